"""The package's public names (``cdc_apply.__all__``): each resolves, the API's functions stay functions once
the subpackages behind them are imported, and naming them imports no Spark. Pure: no JVM."""

from __future__ import annotations

import subprocess
import sys

_RESOLVE_ALL = """
import sys
import cdc_apply
unresolved = [name for name in cdc_apply.__all__ if getattr(cdc_apply, name, None) is None]
assert not unresolved, unresolved
assert "pyspark" not in sys.modules, sorted(m for m in sys.modules if m.split(".")[0] == "pyspark")
print("ok")
"""


def test_the_verify_function_stays_callable_after_the_verification_package_is_imported():
    # Importing a subpackage sets it as an attribute of its parent package: a subpackage named like one of
    # the API's functions (it was cdc_apply.verify) replaced the function with a module on first import.
    import cdc_apply.api
    import cdc_apply.verification
    from cdc_apply import Verification

    assert Verification.__module__ == "cdc_apply.verification.run"
    assert callable(cdc_apply.verify)
    assert cdc_apply.verify is cdc_apply.api.verify


def test_every_public_name_resolves_without_importing_pyspark():
    proc = subprocess.run([sys.executable, "-c", _RESOLVE_ALL], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
