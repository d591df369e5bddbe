"""Scenario `replica_identity`: every REPLICA IDENTITY setting, key changes and unchanged TOAST.

TOAST columns use STORAGE EXTERNAL and ~8.6 kB of md5 hex (incompressible, deterministic),
so every value really lives out of line and an update that leaves it alone sends 'u'.
"""

from __future__ import annotations

from ..harness import Scenario, Workload

SCHEMA = """
CREATE TABLE ri_default (id int4 PRIMARY KEY, val text, n int4);
CREATE TABLE ri_default_composite (a int4, b text, val text, PRIMARY KEY (a, b));
CREATE TABLE ri_full (id int4 PRIMARY KEY, val text, n int4);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_full_nokey (a int4, b text);
ALTER TABLE ri_full_nokey REPLICA IDENTITY FULL;
CREATE TABLE ri_index (id int4 PRIMARY KEY, code text NOT NULL, region int4 NOT NULL, val text);
CREATE UNIQUE INDEX ri_index_code_region ON ri_index (region, code);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code_region;
CREATE TABLE ri_nothing (id int4 PRIMARY KEY, val text);
ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE ri_default_nokey (a int4, b text);
CREATE TABLE ri_toast_default (id int4 PRIMARY KEY, big text, n int4);
ALTER TABLE ri_toast_default ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE ri_toast_full (id int4 PRIMARY KEY, big text, n int4);
ALTER TABLE ri_toast_full ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE ri_toast_full REPLICA IDENTITY FULL;
"""

INSERT = """
INSERT INTO ri_default VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3), (4, 'four', 4);
INSERT INTO ri_default_composite VALUES (1, 'a', 'x'), (1, 'b', 'y'), (2, 'a', 'z');
INSERT INTO ri_full VALUES (1, 'one', 1), (2, 'two', NULL), (3, 'three', 3);
INSERT INTO ri_full_nokey VALUES (1, 'x'), (1, 'x'), (2, 'y'), (3, NULL), (4, 'dup'), (4, 'dup');
INSERT INTO ri_index VALUES (1, 'A', 10, 'v1'), (2, 'B', 10, 'v2'), (3, 'A', 20, 'v3');
INSERT INTO ri_nothing VALUES (1, 'one'), (2, 'two');
INSERT INTO ri_default_nokey VALUES (1, 'one'), (1, 'one')
"""

# One of two identical rows can only be addressed by its ctid.
ONE_DUPLICATE = "(SELECT ctid FROM ri_full_nokey WHERE a = {a} AND b = '{b}' LIMIT 1)"

UPDATE_NONKEY = f"""
UPDATE ri_default SET val = 'one!', n = 10 WHERE id = 1;
UPDATE ri_default SET val = val WHERE id = 3;
UPDATE ri_default SET n = NULL WHERE id = 4;
UPDATE ri_default_composite SET val = 'x!' WHERE a = 1 AND b = 'a';
UPDATE ri_full SET val = 'one!' WHERE id = 1;
UPDATE ri_full SET n = 2 WHERE id = 2;
UPDATE ri_full_nokey SET b = 'x2' WHERE ctid = {ONE_DUPLICATE.format(a=1, b='x')};
UPDATE ri_full_nokey SET b = 'z' WHERE a = 3;
UPDATE ri_index SET val = 'v1!' WHERE id = 1;
UPDATE ri_index SET id = 30 WHERE id = 3
"""

UPDATE_KEY = """
UPDATE ri_default SET id = 20 WHERE id = 2;
UPDATE ri_default SET id = id + 100, val = 'moved' WHERE id IN (3, 4);
UPDATE ri_default_composite SET b = 'c' WHERE a = 1 AND b = 'b';
UPDATE ri_default_composite SET a = 3, val = 'z!' WHERE a = 2 AND b = 'a';
UPDATE ri_full SET id = 30 WHERE id = 3;
UPDATE ri_full_nokey SET a = 5 WHERE a = 2;
UPDATE ri_index SET code = 'C' WHERE id = 2;
UPDATE ri_index SET region = 11, val = 'v1!!' WHERE id = 1
"""

