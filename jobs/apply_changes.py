"""spark-submit entry point for the apply job (a copy works anywhere cdc_apply is installed).

    spark-submit [--master ...] [--packages io.delta:delta-spark_4.1_2.13:4.4.0] \
        jobs/apply_changes.py --config pipeline.toml [--once] [--progress-seconds S]

The session keeps spark-submit's master, memory and jars (README, "Spark sessions and Databricks").
On Databricks, run the installed wheel's `cdc-apply` entry point as a Python wheel task instead
(jobs/databricks.yml).
"""

import sys

from cdc_apply.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["apply", *sys.argv[1:]]))
