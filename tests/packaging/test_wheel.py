"""The wheel works outside the checkout, as a spark-submit user, a Python API user and a test writer use it.

One module fixture builds the wheel (offline, with the virtualenv's setuptools), installs it into a fresh
virtualenv in a temporary folder, then:

* lands two sources into a bronze table with the suite's session and applies them with
  ``spark-submit --master local[1] --driver-memory 1g --jars <the Delta jars>`` running a copy of
  ``jobs/apply_changes.py`` from outside the checkout (pyspark's own ``bin/spark-submit``);
* runs the README's test snippet, extracted from README.md, with pytest in a user project folder: the
  ``spark`` and ``lake`` fixtures come from the installed wheel's ``pytest11`` entry point, Delta from
  ``$CDC_APPLY_JARS`` naming a plain folder of jars, the apply from ``cdc_apply.apply`` (alongside
  spark-submit, to halve the wait);
* reads the submitted pipeline's status in this process, through ``cdc-apply status --json`` and the API.

The fresh virtualenv gets its dependencies (pyspark, pyarrow, pytest ...) from this project's virtualenv
through a ``.pth`` line, so nothing is downloaded: the wheel itself is installed with pip (``--no-deps``),
its own files are what runs (checked below), and ``pip check`` confirms the dependencies it declares are
satisfied. A ``.pth`` line adds a folder to ``sys.path`` without running that folder's own ``.pth``
files, so the checkout's editable install stays out.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from contextlib import redirect_stdout
from pathlib import Path

import pytest

import cdc_apply
from cdc_apply.cli.main import main
from cdc_apply.spark.jars import find_delta_jars
from cdc_apply.testing.pytest_plugin import Lake
from cdc_apply.testing.stream import StreamBuilder

pytestmark = [pytest.mark.spark, pytest.mark.packaging, pytest.mark.system]

REPO = Path(__file__).resolve().parents[2]


def readme_snippet() -> str:
    """The Python block of README's "Testing your own pipelines" that defines a test."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Testing your own pipelines", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return next(block for block in blocks if "def test_" in block)


def _run(cmd, *, env, cwd, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _start(cmd, *, env, cwd, log: Path) -> tuple[subprocess.Popen, Path]:
    """Start ``cmd`` with stdout and stderr in ``log`` (a file: a pipe nobody reads would fill and block)."""
    with open(log, "w") as handle:
        return subprocess.Popen([str(c) for c in cmd], env=env, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT), log


def _finish(started: tuple[subprocess.Popen, Path], timeout: float = 900) -> subprocess.CompletedProcess:
    proc, log = started
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(), "")


def _shop_and_crm() -> tuple[StreamBuilder, StreamBuilder]:
    """Two sources, one transaction each."""
    shop, crm = StreamBuilder("shop"), StreamBuilder("crm")
    users = shop.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    accounts = crm.relation("sales", "accounts", [("id", "int8", True), ("owner", "text", False)])
    with shop.transaction() as tx:
        tx.insert(users, {"id": 1, "name": "Ada"})
        tx.insert(users, {"id": 2, "name": "Brian"})
    with crm.transaction() as tx:
        tx.insert(accounts, {"id": 10, "owner": "Ada"})
    return shop, crm


