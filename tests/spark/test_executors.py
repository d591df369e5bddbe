"""cdc_apply on a cluster's executors: the zip shipped to them, the probe's function, which masters are local.
The shipping itself on a real standalone cluster: tests/cluster/test_standalone.py (make cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cdc_apply.errors import SetupError
from cdc_apply.spark import executors
from cdc_apply.spark.executors import (
    ExecutorSetup,
    _cause_line,
    _compiled,
    _require_needs,
    is_local_master,
    package_dir,
    package_hash,
    package_zip,
)


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,2]"])
def test_local_masters_run_python_workers_on_the_drivers_interpreter(master):
    assert is_local_master(master)


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://k8s:443", "local-cluster[2,1,1024]"])
def test_cluster_masters_and_local_cluster_have_executors_of_their_own(master):
    assert not is_local_master(master)


def test_the_zip_holds_the_package_code_and_data_files_and_no_bytecode(tmp_path):
    archive = package_zip(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    assert "cdc_apply/__init__.py" in names and "cdc_apply/decode/changes.py" in names
    assert "cdc_apply/spark/log4j2.properties" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert archive.name == f"cdc_apply-{package_hash()[:16]}.zip"


def test_the_zip_is_built_once_per_content_and_reused(tmp_path):
    first = package_zip(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert package_zip(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]   # no partial file left


def test_a_python_given_only_the_zip_imports_the_decode_from_it(tmp_path):
    archive = package_zip(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(archive)
    found = subprocess.run([sys.executable, "-c", "import cdc_apply.decode.changes as m; print(m.__file__)"],
                           capture_output=True, text=True, env=env, cwd="/")
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip().startswith(str(archive))


def test_the_probe_is_sent_by_value_so_executors_without_cdc_apply_can_run_it():
    from pyspark import cloudpickle

    probe = _compiled("probe", NEEDS=executors.EXECUTOR_NEEDS, SUFFIXES=executors._SHIPPED_SUFFIXES)
    sent = cloudpickle.dumps(probe)
    assert b"cdc_apply.spark" not in sent
    found = cloudpickle.loads(sent)(0)
    assert found["cdc_apply_hash"] == package_hash(package_dir())
    assert found["pyarrow"] and found["numpy"]


def test_an_executor_python_without_pyarrow_is_a_setup_error_naming_what_to_install():
    with pytest.raises(SetupError, match=r"the executors' Python lacks pyarrow, which the decode needs; install "
                                         r"pyarrow into it \(pip install pyarrow\)"):
        _require_needs({"python": "3.11.7", "executable": "/opt/py/bin/python", "pyarrow": None, "numpy": "2.4.6"})


def test_a_failed_probe_is_told_by_pysparks_error_class_or_the_executors_last_exception_line():
    assert _cause_line("py4j.protocol.Py4JJavaError: An error\n  [PYTHON_VERSION_MISMATCH] Python in worker has "
                       "different version (3, 10) than that in driver 3.11") .startswith("[PYTHON_VERSION_MISMATCH]")
    assert _cause_line("Traceback (most recent call last):\n  File \"x\"\nModuleNotFoundError: No module named 'numpy'"
                       "\n\tat org.apache.spark.api.python") == "ModuleNotFoundError: No module named 'numpy'"


def test_the_setup_line_says_where_executors_import_cdc_apply_from():
    line = ExecutorSetup("auto", "shipped", "3.11.7 at /opt/py/bin/python", "/tmp/x/cdc_apply-0123.zip").line()
    assert line == "executors (Python 3.11.7 at /opt/py/bin/python) import cdc_apply from cdc_apply-0123.zip, " \
                   "shipped by addPyFile"


@pytest.mark.spark
def test_a_local_master_ships_nothing_and_keeps_its_task_counts(spark):
    assert executors.prepare_executors(spark).action == "local master"
    assert executors.cluster_settings(spark) == {}


@pytest.mark.spark
def test_an_unknown_executor_code_mode_is_a_setup_error_naming_the_key(spark):
    spark.conf.set(executors.EXECUTOR_CODE_KEY, "sometimes")
    try:
        with pytest.raises(SetupError, match=r"spark\.cdc_apply\.executorCode must be one of auto, ship, installed"):
            executors.prepare_executors(spark)
    finally:
        spark.conf.unset(executors.EXECUTOR_CODE_KEY)


def test_the_package_folder_is_the_one_imported():
    import cdc_apply

    assert package_dir() == Path(cdc_apply.__file__).resolve().parent
