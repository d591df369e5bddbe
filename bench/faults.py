"""Fault probes: the apply job SIGKILLed mid-batch, a 200 MB value, a full disk during a MERGE.

    .venv/bin/python -m bench.faults                      # every probe, ~1 hour on 2 busy cores
    .venv/bin/python -m bench.faults --only value_200mb   # one probe; --keep leaves the work folder

Every probe runs a real PostgreSQL 18 (``cdc_apply.testing.postgres``) and the real command line in
subprocesses — ``cdc-apply land`` and ``apply --once``, the console script beside this interpreter —
each started in a process group of
its own, so that a kill takes the whole job (the Python driver, Spark's JVM and its Python workers).
Configurations are written to a temporary folder (``--keep`` leaves it, with every subprocess's log).
This process only reads: it runs PostgreSQL, the workload, and a Spark session that reads the lake
between runs to compare silver with PostgreSQL (``compare_with_postgres``).

``kill_during_merge``
    A lander runs throughout. A base load (a keyed table, a REPLICA IDENTITY FULL table with
    duplicate rows, a table with a TOASTed column, a table truncated every round) is applied cleanly;
    then each round runs a workload (updates, key moves, unchanged-TOAST updates, deletes of one of
    several identical rows, ``TRUNCATE`` + inserts, one transaction over every table with a
    transactional message), lands it, starts ``apply --once`` and SIGKILLs its process group the moment
    the round's kill point appears on disk (polled every 20 ms): the k-th new silver commit of the batch,
    the batch's transactions-log commit, or its progress commit. Then ``apply --once`` again; every
    silver table is compared with PostgreSQL and the transactions log must hold each committed
    transaction (from the reference applier over bronze) exactly once.

``value_200mb``
    One row whose ``text`` value is 200 MiB (incompressible hex, ``STORAGE EXTERNAL``): inserted,
    updated leaving it unchanged (unchanged TOAST, kept from silver), then changed. After each step the
    lander (``--once``) and ``apply --once`` run; peak memory (VmHWM) of each process, seconds, the
    bronze row's size and silver against PostgreSQL are recorded.

``disk_full_during_merge``
    Silver lives on a tmpfs of ``--fs-mb`` MiB (``mount -t tmpfs``; a loop-mounted ext4 when tmpfs
    cannot be mounted). After a clean base batch, a filler file leaves ``--free-mb`` free and a batch
    that writes more than that is applied: the job must stop with an error. Then each silver table is
    compared with the reference applier at the state's applied seq (before the batch) and at the end of
    bronze (after it); the filler is removed and ``apply --once`` must complete with silver equal to
    PostgreSQL.

Results merge into ``bench/results.json`` under ``faults`` (one key per probe); a table is printed.
docs/FAULTS.md describes what each fault gives.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench.results import merge_results, read_results
from cdc_apply.lake.books.commit_tag import decode_tag
from cdc_apply.testing.processes import CLI, CliProcess, Finished, session_processes

SOURCE = "faults"
MIB = 2 ** 20

CONFIG = """# written by python -m bench.faults
pipeline = "faults"
[bronze]
path = "{bronze}"
[silver]
path = "{silver}"
[state]
path = "{state}"
[apply]
parallelism = {parallelism}
[source]
name = "{source}"
dsn = "{dsn}"
slot = "{slot}"
publication = "{publication}"
proto_version = 4
streaming = "parallel"
two_phase = true
messages = true
[land]
batch_seconds = 1.0
idle_exit_seconds = 2.0
"""


# -- processes ------------------------------------------------------------------------------------------

def _memory_kb(pid: int) -> tuple[int, int, int]:
    """(VmHWM, VmRSS, Pss) of ``pid`` in kB; zeros when it is gone."""
    hwm = rss = pss = 0
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                    break
    except OSError:
        pass
    return hwm, rss, pss


class MemorySampler(threading.Thread):
    """Peak memory of a process tree (one session), sampled every ``every`` seconds.

    Per process its high-water mark (VmHWM: the kernel's own peak RSS, exact up to the last sample
    before the process ends); for the tree the largest sum of proportional set sizes (Pss: pages shared
    between processes, such as a forked Python worker's, count once in the sum). A JVM's child that is
    still the JVM (``java`` under ``java``: the moment between its vfork and exec, sharing the JVM's
    memory) is left out, or the JVM would count twice.
    """

    def __init__(self, sid: int, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.sid, self.every = sid, every
        self.hwm: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.tree_peak_kb = 0
        self.heap: str | None = None  # the driver JVM's -Xmx
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.sample()
            self.halt.wait(self.every)

    def sample(self) -> None:
        procs = session_processes(self.sid)
        total = 0
        for pid, (name, parent) in procs.items():
            if name == "java" and procs.get(parent, ("",))[0] == "java":
                continue
            hwm, _, pss = _memory_kb(pid)
            total += pss
            if name == "java" and self.heap is None:
                # Spark's driver JVM (SparkSubmit), not the launcher spark-submit runs first (-Xmx128m).
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        args = f.read().split(b"\0")
                    if b"org.apache.spark.deploy.SparkSubmit" in args and b"org.apache.spark.launcher.Main" not in args:
                        xmx = [a for a in args if a.startswith(b"-Xmx")]
                        self.heap = xmx[-1][4:].decode() if xmx else None
                except OSError:
                    pass
            self.names[pid] = name
            self.hwm[pid] = max(self.hwm.get(pid, 0), hwm)
        self.tree_peak_kb = max(self.tree_peak_kb, total)

    def peaks_mb(self) -> dict[str, float]:
        """MiB: the CLI's Python driver, the JVM, the largest Python worker, the tree's largest sum."""
        def most(pids):
            return round(max((self.hwm[p] for p in pids), default=0) / 1024, 1)
        java = [p for p, n in self.names.items() if n == "java"]
        workers = [p for p, n in self.names.items() if n.startswith("python") and p != self.sid]
        return {"driver_python_mb": most([self.sid] if self.sid in self.hwm else []), "jvm_mb": most(java),
                "jvm_heap_max": self.heap, "python_worker_mb": most(workers),
                "tree_pss_mb": round(self.tree_peak_kb / 1024, 1)}


@dataclass
class RunResult(Finished):
    """One subprocess run of the CLI, with the memory its process tree took."""

    memory: dict[str, float] = field(default_factory=dict)

    def cause(self) -> str | None:
        """What Spark logged as the failure's root: the first ``OutOfMemoryError`` or ``No space left``
        line, else the last ``Caused by:`` line."""
        lines = self.stderr.splitlines()
        for needle in ("OutOfMemoryError", "No space left on device"):
            found = next((line.strip() for line in lines if needle in line), None)
            if found:
                return found
        causes = [line.strip() for line in lines if line.startswith("Caused by:")]
        return causes[-1] if causes else None

    def failed_write(self) -> str | None:
        """Spark's line naming the write that failed (``[TASK_WRITE_FAILED] ... to file:<table>``)."""
        return next((line.strip() for line in self.stderr.splitlines() if "TASK_WRITE_FAILED" in line), None)

    def summary(self) -> dict:
        out = {"returncode": self.returncode, "seconds": round(self.seconds, 1), "memory": self.memory}
        if self.killed:
            out.update(killed=self.killed, killed_after_s=round(self.killed_after_s or 0, 2))
        if self.returncode not in (0, None) and not self.killed:
            out.update(error=self.error_line(), cause=self.cause(), failed_write=self.failed_write(),
                       stderr_lines=len(self.stderr.splitlines()))
        batch = [line for line in self.stdout.splitlines() if line.startswith("batch ")]
        if batch:
            out["batch_lines"] = batch
        return out


class Cli(CliProcess):
    """``cdc-apply <command> --config FILE [--once]`` in a process group of its own, memory sampled."""

    def __init__(self, name: str, args: list[str], logdir: Path, cwd: Path, env: dict | None = None) -> None:
        super().__init__(name, args, logdir, cwd, env)
        self.memory = MemorySampler(self.proc.pid)
        self.memory.start()

    def before_kill(self) -> None:
        self.memory.sample()  # the last look before the kill

    def wait(self, timeout: float = 900, kill_when: Callable[[], str | None] | None = None,
             poll: float = 0.02) -> RunResult:
        done = super().wait(timeout, kill_when, poll)
        self.memory.halt.set()
        self.memory.join()
        return RunResult(**vars(done), memory=self.memory.peaks_mb())


# -- the lake on disk -----------------------------------------------------------------------------------

_COMMIT = re.compile(r"^(\d{20})\.json$")


def delta_versions(table: Path) -> list[int]:
    """The committed versions of a Delta table, from its ``_delta_log`` (a commit is its JSON file:
    Delta writes it under a temporary name and renames it into place)."""
    try:
        names = os.listdir(table / "_delta_log")
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_COMMIT.match, names) if m)


