"""The history capture: several transactions per batch touching the same keys, unchanged TOAST, key
moves, truncates, duplicates without a key, schema changes, a tracked table and one without history,
in three batches; and the helpers that compare a history table with the states the reference
applier went through."""

from __future__ import annotations

from collections import Counter

from cdc_apply.delta.engine import spark_tables
from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.reference import ReferenceApplier
from cdc_apply.testing.stream import StreamBuilder

U = UNCHANGED_TOAST
DOC = "d" * 2500


def build_history():
    """Bronze rows of the capture and where its batches end."""
    b = StreamBuilder("hist")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False), ("doc", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", True), ("y", "text", True)], replica_identity="f")
    evo = b.relation("public", "evo", [("id", "int4", True), ("a", "text", False), ("gone", "int4", False)])
    tracked = b.relation("public", "tracked", [("id", "int4", True), ("status", "text", False),
                                                ("seen", "int4", False)])
    plain = b.relation("public", "plain", [("id", "int4", True), ("v", "text", False)])   # no history
    cuts = []
    # -- batch 1: several transactions on the same keys ------------------------------------------
    with b.transaction() as tx:
        for i in (1, 2, 3):
            tx.insert(t, {"id": i, "v": f"v{i}", "doc": DOC + str(i)})
        tx.insert(bag, {"x": 1, "y": "a"})
        tx.insert(bag, {"x": 1, "y": "a"})
        tx.insert(evo, {"id": 1, "a": "a1", "gone": 1})
        tx.insert(tracked, {"id": 1, "status": "new", "seen": 0})
        tx.insert(plain, {"id": 1, "v": "p1"})
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v": "v1b", "doc": U})        # unchanged TOAST, from the batch
        tx.insert(t, {"id": 4, "v": "v4", "doc": "four"})      # inserted and deleted in one transaction:
        tx.delete(t, key={"id": 4})                            # never a version
        tx.delete(bag, old={"x": 1, "y": "a"})                 # one of two copies
        tx.update(tracked, {"id": 1, "status": "new", "seen": 1})   # an untracked column: in place
    with b.transaction() as tx:
        tx.update(t, {"id": 5, "v": "v2", "doc": U}, key={"id": 2})  # a key move with unchanged TOAST
        tx.delete(t, key={"id": 3})
        tx.update(t, {"id": 1, "v": "v1c", "doc": U})
        tx.update(t, {"id": 1, "v": "v1d", "doc": U})          # twice in one transaction: one version
        tx.insert(bag, {"x": 2, "y": "b"})
        tx.update(tracked, {"id": 1, "status": "open", "seen": 2})  # a tracked column: a new version
    cuts.append(len(b.rows()))
    # -- batch 2: values from the history table, a delete and re-insert, a truncate, a new column -----------
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v": "v1e", "doc": U})          # unchanged TOAST from the history
        tx.insert(t, {"id": 3, "v": "v3 again", "doc": "three"})
        tx.update(bag, {"x": 1, "y": "c"}, old={"x": 1, "y": "a"})
        tx.update(tracked, {"id": 1, "status": "open", "seen": 3})
        tx.update(plain, {"id": 1, "v": "p2"})
    with b.transaction() as tx:
        tx.delete(t, key={"id": 5})
        tx.insert(t, {"id": 5, "v": "v5 new", "doc": "five"})  # deleted and re-inserted in one transaction
        tx.insert(bag, {"x": 2, "y": "b"})
        tx.update(tracked, {"id": 1, "status": "closed", "seen": 4})
    evo2 = b.relation("public", "evo", [("id", "int4", True), ("a", "text", False), ("gone", "int4", False),
                                        ("added", "int4", False)], oid=evo.oid)
    with b.transaction() as tx:
        tx.update(evo2, {"id": 1, "a": "a2", "gone": 1, "added": 7})
        tx.insert(evo2, {"id": 2, "a": "b1", "gone": 2, "added": None})
    with b.transaction() as tx:
        tx.truncate([t, bag])
        tx.insert(t, {"id": 1, "v": "after truncate", "doc": "one"})
        tx.insert(bag, {"x": 9, "y": "z"})
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v": "after truncate b", "doc": U})
    cuts.append(len(b.rows()))
    # -- batch 3: a rename and a drop; versions opened in batch 2 close ------------------------------
    evo3 = b.relation("public", "evo", [("id", "int4", True), ("renamed", "text", False),
                                        ("added", "int4", False)], oid=evo.oid)
    with b.transaction() as tx:
        tx.update(evo3, {"id": 2, "renamed": "b2", "added": 8})
        tx.update(t, {"id": 3, "v": "v3 last", "doc": U})
        tx.delete(bag, old={"x": 2, "y": "b"})
    with b.transaction() as tx:
        tx.delete(evo3, key={"id": 1})
        tx.insert(tracked, {"id": 2, "status": "new", "seen": 0})
        tx.insert(plain, {"id": 2, "v": "p3"})
    cuts.append(len(b.rows()))
    return b.rows(), cuts


def reference_states(rows) -> list[tuple[int, dict[str, list[dict]]]]:
    """(commit LSN, {table: rows}) after every commit, rows named as each table's last relation version."""
    ref = ReferenceApplier()
    raw: list[tuple[int, dict[int, list[dict]]]] = []

    def record(lsn: int) -> None:
        raw.append((lsn, {rid: [dict(r) for r in list(t.keyed.values()) + t.bag] for rid, t in ref.tables.items()}))

    ref.on_commit = record
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    out = []
    for lsn, tables in raw:
        named = {}
        for rid, table_rows in tables.items():
            latest = ref.history.relations[rid].latest
            named[latest.qualified_name] = [{n: r.get(lin) for lin, n in zip(latest.lineage, latest.column_names)}
                                            for r in table_rows]
        out.append((lsn, named))
    return out


def as_of(history_rows, lsn: int, columns) -> Counter:
    """The multiset of ``columns`` values a history table (its collected rows) holds as of ``lsn``."""
    out: Counter = Counter()
    for r in history_rows:
        if r["_cdc_valid_from_lsn"] <= lsn and (r["_cdc_valid_to_lsn"] is None or r["_cdc_valid_to_lsn"] > lsn):
            out[tuple(_text(r[c]) for c in columns)] += r["_cdc_copies"]
    return out


def expected(state_rows, columns) -> Counter:
    return Counter(tuple(r.get(c) for c in columns) for r in state_rows)


def _text(value):
    """A silver value as the reference applier holds it (PostgreSQL's text output)."""
    return None if value is None else str(value)


CONFIG = {"silver": {"history": ["public.*"]},
          "tables": {"public.tracked": {"track_columns": ["status"]}, "public.plain": {"history": False}}}
COLUMNS = {"public.t": ["id", "v", "doc"], "public.bag": ["x", "y"], "public.evo": ["id", "renamed", "added"],
           "public.plain": ["id", "v"]}


def apply_history(lake, crashes=(), batches: int = 3):
    """Land the capture's first ``batches`` batches as that many bronze commits and apply them:
    (rows, cuts, pipeline) — rows and cuts of the whole capture.

    ``crashes``: (fault point, apply version) pairs; each makes one run of the job die there (see
    ApplyPipeline's fault hook) before the last run applies everything."""
    from cdc_apply.lake.pipeline import ApplyPipeline

    rows, cuts = build_history()
    start = 0
    for cut in cuts[:batches]:
        lake.land(rows[start:cut])
        start = cut
    for point, version in crashes:
        holder = {}

        def hook(at, point=point, version=version):
            if at == point and holder["pipeline"].version + 1 == version:
                raise Crash(f"injected crash at {at}")

        holder["pipeline"] = ApplyPipeline.open(spark_tables(lake.spark), lake.config, fault_hook=hook)
        try:
            holder["pipeline"].run(once=True)
        except Exception as exc:  # noqa: BLE001 - the injected crash, as Spark reports it
            if "injected crash" not in str(exc):
                raise
        else:
            raise AssertionError(f"no crash at {point} in version {version}")
    pipeline, _ = lake.apply()
    return rows, cuts, pipeline


class Crash(RuntimeError):
    pass
