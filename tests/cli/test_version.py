"""``cdc-apply --version``: the pinned Delta and the Delta actually there, answered without starting Java."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import cdc_apply

CLI = Path(sys.executable).parent / "cdc-apply"


def test_version_answers_without_java_naming_the_pinned_delta_and_the_jar_a_session_here_would_load(tmp_path):
    jars = tmp_path / "my-jars"
    jars.mkdir()
    with zipfile.ZipFile(jars / "delta-spark_4.1_2.13-4.3.1.jar", "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nImplementation-Title: delta-spark\n"
                                             "Implementation-Version: 4.3.1\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_HOME", "SPARK_HOME", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")}
    # No java anywhere: a --version that started a JVM would fail here.
    env.update(PATH=str(tmp_path / "no-java-here"), CDC_APPLY_JARS=str(jars))
    run = subprocess.run([str(CLI), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (f"cdc-apply {cdc_apply.__version__} (pyspark 4.1.1; Delta io.delta:delta-spark_4.1_2.13:4.4.0 "
                          f"pinned, found delta-spark_4.1_2.13 4.3.1 in CDC_APPLY_JARS ({jars}))\n")
