"""Shared pieces of the lander tests: configs, bronze and slot readers, workloads."""

from __future__ import annotations

import io
import threading
from collections import Counter
from pathlib import Path

from cdc_apply.config import Config, parse_config
from cdc_apply.lander import framing as f
from cdc_apply.lander.lander import Lander, LandSummary
from cdc_apply.lander.options import SESSION_SETTINGS, options_string

FAST = {"batch_seconds": 60.0, "idle_exit_seconds": 0.6, "keepalive_seconds": 2.0,
        "backoff_seconds": 0.2, "backoff_max_seconds": 2.0}


def make_config(root: Path, dsn: str, source: str, slot: str, publication: str, bronze: Path | None = None,
                land: dict | None = None, **src) -> Config:
    raw = {
        "bronze": {"path": str(bronze or root / "bronze")},
        "silver": {"path": str(root / "silver")},
        "state": {"path": str(root / "state")},
        "source": {"name": source, "dsn": dsn, "slot": slot, "publication": publication, **src},
        "land": {**FAST, **(land or {})},
    }
    return parse_config(raw)


def run_lander(config: Config, spark, once: bool = True, probe=None, stop: threading.Event | None = None
               ) -> tuple[LandSummary, str]:
    out = io.StringIO()
    summary = Lander(config, spark, out=out, probe=probe, stop=stop).run(once=once)
    return summary, out.getvalue()


def bronze_rows(spark, path, source: str) -> list[tuple[int, int, bytes]]:
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(str(path)).where(F.col("source") == source)
    return [(r.seq, r.lsn, bytes(r.payload)) for r in df.select("seq", "lsn", "payload").orderBy("seq").collect()]


def slot_options(proto=4, streaming="parallel", two_phase=True, binary=False) -> list[str]:
    options = ["proto_version", str(proto), "publication_names", "pub", "messages", "true",
               "binary", "true" if binary else "false"]
    if streaming != "off":
        options += ["streaming", streaming]
    if two_phase:
        options += ["two_phase", "on"]
    return options


def peek(postgres, dbname: str, slot: str, options: list[str]) -> list[tuple[int, bytes]]:
    """What the SQL interface decodes from ``slot`` (without consuming it), as ``(lsn, payload)``."""
    conn = postgres.connect(dbname, options=options_string(SESSION_SETTINGS))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT lsn - '0/0'::pg_lsn, data FROM pg_logical_slot_peek_binary_changes("
                        "%s, NULL, NULL, VARIADIC %s::text[])", (slot, options))
            return [(int(lsn), bytes(data)) for lsn, data in cur.fetchall()]
    finally:
        conn.close()


def _schema_key(payload: bytes, in_block: bool) -> tuple[bytes, bytes]:
    """A Relation/Type message without the xid a stream block adds: (kind and oid, rest)."""
    body = payload[5:] if in_block else payload[1:]
    return payload[:1] + body[:4], body[4:]


def canonical(payloads: list[bytes]) -> list[bytes]:
    """Payloads with the Relation/Type messages that repeat the current version of their oid removed.

    The walsender sends Relation/Type again after every reconnect (and after
    cache invalidations), so two landings of the same changes differ there.
    """
    current: dict[bytes, bytes] = {}
    out, in_block = [], False
    for p in payloads:
        kind = p[:1]
        if kind in f.SCHEMA_KINDS:
            key, body = _schema_key(p, in_block)
            if current.get(key) == body:
                continue
            current[key] = body
        elif kind == f.STREAM_START:
            in_block = True
        elif kind == f.STREAM_STOP:
            in_block = False
        out.append(p)
    return out


def units(rows: list[tuple[int, bytes]]) -> list[tuple[bytes, ...]]:
    """What a consumer sees: complete units in the order they completed.

    A plain or prepared transaction is its messages from Begin to Commit/Prepare;
    a streamed transaction is the messages of all its blocks (and subtransaction
    aborts), without the block framing, ending with its Stream Commit, Prepare or
    Abort; Commit/Rollback Prepared and non-transactional messages stand alone.
    A first segment for a transaction already begun, or a Stream Abort, drops what
    came of it before; the lander's own Stream Aborts (LSN 0) only do that. Two landings of the same changes cut streams into blocks
    differently (a reconnect decodes from another point); this form does not see that.
    """
    out: list[tuple[bytes, ...]] = []
    streams: dict[int, list[bytes]] = {}
    txn: list[bytes] | None = None
    block: int | None = None
    synthetic = {p for lsn, p in rows if lsn == 0 and p[:1] == f.STREAM_ABORT}
    for p in canonical([p for _, p in rows]):
        kind = p[:1]
        if txn is not None:
            txn.append(p)
            if kind in (f.COMMIT, f.PREPARE):
                out.append(tuple(txn))
                txn = None
        elif block is not None:
            if kind == f.STREAM_STOP:
                block = None
            else:
                streams[block].append(p)
        elif kind in (f.BEGIN, f.BEGIN_PREPARE):
            txn = [p]
        elif kind == f.STREAM_START:
            block, first = f.stream_start(p)
            if first or block not in streams:
                streams[block] = []
        elif kind == f.STREAM_ABORT and f.stream_abort(p)[0] != f.stream_abort(p)[1]:
            streams.setdefault(f.stream_abort(p)[0], []).append(p)
        elif kind in (f.STREAM_COMMIT, f.STREAM_PREPARE, f.STREAM_ABORT):
            xid = f.stream_abort(p)[0] if kind != f.STREAM_PREPARE else f.prepared_xid(p)
            content = streams.pop(xid, [])
            if p not in synthetic:
                out.append(tuple(content) + (p,))
        else:
            out.append((p,))
    return out


def change_counts(rows: list[tuple[int, bytes]]) -> Counter:
    """How often each change (Insert/Update/Delete/Truncate/Message) payload is in ``rows``."""
    return Counter(p for _, p in rows if p[:1] in (b"I", b"U", b"D", b"T", b"M"))


def slot_confirmed(postgres, dbname: str, slot: str) -> int:
    return int(postgres.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                                "WHERE slot_name = %s", (slot,), dbname=dbname)[0][0])


def create_slot(postgres, dbname: str, slot: str, two_phase: bool = True, twins: tuple[str, ...] = ()) -> None:
    postgres.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)", (slot, two_phase),
                     dbname=dbname)
    for twin in twins:
        postgres.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (slot, twin), dbname=dbname)


def apply_reference(rows: list[tuple[int, int, bytes]], tables: list[str]) -> dict[str, list]:
    """Final table contents by the project's reference applier (commit order, aborts dropped)."""
    from cdc_apply.testing.reference import ReferenceApplier

    ref = ReferenceApplier()
    for seq, _, payload in rows:
        ref.feed(seq, payload)
    return {t: sorted(ref.rows(t), key=lambda r: tuple(str(v) for v in r.values())) for t in tables}
