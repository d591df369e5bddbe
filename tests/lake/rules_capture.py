"""The apply-rules capture: every apply rule of the README's contracts on its own table, in three micro-batches.

Built with the encoder (StreamBuilder): transactions open at a batch end, streamed transactions
spanning batches, a prepared transaction committed two batches later, key moves with unchanged
TOAST, duplicates under REPLICA IDENTITY FULL, a TRUNCATE ... CASCADE, names that need quoting.
What each rule leaves is stated on the reference applier (tests/testing/test_reference_rules.py); applied
once per test module (``rules_run`` in test_apply_rules.py), where silver must equal the reference, and
again by the test that varies internals, which compares.
"""

from __future__ import annotations

from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.stream import StreamBuilder

BIG = "x" * 3000


def build_rules():
    """The capture's bronze rows and where its three micro-batches end."""
    b = StreamBuilder("shop")
    basic = b.relation("public", "basic", [("id", "int4", True), ("name", "text", False)])
    toast = b.relation("public", "toasty", [("id", "int4", True), ("n", "int4", False), ("doc", "text", False)])
    moves = b.relation("public", "moves", [("id", "int4", True), ("doc", "text", False)])
    dups = b.relation("public", "dups", [("a", "int4", True), ("b", "text", True)], replica_identity="f")
    parent = b.relation("public", "parent", [("id", "int4", True)])
    child = b.relation("public", "child", [("id", "int4", True), ("parent_id", "int4", False)])
    streamed = b.relation("public", "streamed", [("id", "int4", True), ("v", "text", False)])
    twophase = b.relation("public", "twophase", [("id", "int4", True), ("v", "text", False)])
    weird = b.relation("we/ird%ns", 'Mixed "Case", tbl', [("id", "int4", True), ("a b,c", "text", False),
                                                           ("ünï", "int8", False)])
    batches = []

    # -- batch 1 ---------------------------------------------------------------
    with b.transaction() as tx:
        for i in range(1, 5):
            tx.insert(basic, {"id": i, "name": f"n{i}"})
        tx.insert(toast, {"id": 1, "n": 1, "doc": BIG + "1"})
        tx.insert(toast, {"id": 2, "n": 2, "doc": BIG + "2"})
        tx.insert(moves, {"id": 1, "doc": "m1"})
        tx.insert(moves, {"id": 2, "doc": "m2"})
        tx.insert(moves, {"id": 3, "doc": "m3"})
        for a, bb in [(1, "x"), (1, "x"), (2, "y")]:
            tx.insert(dups, {"a": a, "b": bb})
        tx.insert(parent, {"id": 1})
        tx.insert(child, {"id": 1, "parent_id": 1})
        tx.insert(weird, {"id": 1, "a b,c": "w", "ünï": 10})
    big = b.stream()
    with big.block() as blk:
        blk.insert(streamed, {"id": 1, "v": "s1"})
        blk.sub(big.xid + 50).insert(streamed, {"id": 2, "v": "rolled back"})
    big.abort(subxid=big.xid + 50)
    doomed = b.stream()
    with doomed.block() as blk:
        blk.insert(streamed, {"id": 99, "v": "never"})
    with b.prepared_transaction("gid-1") as tx:
        tx.insert(twophase, {"id": 1, "v": "prepared then committed"})
    prepared_xid = b._xid
    with b.prepared_transaction("gid-2") as tx:
        tx.insert(twophase, {"id": 2, "v": "prepared then rolled back"})
    rolled_xid = b._xid
    b.logical_message("audit", b"outside", transactional=False)
    with b.transaction() as tx:               # open at the end of batch 1
        tx.insert(basic, {"id": 10, "name": "spans batches"})
        rows = b.rows()
    batches.append(len(rows))

    # -- batch 2 ---------------------------------------------------------------
    with b.transaction() as tx:
        tx.update(basic, {"id": 1, "name": "one"})
        tx.delete(basic, key={"id": 2})
        tx.update(toast, {"id": 1, "n": 10, "doc": UNCHANGED_TOAST})          # TOAST from silver
        tx.insert(toast, {"id": 3, "n": 3, "doc": BIG + "3"})
        tx.update(toast, {"id": 3, "n": 30, "doc": UNCHANGED_TOAST})          # TOAST from this batch
        tx.update(moves, {"id": 10, "doc": UNCHANGED_TOAST}, key={"id": 1})   # key change keeps TOAST
        tx.update(moves, {"id": 20, "doc": "new"}, key={"id": 2})
        tx.update(moves, {"id": 3, "doc": UNCHANGED_TOAST})                   # unchanged, then moved:
        tx.update(moves, {"id": 30, "doc": UNCHANGED_TOAST}, key={"id": 3})   # the value is still silver's
        tx.delete(dups, old={"a": 1, "b": "x"})                               # one of two identical rows
        tx.update(dups, {"a": 3, "b": "y"}, old={"a": 2, "b": "y"})
        tx.message("audit", b"inside")
    with big.block() as blk:
        blk.insert(streamed, {"id": 3, "v": "s3"})
    doomed.abort()
    with b.transaction() as tx:
        tx.insert(basic, {"id": 11, "name": "after"})
    batches.append(len(b.rows()))

    # -- batch 3 ---------------------------------------------------------------
    big.commit()
    b.commit_prepared("gid-1", prepared_xid)
    b.rollback_prepared("gid-2", rolled_xid)
    with b.transaction() as tx:
        tx.insert(child, {"id": 2, "parent_id": 1})
        tx.truncate([parent, child], cascade=True, restart_identity=True)
        tx.insert(parent, {"id": 5})                                          # after the truncate
        tx.update(weird, {"id": 1, "a b,c": "w2", "ünï": 11})
    batches.append(len(b.rows()))
    return b.rows(), batches


def reference_rules():
    """The capture fed through the reference applier: the tables the rules leave, in plain Python."""
    from cdc_apply.testing.reference import ReferenceApplier

    rows, _ = build_rules()
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    return ref


def apply_rules(lake):
    """Land the capture in its three bronze appends and run the job once over them."""
    rows, cuts = build_rules()
    start = 0
    for cut in cuts:
        lake.land(rows[start:cut])
        start = cut
    return lake.apply()
