"""The layer rule: the protocol and planning code import no Spark."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import importlib, pkgutil, sys
sys.modules["pyspark"] = None   # any `import pyspark` now raises ImportError
sys.modules["delta"] = None
for name in {names!r}:
    pkg = importlib.import_module(name)
    if {walk!r}:
        for info in pkgutil.walk_packages(pkg.__path__, name + "."):
            importlib.import_module(info.name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j", "delta") and sys.modules[m] is not None)
assert not leaked, leaked
print("ok")
"""


def _probe(names: list[str], walk: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROBE.format(names=names, walk=walk)],
                          capture_output=True, text=True)


def test_pure_layers_import_with_pyspark_unimportable():
    proc = _probe(["cdc_apply.pgoutput", "cdc_apply.apply"], walk=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_importing_the_package_does_not_import_spark():
    proc = _probe(["cdc_apply", "cdc_apply.errors"], walk=False)
    assert proc.returncode == 0, proc.stderr
