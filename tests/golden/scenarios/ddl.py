"""Scenario `ddl`: column add/drop/rename/retype and identity changes, with DML after each.

pgoutput sends a Relation message before the first change of a relation after any
invalidation, so every step shows the relation version its rows were written with.
"""

from __future__ import annotations

from ..harness import Scenario, Workload

LARGE = 1000

SCHEMA = """
CREATE TABLE ddl_t (id int4 PRIMARY KEY, a int4, b varchar(10), c int4, d int4);
CREATE TABLE ddl_big (id int4 PRIMARY KEY, val text);
CREATE TABLE ddl_nokey (a int4 NOT NULL, b text)
"""

STEPS = (
    ("initial", """
INSERT INTO ddl_t VALUES (1, 1, 'one', 1, 1), (2, 2, 'two', 2, 2), (3, 3, 'three', 3, 3);
INSERT INTO ddl_nokey VALUES (1, 'one'), (2, 'two')"""),
    ("add_column", """
ALTER TABLE ddl_t ADD COLUMN e text;
INSERT INTO ddl_t VALUES (4, 4, 'four', 4, 4, 'e4');
UPDATE ddl_t SET e = 'e1' WHERE id = 1"""),
    ("add_column_default", """
ALTER TABLE ddl_t ADD COLUMN f int4 DEFAULT 42;
INSERT INTO ddl_t (id, a, b, c, d) VALUES (5, 5, 'five', 5, 5);
UPDATE ddl_t SET a = 20 WHERE id = 2"""),
    ("drop_column", """
ALTER TABLE ddl_t DROP COLUMN c;
INSERT INTO ddl_t (id, a, b, d, e, f) VALUES (6, 6, 'six', 6, 'e6', 6);
UPDATE ddl_t SET a = 30 WHERE id = 3"""),
    ("rename_column", """
ALTER TABLE ddl_t RENAME COLUMN b TO b_renamed;
INSERT INTO ddl_t (id, a, b_renamed, d) VALUES (7, 7, 'seven', 7);
UPDATE ddl_t SET b_renamed = 'one!' WHERE id = 1"""),
    ("retype_int4_int8", """
ALTER TABLE ddl_t ALTER COLUMN a TYPE int8;
INSERT INTO ddl_t (id, a, b_renamed, d) VALUES (8, 9000000000, 'eight', 8)"""),
    ("retype_int4_text", """
ALTER TABLE ddl_t ALTER COLUMN d TYPE text USING d::text;
UPDATE ddl_t SET d = 'four' WHERE id = 4"""),
    ("retype_varchar_10_50", """
ALTER TABLE ddl_t ALTER COLUMN b_renamed TYPE varchar(50);
INSERT INTO ddl_t (id, a, b_renamed, d) VALUES (9, 9, 'a value longer than ten characters', 'nine')"""),
    ("replica_identity_full", """
ALTER TABLE ddl_t REPLICA IDENTITY FULL;
UPDATE ddl_t SET e = 'e5' WHERE id = 5;
DELETE FROM ddl_t WHERE id = 6"""),
    ("add_primary_key", """
ALTER TABLE ddl_nokey ADD PRIMARY KEY (a);
UPDATE ddl_nokey SET b = 'two!' WHERE a = 2;
DELETE FROM ddl_nokey WHERE a = 1"""),
    ("ddl_in_transaction", """
BEGIN;
ALTER TABLE ddl_t ADD COLUMN g bool;
INSERT INTO ddl_t (id, a, b_renamed, d, g) VALUES (10, 10, 'ten', 'ten', true);
ALTER TABLE ddl_t DROP COLUMN e;
UPDATE ddl_t SET g = false WHERE id = 1;
COMMIT"""),
    ("rolled_back_ddl", """
BEGIN;
ALTER TABLE ddl_t ADD COLUMN never int4;
INSERT INTO ddl_t (id, a, never) VALUES (99, 99, 99);
ROLLBACK;
INSERT INTO ddl_t (id, a, b_renamed) VALUES (11, 11, 'eleven')"""),
    ("ddl_in_streamed_transaction", f"""
BEGIN;
INSERT INTO ddl_big SELECT g, 'v' || g FROM generate_series(1, {LARGE}) g;
ALTER TABLE ddl_big ADD COLUMN z int4 DEFAULT 7;
INSERT INTO ddl_big SELECT g, 'w' || g, g FROM generate_series({LARGE + 1}, {2 * LARGE}) g;
UPDATE ddl_big SET z = 0 WHERE id <= 5;
ALTER TABLE ddl_big RENAME COLUMN val TO value;
ALTER TABLE ddl_big ALTER COLUMN z TYPE int8;
INSERT INTO ddl_big (id, value, z) VALUES ({2 * LARGE + 1}, 'last', 8000000000);
COMMIT"""),
    ("rename_table", """
ALTER TABLE ddl_t RENAME TO ddl_renamed;
UPDATE ddl_renamed SET a = 100 WHERE id = 1"""),
)


def run(w: Workload) -> None:
    """Create the tables, then one DDL step (with DML after it) per checkpoint."""
    w.script(SCHEMA)
    w.checkpoint("schema")
    for name, script in STEPS:
        w.script(script)
        w.checkpoint(name)


SCENARIO = Scenario("ddl", "ADD COLUMN with and without default, DROP/RENAME COLUMN, ALTER COLUMN TYPE "
                    "(int4->int8, int4->text, varchar(10)->varchar(50)), REPLICA IDENTITY FULL, ADD PRIMARY KEY, "
                    "DDL inside a small and a large streamed transaction, RENAME TABLE", run)
