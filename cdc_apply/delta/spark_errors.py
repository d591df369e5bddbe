"""Spark failures as cdc_apply errors.

A decoder's error raised inside a Python worker reaches the driver as the text of a Java exception;
a second job on the same checkpoint or tables as one of Delta's concurrency exceptions. Here both
become the named errors users see.
"""

from __future__ import annotations

from cdc_apply.config import Config
from cdc_apply.errors import CdcApplyError, StateError, error_from_text


def first_decode_error(decoded) -> CdcApplyError:
    """Under ``on_error = "fail"``: the error of the batch's first bad message (the lowest seq of the
    first source that has one). Partitions decode in parallel, so a decoder that raised would report
    whichever bad message's task failed first; the batch stops here, before anything is written."""
    first = decoded.where("error IS NOT NULL").orderBy("source", "seq").select("error").first()
    return error_from_text(first.error)


# Spark and Delta failures that mean another job writes the same tables or checkpoint.
_CONCURRENT_MARKERS = ("CONCURRENT_STREAM_LOG_UPDATE", "CONCURRENT_QUERY", "is already active",
                       "ConcurrentAppendException", "ConcurrentDeleteReadException",
                       "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
                       "MetadataChangedException", "ProtocolChangedException", "DELTA_CONCURRENT_")


def unwrap_error(exc: Exception, config: Config | None = None) -> Exception:
    """The cdc_apply error inside a Spark failure (a Python worker's, or foreachBatch's), as itself; a
    failure that means another job runs on the same checkpoint or tables, as a :class:`StateError`."""
    if isinstance(exc, CdcApplyError):
        return exc
    text = str(exc)
    for cls in CdcApplyError.__subclasses__():
        marker = f"cdc_apply.errors.{cls.__name__}: "
        if marker in text:
            return error_from_text(text.split(marker, 1)[1].splitlines()[0], cls)
    if config is not None and any(marker in text for marker in _CONCURRENT_MARKERS):
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return StateError(f"another job is applying pipeline {config.pipeline!r} (its checkpoint or tables changed "
                          f"under this one: {first[:300]}); run one apply job per pipeline, then restart this one "
                          "— a batch cut short is re-run whole", checkpoint=config.checkpoint_location)
    return exc