def commit_info(table: Path, version: int) -> dict:
    """The commit's operation and cdc_apply metadata (what the table shows in ``DESCRIBE HISTORY``)."""
    path = table / "_delta_log" / f"{version:020d}.json"
    for line in path.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
            tag = decode_tag(info.get("userMetadata")) or {}
            out = {"operation": info.get("operation")}
            if "apply_step" in tag:
                out["apply_step"] = tag["apply_step"]
            return out
    return {}


class Lake:
    """Bronze, silver and state folders of one pipeline, its configuration file and its CLI runs."""

    def __init__(self, root: Path, pg, dbname: str, slot: str, publication: str,
                 silver: Path | None = None, parallelism: int = 4) -> None:
        self.root, self.pg, self.dbname, self.slot = root, pg, dbname, slot
        self.bronze, self.silver, self.state = root / "bronze", silver or root / "silver", root / "state"
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "faults.toml"
        self.config_path.write_text(CONFIG.format(
            bronze=self.bronze, silver=self.silver, state=self.state, parallelism=parallelism, source=SOURCE,
            dsn=pg.dsn(dbname), slot=slot, publication=publication))
        self.runs: Counter = Counter()

    @property
    def config(self):
        from cdc_apply.config import load_config

        return load_config(self.config_path)

    def cli(self, command: str, once: bool = True, env: dict | None = None) -> Cli:
        self.runs[command] += 1
        args = [command, "--config", str(self.config_path)] + (["--once"] if once else [])
        return Cli(f"{command}-{self.runs[command]}", args, self.logs, self.root, env)

    def land_once(self, env: dict | None = None) -> RunResult:
        return self.cli("land", env=env).wait()

    def apply_once(self, kill_when: Callable[[], str | None] | None = None, env: dict | None = None) -> RunResult:
        return self.cli("apply", env=env).wait(kill_when=kill_when)

    # -- Delta commits ----------------------------------------------------------------------------
    def silver_tables(self) -> dict[str, Path]:
        out = {}
        if self.silver.is_dir():
            for ns in sorted(p for p in self.silver.iterdir() if p.is_dir()):
                for rel in sorted(p for p in ns.iterdir() if p.is_dir()):
                    out[f"{ns.name}.{rel.name}"] = rel
        return out

    def state_tables(self) -> dict[str, Path]:
        return {p.name: p for p in sorted(self.state.iterdir()) if (p / "_delta_log").is_dir()} \
            if self.state.is_dir() else {}

    def commits(self) -> dict[str, list[int]]:
        """``{"silver:<ns.rel>" | "state:<table>": [versions]}``."""
        out = {f"silver:{k}": delta_versions(v) for k, v in self.silver_tables().items()}
        out.update({f"state:{k}": delta_versions(v) for k, v in self.state_tables().items()})
        return out

    def new_commits(self, before: dict[str, list[int]]) -> dict[str, list[dict]]:
        """Commits made since ``before``, per table, with their operation and cdc_apply step."""
        out = {}
        paths = {**{f"silver:{k}": v for k, v in self.silver_tables().items()},
                 **{f"state:{k}": v for k, v in self.state_tables().items()}}
        for key, path in paths.items():
            done = set(before.get(key, []))
            new = [v for v in delta_versions(path) if v not in done]
            if new:
                out[key] = [{"version": v, **commit_info(path, v)} for v in new]
        return out

    def watch(self, before: dict[str, list[int]], point: str) -> Callable[[], str | None]:
        """A ``kill_when`` for the kill point ``point``: ``silver_commit_<k>`` (the k-th new silver commit
        of the batch), ``logs`` (the batch's transactions-log commit), ``progress`` (its progress commit)."""
        silver = self.silver_tables()
        base = {k: len(before.get(f"silver:{k}", [])) for k in silver}
        if point.startswith("silver_commit_"):
            wanted = int(point.rsplit("_", 1)[1])

            def check():
                # Tables are listed again each time: a batch may create one.
                new = sum(len(delta_versions(p)) - base.get(k, 0) for k, p in self.silver_tables().items())
                return f"{new} new silver commit(s) seen" if new >= wanted else None
            return check
        table = {"logs": "transactions", "progress": "progress"}[point]
        path = self.state / table
        seen = len(before.get(f"state:{table}", []))

        def check_state():
            return f"new {table} commit seen" if len(delta_versions(path)) > seen else None
        return check_state


