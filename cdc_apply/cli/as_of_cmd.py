"""``cdc-apply as-of``: silver tables of one source as of one PostgreSQL commit LSN (docs/HISTORY.md); the
reading itself is :func:`cdc_apply.lake.history.as_of.read_as_of`."""

from __future__ import annotations

METHODS = ("auto", "history", "time travel")


def add_arguments(parser) -> None:
    """The options of ``cdc-apply as-of`` (and ``python -m cdc_apply.cli.as_of_cmd``)."""
    parser.add_argument("--config", required=True, metavar="FILE")
    parser.add_argument("--lsn", required=True, help="X/Y (as PostgreSQL prints it) or a number")
    parser.add_argument("--tables", default=None, metavar="NS.NAME,...",
                       help="comma-separated qualified names (default: every table)")
    parser.add_argument("--source", default=None, help="needed when the pipeline applies several sources")
    parser.add_argument("--method", choices=METHODS, default="auto")
    parser.add_argument("--show", type=int, default=20, metavar="N", help="rows printed per table (default 20)")
    parser.add_argument("--out", default=None, metavar="DIR", help="write each table as Parquet under DIR instead")


def run_cli(args) -> int:
    """Print (or write under ``--out``) each table as of the LSN; a :class:`CdcApplyError` propagates."""
    from cdc_apply.config import load_config
    from cdc_apply.lake.history.as_of import read_as_of
    from cdc_apply.lake.history.lsn import lsn_text
    from cdc_apply.spark import spark_session

    config = load_config(args.config)
    result = read_as_of(spark_session(f"cdc_apply-as-of-{config.pipeline}"), config, args.lsn,
                        args.tables.split(",") if args.tables else None, args.source, args.method)
    print(f"source {result.source}: as of {result.lsn_text} ({result.lsn}), asked {lsn_text(result.requested_lsn)}, "
          f"by {result.method}"
          f"{'' if result.exact else ' (a batch end: later commits up to the LSN asked are not shown)'}")
    for name, frame in result.frames.items():
        if args.out:
            frame.write.mode("overwrite").parquet(f"{args.out.rstrip('/')}/{name}")
            print(f"{name}: written to {args.out.rstrip('/')}/{name}")
        else:
            print(f"{name}:")
            frame.show(args.show, truncate=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    from cdc_apply.errors import CdcApplyError

    parser = argparse.ArgumentParser(prog="python -m cdc_apply.cli.as_of_cmd",
                                     description="silver tables of one source as of one PostgreSQL commit LSN")
    add_arguments(parser)
    try:
        return run_cli(parser.parse_args(argv))
    except CdcApplyError as err:
        print(f"as_of: error: {err}")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
