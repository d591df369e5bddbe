"""A real pgoutput capture for the benchmarks, cached under ``bench/work/``.

``load_capture()`` returns the messages of a mixed Insert/Update/Delete workload on two tables
of eight common column types (int4, int8, text, numeric(12,2), timestamptz, bool, float8,
varchar), read from a PostgreSQL 18 slot with ``pg_logical_slot_get_binary_changes``
(pgoutput protocol 1, text format). The first call runs the server and the workload
(about a minute); later calls read ``bench/work/decode_capture.arrow``.

    .venv/bin/python -m bench.capture     # capture if needed, then print what the capture holds
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from cdc_apply.pgoutput.messages import parse_lsn

WORK = Path(__file__).resolve().parent / "work"
CAPTURE = WORK / "decode_capture.arrow"
# Bump when the workload changes: a cached capture of another version is rebuilt.
WORKLOAD_VERSION = 1
ROUNDS = 40

_SCHEMA = """
CREATE TABLE bench_orders (
    id int4 PRIMARY KEY, qty int8, note text, amount numeric(12,2),
    created timestamptz, active bool, score float8, code varchar(32));
CREATE TABLE bench_events (
    id int4 PRIMARY KEY, qty int8, note text, amount numeric(12,2),
    created timestamptz, active bool, score float8, code varchar(32));
ALTER TABLE bench_events REPLICA IDENTITY FULL;
CREATE PUBLICATION p FOR TABLE bench_orders, bench_events;
"""

_ROW = """SELECT g, (random() * 1e12)::int8,
       CASE WHEN g %% 17 = 0 THEN NULL ELSE md5(g::text) || repeat('x', g %% 23) END,
       round((random() * 1e8)::numeric, 2),
       timestamptz '2024-01-01 00:00:00+00' - random() * interval '1000 days',
       CASE WHEN g %% 11 = 0 THEN NULL ELSE g %% 3 = 0 END,
       random() * 1e6, 'C-' || (g %% 1000)
FROM generate_series(%(lo)s, %(hi)s) g"""


def _workload(cur, r: int) -> None:
    """One round: 3500 + 1000 inserts, 1050 + 300 updates (50 of them move a key), 400 + 100 deletes."""
    base = r * 10_000
    cur.execute(f"INSERT INTO bench_orders {_ROW}", {"lo": base + 1, "hi": base + 3500})
    cur.execute(f"INSERT INTO bench_events {_ROW}", {"lo": base + 1, "hi": base + 1000})
    cur.execute("UPDATE bench_orders SET qty = qty + 1, amount = amount + 0.01, active = NOT active, "
                "created = created + interval '1 second' WHERE id BETWEEN %s AND %s", (base + 1, base + 1000))
    cur.execute("UPDATE bench_orders SET id = id + 5000 WHERE id BETWEEN %s AND %s", (base + 1001, base + 1050))
    cur.execute("UPDATE bench_events SET score = score / 2, note = note || '!' WHERE id BETWEEN %s AND %s",
                (base + 1, base + 300))
    cur.execute("DELETE FROM bench_orders WHERE id BETWEEN %s AND %s", (base + 3001, base + 3400))
    cur.execute("DELETE FROM bench_events WHERE id BETWEEN %s AND %s", (base + 901, base + 1000))


def _capture(path: Path) -> None:
    from cdc_apply.testing.postgres import start_postgres

    datadir = WORK / "pg" / "data"
    shutil.rmtree(datadir.parent, ignore_errors=True)
    started = time.monotonic()
    server = start_postgres(datadir)
    try:
        conn = server.connect()
        with conn.cursor() as cur:
            cur.execute(_SCHEMA)
            cur.execute("SELECT pg_create_logical_replication_slot('bench', 'pgoutput')")
            for r in range(ROUNDS):
                _workload(cur, r)
            cur.execute("SELECT lsn::text, xid::text, data FROM pg_logical_slot_get_binary_changes("
                        "'bench', NULL, NULL, 'proto_version', '1', 'publication_names', 'p')")
            rows = cur.fetchall()
            cur.execute("SHOW server_version")
            version = cur.fetchone()[0]
        conn.close()
    finally:
        server.destroy()
        shutil.rmtree(datadir.parent, ignore_errors=True)

    table = pa.table({
        "lsn": pa.array([parse_lsn(r[0]) for r in rows], pa.int64()),
        "xid": pa.array([int(r[1]) for r in rows], pa.int64()),
        "payload": pa.array([bytes(r[2]) for r in rows], pa.binary()),
    })
    meta = {"workload_version": WORKLOAD_VERSION, "server_version": version, "rounds": ROUNDS,
            "captured_in_s": round(time.monotonic() - started, 1)}
    table = table.replace_schema_metadata({"bench": json.dumps(meta)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with ipc.new_file(tmp, table.schema) as writer:
        writer.write_table(table)
    tmp.replace(path)


def load_capture(path: Path = CAPTURE) -> tuple[pa.Table, dict]:
    """The capture table (lsn, xid, payload) and its metadata; captured first if missing or stale."""
    if path.exists():
        table = ipc.open_file(path).read_all()
        meta = json.loads((table.schema.metadata or {}).get(b"bench", b"{}"))
        if meta.get("workload_version") == WORKLOAD_VERSION:
            return table, meta
    _capture(path)
    table = ipc.open_file(path).read_all()
    return table, json.loads(table.schema.metadata[b"bench"])


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.capture", description=(
        "Capture the decode benchmark's workload from PostgreSQL 18 if bench/work/decode_capture.arrow is "
        "missing or stale, then print what the capture holds."))
    parser.parse_args(argv)
    table, meta = load_capture()
    kinds: dict[str, int] = {}
    for p in table.column("payload").to_pylist():
        kinds[chr(p[0])] = kinds.get(chr(p[0]), 0) + 1
    print(meta, table.num_rows, sorted(kinds.items()))


if __name__ == "__main__":
    main()