@pytest.fixture(scope="module")
def installed(spark, tmp_path_factory):
    """Build, install, run spark-submit and the README test in the fresh virtualenv; keep what they said."""
    work = tmp_path_factory.mktemp("wheel")
    found = find_delta_jars()
    if not found.jars:
        pytest.skip(found.missing_message())
    # The sources alone, copied: building in the checkout would leave build/ there, whose stale files
    # a later build would package.
    src = work / "src"
    shutil.copytree(REPO / "cdc_apply", src / "cdc_apply", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    build = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                  "--wheel-dir", work / "dist", src], env=os.environ, cwd=work)
    assert build.returncode == 0, build.stderr
    wheel = next((work / "dist").glob("cdc_apply-*.whl"))

    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], env=os.environ, cwd=work)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     env=os.environ, cwd=work).stdout.strip())
    (site / "_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", python]
    install = _run([*pip, "install", "-q", "--no-deps", "--no-index", wheel], env=os.environ, cwd=work)
    assert install.returncode == 0, install.stderr

    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME",
                        "PYSPARK_SUBMIT_ARGS", "CDC_APPLY_JARS", "PYTEST_ADDOPTS")}
    checkout_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(venv / "bin")] + [p for p in env.get("PATH", "").split(os.pathsep)
                                                         if p != checkout_bin])
    env["PYSPARK_PYTHON"] = str(python)
    # The JVMs below live half a minute: compiling hot code only with C1 saves them most of their CPU
    # (49 -> 28 s for the spark-submit run here), which two JVMs sharing two cores feel. Nothing
    # cdc_apply sees changes.
    env["JAVA_TOOL_OPTIONS"] = "-XX:TieredStopAtLevel=1"
    seen = {"wheel": wheel, "check": _run([*pip, "check"], env=env, cwd=work)}
    where = _run([python, "-c", (
        "import json, cdc_apply, importlib.metadata as m\n"
        "from cdc_apply.spark.jars import default_jars_dir\n"
        "print(json.dumps({'module': cdc_apply.__file__, 'fetch_dir': str(default_jars_dir()),\n"
        "  'dist': str(m.distribution('cdc_apply').locate_file('')),\n"
        "  'plugin': [e.value for e in m.entry_points(group='pytest11') if e.name == 'cdc_apply']}))")],
        env=env, cwd=work)
    assert where.returncode == 0, where.stderr
    seen["where"] = json.loads(where.stdout)

    # spark-submit, as a cluster user runs the job: its master, its memory, its --jars.
    lake = Lake(spark, work / "lake", pipeline="submitted")
    shop, crm = _shop_and_crm()
    lake.land(shop)
    lake.land(crm)
    config = lake.write_config()
    job = work / "apply_changes.py"
    shutil.copy2(REPO / "jobs" / "apply_changes.py", job)
    import pyspark

    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    # spark-submit's Python writes its stderr into spark-submit's stdout (PythonRunner merges them), so
    # the log records and the batch lines arrive in one stream.
    submit = _start([spark_submit, "--master", "local[1]", "--driver-memory", "1g",
                     "--conf", "spark.ui.enabled=false", "--jars", ",".join(map(str, found.jars)),
                     job, "--config", config, "--once", "--progress-seconds", "1"],
                    env=env, cwd=work, log=work / "spark-submit.log")

    # The README's test, verbatim, in a user's project: fixtures from the wheel, Delta from a plain folder,
    # the cdc_apply.* log records shown live by pytest. It runs alongside spark-submit: both JVMs spend
    # most of their time starting and warming up.
    jars = work / "delta-jars"
    jars.mkdir()
    for jar in found.jars:
        shutil.copy2(jar, jars / jar.name)
    project = work / "user-project"
    project.mkdir()
    (project / "test_readme.py").write_text(readme_snippet())
    user_test = _start([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "log_cli=true",
                        "--log-cli-level=INFO", "test_readme.py"],
                       env={**env, "CDC_APPLY_JARS": str(jars)}, cwd=project, log=work / "pytest.log")
    seen["submit"] = _finish(submit)
    seen["pytest"] = _finish(user_test)
    ok = seen["submit"].returncode == 0
    seen.update(lake=lake, silver_after_submit=(
        sorted(tuple(r) for r in lake.silver("public.users").select("id", "name").collect()) if ok else None,
        lake.silver("sales.accounts").count() if ok else None))
    return seen


def test_the_wheel_installs_into_a_fresh_virtualenv_and_runs_its_own_files(installed):
    where, venv = installed["where"], installed["wheel"].parents[1] / "venv"
    assert installed["check"].returncode == 0, installed["check"].stdout
    assert Path(where["module"]).is_relative_to(venv)
    assert Path(where["dist"]).is_relative_to(venv)
    assert where["plugin"] == ["cdc_apply.testing.pytest_plugin"]
    # Outside a checkout, `python -m cdc_apply.spark.jars` fetches into the user's cache, not site-packages.
    assert Path(where["fetch_dir"]).parts[-2:] == ("cdc_apply", "jars")
    assert not Path(where["fetch_dir"]).is_relative_to(venv)


def test_spark_submit_with_jars_applies_both_sources_on_the_master_and_memory_it_was_given(installed, spark):
    submit = installed["submit"]
    assert submit.returncode == 0, submit.stdout[-3000:]
    assert re.search(r"^batch 0 \(v1\) \| \d+ msgs \| 2 txns applied \|", submit.stdout, re.M), submit.stdout[-3000:]
    assert ("INFO cdc_apply.spark: Spark session from spark-submit: Spark 4.1.1, master local[1], 1 task slot, "
            "1 shuffle partitions, driver memory 1g; Delta from the class path Spark was given") in submit.stdout
    assert installed["silver_after_submit"] == ([(1, "Ada"), (2, "Brian")], 1)


def test_a_long_batch_under_spark_submit_logs_live_progress(installed):
    live = re.findall(r"INFO cdc_apply\.apply: batch v1 running \d+s \| .*", installed["submit"].stdout)
    assert live, installed["submit"].stdout[-3000:]


def test_the_readme_test_runs_verbatim_with_the_installed_plugin(installed):
    run = installed["pytest"]
    assert run.returncode == 0, run.stdout[-5000:]
    assert re.search(r"\b1 passed\b", run.stdout)
    # The API's batch line reached logging: pytest shows the cdc_apply.apply record live.
    assert re.search(r"INFO\s+cdc_apply\.apply:.*batch 0 \(v1\) \| \d+ msgs \| 2 txns applied", run.stdout), \
        run.stdout[-5000:]
    assert "Delta from CDC_APPLY_JARS" in run.stdout


def test_status_json_prints_one_object_per_source_and_exits_0_when_all_is_applied(installed):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["status", "--config", str(installed["lake"].root / "pipeline.toml"), "--json"])
    entries = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == 0
    assert sorted(e["source"] for e in entries) == ["crm", "shop"]
    assert {e["health"] for e in entries} == {"ok"} and {e["lag_seq"] for e in entries} == {0}
    assert all(e["applied_commit_lsn"].count("/") == 1 for e in entries)


def test_the_python_api_reads_the_same_status_from_a_dict_config(installed, spark):
    entries = cdc_apply.status(spark, installed["lake"].raw_config)
    assert sorted((e["source"], e["apply_version"], e["health"]) for e in entries) == \
        [("crm", 1, "ok"), ("shop", 1, "ok")]
    assert cdc_apply.exit_code(entries) == 0
