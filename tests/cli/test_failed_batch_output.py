"""What a user sees when a batch fails: one line naming the error, not Spark's logging; the stacks on request.

One bronze table holding a truncated Insert (a batch that stops with a ``DecodeError``) is applied by the
real command line and by pyspark's own ``spark-submit`` running ``jobs/apply_changes.py``, each run with a
state folder of its own, all started together (their JVMs spend most of their time starting). Two more
runs bring a log4j configuration of the user's, which must be kept as it is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_apply.testing.pytest_plugin import Lake
from cdc_apply.testing.stream import StreamBuilder

pytestmark = [pytest.mark.spark, pytest.mark.system]

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "cdc-apply"
ERROR = re.compile(r"^cdc-apply: error: cannot decode logical replication message: truncated: .*\[source=src, seq=")
USER_LOG4J = """\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = USER-LOG4J %p %c{1}: %m%n
"""


def _bad_bronze(lake: Lake) -> None:
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "good"})
        tx.insert(t, {"id": 2, "v": "cut short"})
    rows = b.rows()
    last = max(i for i, row in enumerate(rows) if row[3][:1] == b"I")
    source, seq, lsn, payload = rows[last]
    rows[last] = (source, seq, lsn, payload[:1])  # an Insert of its type byte alone
    lake.land(rows)


def _started(name: str, cmd: list, work: Path, **env: str):
    """``cmd`` started with the environment a user's shell would give it, its output in files."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "SPARK_HOME", "CDC_APPLY_LOG_LEVEL",
                         "LOG4J_CONFIGURATION_FILE", "PYTEST_ADDOPTS")}
    base["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), base.get("PATH", "")])
    base["PYSPARK_PYTHON"] = sys.executable
    # These JVMs live a minute or two: compiling only with C1 saves them most of their CPU on two shared
    # cores. Nothing cdc_apply sees changes; the JVM's "Picked up JAVA_TOOL_OPTIONS" lines are dropped below.
    base["JAVA_TOOL_OPTIONS"] = "-XX:TieredStopAtLevel=1"
    base.update(env)
    out, err = open(work / f"{name}.out", "w"), open(work / f"{name}.err", "w")
    with out, err:
        return subprocess.Popen([str(c) for c in cmd], env=base, cwd=work, stdout=out, stderr=err), work, name


def _finished(started, timeout: float = 900) -> dict:
    proc, work, name = started
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # its test fails on the code and the output so far
        proc.kill()
        proc.wait()

    def lines(suffix):
        text = (work / f"{name}.{suffix}").read_text(errors="replace")
        return [line for line in text.splitlines() if line.strip() and not line.startswith("Picked up JAVA_TOOL_")]

    return {"code": proc.returncode, "out": lines("out"), "err": lines("err")}


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("failed_batch")
    bronze = Lake(spark, work / "landed", pipeline="bad")
    _bad_bronze(bronze)

    names = ("cli", "cli_debug", "submit", "submit_debug", "submit_user_log4j", "cli_conf_dir")
    config = {name: Lake(spark, work / name, pipeline="bad", bronze={"path": bronze.bronze_path}).write_config()
              for name in names}

    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    job = REPO / "jobs" / "apply_changes.py"
    submit_args = [submit, "--master", "local[1]", "--driver-memory", "1g", "--conf", "spark.ui.enabled=false"]
    user_log4j = work / "user-log4j2.properties"
    user_log4j.write_text(USER_LOG4J)
    conf_dir = work / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "log4j2.properties").write_text(USER_LOG4J)
    started = {
        "cli": _started("cli", [CLI, "apply", "--config", config["cli"], "--once", "--progress-seconds", "0"], work),
        "cli_debug": _started("cli_debug", [CLI, "--log-level", "DEBUG", "apply", "--config", config["cli_debug"],
                                            "--once", "--progress-seconds", "0"], work),
        "submit": _started("submit", [*submit_args, job, "--config", config["submit"], "--once",
                                      "--progress-seconds", "0"], work),
        "submit_debug": _started("submit_debug", [*submit_args, job, "--config", config["submit_debug"], "--once",
                                                  "--progress-seconds", "0", "--log-level", "DEBUG"], work),
        "submit_user_log4j": _started("submit_user_log4j", [
            *submit_args, "--driver-java-options", f"-Dlog4j2.configurationFile=file:{user_log4j}",
            job, "--config", config["submit_user_log4j"], "--once", "--progress-seconds", "0"], work),
        "cli_conf_dir": _started("cli_conf_dir", [CLI, "apply", "--config", config["cli_conf_dir"], "--once",
                                                  "--progress-seconds", "0"], work, SPARK_CONF_DIR=str(conf_dir)),
    }
    return {name: _finished(run) for name, run in started.items()}


