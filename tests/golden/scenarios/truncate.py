"""Scenario `truncate`: every TRUNCATE option bit, cascades over a foreign key, changes after it.

RESTART IDENTITY makes the refill reuse the same serial keys, so an apply that does not
empty the table at the truncate's position collides on the primary key.
"""

from __future__ import annotations

from ..harness import Scenario, Workload

LARGE = 1000

SCHEMA = """
CREATE TABLE tr_parent (id serial PRIMARY KEY, name text);
CREATE TABLE tr_child (id serial PRIMARY KEY, parent_id int4 REFERENCES tr_parent (id), note text);
CREATE TABLE tr_plain (id int4 PRIMARY KEY, val text);
CREATE TABLE tr_other (id bigserial PRIMARY KEY, val text)
"""

FILL_FAMILY = """
INSERT INTO tr_parent (name) VALUES ('p1'), ('p2'), ('p3');
INSERT INTO tr_child (parent_id, note)
SELECT p.id, p.name || '-c' || n FROM tr_parent p, generate_series(1, 2) n WHERE p.name <> 'p3' ORDER BY p.id, n
"""

INITIAL = FILL_FAMILY + """;
INSERT INTO tr_plain VALUES (1, 'a'), (2, 'b'), (3, 'c');
INSERT INTO tr_other (val) VALUES ('x'), ('y'), ('z')
"""

MID_TRANSACTION = """
BEGIN;
INSERT INTO tr_plain VALUES (10, 'before');
TRUNCATE tr_plain;
INSERT INTO tr_plain VALUES (1, 'after'), (10, 'after');
UPDATE tr_plain SET val = 'after!' WHERE id = 1;
COMMIT
"""

STREAMED = f"""
BEGIN;
INSERT INTO tr_plain SELECT g, 'bulk ' || g FROM generate_series(1001, {1000 + LARGE}) g;
TRUNCATE tr_plain;
INSERT INTO tr_plain VALUES (1, 'after streamed truncate'), (1001, 'kept');
INSERT INTO tr_other (val) VALUES ('streamed');
COMMIT
"""


def run(w: Workload) -> None:
    """One step per truncate flavour, each followed by a checkpoint."""
    w.script(SCHEMA)
    w.script(INITIAL)
    w.checkpoint("initial")
    w.sql("TRUNCATE tr_parent, tr_child RESTART IDENTITY CASCADE")
    w.checkpoint("truncate_restart_cascade")
    w.script(FILL_FAMILY)  # serial keys start at 1 again
    w.checkpoint("refill")
    w.sql("TRUNCATE tr_plain")
    w.checkpoint("truncate_plain")
    w.script(MID_TRANSACTION)
    w.checkpoint("truncate_mid_transaction")
    w.sql("TRUNCATE tr_parent CASCADE")  # names only the parent; the child goes with it
    w.checkpoint("truncate_cascade")
    w.sql("INSERT INTO tr_other (val) VALUES ('w')")
    w.sql("TRUNCATE tr_other RESTART IDENTITY")
    w.checkpoint("truncate_restart")
    w.script(FILL_FAMILY + "; INSERT INTO tr_other (val) VALUES ('again'); INSERT INTO tr_plain VALUES (2, 'later')")
    w.checkpoint("after")
    w.script("BEGIN; TRUNCATE tr_plain, tr_other; ROLLBACK")  # decodes to nothing
    w.checkpoint("rolled_back_truncate")
    w.script(STREAMED)
    w.checkpoint("streamed_truncate")
    w.sql("TRUNCATE tr_plain, tr_other")
    w.checkpoint("truncate_two_unrelated")
    w.sql("INSERT INTO tr_plain VALUES (1, 'final')")
    w.checkpoint("final")


SCENARIO = Scenario("truncate", "TRUNCATE with option bits 0-3, CASCADE over a foreign key, RESTART IDENTITY, "
                    "changes after a truncate in the same and later transactions, truncate in a streamed "
                    "transaction", run)
