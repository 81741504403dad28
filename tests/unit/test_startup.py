"""Start-up cost: ``lakecurate --help`` and ``import lakecurate`` load no heavy library.

DuckDB, Delta Lake, Arrow and NumPy take most of a second to import; a command's help must not
wait for them. Each check runs a fresh interpreter (this one has long imported everything) and
asserts on *which* modules it imported, never on how long it took: timings are for benchmarks.
The public names of the package still resolve (lazily, PEP 562) to the same objects, and a
reader of the state tables alone (what ``status`` needs) loads neither Arrow nor Delta Lake.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from helpers import ROOT, cli_env

import lakecurate
from lakecurate.cli import main

HEAVY = ("duckdb", "deltalake", "pyarrow", "numpy")
PRINT_MODULES = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in a fresh interpreter, which must succeed."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _modules_after(code: str) -> list[str]:
    """The modules a fresh interpreter has imported after running ``code``."""
    return list(json.loads(_python(code + PRINT_MODULES).stdout.splitlines()[-1]))


def _heavy(modules: list[str]) -> list[str]:
    """The heavy libraries among ``modules`` (top-level names, sorted)."""
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def _every_command_line() -> list[list[str]]:
    """``[]`` (the group) and the words naming each command and sub-command."""
    found: list[list[str]] = [[]]

    def walk(group: click.Group, prefix: list[str]) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            found.append([*prefix, name])
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])

    walk(main, [])
    return found


def test_the_walk_sees_every_command() -> None:
    lines = _every_command_line()
    # If these are missing the walk is broken, and the help test below passes vacuously.
    assert {(), ("ingest",), ("status",), ("sql",), ("index",), ("index", "stats")} <= {
        tuple(line) for line in lines
    }
    assert len(lines) >= 18


def test_the_check_sees_a_heavy_import() -> None:
    # The check itself must be able to fail: the ingest path imports all of them.
    heavy = _heavy(_modules_after("import lakecurate.ingest.runner"))
    assert {"duckdb", "deltalake", "pyarrow"} <= set(heavy)


def test_import_lakecurate_loads_no_heavy_library() -> None:
    modules = _modules_after("import lakecurate, lakecurate.cli\nassert lakecurate.__version__")
    assert not _heavy(modules), f"`import lakecurate` imports {_heavy(modules)}"
    assert "lakecurate.api" not in modules


def test_help_of_every_command_loads_no_heavy_library() -> None:
    """``--help`` of the group and of each command, and ``--version``, in one interpreter; a
    command's help that imports a heavy library is named (later ones would see it too)."""
    cases = [*([*line, "--help"] for line in _every_command_line()), ["--version"]]
    code = f"""
import json, sys
from lakecurate.cli import main
heavy = {{}}
for args in {cases!r}:
    code = main.main(args, prog_name="lakecurate", standalone_mode=False)
    assert code in (0, None), (args, code)
    heavy[" ".join(args)] = sorted({{m.split(".")[0] for m in sys.modules}} & {set(HEAVY)!r})
print(json.dumps(heavy), file=sys.stderr)
"""
    proc = _python(code)
    assert "Usage: lakecurate status" in proc.stdout  # the help was really rendered
    heavy = json.loads(proc.stderr.splitlines()[-1])
    assert len(heavy) == len(cases)
    first = next(((args, mods) for args, mods in heavy.items() if mods), None)
    assert first is None, f"`lakecurate {first[0]}` imports {first[1]}"


