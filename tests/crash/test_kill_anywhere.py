"""SIGKILL the real command line at random moments — first runs included — then run it again: silver
must equal PostgreSQL, whatever moment the kill hit.

Each seed is one pipeline from nothing: a database that already has data (an initial snapshot), then
rounds of changes (a new table, a column added, a truncate, key moves, unchanged TOAST). Every round
runs ``cdc-apply land --once`` and ``cdc-apply apply --once`` as a user would, each killed (its whole
process group: the Python driver, Spark's JVM and its Python workers) at a moment drawn from the seed,
sometimes twice in a row, then run until it exits 0. A restart that fails is the defect this test is
for: it prints the seed, the kill times and the failing run's output.

The seeds are ``CDC_APPLY_KILL_SEEDS`` (default ``1``); ``make system`` (which ``.ci/run`` runs after
``make test``) runs four.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from cdc_apply.testing.processes import CliProcess, Finished

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.system]

SEEDS = [int(s) for s in os.environ.get("CDC_APPLY_KILL_SEEDS", "1").split(",") if s.strip()]
ROUNDS = int(os.environ.get("CDC_APPLY_KILL_ROUNDS", "3"))

CONFIG = """pipeline = "kills"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
[apply]
parallelism = 2
[source]
name = "kills"
dsn = "{dsn}"
slot = "{slot}"
publication = "kills_pub"
create_slot = true
snapshot = "initial"
snapshot_chunk_rows = 700
ddl_events = true
[land]
batch_seconds = 1.0
idle_exit_seconds = 1.0
"""

SCHEMA = [
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, visits int NOT NULL DEFAULT 0)",
    "CREATE TABLE audit (event text NOT NULL, n int)",
    "ALTER TABLE audit REPLICA IDENTITY FULL",
    "CREATE TABLE docs (id int PRIMARY KEY, title text, body text)",
    "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",
    "CREATE TABLE measures (day date NOT NULL, id int NOT NULL, v float8, PRIMARY KEY (day, id)) PARTITION BY RANGE (day)",
    "CREATE TABLE measures_a PARTITION OF measures FOR VALUES FROM ('2026-01-01') TO ('2026-07-01')",
    "CREATE TABLE measures_b PARTITION OF measures FOR VALUES FROM ('2026-07-01') TO ('2027-01-01')",
    "INSERT INTO customers SELECT g, 'customer ' || g, 0 FROM generate_series(1, 2000) g",
    "INSERT INTO audit SELECT 'login', g % 5 FROM generate_series(1, 300) g",
    "INSERT INTO docs SELECT g, 'doc ' || g, (SELECT string_agg(md5(g::text || i::text), '') "
    "FROM generate_series(1, 200) i) FROM generate_series(1, 30) g",
    "INSERT INTO measures SELECT DATE '2026-01-01' + g % 360, g, g / 3.0 FROM generate_series(1, 500) g",
    "CREATE PUBLICATION kills_pub FOR ALL TABLES WITH (publish_via_partition_root = true)",
]


def round_changes(r: int, rng: random.Random) -> list[str]:
    """Round ``r``'s transactions (each statement one, or BEGIN ... COMMIT)."""
    a, b = rng.randrange(1, 1500), rng.randrange(1, 25)
    out = [
        f"UPDATE customers SET visits = visits + 1 WHERE id % 7 = {r % 7}",
        f"INSERT INTO customers SELECT g, 'new ' || g, {r} FROM generate_series({5000 * r}, {5000 * r + 199}) g",
        f"DELETE FROM customers WHERE id % 53 = {r}",
        f"UPDATE customers SET id = id + 100000 WHERE id BETWEEN {a} AND {a + 2}",        # key moves
        f"UPDATE docs SET title = title || ' r{r}' WHERE id % 3 = {r % 3}",                # unchanged TOAST
        f"UPDATE docs SET id = id + 1000 WHERE id = {b}",                                   # key move, TOAST kept
        f"INSERT INTO audit SELECT 'round {r}', g % 3 FROM generate_series(1, 40) g",
        "DELETE FROM audit WHERE ctid IN (SELECT ctid FROM audit WHERE event = 'login' LIMIT 1)",
        # Across partitions (the other half of the year), published as updates of the root.
        f"UPDATE measures SET day = DATE '2026-01-01' + (day - DATE '2026-01-01' + 180) % 360, v = v + 1 "
        f"WHERE id % 11 = {r}",
        f"BEGIN; UPDATE customers SET name = name || '!' WHERE id = {r + 10}; INSERT INTO audit VALUES ('txn', {r}); "
        f"SELECT pg_logical_emit_message(true, 'kills', 'round {r}'); COMMIT",
    ]
    if r == 1:
        out[1:1] = ["CREATE TABLE notes (id bigint PRIMARY KEY, note text)",
                    "INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 100) g",
                    "ALTER TABLE customers ADD COLUMN tier text DEFAULT 'basic'",
                    "UPDATE customers SET tier = 'gold' WHERE id % 40 = 0"]
    if r == 2:
        out += ["BEGIN; TRUNCATE audit; INSERT INTO audit SELECT 'after', g FROM generate_series(1, 20) g; COMMIT",
                "UPDATE notes SET note = note || '?' WHERE id % 2 = 0"]
    return out


