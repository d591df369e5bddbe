"""Scenario `transactions`: savepoints, large (streamed) transactions, 2PC, messages, empty ones.

"Large" is LARGE rows of a few bytes each: several times logical_decoding_work_mem (64kB),
so the configs with streaming send every large transaction in several Stream Start/Stop
blocks, while the others spill to disk and send it whole at commit.
"""

from __future__ import annotations

from ..harness import TRANSACTIONS_CONFIGS, Scenario, Workload

LARGE = 1000
BATCH = 100

SCHEMA = """
CREATE TABLE tx_small (id int4 PRIMARY KEY, val text);
CREATE TABLE tx_big (id int4 PRIMARY KEY, val text);
CREATE TABLE tx_other (id int4 PRIMARY KEY, note text);
INSERT INTO tx_other SELECT g, 'note ' || g FROM generate_series(1, 5) g
"""

SMALL_SAVEPOINTS = """
BEGIN;
INSERT INTO tx_small VALUES (1, 'kept');
SAVEPOINT a;
INSERT INTO tx_small VALUES (2, 'rolled back');
SELECT pg_logical_emit_message(true, 'golden.sub', 'in a rolled back subtransaction');
ROLLBACK TO SAVEPOINT a;
INSERT INTO tx_small VALUES (3, 'kept');
SAVEPOINT b;
INSERT INTO tx_small VALUES (4, 'released');
RELEASE SAVEPOINT b;
SAVEPOINT c;
SAVEPOINT d;
INSERT INTO tx_small VALUES (5, 'rolled back, nested');
ROLLBACK TO SAVEPOINT d;
INSERT INTO tx_small VALUES (6, 'kept, nested');
RELEASE SAVEPOINT c;
UPDATE tx_small SET val = 'kept!' WHERE id = 1;
COMMIT
"""


def bulk(table: str, first: int, count: int, tag: str) -> str:
    """An INSERT of ``count`` short rows with keys ``first``..``first + count - 1``."""
    return (f"INSERT INTO {table} SELECT g, '{tag}' || g "
            f"FROM generate_series({first}, {first + count - 1}) g")


def _two_phase(w: Workload) -> None:
    w.script("BEGIN; INSERT INTO tx_small VALUES (10, 'prepared'); UPDATE tx_other SET note = 'prepared' "
             "WHERE id = 1; PREPARE TRANSACTION 'golden_small_commit'")
    w.checkpoint("small_prepared")
    w.sql("COMMIT PREPARED 'golden_small_commit'")
    w.checkpoint("small_commit_prepared")
    w.script("BEGIN; INSERT INTO tx_small VALUES (11, 'never'); PREPARE TRANSACTION 'golden_small_rollback'")
    w.sync()
    w.sql("ROLLBACK PREPARED 'golden_small_rollback'")
    w.checkpoint("small_rollback_prepared")
    w.script(f"BEGIN; {bulk('tx_big', 10001, LARGE, 'p')}; PREPARE TRANSACTION 'golden_large_commit'")
    w.checkpoint("large_prepared")
    w.sql("COMMIT PREPARED 'golden_large_commit'")
    w.checkpoint("large_commit_prepared")
    w.script(f"BEGIN; {bulk('tx_big', 20001, LARGE, 'never')}; PREPARE TRANSACTION 'golden_large_rollback'")
    w.sync()  # decoded (streamed, or sent as a prepared transaction) before it is rolled back
    w.sql("ROLLBACK PREPARED 'golden_large_rollback'")
    w.checkpoint("large_rollback_prepared")
    # Prepared before, committed after another transaction's commit.
    w.script("BEGIN; INSERT INTO tx_small VALUES (12, 'prepared first'); PREPARE TRANSACTION 'golden_interleaved'")
    w.sql("INSERT INTO tx_small VALUES (13, 'committed while 12 was prepared')")
    w.sql("COMMIT PREPARED 'golden_interleaved'")
    w.checkpoint("prepared_interleaved")
    # A prepared transaction with an xid but no changes.
    w.script("BEGIN; SELECT pg_current_xact_id(); PREPARE TRANSACTION 'golden_empty'")
    w.sql("COMMIT PREPARED 'golden_empty'")
    w.checkpoint("empty_prepared")