DELETE = f"""
DELETE FROM ri_default WHERE id = 1;
DELETE FROM ri_default_composite WHERE a = 1 AND b = 'c';
DELETE FROM ri_full WHERE id = 2;
DELETE FROM ri_full_nokey WHERE ctid = {ONE_DUPLICATE.format(a=4, b='dup')};
DELETE FROM ri_index WHERE id = 30
"""


def big(seed: str, chunks: int = 270) -> str:
    """SQL for ~32 * ``chunks`` characters of md5 hex: incompressible and deterministic."""
    return (f"(SELECT string_agg(md5(i::text || '{seed}'), '' ORDER BY i) "
            f"FROM generate_series(1, {chunks}) i)")


TOAST_INSERT = f"""
INSERT INTO ri_toast_default VALUES (1, {big('d1')}, 1), (2, {big('d2')}, 2), (3, 'small', 3);
INSERT INTO ri_toast_full VALUES (1, {big('f1')}, 1), (2, {big('f2')}, 2), (3, 'small', 3)
"""

TOAST_UNCHANGED = """
UPDATE ri_toast_default SET n = 10 WHERE id = 1;
UPDATE ri_toast_full SET n = 10 WHERE id = 1;
UPDATE ri_toast_default SET n = 30 WHERE id = 3
"""

TOAST_KEY = """
UPDATE ri_toast_default SET id = 102 WHERE id = 2;
UPDATE ri_toast_full SET id = 102, n = 20 WHERE id = 2
"""

TOAST_VALUE = f"""
UPDATE ri_toast_default SET big = {big('d1b', 260)} WHERE id = 1;
UPDATE ri_toast_default SET big = NULL WHERE id = 3;
UPDATE ri_toast_full SET big = 'now small' WHERE id = 1
"""

# The update reuses the toast pointer written by the insert of the same transaction;
# the decoder has no chunks for it by then, so the new tuple still says 'u'.
TOAST_SAME_TRANSACTION = f"""
INSERT INTO ri_toast_default VALUES (4, {big('d4', 265)}, 4);
UPDATE ri_toast_default SET n = 40 WHERE id = 4;
INSERT INTO ri_toast_full VALUES (4, {big('f4', 265)}, 4);
UPDATE ri_toast_full SET n = 40 WHERE id = 4
"""

TOAST_DELETE = """
DELETE FROM ri_toast_default WHERE id = 102;
DELETE FROM ri_toast_full WHERE id = 102
"""


def run(w: Workload) -> None:
    """Inserts, non-key updates, key updates and deletes per identity; then the TOAST cases."""
    w.script(SCHEMA)
    w.checkpoint("schema")
    for name, script in (("insert", INSERT), ("update_nonkey", UPDATE_NONKEY),
                         ("update_key", UPDATE_KEY), ("delete", DELETE)):
        w.script(script)
        w.checkpoint(name)
    # REPLICA IDENTITY NOTHING (and DEFAULT without a key) cannot publish updates or deletes.
    w.expect_error("UPDATE ri_nothing SET val = 'x' WHERE id = 1", "UPDATE on REPLICA IDENTITY NOTHING")
    w.expect_error("DELETE FROM ri_nothing WHERE id = 1", "DELETE on REPLICA IDENTITY NOTHING")
    w.expect_error("UPDATE ri_default_nokey SET b = 'x'", "UPDATE on REPLICA IDENTITY DEFAULT without a key")
    w.sql("INSERT INTO ri_nothing VALUES (3, 'three')")
    w.checkpoint("nothing")
    for name, script in (("toast_insert", TOAST_INSERT), ("toast_update_unchanged", TOAST_UNCHANGED),
                         ("toast_update_key", TOAST_KEY), ("toast_update_value", TOAST_VALUE),
                         ("toast_same_transaction", TOAST_SAME_TRANSACTION), ("toast_delete", TOAST_DELETE)):
        w.script(script)
        w.checkpoint(name)


SCENARIO = Scenario("replica_identity", "REPLICA IDENTITY DEFAULT (single and composite pk, and no key), "
                    "FULL (with pk, without key, duplicate rows), USING INDEX, NOTHING; key changes ('K'), "
                    "old tuples ('O'); unchanged out-of-line TOAST ('u')", run)
