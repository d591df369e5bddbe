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


def run_status(config_path: str, as_json: bool = False) -> int:
    from cdc_apply.delta.status import read_status
    from cdc_apply.spark import spark_session

    config = load_config(config_path)
    spark = spark_session(f"cdc_apply-status-{config.pipeline}")
    for entry in read_status(spark, config):
        if as_json:
            print(json.dumps(entry, default=str))
        else:
            print(" | ".join(f"{k}={v}" for k, v in entry.items()))
    sys.stdout.flush()
    return 0
