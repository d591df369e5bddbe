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


# Spark and Delta failures that mean another job writes the same tables or checkpoint. Two streams
# started together on a new checkpoint both write its ``metadata`` file; the later rename fails with
# Hadoop's FileAlreadyExistsException before either has a batch. A stream that read the new checkpoint
# as empty and finds the other's offsets there when it plans its first batch fails with
# STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY.
# Delta's exceptions for a commit that lost a race on a table's files to another writer's commit: the statement
# (or batch) can run again on the table's new version.
_RACE_MARKERS = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
                 "DELTA_CONCURRENT_APPEND", "DELTA_CONCURRENT_DELETE_READ", "DELTA_CONCURRENT_DELETE_DELETE")
_CONCURRENT_MARKERS = ("CONCURRENT_STREAM_LOG_UPDATE", "CONCURRENT_QUERY", "is already active",
                       "FileAlreadyExistsException", "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY",
                       *_RACE_MARKERS, "ConcurrentTransactionException",
                       "MetadataChangedException", "ProtocolChangedException", "DELTA_CONCURRENT_")


def unwrap_error(exc: Exception, config: Config | None = None) -> Exception:
    """The cdc_apply error inside a Spark failure (a Python worker's, or foreachBatch's), as itself; a
    failure that means another job runs on the same checkpoint or tables, as a :class:`StateError`; a
    driver stopped mid-batch (its JVM gone, its SparkContext shut down), as an :class:`ApplyError` that
    says what to do."""
    if isinstance(exc, CdcApplyError):
        return exc
    text = error_text(exc)
    for cls in CdcApplyError.__subclasses__():
        marker = f"cdc_apply.errors.{cls.__name__}: "
        if marker in text:
            return error_from_text(text.split(marker, 1)[1].splitlines()[0], cls)
    if config is not None and any(marker in text for marker in _CONCURRENT_MARKERS):
        return StateError(f"another job is applying pipeline {config.pipeline!r} (its checkpoint or tables changed "
                          f"under this one: {_concurrent_line(text)[:300]}); run one apply job per pipeline, "
                          "then restart this one "
                          "— a batch cut short is re-run whole", checkpoint=config.checkpoint_location)
    if driver_stopped(exc, text):
        return driver_stopped_error(text)
    return exc


def lost_commit_race(exc: BaseException) -> bool:
    """Whether ``exc`` is Delta's report that another writer's commit to a table won a race with this one (not
    a cdc_apply error, nor a checkpoint or stream conflict)."""
    return not isinstance(exc, CdcApplyError) and any(marker in error_text(exc) for marker in _RACE_MARKERS)


def _concurrent_line(text: str) -> str:
    """The line of ``text`` naming the concurrency failure (a Java trace's cause sits deep below its
    first line), else its first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if any(m in line for m in _CONCURRENT_MARKERS)), lines[0] if lines else "")


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
# Spark's words for a driver that shut its SparkContext down under a running job: an uncaught error in a
# task thread (java.lang.OutOfMemoryError above all) stops the local driver.
_STOPPED_MARKERS = ("SparkContext was shut down", "Cannot call methods on a stopped SparkContext")


def jvm_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is py4j's report of a driver JVM that went away during a call (or the socket error
    py4j lets through when it tries to reconnect to it: a refused or reset connection)."""
    if isinstance(exc, ConnectionError):
        return True
    try:
        from py4j.protocol import Py4JError, Py4JNetworkError
    except ImportError:  # no py4j, no JVM
        return False
    if isinstance(exc, Py4JNetworkError):
        return True
    return isinstance(exc, Py4JError) and any(marker in error_text(exc) for marker in _JVM_GONE_MARKERS)


def error_text(exc: BaseException) -> str:
    """``str(exc)``; a py4j Java error asks the JVM for its stack trace, so a dead JVM gives its class name."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - the JVM is gone
        return type(exc).__name__


def driver_stopped(exc: BaseException, text: str | None = None) -> bool:
    """Whether ``exc`` means Spark's driver stopped mid-batch: its JVM gone, or its SparkContext shut down."""
    text = error_text(exc) if text is None else text
    return jvm_gone(exc) or any(marker in text for marker in _STOPPED_MARKERS)


def driver_stopped_error(text: str, **context) -> ApplyError:
    """The error for a driver that stopped mid-batch: what to look for, what to do, that nothing is lost."""
    lines = [line.strip(" :") for line in text.splitlines() if line.strip(" :")]
    detail = next((line for line in lines if any(m in line for m in _STOPPED_MARKERS + _JVM_GONE_MARKERS)),
                  lines[0] if lines else "")
    return ApplyError(
        f"Spark's driver stopped during the batch ({detail[:200]}); the JVM's own output above says why: "
        "java.lang.OutOfMemoryError means the batch needs more driver memory (spark.driver.memory: spark-submit "
        "--driver-memory, spark-defaults.conf, or PYSPARK_SUBMIT_ARGS=\"--driver-memory 8g pyspark-shell\" for "
        "the cdc-apply command); nothing is lost: run the job again and it completes the batch, skipping the "
        "writes the stopped run committed", **context)
