"""``cdc-apply``: land, apply, inspect, status, demo.

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-apply",
        description="Apply PostgreSQL logical replication (pgoutput) to Delta Lake tables.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the end-to-end demo on an embedded default")
    demo.add_argument("--workdir", default="demo-data", help="folder for the demo's tables (default: demo-data)")
    demo.set_defaults(run=_demo)
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
