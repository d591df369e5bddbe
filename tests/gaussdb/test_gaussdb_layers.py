"""The layer rule for cdc_apply.gaussdb: pure, imports no Spark (as tests/test_layers.py checks for pgoutput)."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import importlib, pkgutil, sys
sys.modules["pyspark"] = None
sys.modules["delta"] = None
import cdc_apply.gaussdb as pkg
for info in pkgutil.walk_packages(pkg.__path__, "cdc_apply.gaussdb."):
    importlib.import_module(info.name)
leaked = sorted(m for m in sys.modules
                if m.split(".")[0] in ("pyspark", "py4j", "delta") and sys.modules[m] is not None)
assert not leaked, leaked
upward = sorted(m for m in sys.modules if m.startswith(("cdc_apply.lake", "cdc_apply.spark", "cdc_apply.cli")))
assert not upward, upward
print("ok")
"""


def test_gaussdb_imports_with_pyspark_unimportable_and_nothing_above_it():
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_package_docstring_example_runs():
    import doctest

    import cdc_apply.gaussdb

    assert doctest.testmod(cdc_apply.gaussdb).failed == 0
