"""``cdc-apply apply`` and ``cdc-apply status``: the Python API (:mod:`cdc_apply.api`) behind a command."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext

from cdc_apply.config import load_config
from cdc_apply.metrics.serving import serving
from cdc_apply.metrics.source_side import read_slot, slot_entries

# status's exit code when a slot holds back more WAL than --max-retained-wal-bytes (below a failing batch's 4).
RETAINED_WAL_EXIT = 6


def run_apply(config_path: str, once: bool = False, progress_seconds: float | None = None) -> int:
    """Apply until done (``once``) or stopped; the batch lines go to stdout and the ``cdc_apply.apply`` log."""
    from cdc_apply.api import PROGRESS_SECONDS, apply
    from cdc_apply.spark import spark_session

    config = load_config(config_path)
    # A scheduled --once job serves no endpoint: `status --prometheus` is its textfile instead.
    with serving(config, "apply", sys.stdout) if not once else nullcontext():
        spark = spark_session(f"cdc_apply-apply-{config.pipeline}")
        apply(spark, config, once=once, out=sys.stdout,
              progress_seconds=PROGRESS_SECONDS if progress_seconds is None else progress_seconds)
    return 0


def run_status(config_path: str, as_json: bool = False, quarantine_hours: float = 24.0,
               max_lag_seconds: float | None = None, max_retained_wal_bytes: int | None = None,
               prometheus: bool = False) -> int:
    """Print each source's status; the exit code is the least healthy source's (see ``EXIT_CODES``), or
    :data:`RETAINED_WAL_EXIT` when no source fails and the slot holds back more than ``max_retained_wal_bytes``.

    Each entry adds the configured source's slot as the source sees it (``slot_active``, ``slot_wal_status``,
    ``slot_retained_wal_bytes``, ``slot_safe_wal_size``; null with ``source_unavailable`` saying why when the
    source does not answer within a few seconds, or for a source other than ``[source]``). ``prometheus``:
    the same as Prometheus text (node_exporter's textfile collector) instead.

    ``as_json``: one JSON object per source, one per line (nothing when the pipeline has applied
    nothing yet); timestamps as ``YYYY-MM-DD HH:MM:SS[.ffffff]`` strings in the driver process's local time.
    Tables delta-rs opens (local paths; object storage with its credentials in the environment) are read
    without a JVM (no Spark session is built).
    """
    from cdc_apply.api import exit_code, status
    from cdc_apply.cli.land_cmd import source_dsn
    from cdc_apply.lake.books.status import needs_spark
    from cdc_apply.metrics.textfile import render_status

    config = load_config(config_path)
    spark = None
    if needs_spark(config):   # catalog tables, object storage configured only in Spark: otherwise no JVM
        from cdc_apply.spark import spark_session

        spark = spark_session(f"cdc_apply-status-{config.pipeline}")
    entries = status(spark, config, quarantine_hours=quarantine_hours, max_lag_seconds=max_lag_seconds)
    slot = read_slot(source_dsn(config), config.source.slot)
    shown = slot_entries(entries, config.source.name, slot)
    code = exit_code(entries)
    retained = slot.retained_wal_bytes
    if max_retained_wal_bytes is not None and retained is not None and retained > max_retained_wal_bytes \
            and code != 4:
        code = RETAINED_WAL_EXIT
    if prometheus:
        print(render_status(config.pipeline, shown, config.source.name, slot), end="", flush=True)
        return code
    for entry in shown:
        if as_json:
            print(json.dumps(entry, default=str))
        else:
            print(" | ".join(f"{k}={v}" for k, v in entry.items()))
    if not entries and not as_json:
        print(f"cdc-apply: pipeline {config.pipeline!r} has applied nothing yet")
    sys.stdout.flush()
    return code

