"""spark-submit / Databricks entry point for the lander.

    spark-submit jobs/land_postgres.py --config conf/example.toml [--once]
"""

import sys

from cdc_apply.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["land", *sys.argv[1:]]))