def _concurrent(w: Workload) -> None:
    """Two large transactions interleaving; the one that began second commits first."""
    a, b = w.session(), w.session()
    a.run("BEGIN")
    b.run("BEGIN")
    for i in range(LARGE // BATCH):
        a.run(bulk("tx_big", 5001 + i * BATCH, BATCH, "a"))
        b.run(bulk("tx_big", 7001 + i * BATCH, BATCH, "b"))
        if i == 2:
            w.sql("SELECT pg_logical_emit_message(false, 'golden.nontx', 'while two are open')")
    b.run("COMMIT")
    w.checkpoint("concurrent_second_committed")
    a.run("COMMIT")
    w.checkpoint("concurrent_first_committed")


def _messages(w: Workload) -> None:
    w.sql("SELECT pg_logical_emit_message(false, 'golden.nontx', 'plain text')")
    w.sql(r"SELECT pg_logical_emit_message(false, 'golden.binary', '\x00ff00'::bytea)")
    w.sql("SELECT pg_logical_emit_message(true, 'golden.tx', 'alone in its transaction')")
    w.sql("SELECT pg_logical_emit_message(true, 'golden.empty', '')")
    w.script("BEGIN; INSERT INTO tx_small VALUES (20, 'with message'); "
             "SELECT pg_logical_emit_message(true, 'golden.tx', 'after an insert'); "
             "SELECT pg_logical_emit_message(false, 'golden.nontx', 'inside an open transaction'); COMMIT")
    w.script("BEGIN; INSERT INTO tx_small VALUES (21, 'never'); "
             "SELECT pg_logical_emit_message(true, 'golden.tx', 'rolled back'); "
             "SELECT pg_logical_emit_message(false, 'golden.nontx', 'survives the rollback'); ROLLBACK")
    w.checkpoint("messages")


def run(w: Workload) -> None:
    """Each step commits (or aborts) before the next; checkpoints after every step."""
    w.script(SCHEMA)
    w.checkpoint("initial")
    w.script(SMALL_SAVEPOINTS)
    w.checkpoint("small_savepoints")
    w.script(f"BEGIN; {bulk('tx_big', 1, LARGE // 2, 'c')}; "
             f"SELECT pg_logical_emit_message(true, 'golden.tx', 'inside a large transaction'); "
             f"{bulk('tx_big', 1 + LARGE // 2, LARGE - LARGE // 2, 'c')}; COMMIT")
    w.checkpoint("large_commit")
    w.script(f"BEGIN; {bulk('tx_big', 100001, LARGE, 'never')}")
    w.sync()  # streamed while in progress, so the rollback becomes a Stream Abort
    w.sql("ROLLBACK")
    w.checkpoint("large_rollback")
    w.script(f"BEGIN; {bulk('tx_big', 2001, 500, 's')}; SAVEPOINT s; {bulk('tx_big', 3001, LARGE, 'never')}")
    w.sync()
    w.script(f"ROLLBACK TO SAVEPOINT s; {bulk('tx_big', 2501, 500, 's')}; COMMIT")
    w.checkpoint("large_savepoint_rollback")
    _concurrent(w)
    _two_phase(w)
    w.script("BEGIN; COMMIT")
    w.script("BEGIN; CREATE TEMP TABLE scratch (x int4); INSERT INTO scratch VALUES (1); COMMIT")
    w.sql("UPDATE tx_small SET val = 'nothing' WHERE false")
    w.sql("CREATE TABLE tx_ddl_only (x int4)")
    w.checkpoint("empty_transactions")
    _messages(w)
    w.script("BEGIN; INSERT INTO tx_small VALUES (30, 'multi'); UPDATE tx_other SET note = 'multi' WHERE id = 2; "
             "DELETE FROM tx_big WHERE id <= 10; INSERT INTO tx_other VALUES (6, 'multi'); COMMIT")
    w.checkpoint("multi_table")
    w.script(f"BEGIN; UPDATE tx_big SET val = val || '!' WHERE id <= {LARGE}; "
             "DELETE FROM tx_big WHERE id > 2900 AND id <= 3000; INSERT INTO tx_small VALUES (31, 'large'); "
             "UPDATE tx_other SET note = 'large' WHERE id = 3; COMMIT")
    w.checkpoint("large_update_delete")


SCENARIO = Scenario("transactions", "savepoints, large streamed transactions (commit, rollback, subxact "
                    "abort, two interleaving), PREPARE/COMMIT PREPARED/ROLLBACK PREPARED small and large, "
                    "logical decoding messages, empty and multi-table transactions", run,
                    configs=TRANSACTIONS_CONFIGS)
