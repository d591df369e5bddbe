"""``cdc-apply verify``: compare silver with the live source at one consistent point (docs/VERIFY.md).

Exit code: 0 every table equal, 1 some table differs, 2 a table (or the run) could not be verified; with
``--repair``, of each repaired table's second verification.
"""

from __future__ import annotations


def run_verify(args) -> int:
    """Verify the tables of ``args.config`` and print one line per table (or JSON with ``--json``)."""
    from cdc_apply.config import load_config
    from cdc_apply.spark import spark_session
    from cdc_apply.verification.run import print_run, verify

    config = load_config(args.config)
    spark = spark_session(f"cdc_apply-verify-{config.pipeline}")
    run = verify(spark, config, args.table or None, range_rows=args.range_rows,
                 max_source_rows_per_second=args.max_source_rows_per_second, wait_seconds=args.wait_seconds,
                 samples=args.samples, record=not args.no_record, repair=args.repair)
    print_run(run, as_json=args.json)
    return run.exit_code


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE")
    parser.add_argument("--table", action="append", default=[], metavar="NS.NAME",
                        help="only this table (repeatable; default: every applied table)")
    parser.add_argument("--json", action="store_true", help="the run as one JSON object")
    parser.add_argument("--max-source-rows-per-second", type=float, default=None, metavar="N",
                        help="bound the source reads (default: verify.max_source_rows_per_second, else none)")
    parser.add_argument("--range-rows", type=int, default=None, metavar="N",
                        help="rows per compared key range (default: verify.range_rows, 100000)")
    parser.add_argument("--wait-seconds", type=float, default=None, metavar="S",
                        help="how long to wait for the apply job to reach the source's point (default 300)")
    parser.add_argument("--samples", type=int, default=5, metavar="N", help="differing keys named per table")
    parser.add_argument("--no-record", action="store_true", help="do not append to the verifications table")
    parser.add_argument("--repair", action="store_true",
                        help="copy the differing key ranges again through the running lander, wait for the apply job "
                             "to apply them, and verify those tables again")
