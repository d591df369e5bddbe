"""Shared pieces of the snapshot tests: a database whose published tables cover what a snapshot must get
right, a workload that keeps changing them, and what silver must hold."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from dataclasses import replace

from cdc_apply.lander import framing as f
from cdc_apply.lander.snapshots.state import parse_message
from cdc_apply.pgoutput.snapshot import SNAPSHOT_PREFIX, SNAPSHOT_XID
from cdc_apply.testing.compare import SourceTable, snapshot_postgres

SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE docs (id int PRIMARY KEY, title text, body text, m mood);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE dups (a int, b text);
ALTER TABLE dups REPLICA IDENTITY FULL;
CREATE TABLE proot (id int, region text, v text, PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE proot_eu PARTITION OF proot FOR VALUES IN ('eu');
CREATE TABLE proot_us PARTITION OF proot FOR VALUES IN ('us');
CREATE TABLE pleaf (id int, k int, v text, PRIMARY KEY (k, id)) PARTITION BY LIST (k);
CREATE TABLE pleaf_all PARTITION OF pleaf FOR VALUES IN (0, 1);
CREATE TABLE cols (id int PRIMARY KEY, a text, secret text, twice int GENERATED ALWAYS AS (id * 2) STORED);
CREATE TABLE unpublished (id int PRIMARY KEY);
CREATE PUBLICATION pub_main FOR TABLE docs WHERE (id % 5 <> 0), dups, pleaf, cols (id, a, twice);
CREATE PUBLICATION pub_root FOR TABLE proot WITH (publish_via_partition_root = true);
"""
PRELOAD = """
INSERT INTO docs SELECT g, 'title ' || g, CASE WHEN g % 4 = 0 THEN NULL ELSE repeat(md5(g::text), 100) END,
    (ARRAY['sad', 'ok', 'happy'])[g % 3 + 1]::mood FROM generate_series(1, 300) g;
INSERT INTO dups SELECT g % 7, 'dup ' || (g % 3) FROM generate_series(1, 200) g;
INSERT INTO proot SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, 'v' || g FROM generate_series(1, 200) g;
INSERT INTO pleaf SELECT g, g % 2, 'v' || g FROM generate_series(1, 200) g;
INSERT INTO cols SELECT g, 'a' || g, 'secret ' || g FROM generate_series(1, 200) g;
INSERT INTO unpublished SELECT g FROM generate_series(1, 10) g;
"""
PUBLISHED = ("docs", "dups", "proot", "pleaf_all", "cols")
ONE_COPY = "(SELECT ctid FROM dups WHERE a = %s LIMIT 1)"


class Workload(threading.Thread):
    """Small transactions of inserts, updates and deletes on every published table until stopped."""

    def __init__(self, pg, dbname: str, seed: int = 7, first_id: int = 10_000) -> None:
        super().__init__(daemon=True)
        self.pg, self.dbname, self.rng = pg, dbname, random.Random(seed)
        self.next_id = first_id
        self.commits = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        if self.error is not None:
            raise self.error

    def run(self) -> None:
        conn = self.pg.connect(self.dbname, autocommit=False)
        try:
            while not self.halt.is_set():
                with conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, 4)):
                        self.change(cur)
                conn.commit()
                self.commits += 1
                self.halt.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            conn.close()

    def change(self, cur) -> None:
        rng, new = self.rng, self.next_id
        self.next_id += 1
        pick = rng.randrange(1, 300)
        table = rng.choice(["docs", "dups", "proot", "pleaf", "cols"])
        op = rng.choice(["insert", "update", "delete", "move"] if table == "docs" else ["insert", "update", "delete"])
        sql = {
            ("docs", "insert"): ("INSERT INTO docs VALUES (%s, 'new', repeat(md5(%s::text), 80), 'ok')", (new, new)),
            ("docs", "update"): ("UPDATE docs SET title = title || '+' WHERE id = %s", (pick,)),   # body: unchanged TOAST
            ("docs", "delete"): ("DELETE FROM docs WHERE id = %s", (pick,)),
            ("docs", "move"): ("UPDATE docs SET id = id + 100000 WHERE id = %s", (pick,)),   # in and out of the filter
            ("dups", "insert"): ("INSERT INTO dups VALUES (%s, 'dup 1'), (%s, 'dup 1')", (pick % 7, pick % 7)),
            ("dups", "update"): ("UPDATE dups SET b = b || '!' WHERE ctid = " + ONE_COPY, (pick % 7,)),
            ("dups", "delete"): ("DELETE FROM dups WHERE ctid = " + ONE_COPY, (pick % 7,)),
            ("proot", "insert"): ("INSERT INTO proot VALUES (%s, 'eu', 'new')", (new,)),
            ("proot", "update"): ("UPDATE proot SET region = CASE region WHEN 'eu' THEN 'us' ELSE 'eu' END, "
                                  "v = v || '*' WHERE id = %s", (pick,)),                    # across partitions
            ("proot", "delete"): ("DELETE FROM proot WHERE id = %s", (pick,)),
            ("pleaf", "insert"): ("INSERT INTO pleaf (id, k, v) VALUES (%s, %s, 'new')", (new, new % 2)),
            ("pleaf", "update"): ("UPDATE pleaf SET v = v || '*' WHERE id = %s", (pick,)),
            ("pleaf", "delete"): ("DELETE FROM pleaf WHERE id = %s", (pick,)),
            ("cols", "insert"): ("INSERT INTO cols (id, a, secret) VALUES (%s, 'new', 'hidden')", (new,)),
            ("cols", "update"): ("UPDATE cols SET a = a || '*', secret = 'changed' WHERE id = %s", (pick,)),
            ("cols", "delete"): ("DELETE FROM cols WHERE id = %s", (pick,)),
        }[(table, op)]
        cur.execute(*sql)


