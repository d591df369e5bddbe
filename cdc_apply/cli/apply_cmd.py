"""``cdc-apply apply`` and ``cdc-apply status``."""

from __future__ import annotations

import json
import sys

from cdc_apply.config import load_config


def run_apply(config_path: str, once: bool = False) -> int:
    from cdc_apply.delta.pipeline import ApplyPipeline
    from cdc_apply.spark import spark_session

    config = load_config(config_path)
    spark = spark_session(f"cdc_apply-apply-{config.pipeline}")
    pipeline = ApplyPipeline(spark, config)
    print(f"cdc-apply: applying {pipeline.bronze} -> {config.silver.path or config.silver.table_template} "
          f"({'once' if once else 'every ' + config.apply.trigger_interval}), apply version {pipeline.version}",
          flush=True)
    pipeline.run(once=once)
    return 0


def run_status(config_path: str, as_json: bool = False, quarantine_hours: float = 24.0,
               max_lag_seconds: float | None = None) -> int:
    """Print each source's status; the exit code is the least healthy source's (see ``EXIT_CODES``)."""
    from datetime import timedelta

    from cdc_apply.delta.status import read_status, worst_exit_code
    from cdc_apply.spark import spark_session

    config = load_config(config_path)
    spark = spark_session(f"cdc_apply-status-{config.pipeline}")
    entries = read_status(spark, config, timedelta(hours=quarantine_hours), max_lag_seconds)
    for entry in entries:
        if as_json:
            print(json.dumps(entry, default=str))
        else:
            print(" | ".join(f"{k}={v}" for k, v in entry.items()))
    if not entries and not as_json:
        print(f"cdc-apply: pipeline {config.pipeline!r} has applied nothing yet")
    sys.stdout.flush()
    return worst_exit_code(entries)
