"""spark-submit entry point for the lander (a copy works anywhere cdc_apply is installed).

    spark-submit [--packages io.delta:delta-spark_4.1_2.13:4.4.0] jobs/land_postgres.py --config pipeline.toml [--once]
"""

import sys

from cdc_apply.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["land", *sys.argv[1:]]))
