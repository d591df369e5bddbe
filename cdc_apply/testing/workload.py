"""A seeded random workload against a real PostgreSQL, for the differential suite and the soak.

Tables in schema ``diff`` cover every replica identity and a spread of types:

* ``pk_t``   primary key; text, numeric, timestamptz, float8 and a TOASTed ``doc`` (STORAGE EXTERNAL)
* ``full_t`` REPLICA IDENTITY FULL without a key: duplicate rows on purpose
* ``idx_t``  REPLICA IDENTITY USING INDEX on ``code``; an int[] column
* ``comp_t`` composite primary key; jsonb, date, bool, bytea

Transactions mix inserts, updates (of non-key columns, so TOAST stays unchanged; of keys, so rows
move), deletes (one of two duplicates too), savepoints rolled back, large transactions (streamed
at ``logical_decoding_work_mem = 64kB``), prepared transactions committed or rolled back,
truncates and ALTER TABLE add/rename/drop column. The SQL depends only on the seed and on the
database's state, so a seed replays exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

SCHEMA = """
CREATE SCHEMA diff;
CREATE TABLE diff.pk_t (id int PRIMARY KEY, v text, n numeric(10,2), ts timestamptz, f float8, doc text);
ALTER TABLE diff.pk_t ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE TABLE diff.full_t (a int, b text, c float8);
ALTER TABLE diff.full_t REPLICA IDENTITY FULL;
CREATE TABLE diff.idx_t (id int PRIMARY KEY, code text NOT NULL, qty int, tags int[]);
CREATE UNIQUE INDEX idx_t_code ON diff.idx_t (code);
ALTER TABLE diff.idx_t REPLICA IDENTITY USING INDEX idx_t_code;
CREATE TABLE diff.comp_t (k1 int, k2 text, val jsonb, d date, flag bool, raw bytea, PRIMARY KEY (k1, k2));
"""


FLOATS = ("1.5", "-0.25", "'NaN'", "1e300", "'-Infinity'")


@dataclass
class Workload:
    """Runs seeded transactions through ``execute(sql)`` (autocommit connection semantics)."""

    seed: int
    execute: Callable[[str], object]   # what it returns is not used
    large_rows: int = 400
    rng: random.Random = field(init=False)
    next_id: int = 1
    txns: int = 0
    extra_columns: list[str] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- helpers ---------------------------------------------------------------------
    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _doc(self) -> str:
        # md5 chains do not compress, so 3 kB go out of line (STORAGE EXTERNAL) and come back as 'u'.
        return f"(SELECT string_agg(md5('{self.rng.random()}' || i), '') FROM generate_series(1, 100) i)"

    def _pick(self, table: str, key: str) -> str:
        """A subquery for an existing row's key (deterministic: ordered, offset from the seed)."""
        return f"(SELECT {key} FROM diff.{table} ORDER BY {key} OFFSET {self.rng.randint(0, 40)} LIMIT 1)"

    def _text(self) -> str:
        choice = self.rng.random()
        if choice < 0.1:
            return "NULL"
        if choice < 0.2:
            return "'quote '' comma, \\\\ back ü'"
        return f"'t{self.rng.randint(0, 9999)}'"

    # -- statements ------------------------------------------------------------------------
    def statement(self) -> str:
        r = self.rng.random()
        i = self._id()
        if r < 0.16:
            doc = self._doc() if self.rng.random() < 0.5 else "NULL"
            return (f"INSERT INTO diff.pk_t (id, v, n, ts, f, doc) VALUES ({i}, {self._text()}, "
                    f"{self.rng.randint(-99999, 99999) / 100}, '2026-01-01 00:00:00+00'::timestamptz + "
                    f"interval '{self.rng.randint(0, 10**6)} seconds', {self.rng.choice(FLOATS)}, {doc})")
        if r < 0.28:
            return f"UPDATE diff.pk_t SET v = {self._text()}, n = n + 1 WHERE id = {self._pick('pk_t', 'id')}"
        if r < 0.33:
            return f"UPDATE diff.pk_t SET id = {i} WHERE id = {self._pick('pk_t', 'id')}"
        if r < 0.38:
            return f"DELETE FROM diff.pk_t WHERE id = {self._pick('pk_t', 'id')}"
        if r < 0.50:
            a = self.rng.randint(0, 5)
            return f"INSERT INTO diff.full_t VALUES ({a}, 'b{a % 3}', {a}.5)"
        if r < 0.55:
            a = self.rng.randint(0, 5)
            return (f"DELETE FROM diff.full_t WHERE ctid = (SELECT ctid FROM diff.full_t WHERE a = {a} "
                    f"ORDER BY b, c LIMIT 1)")
        if r < 0.60:
            a = self.rng.randint(0, 5)
            return (f"UPDATE diff.full_t SET c = c + 1 WHERE ctid = (SELECT ctid FROM diff.full_t "
                    f"WHERE a = {a} ORDER BY b, c LIMIT 1)")
        if r < 0.70:
            return (f"INSERT INTO diff.idx_t VALUES ({i}, 'code-{i}', {self.rng.randint(0, 100)}, "
                    f"ARRAY[{self.rng.randint(0, 9)}, NULL, {self.rng.randint(0, 9)}])")
        if r < 0.75:
            return f"UPDATE diff.idx_t SET code = 'code-{i}-b' WHERE id = {self._pick('idx_t', 'id')}"
        if r < 0.80:
            return f"UPDATE diff.idx_t SET qty = qty + 1 WHERE id = {self._pick('idx_t', 'id')}"
        if r < 0.83:
            return f"DELETE FROM diff.idx_t WHERE id = {self._pick('idx_t', 'id')}"
        if r < 0.92:
            return (f"INSERT INTO diff.comp_t VALUES ({i % 7}, 'k{i}', '{{\"n\": {i}, \"s\": [1, \"x\"]}}', "
                    f"'2026-03-{1 + i % 28:02d}', {self.rng.choice(['true', 'false', 'NULL'])}, "
                    f"'\\x{i:06x}00ff')")
        if r < 0.97:
            return (f"UPDATE diff.comp_t SET val = jsonb_set(val, '{{n}}', '{i}'), flag = NOT flag "
                    f"WHERE (k1, k2) = (SELECT k1, k2 FROM diff.comp_t ORDER BY k1, k2 "
                    f"OFFSET {self.rng.randint(0, 20)} LIMIT 1)")
        return (f"DELETE FROM diff.comp_t WHERE (k1, k2) = (SELECT k1, k2 FROM diff.comp_t ORDER BY k1, k2 "
                f"OFFSET {self.rng.randint(0, 20)} LIMIT 1)")

    def transaction(self) -> list[str]:
        """One transaction as the statements to run, in order (BEGIN/COMMIT included)."""
        self.txns += 1
        kind = self.rng.random()
        body = [self.statement() for _ in range(self.rng.randint(1, 4))]
        if kind < 0.08:   # a savepoint rolled back in the middle
            return ["BEGIN", *body, "SAVEPOINT s1", self.statement(), self.statement(),
                    "ROLLBACK TO SAVEPOINT s1", self.statement(), "COMMIT"]
        if kind < 0.11:   # large: streamed when the slot streams
            first = self._id()
            self.next_id += self.large_rows
            stmts = [f"INSERT INTO diff.full_t SELECT g % 6, 'bulk', g FROM generate_series(1, {self.large_rows}) g",
                     f"INSERT INTO diff.pk_t (id, v, n) SELECT {first} + g, 'bulk ' || g, g "
                     f"FROM generate_series(1, {self.large_rows}) g"]
            if self.rng.random() < 0.3:   # with a subtransaction rolled back inside the stream
                stmts += ["SAVEPOINT big", f"DELETE FROM diff.pk_t WHERE id > {first}", "ROLLBACK TO SAVEPOINT big"]
            if self.rng.random() < 0.25:  # the whole large transaction rolled back
                return ["BEGIN", *stmts, *body, "ROLLBACK"]
            return ["BEGIN", *stmts, *body, "COMMIT"]
        if kind < 0.15:   # two-phase, decided now or a few transactions later
            gid = f"g{self.seed}_{self.txns}"
            self.prepared.append(gid)
            # Only new rows: they stay invisible (and unlocked for others) until the decision.
            return ["BEGIN", *self._inserts(), f"PREPARE TRANSACTION '{gid}'"]
        # TRUNCATE and ALTER TABLE wait for the locks of prepared transactions: decide those first.
        if kind < 0.16:
            return [*self._decided_now(), "BEGIN", "TRUNCATE diff.comp_t", *body, "COMMIT"]
        if kind < 0.17:
            return [*self._decided_now(), "BEGIN", *self._ddl(), *body, "COMMIT"]
        return ["BEGIN", *body, "COMMIT"]

    def _inserts(self) -> list[str]:
        out: list[str] = []
        while len(out) < 2:
            statement = self.statement()
            if statement.startswith("INSERT"):
                out.append(statement)
        return out

    def _ddl(self) -> list[str]:
        if self.extra_columns and self.rng.random() < 0.4:
            name = self.extra_columns.pop(self.rng.randrange(len(self.extra_columns)))
            if self.rng.random() < 0.5:
                return [f"ALTER TABLE diff.pk_t DROP COLUMN {name}"]
            renamed = f"{name}_r"
            self.extra_columns.append(renamed)
            return [f"ALTER TABLE diff.pk_t RENAME COLUMN {name} TO {renamed}",
                    f"UPDATE diff.pk_t SET {renamed} = 7 WHERE id = {self._pick('pk_t', 'id')}"]
        name = f"extra_{self.txns}"
        self.extra_columns.append(name)
        return [f"ALTER TABLE diff.pk_t ADD COLUMN {name} int",
                f"UPDATE diff.pk_t SET {name} = {self.rng.randint(0, 9)} WHERE id = {self._pick('pk_t', 'id')}"]

    def _decided_now(self) -> list[str]:
        return [f"{s};" for s in self.decide_prepared(all_of_them=True)]

    def decide_prepared(self, all_of_them: bool = False) -> list[str]:
        """COMMIT PREPARED or ROLLBACK PREPARED for some (or all) waiting prepared transactions."""
        out = []
        keep = []
        for gid in self.prepared:
            if all_of_them or self.rng.random() < 0.5:
                out.append(f"{self.rng.choice(['COMMIT', 'COMMIT', 'ROLLBACK'])} PREPARED '{gid}'")
            else:
                keep.append(gid)
        self.prepared = keep
        return out

    def run(self, transactions: int) -> None:
        """Run ``transactions`` transactions (prepared ones decided along the way)."""
        for _ in range(transactions):
            self._run(self.transaction())
            for statement in self.decide_prepared():
                self.execute(statement)

    def finish(self) -> None:
        """Decide every prepared transaction still waiting (before a checkpoint)."""
        for statement in self.decide_prepared(all_of_them=True):
            self.execute(statement)

    def _run(self, statements: list[str]) -> None:
        # COMMIT/ROLLBACK PREPARED cannot run inside a transaction block: send them on their own.
        while statements and statements[0].endswith(";") and " PREPARED '" in statements[0]:
            self.execute(statements.pop(0).rstrip(";"))
        self.execute(";\n".join(statements))
