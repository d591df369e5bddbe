"""One logical workload written two ways: as pgoutput (StreamBuilder) and as GaussDB binary records.

A tiny simulated database runs random transactions over three tables and
records every change both as PostgreSQL's pgoutput would send it and as
GaussDB's binary decode-style would: a primary-key table (old tuple = the key
columns; pgoutput sends 'K' only when the key changes), a composite-key table
in its own schema with a column whose name needs quoting, and a REPLICA
IDENTITY FULL table without a key (old tuple = every column; duplicate rows
are real). Midway a column is added to the first table. The GaussDB records
are then cut into payloads at random: single results, batches ending in
'F' or in a 0 length, transactions split across payloads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cdc_apply.gaussdb import Begin, Commit, Delete, Insert, Update, encode_gaussdb, format_timestamp
from cdc_apply.testing.stream import BASE_TIMESTAMP, StreamBuilder

# name, pgoutput columns (name, type, key), GaussDB column names as sent (quote_identifier), identity
TABLES = {
    ("public", "accounts"): ([("id", "int4", True), ("name", "text", False), ("balance", "numeric", False)],
                             ["id", "name", "balance"], "d"),
    ("shop", "orders"): ([("region", "text", True), ("no", "int8", True), ("Mixed Case", "text", False)],
                         ["region", "no", '"Mixed Case"'], "d"),
    ("public", "tags"): ([("a", "int4", True), ("b", "text", True)], ["a", "b"], "f"),
}
OIDS = {"int4": 23, "int8": 20, "text": 25, "numeric": 1700}
USERS = ("alice", "bob", "etl")


@dataclass
class _Table:
    schema: str
    name: str
    cols: list  # (name, type, key)
    sent_names: list
    identity: str
    rel: object = None
    rows: list = field(default_factory=list)  # dicts name -> text value or None
    # The columns GaussDB's stream has described (the last full tuple's): it carries no DDL, so a column
    # added in the database is unknown to the transcoder until a tuple holds it.
    described: list = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [c for c, _, _ in self.cols]

    @property
    def key(self) -> list[str]:
        return [c for c, _, k in self.cols if k]

    def gtuple(self, row: dict, only: list[str] | None = None) -> tuple:
        return tuple((sent, OIDS[t], row.get(c)) for (c, t, _), sent in zip(self.cols, self.sent_names)
                     if only is None or c in only)


@dataclass
class Workload:
    builder: StreamBuilder
    records: list  # GaussDB records in stream order
    expected: dict  # "schema.table" -> list of row dicts (the simulated database's final state)
    users: list  # user name per transaction, in commit order
    xids: list = field(default_factory=list)  # 64-bit xid per transaction, in commit order
    # The same state in the columns GaussDB's records described (a column added late and never sent is absent).
    expected_gaussdb: dict = field(default_factory=dict)

    def payloads(self, rng: random.Random) -> list[bytes]:
        """The records cut into payloads at random."""
        out, i = [], 0
        while i < len(self.records):
            if rng.random() < 0.3:
                out.append(encode_gaussdb([self.records[i]], batch=False))
                i += 1
                continue
            n = rng.randint(1, 12)
            out.append(encode_gaussdb(self.records[i:i + n], batch=True, end=rng.choice("F0")))
            i += n
        return out


def build(seed: int, transactions: int = 25) -> Workload:
    rng = random.Random(seed)
    b = StreamBuilder("gauss", start_lsn=0x5000000)
    tables = [_Table(s, n, list(cols), list(sent), ident) for (s, n), (cols, sent, ident) in TABLES.items()]
    for t in tables:
        t.rel = b.relation(t.schema, t.name, t.cols, replica_identity=t.identity)
    records: list = []
    users: list = []
    xids: list = []
    lsn, csn, xid, ts = 0x9000000, 1000, 5_000_000_000, BASE_TIMESTAMP
    next_id = 0
    for n in range(transactions):
        if n == transactions // 2:  # ALTER TABLE accounts ADD COLUMN note text
            acc = tables[0]
            acc.cols.append(("note", "text", False))
            acc.sent_names.append("note")
            acc.rel = b.relation(acc.schema, acc.name, acc.cols, oid=acc.rel.oid)
        user = rng.choice(USERS)
        users.append(user)
        csn, xid, ts = csn + 1, xid + 7, ts + 1000
        lsn += 0x40
        first = lsn
        tstext = format_timestamp(ts, rng.choice([0, 8 * 3600, -5 * 3600 - 30 * 60]))
        xids.append(xid)
        # openGauss writes the xid in Begin and Commit (include-xids); GaussDB's page in Commit only.
        records.append(Begin(first, csn, first, rng.choice([tstext, None]), user, xid=xid if n % 3 != 2 else None))
        with b.transaction(xid=xid & 0xFFFFFFFF) as tx:
            for _ in range(rng.choice([0, 1, 2, 3, 5])):
                t = rng.choice(tables)
                lsn += 0x30
                op = rng.random()
                if op < 0.45 or not t.rows:
                    next_id += 1
                    row = _new_row(rng, t, next_id)
                    t.rows.append(row)
                    t.described = t.names
                    tx.insert(t.rel, row)
                    records.append(Insert(lsn, t.schema, t.name, t.gtuple(row)))
                elif op < 0.8:
                    old = rng.choice(t.rows)
                    new = dict(old)
                    for c, _, k in t.cols:
                        if (not k or t.identity == "f" or rng.random() < 0.2) and rng.random() < 0.6:
                            next_id += 1
                            new[c] = _value(rng, c, next_id, t)
                    t.rows[t.rows.index(old)] = new
                    t.described = t.names
                    if t.identity == "f":
                        tx.update(t.rel, new, old=old)
                        old_t = t.gtuple(old)
                    else:
                        changed = any(old[k] != new[k] for k in t.key)
                        tx.update(t.rel, new, key={k: old[k] for k in t.key} if changed else None)
                        old_t = t.gtuple(old, only=t.key)
                    records.append(Update(lsn, t.schema, t.name, t.gtuple(new), old_t))
                else:
                    old = rng.choice(t.rows)
                    t.rows.remove(old)
                    if t.identity == "f":   # the old tuple holds every column
                        t.described = t.names
                        tx.delete(t.rel, old=old)
                        records.append(Delete(lsn, t.schema, t.name, t.gtuple(old)))
                    else:
                        tx.delete(t.rel, key={k: old[k] for k in t.key})
                        records.append(Delete(lsn, t.schema, t.name, t.gtuple(old, only=t.key)))
        lsn += 0x30
        records.append(Commit(lsn, xid if n % 3 != 1 else None, rng.choice([tstext, None])))
    expected = {f"{t.schema}.{t.name}": [{c: r.get(c) for c, _, _ in t.cols} for r in t.rows] for t in tables}
    described = {f"{t.schema}.{t.name}": [{c: r.get(c) for c in t.described} for r in t.rows] for t in tables}
    return Workload(b, records, expected, users, xids, described)


def _value(rng: random.Random, column: str, n: int, t: _Table):
    if t.identity == "f":  # a small domain, so duplicate rows happen
        return str(rng.randint(1, 3)) if column == "a" else rng.choice(["x", "y", None])
    if column in ("id", "no"):
        return str(n)
    if column == "region":
        return rng.choice(["eu", "us", "apac"])
    if column == "balance":
        return rng.choice([None, "0", "12.50", str(n)])
    return rng.choice([None, "", "ü€", f"v{n}", "it's"])


def _new_row(rng: random.Random, t: _Table, n: int) -> dict:
    row = {c: _value(rng, c, n, t) for c, _, _ in t.cols}
    if t.identity == "d":  # keys stay unique and non-null
        for k in t.key:
            row[k] = str(n) if k in ("id", "no") else row[k]
    return row


def sort_rows(rows: list[dict]) -> list:
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)
