"""The apply job's batches over a Spark Connect session: a loop in this process instead of ``foreachBatch``.

Over Spark Connect a streaming query's ``foreachBatch`` function runs in a Python process of the server,
not here: the pipeline's carried state (open transactions, schema histories, the apply version) would
live there and be lost with it. The micro-batch only ever told the pipeline how far each source had
landed (``max(seq)``), the rows themselves being read from bronze by seq range, so the loop here hands
:meth:`~cdc_apply.lake.pipeline.ApplyPipeline.process` the bronze rows past each source's applied seq
instead; the progress table, not a streaming checkpoint, says where the job stopped.

What the streaming query adds and the loop does not: ``bronze.max_files_per_trigger`` /
``max_bytes_per_trigger`` (one batch takes everything landed), and the detection of rows appended below
a source's applied seq (they are past the loop's read; the bronze contract's row count still checks
each batch's own rows).
"""

from __future__ import annotations

import re
import threading

from cdc_apply.planning.state import SourceState

_UNITS = {"us": 1e-6, "microsecond": 1e-6, "ms": 1e-3, "millisecond": 1e-3, "s": 1.0, "second": 1.0,
          "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0,
          "week": 604800.0}


def interval_seconds(text: str) -> float:
    """``apply.trigger_interval`` (``"10 seconds"``, ``"interval 2 minutes"``; checked by the config) in seconds."""
    match = re.match(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$", text, re.IGNORECASE)
    if match is None:
        raise ValueError(text)
    unit = match.group(2).lower()
    return float(match.group(1)) * _UNITS.get(unit, _UNITS.get(unit + "s", 1.0))


def unapplied_rows(pipeline):
    """Bronze's rows past each known source's applied position (every row of a source not applied yet)."""
    from pyspark.sql import functions as F

    known = {source: pipeline.formats.of(source).bronze_seq(state or SourceState())
             for source, state in pipeline.states.items()}
    cond = ~F.col("source").isin(sorted(known)) if known else F.lit(True)
    for source, floor in known.items():
        cond = cond | ((F.col("source") == source) & (F.col("seq") > floor))
    return pipeline.bronze.read(pipeline.spark).where(cond)


def run_batches(pipeline, once: bool, stop: threading.Event | None = None) -> None:
    """Apply what bronze holds, as one batch (``once``), or again every ``apply.trigger_interval`` until
    ``stop`` is set (or the call is interrupted)."""
    from cdc_apply.delta.spark_errors import unwrap_error
    from cdc_apply.errors import StopRequested

    stop = stop or threading.Event()
    pause = interval_seconds(pipeline.config.apply.trigger_interval)
    batch_id = 0
    while not stop.is_set():
        try:
            pipeline.process(unapplied_rows(pipeline), batch_id)
        except StopRequested:
            return
        except Exception as exc:
            raise unwrap_error(exc, pipeline.config) from None
        batch_id += 1
        if once or stop.wait(pause):
            return
