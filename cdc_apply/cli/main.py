"""``cdc-apply``: apply, land, snapshot, inspect, status, demo.

Each subcommand lives in its own module and is imported only when used, so
``cdc-apply inspect --hex`` starts without a JVM.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from cdc_apply.errors import CdcApplyError


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

    return run_apply(args.config, once=args.once)


def _land(args: argparse.Namespace) -> int:
    from cdc_apply.cli.land_cmd import run_land

    return run_land(args.config, once=args.once)


def _snapshot(args: argparse.Namespace) -> int:
    from cdc_apply.cli.snapshot_cmd import run_snapshot

    return run_snapshot(args.config, args.table, ddl_events_sql=args.ddl_events_sql)


def _status(args: argparse.Namespace) -> int:
    from cdc_apply.cli.apply_cmd import run_status

    return run_status(args.config, as_json=args.json, quarantine_hours=args.quarantine_hours,
                      max_lag_seconds=args.max_lag_seconds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-apply",
        description="Apply PostgreSQL logical replication (pgoutput) to Delta Lake tables.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    apply = sub.add_parser("apply", help="apply bronze to silver (Structured Streaming)")
    apply.add_argument("--config", required=True, metavar="FILE", help="a TOML configuration (see conf/example.toml)")
    apply.add_argument("--once", action="store_true", help="process everything available, then stop")
    apply.set_defaults(run=_apply)

    land = sub.add_parser("land", help="land a PostgreSQL replication slot into bronze")
    land.add_argument("--config", required=True, metavar="FILE", help="a TOML configuration (see conf/example.toml)")
    land.add_argument("--once", action="store_true", help="stop when the slot has nothing more to send")
    land.set_defaults(run=_land)

    snapshot = sub.add_parser("snapshot", help="ask the lander to copy tables again while the stream flows")
    snapshot.add_argument("--config", required=True, metavar="FILE", help="a TOML configuration (see conf/example.toml)")
    snapshot.add_argument("--table", action="append", default=[], metavar="NS.NAME",
                          help="a published table to copy again (repeat for several)")
    snapshot.add_argument("--ddl-events-sql", action="store_true",
                          help="print the event trigger SQL of source.ddl_events (for a superuser to run)")
    snapshot.set_defaults(run=_snapshot)

    status = sub.add_parser(
        "status", help="show per-source progress, pending transactions and lag",
        description="Per source: applied seq/LSN, pending transactions, lag against bronze now, quarantined "
                    "messages and the last failure. Exit code: 0 every source ok, 4 a source's last batch "
                    "failed, 3 messages were quarantined within --quarantine-hours, 5 lag above "
                    "--max-lag-seconds (the worst source decides), 2 status itself failed.")
    status.add_argument("--config", required=True, metavar="FILE")
    status.add_argument("--json", action="store_true", help="one JSON object per source")
    status.add_argument("--quarantine-hours", type=float, default=24.0, metavar="H",
                        help="quarantined messages this recent make the exit code 3 (default 24)")
    status.add_argument("--max-lag-seconds", type=float, default=None, metavar="S",
                        help="exit code 5 when a source's lag is above this (default: never)")
    status.set_defaults(run=_status)

    demo = sub.add_parser("demo", help="run the end-to-end demo on an embedded default")
    demo.add_argument("--workdir", default="demo-data", help="folder for the demo's tables (default: demo-data)")
    demo.set_defaults(run=_demo)

    inspect = sub.add_parser("inspect", help="print messages as JSON, one object per line")
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
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CdcApplyError as err:
        print(f"cdc-apply: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