def test_python_dash_m_help_loads_no_heavy_library() -> None:
    """``python -m lakecurate --help`` as a user runs it (through ``__main__``)."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['lakecurate', '--help']\n"
        "try:\n"
        "    runpy.run_module('lakecurate', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )
    modules = _modules_after(code)
    assert "lakecurate.cli" in modules
    assert not _heavy(modules), f"`lakecurate --help` imports {_heavy(modules)}"


def test_public_names_resolve_in_a_fresh_interpreter() -> None:
    code = (
        "import lakecurate\n"
        "from lakecurate import Lake\n"
        "import lakecurate.api, lakecurate.config, lakecurate.errors\n"
        "assert Lake is lakecurate.api.Lake and isinstance(Lake, type)\n"
        "assert lakecurate.LakeStatus is lakecurate.api.LakeStatus\n"
        "assert lakecurate.IngestReport is lakecurate.api.IngestReport\n"
        "assert lakecurate.Config is lakecurate.config.Config\n"
        "assert lakecurate.LakecurateError is lakecurate.errors.LakecurateError\n"
        "ns = {}\n"
        "exec('from lakecurate import *', ns)\n"
        "assert set(lakecurate.__all__) <= set(ns), sorted(set(lakecurate.__all__) - set(ns))\n"
    )
    assert "lakecurate.api" in _modules_after(code)


@pytest.mark.parametrize("name", lakecurate.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(lakecurate, name)
    assert value is not None
    assert name in dir(lakecurate)
    if name != "__version__":
        assert isinstance(value, type)
        assert value.__name__ == name


def test_the_public_names_are_the_api_objects() -> None:
    from lakecurate import Config, IngestReport, Lake, LakecurateError, LakeStatus, api, config
    from lakecurate import errors as errors_module

    assert (Lake, LakeStatus, IngestReport) == (api.Lake, api.LakeStatus, api.IngestReport)
    assert Config is config.Config
    assert LakecurateError is errors_module.LakecurateError
    assert isinstance(lakecurate.__version__, str)
    assert "__version__" in vars(lakecurate)  # a plain constant, not resolved lazily


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = lakecurate.NoSuchThing
    assert not hasattr(lakecurate, "NoSuchThing")


@pytest.fixture
def empty_lake(tmp_path: Path) -> Path:
    """A lake with a migrated, empty state and no Delta table yet."""
    from lakecurate.store.state import StateStore

    lake = tmp_path / "lake"
    lake.mkdir()
    StateStore.open(lake / "state.duckdb").close()
    return lake


def _status_code(lake: Path) -> str:
    return (
        "import sys\n"
        "from lakecurate.cli import main\n"
        f"code = main.main(['status', '--lake', {str(lake)!r}], prog_name='lakecurate',"
        " standalone_mode=False)\n"
        "assert code in (0, None), code\n"
    )


def test_a_reader_of_the_state_alone_loads_neither_arrow_nor_delta(empty_lake: Path) -> None:
    code = (
        "from pathlib import Path\n"
        "from lakecurate import engine\n"
        "from lakecurate.read import query\n"
        f"lake = Path({str(empty_lake)!r})\n"
        "con = query.open_reader(lake / 'state.duckdb', lake / 'documents', views=False)\n"
        "assert query.run(con, engine.q('state.by_status')).rows == []\n"
        "views = con.execute('SELECT view_name FROM duckdb_views() WHERE NOT internal')\n"
        "views = views.fetchall()\n"
        "assert not {v for (v,) in views} & {'documents', 'docs', 'rejects'}, views\n"
        "con.close()\n"
    )
    modules = _modules_after(code)
    assert "duckdb" in modules
    heavy = [m for m in _heavy(modules) if m != "duckdb"]
    assert not heavy, f"a state-only reader imports {heavy}"


def test_a_reader_of_the_state_alone_binds_no_version(empty_lake: Path) -> None:
    from lakecurate.read import query

    with pytest.raises(ValueError, match="binds no version"):
        query.open_reader(empty_lake / "state.duckdb", empty_lake / "documents", 0, views=False)


def test_status_runs_in_a_fresh_interpreter(empty_lake: Path) -> None:
    # The command the next test is about works at all (so its check means what it says).
    assert "lakecurate.api" in _modules_after(_status_code(empty_lake))


def test_status_loads_no_arrow(empty_lake: Path) -> None:
    """Status reads the state (DuckDB) and opens the table's log (Delta Lake, so a damaged log
    is reported), never Arrow or NumPy: together they are most of a second of start-up."""
    modules = _modules_after(_status_code(empty_lake))
    heavy = [m for m in _heavy(modules) if m not in ("duckdb", "deltalake")]
    assert not heavy, f"`lakecurate status` imports {heavy}"
