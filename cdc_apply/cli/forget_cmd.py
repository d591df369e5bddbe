"""``cdc-apply forget``: remove every trace of some keys of one table from the lake (docs/FORGET.md).

Exit code: 0 forgotten; 2 refused or failed (the source still holds a key, a key moved to another, the lander
or the apply job did not reach the point) — nothing half-done stays wrong: running it again finishes it.
"""

from __future__ import annotations


def run_forget(args) -> int:
    """Forget the keys of ``args.table`` and print what was removed (or JSON with ``--json``)."""
    import json

    from cdc_apply.config import load_config
    from cdc_apply.forgetting.run import forget
    from cdc_apply.spark import spark_session

    config = load_config(args.config)
    spark = spark_session(f"cdc_apply-forget-{config.pipeline}")
    run = forget(spark, config, args.table, args.key, even_if_in_source=args.even_if_in_source,
                 wait_seconds=args.wait_seconds, vacuum=args.vacuum or args.retain_hours is not None,
                 retain_hours=args.retain_hours)
    if args.json:
        print(json.dumps(run.as_dict()))
    else:
        for line in run.lines():
            print(line)
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE")
    parser.add_argument("--table", required=True, metavar="NS.NAME", help="the table whose keys are forgotten")
    parser.add_argument("--key", action="append", required=True, metavar="VALUE",
                        help="a key to forget (repeatable): its value, or a JSON object by key column for a key "
                             'of several columns, e.g. \'{"id": 7, "region": "eu"}\'')
    parser.add_argument("--even-if-in-source", action="store_true",
                        help="forget keys the source still holds (its next change of such a key brings it back)")
    parser.add_argument("--wait-seconds", type=float, default=None, metavar="S",
                        help="how long to wait for the lander and the apply job to reach the source's point "
                             "(default: verify.wait_seconds, 300)")
    parser.add_argument("--vacuum", action="store_true",
                        help="VACUUM the tables the forget changed, at each table's own retention")
    parser.add_argument("--retain-hours", type=float, default=None, metavar="H",
                        help="VACUUM keeping H hours of older files (implies --vacuum; below 168 turns Delta's "
                             "retention check off for the statement: readers of older versions may fail)")
    parser.add_argument("--json", action="store_true", help="the result as one JSON object")
