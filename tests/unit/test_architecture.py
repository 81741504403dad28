"""The layers of ``docs/architecture.md``, checked by reading the source with ``ast``.

Dependencies point one way: each layer imports only the layers the table below allows; the
driver side of ``ingest`` never imports worker code and the worker never imports driver code; no
import cycles; the base modules import only ``errors`` and ``types``; the heavy or stateful
libraries each have one door (click: cli, deltalake: lake.delta, ``duckdb.connect``: engine).
Imports inside functions count as much as the ones at the top. The module map in
``docs/architecture.md`` lists exactly the modules in the tree.

``lakecurate/__init__.py`` is the top: it re-exports the API. A module importing a re-exported
name from the package (``from lakecurate import Lake``) is resolved to the module that defines
it; ``from lakecurate import __version__`` depends on nothing (the version is a constant there),
so edges into the package ``__init__`` never enter the cycle check.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "lakecurate"
TOP = "lakecurate"

DOC = PKG.parent / "docs" / "architecture.md"

BASE = {"config", "types", "schema", "errors", "progress", "faults", "engine", "memory"}
"""The bottom layer: every layer may import it; it imports only BASE_MAY_IMPORT."""
BASE_MAY_IMPORT = {"errors", "types", "schema"}

ALLOWED: dict[str, set[str]] = {
    # layer (the first name under lakecurate) -> the layers it may import besides itself and BASE
    "__main__": {"cli"},
    "cli": {"api"},
    "api": {"ingest", "read", "ops", "store", "lake"},
    "ingest": {"store", "lake", "steps"},
    "read": {"store", "lake"},
    "ops": {"store", "lake"},
    "store": {"lake", "steps"},
    "steps": set(),
    "lake": set(),
}
WORKER_SIDE = {"lakecurate.ingest.worker", "lakecurate.ingest.reader"}
"""Code that runs in worker processes: it may import only steps, BASE and WORKER_SHARED."""
WORKER_SHARED = {
    "lakecurate.ingest.staging",
    "lakecurate.ingest.digest",
    "lakecurate.ingest.cutting",
    "lakecurate.lake.files",
    "lakecurate.lake.storage",
    "lakecurate.lake.atomic",
    "lakecurate.lake.sets",
}
"""Vocabulary of both sides of ingest (the staged file, a chunk's digest, how inputs are cut)
and the lake modules a worker uses: it writes data files on the lake's storage, never the
Delta log."""
WORKER_DOORS = {"lakecurate.ingest.executor", "lakecurate.ingest.ray_executor"}
"""The driver modules that import worker code: the executors, which ship work to the workers
(local processes, Ray tasks)."""
# Names the package __init__ defines itself (not re-exported from a submodule).
TOP_CONSTANTS = {"__version__"}


@dataclass
class Module:
    name: str  # dotted: lakecurate.lake.delta; a package is its __init__: lakecurate.lake
    path: Path
    tree: ast.Module
    imports: list[tuple[str, int]] = field(default_factory=list)  # (absolute name, line)
    from_names: list[tuple[str, str, int]] = field(default_factory=list)  # (module, name, line)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(mod: Module, level: int, target: str | None) -> str:
    base = mod.name.split(".")
    if mod.path.name != "__init__.py":
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


@cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for path in sorted(PKG.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        mod = Module(_module_name(path), path, ast.parse(path.read_text(encoding="utf-8")))
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Import):
                mod.imports += [(a.name, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = (
                    _resolve_relative(mod, node.level, node.module)
                    if node.level
                    else node.module or ""
                )
                mod.imports.append((target, node.lineno))
                mod.from_names += [(target, a.name, node.lineno) for a in node.names]
        found[mod.name] = mod
    return found


def test_the_walk_sees_the_package() -> None:
    names = set(modules())
    # If these are missing the walk is broken, and every other test here passes vacuously.
    assert {
        "lakecurate",
        "lakecurate.cli",
        "lakecurate.engine",
        "lakecurate.lake.delta",
        "lakecurate.errors",
        "lakecurate.cli.render",
    } <= names
    assert len(names) >= 20


@cache
def _reexports() -> dict[str, str]:
    """Name re-exported by ``lakecurate/__init__.py`` -> the module that defines it."""
    top = modules()[TOP]
    return {name: target for target, name, _ in top.from_names if target.startswith(TOP + ".")}


def _internal_edges(mod: Module) -> set[tuple[str, int]]:
    """The lakecurate modules ``mod`` depends on (never the package ``__init__`` itself)."""
    mods = modules()
    edges: set[tuple[str, int]] = set()
    for target, line in mod.imports:
        if target != TOP and target.startswith(TOP + ".") and target in mods:
            edges.add((target, line))
    for target, name, line in mod.from_names:
        sub = f"{target}.{name}"
        if sub in mods:  # from lakecurate import engine / from lakecurate.lake import delta
            edges.add((sub, line))
        elif target == TOP and mod.name != TOP:
            if name in TOP_CONSTANTS:
                continue  # a constant of the top: depends on nothing
            if name not in _reexports():
                pytest.fail(
                    f"{mod.path}:{line} imports {name!r} from the lakecurate package, "
                    "which neither defines nor re-exports it"
                )
            edges.add((_reexports()[name], line))
    return {(t, ln) for t, ln in edges if t != mod.name}


def _graph() -> dict[str, set[str]]:
    return {
        name: {t for t, _ in _internal_edges(m)} for name, m in modules().items() if name != TOP
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in colour:
                continue  # the package __init__: not part of the check
            if colour[nxt] == grey:
                return [*stack[stack.index(nxt) :], nxt]
            if colour[nxt] == white and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        colour[node] = black
        return None

    for node in sorted(graph):
        if colour[node] == white and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    # The checker itself must be able to fail.
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles_between_lakecurate_modules() -> None:
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _importers_of(library: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name, mod in modules().items():
        for target, line in mod.imports:
            if target == library or target.startswith(library + "."):
                out.setdefault(name, []).append(line)
    return out


@pytest.mark.parametrize(
    ("library", "door"),
    [
        ("click", "lakecurate.cli"),
        ("deltalake", "lakecurate.lake.delta"),
        ("ray", "lakecurate.ingest.ray_executor"),
        ("boto3", "lakecurate.lake.lease"),
    ],
)
def test_one_module_imports_each_library(library: str, door: str) -> None:
    importers = _importers_of(library)
    assert door in importers, f"{door} no longer imports {library}: update this test"
    others = {m: lines for m, lines in importers.items() if m != door}
    assert not others, f"only {door} may import {library}; also imported by {others}"


def _duckdb_connect_calls(mod: Module) -> list[int]:
    """Lines calling ``duckdb.connect`` however duckdb or connect was imported."""
    module_aliases = {
        a.asname or a.name
        for node in ast.walk(mod.tree)
        if isinstance(node, ast.Import)
        for a in node.names
        if a.name == "duckdb"
    }
    func_aliases = {
        a.asname or a.name
        for node in ast.walk(mod.tree)
        if isinstance(node, ast.ImportFrom) and node.module == "duckdb"
        for a in node.names
        if a.name == "connect"
    }
    lines = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "connect"
                and isinstance(f.value, ast.Name)
                and f.value.id in module_aliases
            ) or (isinstance(f, ast.Name) and f.id in func_aliases):
                lines.append(node.lineno)
    return lines + [
        ln for target, name, ln in mod.from_names if target == "duckdb" and name == "connect"
    ]


def test_duckdb_connect_detector_sees_every_spelling() -> None:
    src = (
        "import duckdb\nimport duckdb as ddb\nfrom duckdb import connect as c\n"
        "duckdb.connect()\nddb.connect(':memory:')\nc()\nother.connect()\n"
    )
    mod = Module("x", PKG / "x.py", ast.parse(src))
    mod.from_names.append(("duckdb", "connect", 3))
    assert sorted(_duckdb_connect_calls(mod)) == [3, 4, 5, 6]


# Violations found by this test and reported, not yet fixed (the owners' files). A ratchet: a
# new violation fails, and so does a fixed one still listed here (delete its line then).
KNOWN_DUCKDB_CONNECT: set[str] = set()


def test_only_engine_calls_duckdb_connect() -> None:
    callers = {name: lines for name, m in modules().items() if (lines := _duckdb_connect_calls(m))}
    assert "lakecurate.engine" in callers, "engine.py no longer calls duckdb.connect"
    others = {m: lines for m, lines in callers.items() if m != "lakecurate.engine"}
    new = {m: lines for m, lines in others.items() if m not in KNOWN_DUCKDB_CONNECT}
    assert not new, f"only lakecurate.engine may call duckdb.connect; also: {new}"
    fixed = KNOWN_DUCKDB_CONNECT - set(others)
    assert not fixed, f"{fixed} no longer call duckdb.connect: remove from KNOWN_DUCKDB_CONNECT"


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge of ``graph`` (module -> modules it imports) the layer rules forbid."""
    bad = []
    for mod, targets in sorted(graph.items()):
        src = _layer(mod)
        for target in sorted(targets):
            dst = _layer(target)
            if src in BASE:
                ok = dst in BASE_MAY_IMPORT
            elif src not in ALLOWED:
                ok = False  # a layer the table does not know: add it to ALLOWED
            else:
                ok = dst == src or dst in BASE or dst in ALLOWED[src]
            if mod in WORKER_SIDE:
                ok = ok and (target in WORKER_SIDE | WORKER_SHARED or dst in {"steps", *BASE})
            elif target in WORKER_SIDE and mod not in WORKER_DOORS:
                ok = False
            if not ok:
                bad.append(f"{mod} -> {target}")
    return bad


def test_layer_checker_fails_on_forbidden_imports() -> None:
    # The checker itself must be able to fail: upward, sideways, into and out of the worker.
    graph = {
        "lakecurate.store.state": {"lakecurate.ingest.commit", "lakecurate.lake.delta"},
        "lakecurate.read.query": {"lakecurate.ops.verify"},
        "lakecurate.errors": {"lakecurate.config"},
        "lakecurate.ingest.runner": {"lakecurate.ingest.worker", "lakecurate.ingest.staging"},
        "lakecurate.ingest.worker": {
            "lakecurate.store.index",
            "lakecurate.steps.near.minhash",
            "lakecurate.ingest.staging",
            "lakecurate.lake.files",
            "lakecurate.lake.delta",
        },
        "lakecurate.ingest.executor": {"lakecurate.ingest.worker"},
        "lakecurate.newlayer.x": {"lakecurate.errors"},
    }
    assert layer_violations(graph) == [
        "lakecurate.errors -> lakecurate.config",
        "lakecurate.ingest.runner -> lakecurate.ingest.worker",
        "lakecurate.ingest.worker -> lakecurate.lake.delta",
        "lakecurate.ingest.worker -> lakecurate.store.index",
        "lakecurate.newlayer.x -> lakecurate.errors",
        "lakecurate.read.query -> lakecurate.ops.verify",
        "lakecurate.store.state -> lakecurate.ingest.commit",
    ]


def test_imports_follow_the_layers() -> None:
    bad = layer_violations(_graph())
    assert not bad, "imports against docs/architecture.md's layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("base", sorted(BASE))
def test_base_modules_import_nothing_from_the_package_top(base: str) -> None:
    name = f"{TOP}.{base}"
    assert name in modules(), f"base module {name} is gone: update BASE"
    from_top = [
        (n, ln) for t, n, ln in modules()[name].from_names if t == TOP and n not in TOP_CONSTANTS
    ]
    assert not from_top, f"base {name} imports from the package top: {from_top}"


def _mapped_modules() -> set[str]:
    """The module paths the map in docs/architecture.md names (`lakecurate/...py`)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Module map", 1)[1]
    return set(re.findall(r"`(lakecurate/[\w/]+\.py)`", section))


def test_the_module_map_matches_the_tree() -> None:
    tree = {str(m.path.relative_to(PKG.parent)) for m in modules().values()}
    mapped = _mapped_modules()
    assert not tree - mapped, f"modules missing from docs/architecture.md: {sorted(tree - mapped)}"
    assert not mapped - tree, (
        f"docs/architecture.md maps modules that do not exist: {sorted(mapped - tree)}"
    )


@pytest.mark.parametrize(
    "pure",
    ["lakecurate.store.bloom", "lakecurate.steps.near.minhash", "lakecurate.steps.near.signatures"],
)
def test_pure_modules_use_neither_duckdb_nor_deltalake(pure: str) -> None:
    assert pure in modules(), f"{pure} is gone: update this test"
    bad = [
        (t, ln) for t, ln in modules()[pure].imports if t.split(".")[0] in {"duckdb", "deltalake"}
    ]
    assert not bad, f"{pure} is meant to be pure (design section 2): {bad}"


def test_every_public_module_has_a_docstring() -> None:
    missing = []
    for name, mod in modules().items():
        if any(p.startswith("_") and p != "__main__" for p in name.split(".")):
            continue  # private module
        if mod.path.name == "__init__.py" and not mod.tree.body:
            continue  # an empty package marker has nothing to document
        if not ast.get_docstring(mod.tree):
            missing.append(str(mod.path.relative_to(PKG.parent)))
    assert not missing, f"modules without a docstring: {missing}"


def test_every_sql_statement_is_used() -> None:
    """A named statement in sql/ that no code runs is dead (statements named with an f-string,
    ``engine.q(f"report.{name}")``, count for their whole file)."""
    source = "\n".join(m.path.read_text(encoding="utf-8") for m in modules().values())
    dynamic = set(re.findall(r'q\(f"(\w+)\.\{', source))
    unused = []
    for path in sorted((PKG.parent / "sql").rglob("*.sql")):
        folder = path.parent.name
        for name in re.findall(r"^-- name: (\w+)", path.read_text(encoding="utf-8"), re.M):
            quoted = (f'"{folder}.{name}"', f"'{folder}.{name}'")
            if folder not in dynamic and not any(q in source for q in quoted):
                unused.append(f"{path.relative_to(PKG.parent)}: {name}")
    assert not unused, f"SQL statements no code runs: {unused}"