def _spark_log_lines(lines: list[str]) -> list[str]:
    """Lines of Spark's own default profile (``yy/MM/dd HH:mm:ss LEVEL Class: ...``) below WARN."""
    return [line for line in lines if re.match(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|DEBUG) ", line)]


def test_a_failed_batch_under_the_command_line_prints_one_error_line_and_no_java_stack(runs):
    run = runs["cli"]
    shown = "\n".join(run["err"])
    assert run["code"] == 2, shown
    assert [line for line in run["err"] if line.startswith("cdc-apply: error:")] == \
        [line for line in run["err"] if ERROR.match(line)] != [], shown
    assert len(run["err"]) <= 6, shown       # the JVM's own start-up lines, the session line, the error
    assert not [line for line in run["err"] if line.startswith("\tat ") or "Traceback" in line], shown


def test_log_level_debug_shows_the_failed_querys_java_stack_and_the_errors_traceback(runs):
    run = runs["cli_debug"]
    shown = "\n".join(run["err"])
    assert run["code"] == 2, shown
    assert any(ERROR.match(line) for line in run["err"]), shown
    assert any(re.search(r"ERROR MicroBatchExecution: Query cdc_apply_bad .* terminated with error", line)
               for line in run["err"]), shown
    assert sum(line.startswith("\tat org.apache.spark.") for line in run["err"]) > 10, shown
    assert "DEBUG cdc_apply.cli: the error's traceback" in shown and "Traceback (most recent call last)" in shown


def test_a_failed_batch_under_spark_submit_prints_one_error_line_and_none_of_sparks_info_logging(runs):
    run = runs["submit"]
    # spark-submit passes the Python driver's stderr on to its stdout, the JVM's log to its stderr.
    seen = run["out"] + run["err"]
    shown = "\n".join(seen)
    assert run["code"] == 2, shown
    assert [line for line in seen if line.startswith("cdc-apply: error:")] == \
        [line for line in seen if ERROR.match(line)] != [], shown
    assert not _spark_log_lines(seen), shown
    assert not [line for line in seen if line.startswith("\tat ") or "Traceback" in line], shown
    # What spark-submit prints before the job starts (Java's notice, Spark's profile, this host's
    # address) and the job's own three lines.
    assert len(seen) <= 10, shown
    assert any("JVM log: errors only (cdc_apply's log4j2.properties)" in line for line in run["out"]), shown


def test_log_level_debug_given_after_the_jobs_arguments_shows_the_stack_under_spark_submit(runs):
    run = runs["submit_debug"]
    shown = "\n".join(run["out"] + run["err"])
    assert run["code"] == 2, shown
    assert any(ERROR.match(line) for line in run["out"]), shown
    assert any("ERROR MicroBatchExecution: Query cdc_apply_bad" in line for line in run["err"]), shown
    assert sum(line.startswith("\tat org.apache.spark.") for line in run["err"]) > 10, shown
    assert "DEBUG cdc_apply.cli: the error's traceback" in shown
    assert not _spark_log_lines(run["err"]), shown     # the stack, not Spark's INFO logging


def test_a_log4j_configuration_given_to_spark_submit_is_kept_and_named(runs):
    run = runs["submit_user_log4j"]
    shown = "\n".join(run["out"] + run["err"])
    assert run["code"] == 2, shown
    assert any(line.startswith("USER-LOG4J INFO SparkContext: ") for line in run["err"]), shown
    session = next(line for line in run["out"] if "cdc_apply.spark: Spark session from spark-submit" in line)
    assert re.search(r"; JVM log: yours \(.*/user-log4j2\.properties\)$", session), session


def test_a_log4j2_properties_in_the_spark_conf_folder_is_kept_by_the_command_line(runs):
    run = runs["cli_conf_dir"]
    shown = "\n".join(run["out"] + run["err"])
    assert run["code"] == 2, shown
    # The user's layout; WARN and above only, as in the `pyspark` shell: a JVM that pyspark launches gets
    # Spark's shell threshold whatever the configuration.
    assert sum(line.startswith("USER-LOG4J ") for line in run["err"]) >= 3, shown
    assert any(re.search(r"; JVM log: yours \(.*/spark-conf/log4j2\.properties\)$", line) for line in run["err"]), shown