# -- PostgreSQL helpers ---------------------------------------------------------------------------------

def setup_source(pg, dbname: str, schema: str, slot: str, publication: str) -> None:
    pg.create_database(dbname)
    pg.execute(schema, dbname=dbname)
    pg.execute(f"CREATE PUBLICATION {publication} FOR ALL TABLES", dbname=dbname)
    # Before any workload: a slot decodes only what is written after it exists.
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)", (slot,), dbname=dbname)


def end_marker(pg, dbname: str, text: str) -> int:
    """Commit a transaction holding one logical decoding message; returns an LSN taken inside it, before
    its commit record. Once the slot is confirmed past it, the lander has landed this transaction and,
    as units are landed in commit order and the workload runs in one session, all before it."""
    conn = pg.connect(dbname, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_logical_emit_message(true, 'faults', %s)", (text,))
            cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
            lsn = int(cur.fetchone()[0])
        conn.commit()
    finally:
        conn.close()
    return lsn


def wait_landed(pg, dbname: str, slot: str, lsn: int, timeout: float = 180) -> float:
    """Wait until the running lander confirmed the slot past ``lsn``; returns the seconds waited."""
    started = time.monotonic()
    while True:
        row = pg.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                         "WHERE slot_name = %s", (slot,), dbname=dbname)
        if row and row[0][0] is not None and int(row[0][0]) > lsn:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the lander did not land past {lsn} within {timeout}s")
        time.sleep(0.2)


def run_sql(pg, dbname: str, statements: list[str]) -> None:
    """Each statement in autocommit mode (a statement with BEGIN ... COMMIT is one transaction)."""
    conn = pg.connect(dbname)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


# -- checks (this process's own Spark session, reading only) -----------------------------------------

_SPARK = None


def spark():
    global _SPARK
    if _SPARK is None:
        from cdc_apply.spark import spark_session

        _SPARK = spark_session("cdc_apply-faults-check")
    return _SPARK


def compare_postgres(lake: Lake) -> dict:
    """Every silver table against its PostgreSQL table (``compare_with_postgres``)."""
    from cdc_apply.testing.compare import compare_with_postgres

    conn = lake.pg.connect(lake.dbname)
    try:
        checks = compare_with_postgres(spark(), lake.config, conn, source=SOURCE, schemas=["public"])
    finally:
        conn.close()
    return {"equal": all(c.equal for c in checks), "tables": {c.name: c.line() for c in checks}}


def bronze_rows(lake: Lake, through_seq: int | None = None) -> list[tuple[int, bytes]]:
    from pyspark.sql import functions as F

    df = spark().read.format("delta").load(str(lake.bronze)).where(F.col("source") == SOURCE)
    if through_seq is not None:
        df = df.where(F.col("seq") <= through_seq)
    return [(int(r.seq), bytes(r.payload)) for r in df.select("seq", "payload").orderBy("seq").toLocalIterator()]


def reference_over(rows: list[tuple[int, bytes]]):
    """The reference applier fed ``rows``; ``.with_changes`` lists the commit LSN of every committed
    transaction that holds a change or a transactional message (what the transactions log keeps)."""
    from cdc_apply.testing.reference import ReferenceApplier

    class Counting(ReferenceApplier):
        def __init__(self) -> None:
            super().__init__()
            self.with_changes: list[int] = []

        def _commit(self, pending, commit_lsn, kind):
            if pending is not None and pending.changes:
                self.with_changes.append(commit_lsn)
            super()._commit(pending, commit_lsn, kind)

    ref = Counting()
    for seq, payload in rows:
        ref.feed(seq, payload)
    return ref


