"""``cdc-apply``: apply, land, snapshot, inspect, status, optimize, as-of, verify, forget, demo.

Each subcommand lives in its own module and is imported only when used, so
``cdc-apply inspect --hex`` starts without a JVM.

Output: the results (batch lines, status, inspected messages) go to stdout as they always have; log
records (which session was built, live progress of a long batch, errors) go to stderr at
``--log-level`` (``$CDC_APPLY_LOG_LEVEL``, default INFO; before or after the subcommand). Lines already
on stdout are not repeated there. An error is one line; at DEBUG its traceback follows, and Spark's own
report of a failed streaming query (its Java stack) is kept (cdc_apply.spark.session.quiet_jvm_logging).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable

from cdc_apply.errors import CdcApplyError
from cdc_apply.log import PRINTED, configure_logging

log = logging.getLogger("cdc_apply.cli")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _demo(args: argparse.Namespace) -> int:
    from cdc_apply.cli.demo import run_demo

    return run_demo(workdir=args.workdir)


def _inspect(args: argparse.Namespace) -> int:
    from cdc_apply.cli import inspect as inspect_cmd

    if args.format == "gaussdb":
        from cdc_apply.gaussdb.render import inspect_gaussdb_hex

        if args.hex is not None:
            failed = inspect_gaussdb_hex(args.hex)
        else:
            failed = inspect_cmd.inspect_bronze(args.bronze, args.source, args.from_seq, gaussdb=True)
    elif args.hex is not None:
        failed = inspect_cmd.inspect_hex(args.hex)
    else:
        failed = inspect_cmd.inspect_bronze(args.bronze, args.source, args.from_seq)
    if failed:
        print(f"cdc-apply inspect: {failed} message(s) could not be decoded", file=sys.stderr)
    return 1 if failed else 0


def _apply(args: argparse.Namespace) -> int:
    from cdc_apply.cli.apply_cmd import run_apply

    return run_apply(args.config, once=args.once, progress_seconds=args.progress_seconds)


def _land(args: argparse.Namespace) -> int:
    from cdc_apply.cli.land_cmd import run_land

    return run_land(args.config, once=args.once)


def _snapshot(args: argparse.Namespace) -> int:
    from cdc_apply.cli.snapshot_cmd import run_snapshot

    return run_snapshot(args.config, args.table, ddl_events_sql=args.ddl_events_sql)


def _status(args: argparse.Namespace) -> int:
    from cdc_apply.cli.apply_cmd import run_status

    return run_status(args.config, as_json=args.json, quarantine_hours=args.quarantine_hours,
                      max_lag_seconds=args.max_lag_seconds, max_retained_wal_bytes=args.max_retained_wal_bytes,
                      prometheus=args.prometheus)


def _optimize(args: argparse.Namespace) -> int:
    from cdc_apply.config import load_config
    from cdc_apply.lake.maintenance import optimize_bronze, optimize_silver
    from cdc_apply.spark import spark_session

    config = load_config(args.config)
    spark = spark_session(f"cdc_apply-optimize-{config.pipeline}")
    everything = not (args.table or args.bronze)
    if everything or args.table:
        for done in optimize_silver(spark, config, args.table or None):
            key = f"zorder by {', '.join(done.key)}" if done.key else "no key"
            print(f"{done.table}: {done.files_removed} files -> {done.files_added} ({key})", flush=True)
    if everything or args.bronze:
        bronze = optimize_bronze(spark, config)
        print("bronze: no table yet" if bronze is None else
              f"bronze: {bronze.files_removed} files -> {bronze.files_added} (bin-packing)", flush=True)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from cdc_apply.cli.verify_cmd import run_verify

    return run_verify(args)


def _forget(args: argparse.Namespace) -> int:
    from cdc_apply.cli.forget_cmd import run_forget

    return run_forget(args)


def _as_of(args: argparse.Namespace) -> int:
    from cdc_apply.cli.as_of_cmd import run_cli

    return run_cli(args)


def version_text() -> str:
    """``cdc-apply --version``: this package, pyspark, the Delta artifact it is pinned to and the Delta
    actually there: the one a Spark session of this process loaded (asked of its JVM), else the jar a
    session started here would load (its name and manifest; no JVM is started for it)."""
    from importlib import metadata

    from cdc_apply import __version__
    from cdc_apply.spark.jars import DELTA_ARTIFACT, delta_for_new_session
    from cdc_apply.spark.session import running_delta

    try:
        pyspark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pyspark = "not installed (the cluster's Spark is used)"
    running = running_delta()
    if running is not None:
        version, jar = running
        found = f"loaded {version} by the running session ({jar})"
    else:
        new_jar = delta_for_new_session()
        found = (f"found {new_jar.artifact} {new_jar.version} in {new_jar.where}" if new_jar is not None
                 else "no Delta jars found for a session started here (`python -m cdc_apply.spark.jars` fetches them)")
    return f"cdc-apply {__version__} (pyspark {pyspark}; Delta {DELTA_ARTIFACT} pinned, {found})"


class _Version(argparse.Action):
    """``--version``, its text made only when asked for: it looks for jars, which other commands need not."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-apply",
        description="Apply PostgreSQL logical replication (pgoutput) to Delta Lake tables.",
    )
    parser.add_argument("--version", action=_Version,
                        help="cdc_apply, pyspark, the pinned Delta and the Delta found or loaded, then exit")
    log_help = ("log records shown on stderr from this level (default INFO, or $CDC_APPLY_LOG_LEVEL); DEBUG also "
                "shows the stack of an error")
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper,
                        default=os.environ.get("CDC_APPLY_LOG_LEVEL", "INFO").upper(), help=log_help)
    # Also accepted after the subcommand: jobs/*.py put the subcommand first, so under spark-submit
    # that is the only place a user can give it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, default=argparse.SUPPRESS, help=log_help)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    apply = command("apply", help="apply bronze to silver (Structured Streaming)")
    apply.add_argument("--config", required=True, metavar="FILE", help="a TOML configuration (see conf/example.toml)")
    apply.add_argument("--once", action="store_true", help="process everything available, then stop")
    apply.add_argument("--progress-seconds", type=float, default=None, metavar="S",
                       help="log a live progress line every S seconds while a batch runs (default 30; 0: never)")
    apply.set_defaults(run=_apply)

    land = command("land", help="land a PostgreSQL replication slot into bronze")
    land.add_argument("--config", required=True, metavar="FILE", help="a TOML configuration (see conf/example.toml)")
    land.add_argument("--once", action="store_true", help="stop when the slot has nothing more to send")
    land.set_defaults(run=_land)

    snapshot = command("snapshot", help="ask the lander to copy tables again while the stream flows")
    snapshot.add_argument("--config", required=True, metavar="FILE",
                          help="a TOML configuration (see conf/example.toml)")
    snapshot.add_argument("--table", action="append", default=[], metavar="NS.NAME",
                          help="a published table to copy again (repeat for several)")
    snapshot.add_argument("--ddl-events-sql", action="store_true",
                          help="print the event trigger SQL of source.ddl_events (for a superuser to run)")
    snapshot.set_defaults(run=_snapshot)

    status = command(
        "status", help="show per-source progress, pending transactions and lag",
        description="Per source: applied seq/LSN, pending transactions, lag against bronze now, quarantined "
                    "messages and the last failure. Exit code: 0 every source ok, 4 the last batch failed "
                    "(on the source whose message failed, or an entry with no source), 3 messages were quarantined "
                    "within --quarantine-hours, 5 lag above "
                    "--max-lag-seconds (the worst source decides), 6 the slot of [source] holds back more WAL than "
                    "--max-retained-wal-bytes (before 3 and 5, after 4), 2 status itself failed. The slot's figures "
                    "are asked of the source with a 3 s timeout; unreachable, they are null with the reason.")
    status.add_argument("--config", required=True, metavar="FILE")
    status.add_argument("--json", action="store_true", help="one JSON object per source")
    status.add_argument("--quarantine-hours", type=float, default=24.0, metavar="H",
                        help="quarantined messages this recent make the exit code 3 (default 24)")
    status.add_argument("--max-lag-seconds", type=float, default=None, metavar="S",
                        help="exit code 5 when a source's oldest change not yet in silver is older than this "
                             "(default: never)")
    status.add_argument("--max-retained-wal-bytes", type=int, default=None, metavar="N",
                        help="exit code 6 when the slot holds back more than N bytes of WAL on the source "
                             "(pg_current_wal_lsn() - restart_lsn; default: never)")
    status.add_argument("--prometheus", action="store_true",
                        help="print the status as Prometheus text (node_exporter's textfile collector)")
    status.set_defaults(run=_status)

    optimize = command("optimize", help="compact silver and history tables (Z-ordered by key) and bronze "
                                        "(maintenance)",
                       description="OPTIMIZE each silver table of the pipeline and its history table, "
                                   "ZORDER BY the key: fewer files, each a narrow key range, so a MERGE of "
                                   "recent keys reads fewer; and bronze, whose lander writes a file per "
                                   "batch (bin-packing). Both may run beside the lander and the apply job. "
                                   "With --table or --bronze, only what they name.")
    optimize.add_argument("--config", required=True, metavar="FILE")
    optimize.add_argument("--table", action="append", metavar="NS.NAME",
                          help="only this silver table and its history (repeatable)")
    optimize.add_argument("--bronze", action="store_true", help="bronze (alone, unless --table is given too)")
    optimize.set_defaults(run=_optimize)

    as_of = command("as-of", help="print silver tables as of one source commit LSN (docs/HISTORY.md)",
                    description="Silver tables of one source as they were after one PostgreSQL commit: the "
                                "newest applied commit at or below --lsn, from history tables where every "
                                "table keeps one, else by Delta time travel to the newest batch end.")
    from cdc_apply.cli.as_of_cmd import add_arguments as as_of_arguments

    as_of_arguments(as_of)
    as_of.set_defaults(run=_as_of)

    verify = command("verify", help="compare silver with the live source at one consistent point (docs/VERIFY.md)",
                     description="Each table compared with PostgreSQL at one snapshot whose LSN is known, per key "
                                 "range (count + hash), differing ranges row by row. Exit code: 0 equal, 1 "
                                 "differences, 2 an error.")
    from cdc_apply.cli.verify_cmd import add_arguments as verify_arguments

    verify_arguments(verify)
    verify.set_defaults(run=_verify)

    forget = command("forget", help="remove every trace of some keys of a table from the lake (docs/FORGET.md)",
                     description="The keys' messages deleted from bronze and the quarantine, their rows from silver "
                                 "and history, recorded in the forgotten state table; --vacuum removes the older "
                                 "files that still hold them. Exit code: 0 forgotten, 2 refused or failed.")
    from cdc_apply.cli.forget_cmd import add_arguments as forget_arguments

    forget_arguments(forget)
    forget.set_defaults(run=_forget)

    demo = command("demo", help="run the end-to-end demo on an embedded default")
    demo.add_argument("--workdir", default="demo-data", help="folder for the demo's tables (default: demo-data)")
    demo.set_defaults(run=_demo)

    inspect = command("inspect", help="print messages as JSON, one object per line")
    where = inspect.add_mutually_exclusive_group(required=True)
    where.add_argument("--bronze", metavar="PATH", help="a bronze Delta table")
    where.add_argument("--hex", metavar="FILE", help="a file of hex payloads, one per line (- for stdin)")
    inspect.add_argument("--source", help="only this source (bronze)")
    inspect.add_argument("--from-seq", type=int, default=0, metavar="N", help="start at this seq (bronze)")
    inspect.add_argument("--format", choices=("pgoutput", "gaussdb"), default="pgoutput",
                         help="payload format (default: pgoutput)")
    inspect.set_defaults(run=_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (0 ok, 2 a cdc_apply error, ``status``'s codes)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # Records also propagate: the command's process has no root handler, and a caller running main()
    # in-process (tests) keeps seeing them.
    configure_logging(args.log_level, skip_printed=True, propagate=True)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CdcApplyError as err:
        print(f"cdc-apply: error: {err}", file=sys.stderr)
        log.error("%s", err, extra={PRINTED: True})
        log.debug("the error's traceback", exc_info=err)
        return 2


def run() -> None:
    """The ``cdc-apply`` console script: :func:`main`, its exit code as the process's.

    Raises ``SystemExit`` only for a non-zero code, so a runner that calls the entry point as a function
    (a Databricks Python wheel task) fails the task on an error and lets a success return normally.
    """
    code = main()
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    raise SystemExit(main())