# What silver holds of each published table: (columns kept or None for all, rows kept).
SHAPES = {"public.cols": (("id", "a", "twice"), None), "public.docs": (None, lambda row: int(row[0]) % 5 != 0)}
NOT_IN_SILVER = {"public.proot_eu", "public.proot_us", "public.pleaf", "public.unpublished"}


def expected_tables(conn) -> list[SourceTable]:
    """PostgreSQL's tables as the publications show them: partitions of a table published via its root
    and tables no publication has are left out, column lists and row filters applied."""
    out = []
    for table in snapshot_postgres(conn, ["public"]):
        if table.qualified_name in NOT_IN_SILVER:
            continue
        keep, row_filter = SHAPES.get(table.qualified_name, (None, None))
        if keep is not None:
            index = [i for i, c in enumerate(table.columns) if c[0] in keep]
            table = replace(table, columns=tuple(table.columns[i] for i in index),
                            rows=tuple(tuple(r[i] for i in index) for r in table.rows))
        if row_filter is not None:
            table = replace(table, rows=tuple(r for r in table.rows if row_filter(r)))
        out.append(table)
    return out


def framing_rows(spark, path, source: str) -> list[tuple[int, int, bytes]]:
    """Bronze's stream framing and messages of ``source`` (Stream Start/Stop/Commit/Abort, Message), in seq order."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(str(path)).where(F.col("source") == source)
    df = df.where(F.substring("payload", 1, 1).isin(*[bytes([k]) for k in b"SEcAM"]))
    return [(r.seq, r.lsn, bytes(r.payload)) for r in df.select("seq", "lsn", "payload").orderBy("seq").collect()]


def _snapshot_ends(rows):
    """Each snapshot stream (xid 2) in bronze rows as it ends: ``(seq, marker content or None, "commit" | "abort",
    the length of its longest Insert)`` (0 over rows without Inserts, as :func:`framing_rows` reads)."""
    current, block, longest = None, None, 0
    for seq, _, payload in rows:
        kind = payload[:1]
        if kind == f.STREAM_START:
            block = f.stream_start(payload)[0]
        elif kind == f.STREAM_STOP:
            block = None
        elif block == SNAPSHOT_XID and kind == f.MESSAGE:
            parsed = parse_message(payload, in_block=True)
            if parsed and parsed[1] == SNAPSHOT_PREFIX:
                current, longest = json.loads(parsed[2]), 0
        elif block == SNAPSHOT_XID and kind == b"I":
            longest = max(longest, len(payload))
        elif kind in (f.STREAM_COMMIT, f.STREAM_ABORT) and f.stream_abort(payload)[0] == SNAPSHOT_XID:
            yield seq, current, "commit" if kind == f.STREAM_COMMIT else "abort", longest
            current = None


def snapshot_outcomes(rows) -> Counter:
    """``(relation_id, "commit" | "abort")`` counts of the snapshot streams (xid 2) in bronze rows."""
    return Counter((body["relation_id"] if body else None, end) for _, body, end, _ in _snapshot_ends(rows))


def committed_ranges(rows) -> dict[int, list[tuple]]:
    """Per relation, its committed snapshots as ``(low, high, seq of the commit, "range" | "whole")`` in
    bronze order (a whole-table snapshot: ``(None, None, seq, "whole")``)."""
    ranges: dict[int, list[tuple]] = {}
    for seq, body, end, _ in _snapshot_ends(rows):
        if end == "commit" and body is not None:
            rng = body.get("range")
            ranges.setdefault(body["relation_id"], []).append(
                (rng["low"] if rng else None, rng["high"] if rng else None, seq, "range" if rng else "whole"))
    return ranges


def chunk_widths(rows) -> list[tuple[int | None, int]]:
    """Per committed key-range chunk in all of bronze's ``rows``: the longest Insert payload its marker says
    (``widest``) and the longest one its blocks hold."""
    return [(body["range"].get("widest"), longest) for _, body, end, longest in _snapshot_ends(rows)
            if end == "commit" and body is not None and body.get("range")]


def covers_once(chunks) -> bool:
    """Whether key ranges ``(low, high, ...)`` in landing order cover every key exactly once."""
    edges = [(low, high) for low, high, *_ in chunks]
    return bool(edges) and edges[0][0] is None and edges[-1][1] is None and all(
        a[1] is not None and a[1] == b[0] for a, b in zip(edges, edges[1:]))
