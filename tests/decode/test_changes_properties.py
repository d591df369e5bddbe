"""Random pgoutput streams: the vectorised decode stage equals the row-at-a-time oracle.

Streams come from :class:`StreamBuilder`: one or two sources (sharing relation OIDs), several
relations and versions, plain, prepared and streamed transactions (blocks, subtransactions,
sub-aborts, aborts), truncates, transactional and non-transactional messages, relations with no
Relation message, tuples of the wrong width, unchanged TOAST, key changes and old tuples, text,
binary and unconvertible values, then garbled, emptied and null payloads. Plans are built with
``plan_batch`` as the pipeline builds them (in one or two batches, table filters, origin filter,
user names, narrowed slots), and the rows reach the decode in any order and split, with rows of
unplanned sources mixed in, under both on_error policies.
"""

from __future__ import annotations

import struct
from datetime import timezone

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_changes_equivalence import CHANGE, CONTROL, bronze, check_batches, first_change_seq

from cdc_apply.decode.changes_vector import first_bytes, source_codes
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.planning.decode_plan import output_schema
from cdc_apply.planning.plan import plan_batch
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.state import SourceState
from cdc_apply.testing.stream import StreamBuilder

PG_EPOCH_DAYS = 10957
TYPES = {  # name -> (value strategy, text form, binary form or None)
    "int4": (st.integers(-2**31, 2**31 - 1), str, lambda v: v.to_bytes(4, "big", signed=True)),
    "int8": (st.integers(-2**63, 2**63 - 1), str, lambda v: v.to_bytes(8, "big", signed=True)),
    "text": (st.text(max_size=5), str, lambda v: v.encode()),
    "bool": (st.booleans(), lambda v: "t" if v else "f", lambda v: bytes([v])),
    "float8": (st.floats(), lambda v: {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(str(v), repr(v)),
               lambda v: struct.pack(">d", v)),
    "numeric": (st.decimals(-10**6, 10**6, places=2, allow_nan=False, allow_infinity=False), str, None),
    "timestamptz": (st.datetimes(timezones=st.just(timezone.utc)),
                    lambda v: f"{v:%Y-%m-%d %H:%M:%S.%f}+00", None),
    "date": (st.integers(-1000, 30000), lambda d: str(np.datetime64(d, "D")),  # d: days since 1970
             lambda d: (d - PG_EPOCH_DAYS).to_bytes(4, "big", signed=True)),
    "bytea": (st.binary(max_size=4), lambda v: "\\x" + v.hex(), lambda v: v),
    "_int4": (st.lists(st.integers(-99, 99), max_size=3), lambda v: "{" + ",".join(map(str, v)) + "}", None),
}
NAMES = sorted(TYPES)


class World:
    """One source being built: its builder and each relation's current Relation and column types."""

    def __init__(self, draw, index: int) -> None:
        self.draw = draw
        self.b = StreamBuilder(f"s{index}", start_lsn=0x1000000 + index * 0x800000, start_xid=700 + 100 * index)
        self.rels: list[list] = []  # [Rel, column type names]
        for i in range(draw(st.integers(1, 3))):
            self.rels.append(self._relation(f"t{i}", emit=draw(st.integers(0, 9)) < 9))  # else: no Relation message

    def _relation(self, name: str, emit: bool = True, oid: int | None = None, types=None) -> list:
        types = types or ["int4"] + self.draw(st.lists(st.sampled_from(NAMES), max_size=3))
        identity = self.draw(st.sampled_from("dfd"))
        cols = [(f"c{i}", t, i == 0) for i, t in enumerate(types)]
        return [self.b.relation("public", name, cols, replica_identity=identity, oid=oid, emit=emit), types]

    def new_version(self) -> None:
        entry = self.draw(st.sampled_from(self.rels))
        rel, types = entry
        if self.draw(st.booleans()) and len(types) > 1:
            types = types[:-1]
        else:
            types = types + [self.draw(st.sampled_from(NAMES))]
        entry[:] = self._relation(rel.message.name, oid=rel.oid, types=types)

    def value(self, type_name: str, toast: bool = False):
        strategy, text, binary = TYPES[type_name]
        how = self.draw(st.integers(0, 19))
        if how >= 17:
            return None
        if how == 16:
            return self.draw(st.sampled_from(["garbage", "", "1e999x"]))  # text no converter takes
        if how == 15:
            return self.draw(st.sampled_from([b"\x07", b"\x00\x00\x00"]))  # binary of the wrong size
        if how == 14 and toast:
            return m.UNCHANGED_TOAST
        value = self.draw(strategy)
        if 10 <= how < 14 and binary is not None:
            return binary(value)
        return text(value)

    def row(self, types: list, width: int | None = None, toast: bool = False) -> list:
        values = [self.value(t, toast) for t in types]
        if width is not None:  # a tuple of the wrong width
            values = (values + [self.value("int4") for _ in range(width)])[:width]
        return values

    def change(self, tx) -> None:
        rel, types = self.draw(st.sampled_from(self.rels))
        kind = self.draw(st.integers(0, 19))
        width = self.draw(st.integers(0, len(types) + 1)) if kind == 19 else None
        if kind < 7:
            tx.insert(rel, self.row(types, width))
        elif kind < 12:
            key = old = None
            if self.draw(st.booleans()):
                if rel.message.replica_identity == "f":
                    old = self.row(types, width)
                else:
                    key = {rel.names[0]: self.value("int4")}
            tx.update(rel, self.row(types, width, toast=True), key=key, old=old)
        elif kind < 15:
            if rel.message.replica_identity == "f":
                tx.delete(rel, old=self.row(types, width))
            else:
                tx.delete(rel, key={rel.names[0]: self.value("int4")})
        elif kind == 15:
            rels = self.draw(st.lists(st.sampled_from(self.rels), min_size=1, max_size=2))
            tx.truncate([r for r, _ in rels], cascade=self.draw(st.booleans()),
                        restart_identity=self.draw(st.booleans()))
        elif kind == 16:
            tx.message(self.draw(st.sampled_from(["p", "app", ""])), self.draw(st.binary(max_size=4)))
        elif kind == 17:
            tx.relation(rel)  # a Relation message resent inside the transaction
        else:
            tx.insert(rel, self.row(types, width))

    def changes(self, tx) -> None:
        for _ in range(self.draw(st.integers(1, 4))):
            self.change(tx)

    def event(self) -> None:
        b, kind = self.b, self.draw(st.integers(0, 11))
        if kind < 4:
            with b.transaction(origin=self.draw(st.sampled_from([None, None, "upstream"]))) as tx:
                self.changes(tx)
        elif kind < 6:
            xid = b.next_xid()
            with b.prepared_transaction(f"g{xid}", xid=xid) as tx:
                self.changes(tx)
            end = self.draw(st.integers(0, 2))
            if end == 0:
                b.commit_prepared(f"g{xid}", xid)
            elif end == 1:
                b.rollback_prepared(f"g{xid}", xid)
        elif kind < 9:
            s = b.stream()
            subs = []
            for _ in range(self.draw(st.integers(1, 3))):
                with s.block() as tx:
                    self.changes(tx)
                    if self.draw(st.booleans()):
                        subs.append(b.next_xid())
                        self.changes(tx.sub(subs[-1]))
                if subs and self.draw(st.integers(0, 3)) == 0:
                    s.abort(subxid=subs.pop(0))
            end = self.draw(st.integers(0, 4))
            if end < 2:
                s.commit()
            elif end == 2:
                s.abort()
            elif end == 3:
                s.prepare(f"s{s.xid}")
                b.commit_prepared(f"s{s.xid}", s.xid)
        elif kind == 9:
            self.new_version()
        elif kind == 10:
            b.logical_message("nt", self.draw(st.binary(max_size=3)))
        else:
            with b.transaction() as tx:
                self.change(tx)


def _garble(draw, payload: bytes) -> bytes | None:
    how = draw(st.integers(0, 5))
    if how == 0:
        return payload[:draw(st.integers(0, max(len(payload) - 1, 0)))]
    if how == 1 and payload:
        at = draw(st.integers(0, len(payload) - 1))
        return payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1:]
    if how == 2:
        return draw(st.sampled_from(b"IUDTMRBZ\x00")).to_bytes(1, "big") + payload[1:]
    if how == 3:
        return payload + b"\x00"
    if how == 4:
        return None
    return b""