def check_transactions_log(lake: Lake, rows: list[tuple[int, bytes]] | None = None) -> dict:
    """Each committed transaction with changes in bronze is in the transactions log exactly once."""
    from cdc_apply.delta.refs import state_ref

    ref = reference_over(rows if rows is not None else bronze_rows(lake))
    want = Counter(ref.with_changes)
    got = Counter(int(r.commit_lsn) for r in state_ref(lake.config, "transactions").read(spark())
                  .where(f"source = '{SOURCE}'").select("commit_lsn").collect())
    return {"ok": got == want, "expected": want.total(), "logged": got.total(),
            "duplicated": sorted(k for k, n in got.items() if n > 1)[:5],
            "missing": sorted((want - got).elements())[:5], "unexpected": sorted((got - want).elements())[:5]}


def progress_point(lake: Lake) -> tuple[int, int]:
    """(apply version, applied seq) of the source's newest progress row; (0, -1) before any."""
    from cdc_apply.delta.refs import state_ref

    ref = state_ref(lake.config, "progress")
    if not ref.exists(spark()):
        return 0, -1
    rows = (ref.read(spark()).where(f"source = '{SOURCE}'")
            .orderBy("apply_version", ascending=False).select("apply_version", "applied_seq").limit(1).collect())
    return (int(rows[0].apply_version), int(rows[0].applied_seq)) if rows else (0, -1)


def compare_reference(lake: Lake, ref) -> dict[str, bool]:
    """Each silver table against the reference applier's table (its rows typed by the job's type map)."""
    from cdc_apply.delta.refs import silver_ref
    from cdc_apply.testing.compare import SourceTable, compare_silver, typed_source_table

    out = {}
    for rid, table in ref.tables.items():
        version = ref.history.relations[rid].latest
        columns = tuple((c.name, c.type_oid, c.type_modifier) for c in version.columns)
        names = [c[0] for c in columns]
        rows = tuple(tuple(r[n] for n in names) for r in ref.rows(version.qualified_name))
        source = SourceTable(rid, version.namespace, version.name, columns, rows)
        want = typed_source_table(source, ref.history.types)
        first = ref.history.relations[rid].versions[0]
        target = silver_ref(lake.config, first.namespace, first.name)
        if not target.exists(spark()):
            out[version.qualified_name] = not rows
            continue
        out[version.qualified_name] = compare_silver(version.qualified_name, want, target.read(spark()), names).equal
    return out


def silver_points(lake: Lake, rows: list[tuple[int, bytes]]) -> dict[str, str]:
    """Where each silver table stands after a failed or killed batch: at the state's applied point
    ("applied point": the batch not applied), at the end of bronze ("end of bronze": the batch applied
    whole), or "neither" — a state between the two, which readers see until the restart."""
    _, applied = progress_point(lake)
    at_applied = compare_reference(lake, reference_over([r for r in rows if r[0] <= applied]))
    at_end = compare_reference(lake, reference_over(rows))
    return {name: ("applied point" if at_applied.get(name) else "end of bronze" if at_end.get(name) else "neither")
            for name in sorted(set(at_applied) | set(at_end))}


# -- probe 1: SIGKILL during a batch ------------------------------------------------------------------

