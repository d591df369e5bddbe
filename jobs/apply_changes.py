"""spark-submit / Databricks entry point for the apply job.

    spark-submit jobs/apply_changes.py --config conf/example.toml [--once]

On Databricks, run it as a Python script task with the same arguments; the
cluster's session (with Delta) is used as it is.
"""

import sys

from cdc_apply.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["apply", *sys.argv[1:]]))
