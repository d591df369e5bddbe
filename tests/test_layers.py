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
    proc = _probe(["cdc_apply.pgoutput", "cdc_apply.gaussdb", "cdc_apply.planning", "cdc_apply.decode"], walk=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_importing_the_package_does_not_import_spark():
    proc = _probe(["cdc_apply", "cdc_apply.errors"], walk=False)
    assert proc.returncode == 0, proc.stderr


# Which top-level parts of cdc_apply each part may import: a layer imports only layers below it.
_BELOW = {
    "errors": set(),
    "config": {"errors"},
    "log": {"errors"},
    "pgoutput": {"errors"},
    "gaussdb": {"errors", "pgoutput"},
    "planning": {"errors", "config", "pgoutput", "gaussdb"},
    "decode": {"errors", "config", "pgoutput", "gaussdb", "planning"},
    "spark": {"errors", "log"},
    "delta": {"errors", "config", "pgoutput", "planning"},
    "lake": {"errors", "config", "log", "pgoutput", "gaussdb", "planning", "decode", "spark", "delta"},
    "lander": {"errors", "config", "log", "pgoutput", "delta", "lake", "spark"},
    "api": {"errors", "config", "log", "pgoutput", "gaussdb", "planning", "decode", "spark", "delta", "lake", "lander"},
    "demo": {"errors", "config", "log", "pgoutput"},
}
_BELOW["testing"] = _BELOW["api"] | {"api"}
_BELOW["cli"] = _BELOW["testing"] | {"testing", "demo"}
_BELOW["__init__"] = _BELOW["api"] | {"api"}


def _imports_by_part():
    import ast
    from pathlib import Path

    import cdc_apply

    root = Path(cdc_apply.__file__).parent
    found: dict[tuple[str, str], str] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        part = rel[0][:-3] if len(rel) == 1 else rel[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                pieces = name.split(".")
                if pieces[0] == "cdc_apply" and len(pieces) > 1 and pieces[1] != part:
                    found.setdefault((part, pieces[1]), f"{'/'.join(rel)}:{node.lineno}")
    return found


def test_no_module_imports_a_layer_above_its_own():
    found = _imports_by_part()
    assert {part for part, _ in found} <= set(_BELOW), "a new top-level part needs its place in _BELOW"
    upward = {f"{part} imports {target} ({where})" for (part, target), where in found.items()
              if target not in _BELOW[part]}
    assert not upward, sorted(upward)