KILL_SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, visits int NOT NULL DEFAULT 0);
CREATE TABLE audit (event text NOT NULL, n int);
ALTER TABLE audit REPLICA IDENTITY FULL;
CREATE TABLE docs (id int PRIMARY KEY, title text NOT NULL, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE lines (order_id int, line_no int, qty int NOT NULL, PRIMARY KEY (order_id, line_no));
"""

KILL_BASE = [
    "INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com', 0 FROM generate_series(1, 5000) g",
    # ~9.6 kB bodies, stored out of line: updates that leave them alone send 'u' (unchanged TOAST).
    "INSERT INTO docs SELECT g, 'doc ' || g, (SELECT string_agg(md5(g::text || i::text), '') "
    "FROM generate_series(1, 300) i) FROM generate_series(1, 60) g",
    # 100 identical rows per n: deletes and updates of one copy must leave the others.
    "INSERT INTO audit SELECT 'login', g % 7 FROM generate_series(1, 700) g",
    "INSERT INTO lines SELECT 1 + g / 4, g % 4, 1 + g % 5 FROM generate_series(0, 1999) g",
]


def kill_round(r: int) -> list[str]:
    """Round ``r``'s workload: every kind of change the tables take, each statement its own transaction."""
    one_login = "SELECT ctid FROM audit WHERE event = 'login' AND n = {n} LIMIT {k}"
    statements = [
        f"UPDATE customers SET visits = visits + 1, email = upper(email) WHERE id % 10 = {r % 10}",
        f"INSERT INTO customers SELECT g, 'new ' || g, NULL, {r} FROM generate_series({10000 * r}, {10000 * r + 299}) g",
        f"DELETE FROM customers WHERE id % 97 = {r}",
        f"UPDATE customers SET id = id + {100000 * r} WHERE id BETWEEN {20 * r + 1} AND {20 * r + 3}",  # key moves
        f"UPDATE docs SET title = title || ' r{r}' WHERE id % 3 = {r % 3}",                   # unchanged TOAST
        "UPDATE docs SET id = id + 1000 WHERE id = (SELECT min(id) FROM docs)",               # key move, TOAST kept
        f"UPDATE docs SET body = md5('{r}') || body WHERE id % 10 = {r % 10}",                  # TOAST changed
        f"INSERT INTO audit SELECT 'round {r}', g % 3 FROM generate_series(1, 90) g",
        f"DELETE FROM audit WHERE ctid IN ({one_login.format(n=r % 7, k=1)})",                 # one of 100 copies
        f"UPDATE audit SET n = n + 100 WHERE ctid IN ({one_login.format(n=(r + 1) % 7, k=2)})",
        f"BEGIN; TRUNCATE lines; INSERT INTO lines SELECT 1 + g / 4, g % 4, {r} FROM generate_series(0, 799) g; COMMIT",
        f"INSERT INTO lines SELECT 5000 + g, 0, {r} FROM generate_series(1, 50) g",
        # One transaction over every table, with a transactional message.
        f"BEGIN; UPDATE customers SET name = name || '!' WHERE id = {r + 4}; INSERT INTO audit VALUES ('txn', {r}); "
        f"UPDATE docs SET title = 'all {r}' WHERE id = (SELECT max(id) FROM docs); "
        f"INSERT INTO lines VALUES ({100000 + r}, 0, 1); SELECT pg_logical_emit_message(true, 'faults', 'round {r}'); "
        "COMMIT",
    ]
    if r == 2:  # a relation version mid-stream: a schema_history append before the MERGEs, an ALTER commit
        statements[1:1] = ["ALTER TABLE customers ADD COLUMN tier text",
                           "UPDATE customers SET tier = 'gold' WHERE id % 50 = 0"]
    return statements


def probe_kill_during_merge(work: Path, points: list[str]) -> dict:
    from cdc_apply.testing.postgres import start_postgres

    started = time.monotonic()
    pg = start_postgres(work / "pg" / "data")
    lander = None
    out: dict = {"points": {}}
    try:
        setup_source(pg, "shop", KILL_SCHEMA, "kill_slot", "kill_pub")
        lake = Lake(work / "kill", pg, "shop", "kill_slot", "kill_pub")
        lander = lake.cli("land", once=False)  # lands every round as it is written
        run_sql(pg, "shop", KILL_BASE)
        wait_landed(pg, "shop", "kill_slot", end_marker(pg, "shop", "base"))
        base = lake.apply_once()
        out["base"] = {"apply": base.summary(), "postgres": compare_postgres(lake)}
        print(f"  base: apply {base.seconds:.1f}s rc={base.returncode}, "
              f"silver equal: {out['base']['postgres']['equal']}", flush=True)
        for r, point in enumerate(points, 1):
            run_sql(pg, "shop", kill_round(r))
            waited = wait_landed(pg, "shop", "kill_slot", end_marker(pg, "shop", f"round {r} end"))
            version_before, _ = progress_point(lake)
            before = lake.commits()
            killed = lake.apply_once(kill_when=lake.watch(before, point))
            at_kill = lake.new_commits(before)
            version_at_kill, _ = progress_point(lake)
            rows = bronze_rows(lake)
            points_at_kill = silver_points(lake, rows)
            restart = lake.apply_once()
            check = compare_postgres(lake)
            txns = check_transactions_log(lake, rows)
            silver_at_kill = {k[7:]: [c["operation"] for c in v] for k, v in at_kill.items() if k.startswith("silver:")}
            state_at_kill = sorted(k[6:] for k in at_kill if k.startswith("state:"))
            result = {
                "killed": killed.summary(),
                "killed_mid_batch": killed.killed is not None and killed.returncode == -signal.SIGKILL,
                "silver_commits_at_kill": silver_at_kill,
                "silver_tables_untouched_at_kill": sorted(set(lake.silver_tables()) - set(silver_at_kill)),
                "state_tables_written_at_kill": state_at_kill,
                "progress_written_at_kill": version_at_kill > version_before,
                "tables_at_kill": points_at_kill,
                "restart": restart.summary(),
                "silver_equals_postgres": check["equal"],
                "tables": check["tables"],
                "transactions_log": txns,
                "landing_wait_s": round(waited, 1),
            }
            result["ok"] = (result["killed_mid_batch"] and restart.returncode == 0 and check["equal"]
                            and txns["ok"])
            out["points"][point] = result
            print(f"  {point}: killed after {killed.killed_after_s or 0:.1f}s ({killed.killed}); at kill silver "
                  f"{silver_at_kill or 'none'}, state {state_at_kill or 'none'}, progress written "
                  f"{result['progress_written_at_kill']};\n    tables at kill: {points_at_kill};\n    restart {restart.seconds:.1f}s rc={restart.returncode}; "
                  f"silver = PostgreSQL: {check['equal']}; transactions once: {txns['ok']} "
                  f"({txns['logged']}/{txns['expected']})", flush=True)
    finally:
        if lander is not None:
            lander.kill(signal.SIGTERM)  # the lander's clean stop
            out["lander"] = lander.wait(timeout=120).summary()
        pg.destroy()
    out["ok"] = bool(out["points"]) and all(p["ok"] for p in out["points"].values()) and \
        out.get("base", {}).get("postgres", {}).get("equal", False)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


# -- probe 2: a 200 MB value -----------------------------------------------------------------------------

BIG_SCHEMA = """
CREATE TABLE blob (id int PRIMARY KEY, note text, body text);
ALTER TABLE blob ALTER COLUMN body SET STORAGE EXTERNAL;
"""


def big_steps(mb: int) -> list[tuple[str, list[str]]]:
    """Insert a ``mb`` MiB value, update the row leaving it alone (unchanged TOAST), change it."""
    chunks = mb * MIB // 32  # md5 gives 32 hex characters: incompressible for pglz's purposes
    return [
        ("insert", [f"INSERT INTO blob SELECT 1, 'inserted', string_agg(md5(g::text), '') "
                    f"FROM generate_series(1, {chunks}) g",
                    "INSERT INTO blob VALUES (2, 'small', 'a small body')"]),
        ("unchanged_toast", ["UPDATE blob SET note = 'updated, body unchanged' WHERE id = 1"]),
        ("changed", ["UPDATE blob SET note = 'body changed', body = 'x' || substr(body, 2) WHERE id = 1"]),
    ]


def _silver_body(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    from cdc_apply.delta.refs import silver_ref

    rows = (silver_ref(lake.config, "public", "blob").read(spark()).where("id = 1")
            .select(F.length("body").alias("chars"), F.md5(F.col("body").cast("binary")).alias("md5"), "note")
            .collect())
    return {"chars": rows[0].chars, "md5": rows[0].md5, "note": rows[0].note} if rows else {}


def _bronze_largest(lake: Lake, after_seq: int) -> dict:
    from pyspark.sql import functions as F

    row = (spark().read.format("delta").load(str(lake.bronze)).where(F.col("seq") > after_seq)
           .select("seq", F.length("payload").alias("bytes"), F.substring("payload", 1, 1).alias("kind"))
           .orderBy(F.col("bytes").desc()).limit(1).collect())
    return {"seq": int(row[0].seq), "bytes": int(row[0].bytes), "kind": bytes(row[0].kind).decode()} if row else {}


def probe_value_200mb(work: Path, mb: int, retry_memory: str | None) -> dict:
    """Each step: its SQL, ``land --once``, ``apply --once``; silver against PostgreSQL. A failed apply is
    examined (its error, what it committed, whether progress moved) and, with ``retry_memory``, run
    again with Spark's driver given that much memory (``PYSPARK_SUBMIT_ARGS``, the one way to size the
    CLI's JVM: the command line passes ``spark.driver.memory`` = 4g, and ``--driver-memory`` after it
    wins); later steps then start with the default again."""
    from cdc_apply.testing.postgres import start_postgres

    started = time.monotonic()
    pg = start_postgres(work / "pg" / "data")
    out: dict = {"mb": mb, "steps": {}}
    bigger = {"PYSPARK_SUBMIT_ARGS": f"--driver-memory {retry_memory} pyspark-shell"} if retry_memory else None
    try:
        setup_source(pg, "big", BIG_SCHEMA, "big_slot", "big_pub")
        lake = Lake(work / "big", pg, "big", "big_slot", "big_pub")
        last_seq = -1
        for name, statements in big_steps(mb):
            t0 = time.monotonic()
            run_sql(pg, "big", statements)
            sql_s = time.monotonic() - t0
            land = lake.land_once()
            step: dict = {"sql_seconds": round(sql_s, 1), "land": land.summary()}
            out["steps"][name] = step
            if land.returncode != 0:
                break
            step["bronze_largest_message"] = _bronze_largest(lake, last_seq)
            point = progress_point(lake)
            before = lake.commits()
            apply = lake.apply_once()
            step["apply"] = apply.summary()
            line = f"  {name}: sql {sql_s:.1f}s; land {land.seconds:.1f}s {land.memory}; apply {apply.seconds:.1f}s " \
                   f"rc={apply.returncode} {apply.memory}"
            if apply.returncode != 0:
                step["apply"]["commits"] = {k: [c["operation"] for c in v] for k, v in lake.new_commits(before).items()}
                step["apply"]["progress_moved"] = progress_point(lake) != point
                line += f"\n    failed: {apply.error_line()} | cause: {apply.cause()} | {apply.failed_write()}; " \
                        f"commits {step['apply']['commits']}, progress moved {step['apply']['progress_moved']}"
                if bigger:
                    apply = lake.apply_once(env=bigger)
                    step["retry"] = {"env": bigger, **apply.summary()}
                    line += f"\n    retry with {retry_memory}: {apply.seconds:.1f}s rc={apply.returncode} {apply.memory}"
            if apply.returncode == 0:
                pg_body = pg.execute("SELECT length(body), md5(body), note FROM blob WHERE id = 1", dbname="big")[0]
                step["postgres_body"] = {"chars": pg_body[0], "md5": pg_body[1], "note": pg_body[2]}
                step["silver_body"] = _silver_body(lake)
                step["postgres"] = compare_postgres(lake)
            step["equal"] = bool(step.get("postgres", {}).get("equal")) and \
                step.get("silver_body") == step.get("postgres_body")
            step["ok_with_defaults"] = step["equal"] and step["apply"]["returncode"] == 0
            print(line + f"; silver = PostgreSQL: {step['equal']}", flush=True)
            if not step["equal"]:
                break
            _, last_seq = progress_point(lake)  # the next step's messages come after this
    finally:
        pg.destroy()
    out["ok_with_defaults"] = len(out["steps"]) == 3 and all(s["ok_with_defaults"] for s in out["steps"].values())
    out["ok"] = len(out["steps"]) == 3 and all(s["equal"] for s in out["steps"].values())
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


# -- probe 3: a full disk during a MERGE ------------------------------------------------------------------

FULL_SCHEMA = """
CREATE TABLE a (id int8 PRIMARY KEY, v text);
CREATE TABLE b (id int8 PRIMARY KEY, v text);
CREATE TABLE c (id int8 PRIMARY KEY, v text);
CREATE TABLE bag (x int, v text);
ALTER TABLE bag REPLICA IDENTITY FULL;
"""


def _filler_text(rows_from: int, rows: int, chars: int) -> str:
    """``chars`` hex characters per row: what Parquet's snappy cannot shrink much."""
    return (f"SELECT g, (SELECT string_agg(md5(g::text || '-' || i::text), '') FROM generate_series(1, {chars // 32}) i) "
            f"FROM generate_series({rows_from}, {rows_from + rows - 1}) g")


FULL_BASE = [
    f"INSERT INTO a {_filler_text(1, 2000, 256)}",
    f"INSERT INTO b {_filler_text(1, 2000, 256)}",
    f"INSERT INTO c {_filler_text(1, 2000, 256)}",
    "INSERT INTO bag SELECT g % 5, 'copy' FROM generate_series(1, 500) g",
]


def full_batch(mb_per_table: int) -> list[str]:
    """A batch that writes about ``mb_per_table`` MiB of new Parquet to each of three tables, with
    updates, deletes, a truncate and a keyless delete of one of several copies."""
    rows = mb_per_table * MIB // 1024
    return [
        f"INSERT INTO a {_filler_text(100000, rows, 1024)}",
        "UPDATE a SET v = 'updated' WHERE id <= 500",
        f"INSERT INTO b {_filler_text(100000, rows, 1024)}",
        "DELETE FROM b WHERE id <= 500",
        f"BEGIN; TRUNCATE c; INSERT INTO c {_filler_text(100000, rows, 1024)}; COMMIT",
        "DELETE FROM bag WHERE ctid IN (SELECT ctid FROM bag WHERE x = 1 LIMIT 1)",
        "INSERT INTO bag SELECT g % 5, 'copy' FROM generate_series(1, 50) g",
    ]


class SmallFilesystem:
    """A filesystem of ``mb`` MiB at ``path``: tmpfs, else an ext4 image on a loop device."""

    def __init__(self, path: Path, mb: int) -> None:
        self.path, self.mb = path, mb
        self.kind = None
        self.image: Path | None = None

    def __enter__(self) -> "SmallFilesystem":
        self.path.mkdir(parents=True, exist_ok=True)
        tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.mb}m", "tmpfs", str(self.path)],
                               capture_output=True, text=True)
        if tmpfs.returncode == 0:
            self.kind = "tmpfs"
            return self
        self.image = self.path.with_suffix(".img")
        subprocess.run(["dd", "if=/dev/zero", f"of={self.image}", "bs=1M", f"count={self.mb}"], check=True,
                       capture_output=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True, capture_output=True)
        loop = subprocess.run(["mount", "-o", "loop", str(self.image), str(self.path)], capture_output=True,
                              text=True)
        if loop.returncode != 0:
            raise RuntimeError(f"cannot mount a small filesystem: tmpfs: {tmpfs.stderr.strip()}; "
                               f"loop: {loop.stderr.strip()}")
        self.kind = "ext4 on a loop device"
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int) -> Path:
        """A filler file that leaves ``leave`` bytes free."""
        filler = self.path / "filler"
        size = max(self.free_bytes() - leave, 0)
        with open(filler, "wb") as f:
            chunk = b"\0" * MIB
            while size > 0:
                n = min(size, len(chunk))
                f.write(chunk[:n])
                size -= n
        return filler

    def __exit__(self, *exc) -> None:
        if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        if self.image is not None:
            self.image.unlink(missing_ok=True)


