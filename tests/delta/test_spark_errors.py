"""A driver JVM that died mid-batch reaches the user as a named error saying what to do (no JVM needed)."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError, Py4JNetworkError

from cdc_apply.delta.spark_errors import jvm_gone, resource_cause, unwrap_error
from cdc_apply.errors import ApplyError


def test_py4j_losing_the_jvm_is_an_apply_error_naming_driver_memory():
    err = unwrap_error(Py4JNetworkError("Answer from Java side is empty"))
    assert isinstance(err, ApplyError)
    text = str(err)
    assert text.startswith("cannot apply change: Spark's driver stopped during the batch")
    assert "Answer from Java side is empty" in text and "spark.driver.memory" in text


def test_other_py4j_errors_are_left_alone():
    assert jvm_gone(Py4JError("An error occurred while calling o12.load: Answer from Java side is empty"))
    assert not jvm_gone(Py4JError("An error occurred while calling o12.load"))
    plain = Py4JError("An error occurred while calling o12.load")
    assert unwrap_error(plain) is plain
    assert not jvm_gone(ValueError("Connection refused"))
    assert jvm_gone(ConnectionResetError())


def test_a_full_disk_or_an_exhausted_heap_is_found_in_a_java_stack_trace():
    trace = ("An error occurred while calling o1938.execute.\n: org.apache.spark.SparkException: [TASK_WRITE_FAILED]\n"
             "\tat org.apache.spark.sql.execution.datasources.FileFormatWriter...\n"
             "Caused by: org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device\n")
    assert resource_cause(trace) == "No space left on device"
    assert resource_cause("Caused by: java.lang.OutOfMemoryError: Java heap space") == \
        "java.lang.OutOfMemoryError: Java heap space"
    assert resource_cause("An error occurred while calling o1.execute.\n: DELTA_MISSING_COLUMN") is None


def test_a_sparkcontext_shut_down_under_the_job_is_the_same_error():
    trace = ("An error occurred while calling o1266.execute.\n: org.apache.spark.SparkException: Job 56 cancelled "
             "because SparkContext was shut down\n\tat org.apache.spark.scheduler.DAGScheduler...")
    err = unwrap_error(RuntimeError(trace))
    assert isinstance(err, ApplyError)
    assert "(org.apache.spark.SparkException: Job 56 cancelled because SparkContext was shut down)" in str(err)


def test_py4j_reconnecting_to_a_dead_jvm_is_the_same_error():
    err = unwrap_error(ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(err, ApplyError) and "Spark's driver stopped during the batch" in str(err)


# Two applies racing on a new pipeline's checkpoint, as Spark reports each way the second one can fail.
_CHECKPOINT_RACES = {
    # Both start together: the later rename of the checkpoint's metadata file fails.
    "both_write_the_metadata": (
        "An error occurred while calling o94.start.\n: java.lang.RuntimeException\n"
        "\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.<init>\n"
        "Caused by: org.apache.hadoop.fs.FileAlreadyExistsException: Rename destination "
        "file:/st/checkpoint/metadata already exists.\n\tat org.apache.hadoop.fs.AbstractFileSystem.rename\n",
        "FileAlreadyExistsException: Rename destination file:/st/checkpoint/metadata already exists"),
    # What CI's race test got from the second of two `apply --once` started 3 s apart: it read the new
    # checkpoint as empty and found the other's offsets there when it planned its first batch.
    "offsets_found_at_batch_0": (
        "[STREAM_FAILED] Query [id = bb594f7a, runId = 50374c2f] terminated with exception: "
        "[STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY] The checkpoint location file:/st/checkpoint/offsets "
        "should be empty on batch 0\nPlease either use a new checkpoint location, or delete the existing data "
        "in the checkpoint location. SQLSTATE: 42K03 SQLSTATE: XXKST\n=== Streaming Query ===\n",
        "file:/st/checkpoint/offsets should be empty on batch 0"),
}


@pytest.mark.parametrize("trace, named", _CHECKPOINT_RACES.values(), ids=_CHECKPOINT_RACES)
def test_two_applies_racing_on_a_new_checkpoint_is_a_state_error_naming_the_other_job(trace, named):
    from cdc_apply.config import config_from_dict
    from cdc_apply.errors import StateError

    config = config_from_dict({"pipeline": "races", "bronze": {"path": "/b"}, "silver": {"path": "/s"},
                               "state": {"path": "/st"}, "source": {"name": "races", "dsn": "dbname=x",
                                                                    "slot": "races", "publication": "p"}})
    err = unwrap_error(RuntimeError(trace), config)
    assert isinstance(err, StateError)
    assert "another job is applying pipeline 'races'" in str(err)
    assert named in str(err)