@st.composite
def scenarios(draw):
    worlds = [World(draw, i) for i in range(draw(st.integers(1, 2)))]
    for w in worlds:
        for _ in range(draw(st.integers(1, 8))):
            w.event()
    clean = {w.b.source: w.b.rows() for w in worlds}
    landed = {}
    for source, rows in clean.items():
        out = []
        for r in rows:
            if r[3][0] not in CONTROL and draw(st.integers(0, 24)) == 24:
                r = (*r[:3], _garble(draw, r[3]))
            out.append(r)
        landed[source] = out
    return worlds, clean, landed


def _plans(draw, worlds, clean, landed, quarantine: bool):
    """Plan one or two batches per the pipeline; returns the last plan and the rows it decodes."""
    cuts = {}
    steps = draw(st.integers(1, 2))
    for source, rows in clean.items():
        last = rows[-1][1]
        cuts[source] = [draw(st.integers(0, last)) for _ in range(steps - 1)]
        # Mostly up to the end; else the last batch ends early (open transactions, pending ranges).
        cuts[source].append(last if draw(st.integers(0, 3)) < 3 else draw(st.integers(max(cuts[source] + [0]), last)))
    states = {s: SourceState() for s in clean}
    histories = {s: SchemaHistory() for s in clean}
    excluded = set()
    if draw(st.integers(0, 3)) == 3:
        excluded.add(draw(st.sampled_from(["public.t0", "public.t1", "public.t2"])))
    origin = draw(st.sampled_from(["any", "any", "none"]))
    plan = None
    for step in range(steps):
        inputs, fresh = {}, {}
        for source, rows in clean.items():
            cut = cuts[source][step]
            prev = states[source].applied_seq
            controls = [(s, lsn, p) for _, s, lsn, p in rows if prev < s <= cut and p[0] in CONTROL]
            inputs[source] = (states[source], histories[source], controls, max(cut, prev))
            fresh[source] = [r for r in landed[source] if prev < r[1] <= cut]
        commits = [decode_message(p).commit_lsn for rows in clean.values() for _, _, _, p in rows
                   if p[0] in b"CcK"]
        users = {next(iter(clean)): {lsn: f"u{lsn % 3}" for lsn in commits if lsn % 2}} if draw(st.booleans()) else None
        present = None
        if draw(st.integers(0, 3)) == 3:
            present = {s: {w.rels[0][0].oid} for s, w in zip(clean, worlds)}
        plan = plan_batch(inputs, first_change_seq(landed), origin_filter=origin, quarantine=quarantine,
                          present_relations=present, table_selected=lambda name: name not in excluded,
                          txn_users=users)
        rows = []
        for source, batch in plan.sources.items():
            rows += fresh[source] + [r for r in landed[source] if any(a <= r[1] <= b for a, b in batch.reread)]
            states[source] = batch.state
    return plan, rows


