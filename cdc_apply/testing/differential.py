"""The differential suite: a seeded random workload on a real PostgreSQL, landed through one slot per
protocol configuration, applied, and silver compared with the source at every checkpoint.

Every configuration lands into the same bronze table as its own source and is applied by one job
into ``<silver>/<source>/<ns>/<rel>``; at each checkpoint every table of every configuration must
equal PostgreSQL's, typed values compared exactly. A failure names the seed and the command that
replays it::

    .venv/bin/python -m cdc_apply.testing.differential --seed 7 --transactions 150 --checkpoints 2
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cdc_apply.config import parse_config
from cdc_apply.testing.workload import SCHEMA, Workload

# name -> [source] options. Protocol 1..4, streaming off/on/parallel, two-phase, binary off and on.
CONFIGS: dict[str, dict] = {
    "v1": {"proto_version": 1, "streaming": "off", "two_phase": False},
    "v1_binary": {"proto_version": 1, "streaming": "off", "two_phase": False, "binary": True},
    "v2_stream": {"proto_version": 2, "streaming": "on", "two_phase": False},
    "v3_twophase": {"proto_version": 3, "streaming": "on", "two_phase": True},
    "v4_parallel": {"proto_version": 4, "streaming": "parallel", "two_phase": True},
    "v4_parallel_binary": {"proto_version": 4, "streaming": "parallel", "two_phase": True, "binary": True},
}
SCHEMAS = ["diff"]


@dataclass
class Outcome:
    seed: int
    checkpoints: list[dict] = field(default_factory=list)  # per checkpoint: config -> list of TableCheck
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def replay_command(seed: int, transactions: int, checkpoints: int, configs, history: bool = False,
                   soft_deletes: bool = False) -> str:
    return (f".venv/bin/python -m cdc_apply.testing.differential --seed {seed} --transactions {transactions} "
            f"--checkpoints {checkpoints} --configs {','.join(configs)}" + (" --history" if history else "")
            + (" --soft-deletes" if soft_deletes else ""))


def _lake(root: Path, extra: dict | None = None, history: bool = False, soft_deletes: bool = False) -> dict:
    raw: dict[str, Any] = {"pipeline": "differential",
           "bronze": {"path": str(root / "bronze")},
           "silver": {"path": str(root / "silver"), "source_in_path": True},
           "state": {"path": str(root / "state")},
           "apply": {"parallelism": 6}}
    if history:
        raw["silver"]["history"] = [f"{schema}.*" for schema in SCHEMAS]
    if soft_deletes:   # marked rows stay in silver; the comparisons read them as absent (soft_deletes.live_rows)
        raw["silver"]["soft_deletes"] = [f"{schema}.*" for schema in SCHEMAS]
    for section, values in (extra or {}).items():
        raw.setdefault(section, {}).update(values)
    return raw


def run_differential(spark, seed: int, transactions: int = 150, checkpoints: int = 2,
                     configs=tuple(CONFIGS), root: Path | None = None, out: TextIO = sys.stdout,
                     large_rows: int = 300, history: bool = False, preload: int = 0,
                     chunk_rows: int = 100, apply_spark=None, apply_mode=None, rules: dict | None = None,
                     soft_deletes: bool = False, postgres=None) -> Outcome:
    """Run the workload in ``checkpoints`` parts; after each, land every configuration, apply, compare.

    ``history``: every table keeps a history table; the source's state after every transaction is
    recorded, and at each checkpoint the history tables must hold each of those states and
    ``read_as_of`` must equal PostgreSQL (history at this checkpoint, time travel at the one before).
    ``preload``: transactions run before any slot exists; each lander then creates its slot with the
    initial snapshot (tables with an integer key in key ranges of ``chunk_rows`` rows), so silver must
    hold the rows that were there before the slot as well. ``apply_spark``: the session the apply job
    runs with (default ``spark``, which lands and compares), entered with ``apply_mode()`` around each of
    its calls — a Spark Connect session and ``connect_mode`` (docs/CONNECT.md). ``rules``: configuration
    sections merged into the apply job's (``{"tables": {"diff.pk_t": {"mask_columns": ...}}}``); the
    comparisons apply the same exclusions and masks to PostgreSQL's rows (docs/MASKING.md).
    ``soft_deletes``: every table's deletes are soft; silver less its marked rows must equal the source.
    ``postgres``: a running server (:func:`cdc_apply.testing.postgres.start_postgres`) to use instead of
    starting one: the run gets a database and slots of its own there; its slots and prepared
    transactions go at its end (:func:`_release_database`).
    """
    from cdc_apply.delta.bronze_schema import create_bronze_table
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.lander.lander import Lander
    from cdc_apply.testing.compare import compare_with_postgres, snapshot_postgres
    from cdc_apply.testing.history_check import SourceRecord
    from cdc_apply.testing.postgres import start_postgres

    started = time.monotonic()
    root = Path(root or tempfile.mkdtemp(prefix="cdc_apply_diff_"))
    outcome = Outcome(seed)
    pg = postgres or start_postgres(root / "pg" / "data")
    # On a shared server each run has its own database, and slots named after it (slots are the server's).
    db = "diff" if postgres is None else f"diff_{uuid.uuid4().hex[:12]}"
    try:
        pg.create_database(db)
        pg.execute(SCHEMA, dbname=db)
        pg.execute("CREATE PUBLICATION diff_pub FOR TABLES IN SCHEMA diff", dbname=db)
        conn = pg.connect(db)

        def execute(sql: str) -> None:
            with conn.cursor() as cur:
                cur.execute(sql)

        record = SourceRecord(tuple(SCHEMAS)) if history else None
        workload = Workload(seed, execute, large_rows=large_rows)
        if preload:
            workload.run(preload)   # rows the slots never see: they reach silver by the initial snapshots
            workload.finish()   # a prepared transaction would hold the slots' consistent point back
            print(f"[differential seed={seed}] {workload.txns} transactions before the slots", file=out)
        snapshots = {"create_slot": True, "snapshot": "initial", "snapshot_chunk_rows": chunk_rows} if preload else {}
        for name in configs if not preload else ():   # with preload each lander creates its own
            two_phase = "true" if CONFIGS[name]["two_phase"] else "false"
            pg.execute(f"SELECT pg_create_logical_replication_slot('{db}_{name}', 'pgoutput', false, "
                       f"{two_phase})", dbname=db)
        lake = parse_config(_lake(root, rules, history=history, soft_deletes=soft_deletes))
        assert lake.bronze.path is not None  # _lake names the bronze path
        create_bronze_table(spark_tables(spark), lake.bronze.path)
        landers = {name: parse_config(_lake(root, {
            "source": {"name": name, "dsn": pg.dsn(db), "slot": f"{db}_{name}", "publication": "diff_pub",
                       "messages": True, **CONFIGS[name], **snapshots},
            "land": {"batch_messages": 20_000, "idle_exit_seconds": 1.0}})) for name in configs}
        if record:
            workload.execute = record.recorder(conn, execute)
            record.take(conn)  # the state before the first transaction
        apply_mode = apply_mode or contextlib.nullcontext
        with apply_mode():
            pipeline = ApplyPipeline.open(spark_tables(apply_spark or spark), lake, out=out)
        per_part = max(transactions // checkpoints, 1)
        seen = 0
        for part in range(checkpoints):
            workload.run(per_part)
            print(f"[differential seed={seed}] checkpoint {part + 1}/{checkpoints}: "
                  f"{workload.txns} transactions run, {len(workload.prepared)} prepared still waiting", file=out)
            t0 = time.monotonic()
            for name in configs:
                Lander(landers[name], spark, out=io.StringIO()).run(once=True)
            t1 = time.monotonic()
            with apply_mode():
                pipeline.run(once=True)
            t2 = time.monotonic()
            results = {}
            snapshot = snapshot_postgres(conn, SCHEMAS)  # one read of the source for every configuration
            for name in configs:
                checks = compare_with_postgres(spark, lake, conn, source=name, schemas=SCHEMAS, snapshot=snapshot)
                results[name] = checks
                for check in checks:
                    if not check.equal:
                        outcome.failures.append(f"checkpoint {part + 1}, {name}: {check.line()}")
            if record:
                t3 = time.monotonic()
                outcome.failures += _check_history(spark, lake, configs, record, part, seen,
                                                   preload=bool(preload))
                seen = len(record.states)
                print(f"[differential seed={seed}] checkpoint {part + 1}: history and read_as_of checked "
                      f"({time.monotonic() - t3:.0f} s)", file=out)
            outcome.checkpoints.append(results)
            print(f"[differential seed={seed}] checkpoint {part + 1}: "
                  + ", ".join(f"{n} {'ok' if all(c.equal for c in cs) else 'DIFFERS'}" for n, cs in results.items())
                  + f" (land {t1 - t0:.0f} s, apply {t2 - t1:.0f} s, compare {time.monotonic() - t2:.0f} s)", file=out)
        conn.close()
    finally:
        if postgres is None:
            pg.destroy()
        else:
            _release_database(pg, db)
    outcome.seconds = time.monotonic() - started
    if outcome.failures:
        outcome.failures.append(
            "replay: " + replay_command(seed, transactions, checkpoints, configs, history, soft_deletes))
    return outcome


def _release_database(pg, db: str) -> None:
    """A finished run's hold on a shared server: its prepared transactions rolled back and its slots dropped
    (both would keep WAL and locks for the rest of the server's life); the database itself stays until the
    server goes (it holds no slot, no prepared transaction and no open connection)."""
    for (gid,) in pg.execute("SELECT gid FROM pg_prepared_xacts WHERE database = %s", (db,)):
        pg.execute("ROLLBACK PREPARED %s", (gid,), dbname=db)
    pg.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
               (db,))


def _check_history(spark, lake, configs, record, part: int, seen: int, preload: bool) -> list[str]:
    """This part's recorded states against every configuration's history tables; ``read_as_of`` at
    this checkpoint (history) and at the one before (time travel to a batch end) against PostgreSQL.
    With ``--preload`` each lander made its slot after states were recorded: a configuration is checked
    only on the states from its slot's consistent point on (history_check.states_since)."""
    from cdc_apply.testing.history_check import check_as_of, check_history, consistent_point, states_since

    failures = []
    for name in configs:
        point = consistent_point(spark, lake, name) if preload else 0
        states = states_since(record.states[seen:], point)
        found = check_history(spark, lake, name, states)
        now_lsn, now = states[-1]
        found += check_as_of(spark, lake, name, now_lsn, now, method="history")
        if part > 0:
            then_lsn, then = states_since(record.states[:seen], point)[-1]
            found += check_as_of(spark, lake, name, then_lsn, then, method="time travel")
        failures += [f"checkpoint {part + 1}, {name}: {f}" for f in found]
    return failures


def write_result(path: Path, args, configs, outcome: Outcome) -> None:
    import datetime
    import json

    last = outcome.checkpoints[-1] if outcome.checkpoints else {}
    path.write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "seed": args.seed, "transactions": args.transactions,
        "checkpoints": len(outcome.checkpoints), "configs": list(configs), "ok": outcome.ok,
        "seconds": round(outcome.seconds), "failures": outcome.failures,
        "final_rows": {name: {c.name: c.source_rows for c in checks} for name, checks in last.items()},
    }, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdc_apply.testing.differential",
                                     description="seeded differential run: silver must equal PostgreSQL")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--transactions", type=int, default=150)
    parser.add_argument("--checkpoints", type=int, default=2)
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, from {', '.join(CONFIGS)}")
    parser.add_argument("--large-rows", type=int, default=300, help="rows per large (streamed) transaction")
    parser.add_argument("--workdir", default=None, help="keep the lake here (default: a temporary folder)")
    parser.add_argument("--result", default=None, help="write the outcome as JSON to this file")
    parser.add_argument("--preload", type=int, default=0,
                        help="transactions before the slots exist (silver gets them by initial snapshots)")
    parser.add_argument("--history", action="store_true",
                        help="history tables on, checked against the source's state after every transaction "
                             "(records every state: for small runs)")
    parser.add_argument("--soft-deletes", action="store_true",
                        help="every table's deletes soft: silver less its marked rows must equal the source")
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}")
    from cdc_apply.spark import spark_session

    root = Path(args.workdir) if args.workdir else None
    if root is not None and root.exists():
        shutil.rmtree(root)
    spark = spark_session("cdc_apply-differential")
    outcome = run_differential(spark, args.seed, args.transactions, args.checkpoints, configs, root,
                               large_rows=args.large_rows, history=args.history, preload=args.preload,
                               soft_deletes=args.soft_deletes)
    print(f"seed {args.seed}: {args.transactions} transactions, {args.checkpoints} checkpoints, "
          f"{len(configs)} configs, {outcome.seconds:.0f}s: {'OK' if outcome.ok else 'FAILED'}")
    for failure in outcome.failures:
        print("  " + failure)
    if args.result:
        write_result(Path(args.result), args, configs, outcome)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