def probe_disk_full(work: Path, fs_mb: int, free_mb: float, batch_mb: int) -> dict:
    from cdc_apply.testing.postgres import start_postgres

    started = time.monotonic()
    pg = start_postgres(work / "pg" / "data")
    out: dict = {"fs_mb": fs_mb, "free_mb_left": free_mb, "batch_mb_per_table": batch_mb}
    try:
        setup_source(pg, "full", FULL_SCHEMA, "full_slot", "full_pub")
        with SmallFilesystem(work / "small", fs_mb) as fs:
            out["filesystem"] = fs.kind
            lake = Lake(work / "full", pg, "full", "full_slot", "full_pub", silver=fs.path / "silver")
            run_sql(pg, "full", FULL_BASE)
            out["base_land"] = lake.land_once().summary()
            base = lake.apply_once()
            out["base_apply"] = base.summary()
            out["base_postgres"] = compare_postgres(lake)
            out["silver_mb_after_base"] = round((fs_mb * MIB - fs.free_bytes()) / MIB, 1)
            print(f"  base: apply {base.seconds:.1f}s rc={base.returncode}, silver "
                  f"{out['silver_mb_after_base']} MiB, equal: {out['base_postgres']['equal']}", flush=True)
            run_sql(pg, "full", full_batch(batch_mb))
            out["batch_land"] = lake.land_once().summary()
            version_before, seq_before = progress_point(lake)
            filler = fs.fill(int(free_mb * MIB))
            out["free_mb_before_batch"] = round(fs.free_bytes() / MIB, 2)
            before = lake.commits()
            failed = lake.apply_once()
            out["failed_apply"] = failed.summary()
            out["failed_apply"]["stderr_tail"] = failed.stderr.splitlines()[-12:]
            out["error_line"] = failed.error_line()
            out["named_error"] = bool(out["error_line"] and out["error_line"].startswith("cdc-apply: error:"))
            out["free_mb_after_failure"] = round(fs.free_bytes() / MIB, 2)
            out["commits_during_failed_batch"] = {k: [c["operation"] for c in v]
                                                  for k, v in lake.new_commits(before).items()}
            version_after, seq_after = progress_point(lake)
            out["progress_moved"] = (version_after, seq_after) != (version_before, seq_before)
            rows = bronze_rows(lake)
            out["silver_vs_reference"] = silver_points(lake, rows)
            out["half_applied_tables"] = sorted(k for k, v in out["silver_vs_reference"].items() if v == "neither")
            print(f"  full: apply rc={failed.returncode} after {failed.seconds:.1f}s: {out['error_line']}", flush=True)
            print(f"        commits during the failed batch: {out['commits_during_failed_batch']}; progress moved: "
                  f"{out['progress_moved']}; silver vs reference: {out['silver_vs_reference']}", flush=True)
            filler.unlink()
            restart = lake.apply_once()
            out["restart"] = restart.summary()
            out["postgres"] = compare_postgres(lake)
            out["transactions_log"] = check_transactions_log(lake, rows)
            out["silver_mb_at_end"] = round((fs_mb * MIB - fs.free_bytes()) / MIB, 1)
            print(f"  restart: {restart.seconds:.1f}s rc={restart.returncode}; silver = PostgreSQL: "
                  f"{out['postgres']['equal']}; transactions once: {out['transactions_log']['ok']}", flush=True)
            if _SPARK is not None:  # let go of files on the small filesystem before it is unmounted
                _SPARK.catalog.clearCache()
    finally:
        pg.destroy()
    # Nothing lost, the restart completes. Tables left between the two points are reported, not failed:
    # the job promises the end state after a restart, not atomicity across a batch's commits.
    out["ok"] = (failed.returncode not in (0, None) and not out["progress_moved"]
                 and restart.returncode == 0 and out["postgres"]["equal"] and out["transactions_log"]["ok"])
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