@settings(max_examples=150, deadline=None, print_blob=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_streams_decode_the_same(data):
    draw = data.draw
    worlds, clean, landed = draw(scenarios())
    quarantine = draw(st.integers(0, 2)) < 2
    plan, rows = _plans(draw, worlds, clean, landed, quarantine)
    if not draw(st.booleans()):  # as the pipeline selects them (by the first byte of what landed)
        rows = [r for r in rows if r[3] and r[3][0] in CHANGE]
    else:  # anything: control rows, rows of an unplanned source, a null source
        rows = rows + [r for rows_ in landed.values() for r in rows_[:3]]
        rows += [("ghost", 5, 77, rows[0][3])] if rows else []
        rows += [(None, 6, 78, b"I")] if draw(st.integers(0, 9)) == 9 else []
    if not rows:
        return
    draw(st.randoms(use_true_random=False)).shuffle(rows)
    size = draw(st.integers(1, len(rows)))
    got, err = check_batches([bronze(rows[i:i + size]) for i in range(0, len(rows), size)], plan.decode)
    out = pa.Table.from_batches(got, schema=output_schema(plan.decode))
    event(f"quarantine={quarantine} raised={type(err).__name__ if err else None}")
    event(f"slots={min(len(plan.decode.slots), 3)}")
    for op in sorted(set(out.column("op").to_pylist()), key=repr):
        event(f"op {op!r}")
    errors = [e.split(":")[1][:12] for e in out.column("error").drop_null().to_pylist()]
    for e in sorted(set(errors)):
        event(f"error {e}")
    if err is not None:
        event(f"raised {type(err).__name__}: {str(err).partition(':')[2][:30]}")


def test_the_quarantine_op_of_a_walk_error_is_the_type_byte():
    b = StreamBuilder("s")
    rel = b.relation("public", "t", [("id", "int4", True)])
    with b.transaction() as tx:
        tx.insert(rel, [1])
        tx.insert(rel, [2])
    rows = b.rows()
    rows[3] = (*rows[3][:3], rows[3][3][:-2])  # the second Insert, truncated
    controls = [(s, lsn, p) for _, s, lsn, p in rows if p[0] in CONTROL]
    plan = plan_batch({"s": (SourceState(), SchemaHistory(), controls, rows[-1][1])}, lambda *a: {},
                      quarantine=True)
    out = pa.Table.from_batches(check_batches([bronze([r for r in rows if r[3][0] in CHANGE])], plan.decode)[0])
    errors = out.filter(out.column("error").is_valid()).to_pylist()
    assert [(e["seq"], e["op"]) for e in errors] == [(3, "I")] and "Insert" in errors[0]["error"]


@pytest.mark.parametrize("payload_type", [pa.binary(), pa.large_binary()])
@pytest.mark.parametrize("source_type", [pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string())])
def test_other_arrow_types_and_sliced_batches(payload_type, source_type):
    b = StreamBuilder("s")
    rel = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    for i in range(5):
        with b.transaction() as tx:
            tx.insert(rel, [i, f"v{i}"])
            tx.update(rel, [i, m.UNCHANGED_TOAST])
            tx.truncate([rel])
    rows = b.rows()
    controls = [(s, lsn, p) for _, s, lsn, p in rows if p[0] in CONTROL]
    plan = plan_batch({"s": (SourceState(), SchemaHistory(), controls, rows[-1][1])}, lambda *a: {})
    batch = bronze(rows)
    batch = pa.record_batch([batch.column(0).cast(source_type), batch.column(1), batch.column(2),
                             batch.column(3).cast(payload_type)], names=batch.schema.names)
    got, _ = check_batches([batch.slice(3, 11), batch.slice(14)], plan.decode)
    assert sum(b.num_rows for b in got) == 14  # 15 changes, less the Insert at seq 2


def test_first_bytes_and_source_codes():
    payloads = pa.array([b"I", None, b"", b"Dxx", b"T"], pa.binary()).slice(1)
    first, null = first_bytes(payloads)
    assert first.tolist() == [-1, -1, ord("D"), ord("T")] and null.tolist() == [True, False, False, False]
    codes, names = source_codes(pa.array(["a", None, "b", "a"]))
    assert [names[c] for c in codes] == ["a", None, "b", "a"]
