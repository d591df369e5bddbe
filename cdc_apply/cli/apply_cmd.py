"""``cdc-apply apply`` and ``cdc-apply status``: the Python API (:mod:`cdc_apply.api`) behind a command."""

from __future__ import annotations

import json
import sys

from cdc_apply.config import load_config


def run_apply(config_path: str, once: bool = False, progress_seconds: float | None = None) -> int:
    """Apply until done (``once``) or stopped; the batch lines go to stdout and the ``cdc_apply.apply`` log."""
    from cdc_apply.api import PROGRESS_SECONDS, apply
    from cdc_apply.spark import spark_session

    config = load_config(config_path)
    spark = spark_session(f"cdc_apply-apply-{config.pipeline}")
    apply(spark, config, once=once, out=sys.stdout,
          progress_seconds=PROGRESS_SECONDS if progress_seconds is None else progress_seconds)
    return 0


def run_status(config_path: str, as_json: bool = False, quarantine_hours: float = 24.0,
               max_lag_seconds: float | None = None) -> int:
    """Print each source's status; the exit code is the least healthy source's (see ``EXIT_CODES``).

    ``as_json``: one JSON object per source, one per line (nothing when the pipeline has applied
    nothing yet); timestamps as ``YYYY-MM-DD HH:MM:SS[.ffffff]`` strings in the driver process's local time.
    Tables at local paths are read without a JVM (no Spark session is built).
    """
    from cdc_apply.api import exit_code, status
    from cdc_apply.lake.books.status import needs_spark

    config = load_config(config_path)
    spark = None
    if needs_spark(config):   # catalog tables (or object storage): otherwise no JVM is started
        from cdc_apply.spark import spark_session

        spark = spark_session(f"cdc_apply-status-{config.pipeline}")
    entries = status(spark, config, quarantine_hours=quarantine_hours, max_lag_seconds=max_lag_seconds)
    for entry in entries:
        if as_json:
            print(json.dumps(entry, default=str))
        else:
            print(" | ".join(f"{k}={v}" for k, v in entry.items()))
    if not entries and not as_json:
        print(f"cdc-apply: pipeline {config.pipeline!r} has applied nothing yet")
    sys.stdout.flush()
    return exit_code(entries)