# -- main -------------------------------------------------------------------------------------------------

PROBES = ("kill_during_merge", "value_200mb", "disk_full_during_merge")


def _table(results: dict) -> str:
    lines = ["| probe | outcome | seconds | detail |", "|---|---|---:|---|"]
    for name, r in results.items():
        if name == "kill_during_merge":
            detail = "; ".join(
                f"{p}: killed at {v['killed'].get('killed_after_s')}s, silver commits at kill "
                f"{sum(len(x) for x in v['silver_commits_at_kill'].values())}, half-applied "
                f"{[t for t, w in v['tables_at_kill'].items() if w == 'neither'] or 'none'}, restart "
                f"{v['restart']['seconds']}s, "
                f"equal {v['silver_equals_postgres']}, txns once {v['transactions_log']['ok']}"
                for p, v in r.get("points", {}).items())
        elif name == "value_200mb":
            parts = []
            for step, v in r.get("steps", {}).items():
                apply = v.get("apply", {})
                text = (f"{step}: land {v['land']['seconds']}s JVM {v['land']['memory'].get('jvm_mb')} MiB; apply "
                        f"{apply.get('seconds')}s rc {apply.get('returncode')} JVM "
                        f"{apply.get('memory', {}).get('jvm_mb')} MiB")
                if apply.get("returncode"):
                    text += f" ({apply.get('cause')})"
                if "retry" in v:
                    text += (f", retry {v['retry']['env']['PYSPARK_SUBMIT_ARGS'].split()[1]}: {v['retry']['seconds']}s "
                             f"rc {v['retry']['returncode']} JVM {v['retry']['memory'].get('jvm_mb')} MiB")
                parts.append(text + f", equal {v.get('equal')}")
            detail = "; ".join(parts)
        else:
            detail = (f"error: {r.get('error_line')}; progress moved {r.get('progress_moved')}; "
                      f"silver vs reference {r.get('silver_vs_reference')}; restart {r.get('restart', {}).get('seconds')}s rc "
                      f"{r.get('restart', {}).get('returncode')}, equal {r.get('postgres', {}).get('equal')}")
        lines.append(f"| {name} | {'OK' if r.get('ok') else 'FAILED'} | {r.get('seconds')} | {detail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PROBES), help=f"comma-separated probes ({', '.join(PROBES)})")
    parser.add_argument("--points", default="silver_commit_1,silver_commit_2,logs,progress",
                        help="kill points of kill_during_merge, one round each")
    parser.add_argument("--mb", type=int, default=200, help="value_200mb: the value's size in MiB")
    parser.add_argument("--retry-memory", default="8g",
                        help="value_200mb: driver memory for a second attempt of an apply that failed ('' for none)")
    parser.add_argument("--fs-mb", type=int, default=64, help="disk_full: size of silver's filesystem")
    parser.add_argument("--free-mb", type=float, default=2.0, help="disk_full: MiB left free before the batch")
    parser.add_argument("--batch-mb", type=int, default=4, help="disk_full: MiB of new rows per table in the batch")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (lakes, configs, logs)")
    args = parser.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(only) - set(PROBES)
    if unknown:
        parser.error(f"unknown probe(s): {', '.join(sorted(unknown))}")
    if not CLI.exists():
        parser.error(f"{CLI} is missing: run `make setup` (or this interpreter is not the virtualenv's)")
    work = Path(tempfile.mkdtemp(prefix="cdc_apply_faults_"))
    print(f"faults: work folder {work}", flush=True)
    results: dict = {}
    try:
        for name in only:
            print(f"{name}:", flush=True)
            folder = work / name
            if name == "kill_during_merge":
                results[name] = probe_kill_during_merge(folder, args.points.split(","))
            elif name == "value_200mb":
                results[name] = probe_value_200mb(folder, args.mb, args.retry_memory or None)
            else:
                results[name] = probe_disk_full(folder, args.fs_mb, args.free_mb, args.batch_mb)
            merged = dict(read_results().get("faults", {}))
            merged.update({name: results[name]})
            merge_results({"faults": merged})
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(_table(results))
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