class KillLog:
    """Every run of the test, for the message of a failure."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.lines: list[str] = []

    def add(self, done: Finished) -> Finished:
        self.lines.append(done.describe() if done.returncode != 0 or done.killed else
                          f"{done.name}: exit 0 in {done.seconds:.1f}s")
        return done

    def failure(self, what: str) -> str:
        return (f"seed {self.seed}: {what}\nreplay: CDC_APPLY_KILL_SEEDS={self.seed} "
                f".venv/bin/python -m pytest {__file__}\n" + "\n".join(self.lines))


def _lake_files(root: Path) -> int:
    """How many files the lake's folders hold (a kill is drawn once the run has written something)."""
    return sum(len(files) + len(dirs) for part in ("bronze", "silver", "state")
               for _, dirs, files in os.walk(root / part))


class Runner:
    """Runs one command of the pipeline, killing it when the seed says."""

    def __init__(self, root: Path, rng: random.Random, log: KillLog) -> None:
        self.root, self.rng, self.log = root, rng, log
        self.config = root / "kills.toml"
        self.runs = 0
        # Seconds from a run's first write to its end, per command, as last measured (a guess at first).
        self.writing = {"land": 15.0, "apply": 30.0}

    def start(self, command: str) -> CliProcess:
        self.runs += 1
        # The JVM's quick compiler only: these runs are short, and on two cores the optimising compiler's
        # warm-up is most of a short run's time.
        return CliProcess(f"{self.runs:02d}-{command}", [command, "--config", str(self.config), "--once"],
                          self.root / "logs", self.root, env={"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"})

    def killed(self, command: str) -> Finished:
        """One run killed at a random moment after its first write (or ended by itself before it)."""
        proc = self.start(command)
        before = _lake_files(self.root)
        window = self.writing[command]
        state = {"first": None, "at": None}

        def due() -> str | None:
            now = time.monotonic()
            if state["first"] is None:
                if _lake_files(self.root) == before:
                    return None
                state["first"] = now
                state["at"] = now + self.rng.uniform(0.0, window)
            if now >= state["at"]:
                return f"{now - state['first']:.2f}s after its first write (window {window:.0f}s)"
            return None

        done = self.log.add(proc.wait(timeout=600, kill_when=due, poll=0.01))
        assert done.killed or done.returncode == 0, self.log.failure(f"{command} exited {done.returncode}")
        return done

    def complete(self, command: str) -> None:
        """Run the command until it exits by itself; any exit but 0 fails the test."""
        proc = self.start(command)
        before = _lake_files(self.root)
        first = []

        def watch() -> None:
            if not first and _lake_files(self.root) != before:
                first.append(time.monotonic())
            return None

        done = self.log.add(proc.wait(timeout=900, kill_when=watch, poll=0.05))
        assert done.returncode == 0, self.log.failure(f"{command} after a kill exited {done.returncode}")
        if first:
            self.writing[command] = max(2.0, proc.started + done.seconds - first[0])

    def round(self, command: str) -> None:
        self.killed(command)
        if self.rng.random() < 0.3:   # killed again during its recovery
            self.killed(command)
        self.complete(command)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_pipeline_killed_at_random_moments_ends_equal_to_postgres(seed, postgres, spark, tmp_path):
    from cdc_apply.config import load_config
    from cdc_apply.testing.compare import compare_with_postgres, snapshot_postgres

    rng = random.Random(seed)
    db = f"kills_{seed}"
    postgres.create_database(db)
    conn = postgres.connect(db)
    log = KillLog(seed)
    try:
        with conn.cursor() as cur:
            for sql in SCHEMA:
                cur.execute(sql)
        runner = Runner(tmp_path, rng, log)
        runner.config.write_text(CONFIG.format(root=tmp_path, dsn=postgres.dsn(db), slot=f"kills_{seed}"))
        for r in range(ROUNDS):
            if r:
                with conn.cursor() as cur:
                    for sql in round_changes(r, rng):
                        cur.execute(sql)
            runner.round("land")
            runner.round("apply")
        # The partitions are published through their root: silver has one table, measures.
        tables = [t for t in snapshot_postgres(conn, ["public"]) if t.name not in ("measures_a", "measures_b")]
        checks = compare_with_postgres(spark, load_config(runner.config), conn, source="kills", snapshot=tables)
        assert all(c.equal for c in checks), log.failure("silver differs from PostgreSQL:\n" +
                                                         "\n".join(c.line() for c in checks))
    finally:
        conn.close()
        postgres.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = %s AND NOT active", (f"kills_{seed}",), dbname=db)
