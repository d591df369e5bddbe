"""The layer rules: the protocol and planning code, the Delta primitives and the lander import no Spark; no
part imports a layer above its own; the lake's rooms import only rooms below theirs; no two modules import
each other; and docs/ARCHITECTURE.md's map ("Where things live") says what the code does."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import cdc_apply

PACKAGE = Path(cdc_apply.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "ARCHITECTURE.md"

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


def test_the_delta_primitives_and_the_lander_import_with_pyspark_unimportable():
    # Spark and Delta's Python API are imported inside the functions that use them: the lander is to run
    # without a JVM, and the bronze schema's Arrow form is what it writes with.
    proc = _probe(["cdc_apply.delta", "cdc_apply.lander"], walk=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_status_s_read_without_a_jvm_imports_with_pyspark_unimportable():
    # `cdc-apply status` on local paths: the command, its reader and the rules it shares with the Spark read.
    proc = _probe(["cdc_apply.cli.main", "cdc_apply.cli.apply_cmd", "cdc_apply.lake.books.status",
                   "cdc_apply.lake.books.status_files", "cdc_apply.lake.sources.bronze_files"], walk=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_importing_the_package_does_not_import_spark():
    proc = _probe(["cdc_apply", "cdc_apply.errors"], walk=False)
    assert proc.returncode == 0, proc.stderr


# Which top-level parts of cdc_apply each part may import: a layer imports only layers below it. The lander
# and the lake are siblings above the Delta primitives (cdc_apply.delta): the lander imports nothing of the lake.
_BELOW = {
    "errors": set(),
    "config": {"errors"},
    "log": {"errors"},
    "pgoutput": {"errors"},
    "gaussdb": {"errors", "pgoutput"},
    "planning": {"errors", "config", "pgoutput", "gaussdb"},
    "decode": {"errors", "config", "pgoutput", "gaussdb", "planning"},
    "spark": {"errors", "log"},
    "delta": {"errors", "config", "spark"},
    "metrics": {"errors", "config"},
    "lake": {"errors", "config", "log", "pgoutput", "gaussdb", "planning", "decode", "spark", "delta", "metrics"},
    "lander": {"errors", "config", "log", "pgoutput", "spark", "delta", "metrics"},
    "api": {"errors", "config", "log", "pgoutput", "gaussdb", "planning", "decode", "spark", "delta", "metrics", "lake",
            "lander"},
    "demo": {"errors", "config", "log", "pgoutput"},
}
_BELOW["verification"] = {"errors", "config", "log", "pgoutput", "planning", "spark", "delta", "metrics", "lake",
                          "lander"}
_BELOW["forgetting"] = _BELOW["verification"] | {"verification"}
_BELOW["api"] = _BELOW["api"] | {"verification", "forgetting"}
_BELOW["testing"] = _BELOW["api"] | {"api"}
_BELOW["cli"] = _BELOW["testing"] | {"testing", "demo"}
_BELOW["__init__"] = _BELOW["api"] | {"api"}

# The lake's rooms (its subpackages), each importing only rooms before it in this order. The modules
# directly in cdc_apply/lake/ (the batch: pipeline.py, silver_tables.py, report.py, maintenance.py) may
# import every room; no room imports them.
_LAKE_ROOMS = ("sources", "books", "silver", "history")

# Import circles between modules that are known and left: merge.py hands a table's writes to replace_rows.py
# where Delta's MERGE cannot name a column, and replace_rows.py returns merge.py's MergeResult (both lazily).
_KNOWN_CIRCLES: list[set[str]] = []


def _imported_modules(path: Path) -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of every ``import``/``from ... import`` in ``path`` naming cdc_apply, lazy
    imports inside functions included (they are the same dependency, paid later)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
    return [f for f in found if f[0].split(".")[0] == "cdc_apply"]


def _imports_by_part():
    found: dict[tuple[str, str], str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).parts
        part = rel[0][:-3] if len(rel) == 1 else rel[0]
        for module, _, line in _imported_modules(path):
            pieces = module.split(".")
            if len(pieces) > 1 and pieces[1] != part:
                found.setdefault((part, pieces[1]), f"{'/'.join(rel)}:{line}")
    return found


def test_no_module_imports_a_layer_above_its_own():
    found = _imports_by_part()
    assert {part for part, _ in found} <= set(_BELOW), "a new top-level part needs its place in _BELOW"
    upward = {f"{part} imports {target} ({where})" for (part, target), where in found.items()
              if target not in _BELOW[part]}
    assert not upward, sorted(upward)


def _rooms(top: str) -> list[str]:
    return sorted(p.parent.name for p in (PACKAGE / top).glob("*/__init__.py"))


def test_the_lake_s_rooms_import_only_rooms_below_their_own():
    assert sorted(_LAKE_ROOMS) == _rooms("lake"), "a new room of the lake needs its place in _LAKE_ROOMS"
    wrong = []
    for room in _LAKE_ROOMS:
        for path in sorted((PACKAGE / "lake" / room).rglob("*.py")):
            for module, _, line in _imported_modules(path):
                pieces = module.split(".")
                if pieces[1:2] != ["lake"] or len(pieces) < 3 or pieces[2] == room:
                    continue
                target = pieces[2]
                if target not in _LAKE_ROOMS or _LAKE_ROOMS.index(target) > _LAKE_ROOMS.index(room):
                    wrong.append(f"lake/{room} imports {module} ({path.relative_to(PACKAGE)}:{line})")
    assert not wrong, wrong


# The lander's snapshots room sits below the lander: of the lander's own modules it imports only the records
# it hands back and forth (state.py: ResumeState, OutputTracker, Batch; framing.py beneath them) and the
# connection settings (dsn.py, options.py). The rest of the lander reaches it through its port
# (lander/snapshots/port.py), and the lander's modules above these may import the room.
_SNAPSHOTS_SEE = {"state", "framing", "dsn", "options"}


def test_the_lander_s_snapshots_import_only_its_lower_modules():
    wrong = []
    for path in sorted((PACKAGE / "lander" / "snapshots").rglob("*.py")):
        for module, names, line in _imported_modules(path):
            pieces = module.split(".")
            if pieces[1:2] != ["lander"] or pieces[2:3] == ["snapshots"]:
                continue
            # ``from cdc_apply.lander import state`` names its modules after ``import``.
            for target in pieces[2:3] or names:
                if target not in _SNAPSHOTS_SEE:
                    wrong.append(f"lander/snapshots imports cdc_apply.lander.{target} "
                                 f"({path.relative_to(PACKAGE)}:{line})")
    assert not wrong, wrong
    # What the room sees stays below it: those modules import of the room only its own state records.
    for name in sorted(_SNAPSHOTS_SEE):
        for module, names, line in _imported_modules(PACKAGE / "lander" / f"{name}.py"):
            pieces = module.split(".")
            if pieces[1:3] == ["lander", "snapshots"]:
                assert pieces[3:] == ["state"], f"lander/{name}.py:{line} imports {module}"
            elif pieces[1:2] == ["lander"]:
                assert set(pieces[2:3] or names) <= _SNAPSHOTS_SEE, f"lander/{name}.py:{line} imports {module}"


def _module_graph() -> dict[str, set[str]]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module, names, _ in _imported_modules(path):
            # ``from package import module`` depends on the module; ``from module import name`` on the module.
            targets |= {c for c in [module, *(f"{module}.{n}" for n in names)] if c in modules and c != name}
        graph[name] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(component)
    return circles


def test_no_two_modules_import_each_other():
    circles = [sorted(c) for c in _circles(_module_graph()) if c not in _KNOWN_CIRCLES]
    assert not circles, circles


# -- docs/ARCHITECTURE.md's map ---------------------------------------------------------------------------
# Its "Where things live" table has a row per package folder (`cdc_apply/<part>/`, or a room of one:
# `cdc_apply/<part>/<room>/`); the Imports column names the parts its code imports (a room's row also names
# the rooms of its part it imports, as `<part>/<room>`, and its part itself for the part's own modules).
# `errors` and `log` may be imported by every part and are not counted. A row whose Imports says "everything
# above" may import what the rows above it name, and what its own Imports names beside.
_EVERYWHERE = {"errors", "log"}


def _rows() -> list[tuple[list[str], str, str]]:
    section = ARCHITECTURE.read_text().split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `cdc_apply/"):
            folder, idea, imports = (cell.strip() for cell in line.strip().strip("|").split("|"))
            rows.append((re.findall(r"`cdc_apply/([^`]*)`", folder), idea, imports))
    return rows


def _parts() -> set[str]:
    return {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if p.suffix == ".py" or (p / "__init__.py").exists()}


def _code_imports(folder: str) -> set[str]:
    """What the modules under ``folder`` (``lake/`` or ``lake/silver/``) import, named as the map names it."""
    top, _, room = folder.strip("/").partition("/")
    rooms = _rooms(top)
    found = set()
    for path in (PACKAGE / folder).rglob("*.py"):
        for module, _, _ in _imported_modules(path):
            pieces = module.split(".")
            if len(pieces) < 2:
                continue
            if pieces[1] != top:
                found.add(pieces[1])
            elif room and len(pieces) > 2 and pieces[2] != room:
                found.add(f"{top}/{pieces[2]}" if pieces[2] in rooms else top)
    return found - _EVERYWHERE


def _named_imports(cell: str) -> set[str]:
    parts = _parts()
    known = parts | {f"{top}/{room}" for top in parts if (PACKAGE / top).is_dir() for room in _rooms(top)}
    return set(re.findall(r"`([^`]+)`", cell)) & known - _EVERYWHERE


def test_every_package_folder_has_a_row_of_the_map():
    rows = _rows()
    folders = {f.rstrip("/") for paths, _, _ in rows for f in paths if f.endswith("/")}
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent.relative_to(PACKAGE).as_posix()
        if folder == "." or folder in folders:
            continue
        parent, _, name = folder.rpartition("/")
        # A room without a row of its own is described in its part's row.
        if parent and any(parent in (f.rstrip("/") for f in paths) and f"`{name}/" in idea for paths, idea, _ in rows):
            continue
        missing.append(folder)
    assert not missing, missing


def test_every_file_the_map_names_exists():
    missing = []
    for paths, idea, _ in _rows():
        bases = [PACKAGE / p for p in paths if p.endswith("/")]
        for name in re.findall(r"`([\w*/]+(?:\.py|/))`", idea):
            # A bare file name may live in a room the row describes (``values/``: ``datetime.py``, ...).
            pattern = name.rstrip("/")
            if not any(next(base.glob(pattern), None) or ("/" not in pattern and next(base.rglob(pattern), None))
                       for base in bases):
                missing.append(f"{paths}: {name}")
    assert not missing, missing


def test_the_map_names_what_each_folder_imports():
    above: set[str] = set()
    wrong = []
    for paths, _, imports in _rows():
        named = _named_imports(imports)
        own = {p.strip("/").removesuffix(".py") for p in paths}
        code = set().union(*(_code_imports(p) if p.endswith("/") else _module_imports(p) for p in paths)) - own
        if "everything above" in imports:
            if not code <= above | named:
                wrong.append(f"{paths} imports {sorted(code - above - named)}, not above it")
        elif code != named:
            wrong.append(f"{paths}: the map says {sorted(named)}, the code imports {sorted(code)}")
        above |= own | named
    assert not wrong, wrong


def _module_imports(name: str) -> set[str]:
    """What one module directly in cdc_apply/ (``api.py``) imports."""
    return {m.split(".")[1] for m, _, _ in _imported_modules(PACKAGE / name) if len(m.split(".")) > 1} - _EVERYWHERE
