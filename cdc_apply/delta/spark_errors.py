"""Spark failures as cdc_apply errors.

A decoder's error raised inside a Python worker reaches the driver as the text of a Java exception;
a second job on the same checkpoint or tables as one of Delta's concurrency exceptions; a driver JVM
that died (out of memory, killed) as py4j's network error. Here they become the named errors users see.
"""

from __future__ import annotations

from cdc_apply.config import Config
from cdc_apply.errors import ApplyError, CdcApplyError, StateError, error_from_text


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
    failure that means another job runs on the same checkpoint or tables, as a :class:`StateError`; a
    driver JVM gone mid-batch, as an :class:`ApplyError` that says what to do."""
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
    if jvm_gone(exc):
        return ApplyError(
            f"Spark's driver JVM stopped during the batch ({text.splitlines()[0][:200] if text else type(exc).__name__}); "
            "the JVM's own output above says why: java.lang.OutOfMemoryError means the batch needs more driver "
            "memory (spark.driver.memory: spark-submit --driver-memory, spark-defaults.conf, or "
            "PYSPARK_SUBMIT_ARGS=\"--driver-memory 8g pyspark-shell\" for the cdc-apply command; a MERGE that "
            "rewrites a row holding a value of N MB needs several times N); nothing is lost: run the job again and "
            "it completes the batch, skipping the writes the stopped run committed")
    return exc


# A Spark failure whose root is the machine, not the data or the table: the line that says so.
_RESOURCE_MARKERS = ("No space left on device", "Disk quota exceeded", "java.lang.OutOfMemoryError")


def resource_cause(text: str) -> str | None:
    """The line of a Spark failure's text (its Java stack trace, causes included) naming a full disk or
    an exhausted heap, shortened to its message; ``None`` when there is none."""
    for marker in _RESOURCE_MARKERS:
        line = next((line.strip() for line in text.splitlines() if marker in line), None)
        if line:
            return line[line.index(marker):][:300]
    return None


# py4j's words for a JVM that is no longer there (its socket closed mid-call, or nothing listening).
_JVM_GONE_MARKERS = ("Answer from Java side is empty", "Error while sending or receiving",
                     "Error while receiving", "Connection refused")


def jvm_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is py4j's report of a driver JVM that went away during a call."""
    try:
        from py4j.protocol import Py4JError, Py4JNetworkError
    except ImportError:  # no py4j, no JVM
        return False
    if isinstance(exc, Py4JNetworkError):
        return True
    return isinstance(exc, Py4JError) and any(marker in str(exc) for marker in _JVM_GONE_MARKERS)
