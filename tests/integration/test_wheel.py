"""The wheel carries ``sql/`` inside the package (design section 9): build it, install it into a
fresh virtual environment with its dependencies, and load every statement from outside the
source tree, so an installed ``lakecurate`` can never miss a file that a checkout has.

Slow (a venv and a dependency install, ~10 s here with pip's local index; up to a few minutes
from the network). The fallback below keeps it meaningful where a full install is too slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT

from lakecurate import __version__, engine

INSTALL_BUDGET = 180  # seconds for venv + pip install of the wheel and its dependencies
FALLBACK_AFTER = 120  # a slower full install gives way to the --target fallback

PROBE = (
    "import lakecurate, lakecurate.engine as e; "
    "print(','.join(sorted(e.statements()))); print(e.sql_dir()); "
    "print(len(e.migrations())); print(lakecurate.__file__)"
)


def _run(
    cmd: list[str | Path],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = INSTALL_BUDGET,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH, no virtualenv of ours: only what the installed wheel brings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not k.startswith("LAKECURATE_")
    }
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, ROOT], cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("lakecurate-*.whl")
    return whl


def test_wheel_contains_every_sql_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert "lakecurate/sql/state/migrations/001_init.sql" in names
    repo_sql = sorted((ROOT / "sql").rglob("*.sql"))
    assert len(repo_sql) > 5
    missing = [
        str(p.relative_to(ROOT))
        for p in repo_sql
        if f"lakecurate/{p.relative_to(ROOT).as_posix()}" not in names
    ]
    assert not missing, f"not in the wheel: {missing}"
    # Nothing of the test suite or the examples leaks into the wheel.
    assert not [n for n in names if n.startswith(("tests/", "examples/", "benchmarks/"))]


def test_wheel_contains_every_preset(wheel: Path) -> None:
    from lakecurate.config import PRESETS

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert {f"lakecurate/presets/{p}.toml" for p in PRESETS} <= names
    # and the per-language filter settings (rule version 3) the pipeline reads at run time
    assert "lakecurate/steps/filters/fineweb2_languages.toml" in names


def _wheel_statements(wheel: Path) -> tuple[set[str], int]:
    """Statement keys (``subject.name``) and the number of migrations in the wheel's ``sql/``.

    Read from the wheel, not the checkout: the tree may change while the test runs.
    """
    keys: set[str] = set()
    migrations = 0
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if parts[:2] != ["lakecurate", "sql"] or not name.endswith(".sql"):
                continue
            if "migrations" in parts:
                migrations += 1
                continue
            text = zf.read(name).decode("utf-8")
            keys |= {f"{parts[-2]}.{m.group(1)}" for m in engine._NAME.finditer(text)}
    return keys, migrations


def _check_probe(out: str, site: Path, wheel: Path) -> None:
    keys, sql_dir, n_migrations, init = out.strip().splitlines()
    expected, migrations = _wheel_statements(wheel)
    assert len(expected) > 10 and migrations > 0
    assert set(keys.split(",")) == expected
    assert int(n_migrations) == migrations
    assert Path(sql_dir) == site / "lakecurate" / "sql"
    assert Path(init) == site / "lakecurate" / "__init__.py"
    assert ROOT not in Path(sql_dir).parents


def test_installed_wheel_finds_every_statement(wheel: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    venv = tmp_path / "venv"
    started = time.monotonic()
    # Without a pip of its own (ensurepip takes seconds): this interpreter's pip installs into
    # it (``--python``). No byte-compiling of the dependencies either (most of an install's
    # time): the probe imports from the sources all the same.
    proc = _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=outside)
    assert proc.returncode == 0, proc.stderr
    py = venv / "bin" / "python"
    try:
        remaining = max(FALLBACK_AFTER - (time.monotonic() - started), 10)
        # With its dependencies, from pip's configured index or cache.
        proc = _run(
            [sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-compile", wheel],
            cwd=outside,
            env=_clean_env(),
            timeout=remaining,
        )
        full_install = proc.returncode == 0
        reason = proc.stderr[-2000:]
    except subprocess.TimeoutExpired:
        full_install, reason = False, f"pip install took over {FALLBACK_AFTER} s"

    if full_install:
        site_out = _run(
            [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            cwd=outside,
            env=_clean_env(),
        )
        site = Path(site_out.stdout.strip())
        probe = _run([py, "-c", PROBE], cwd=outside, env=_clean_env())
        assert probe.returncode == 0, probe.stderr
        _check_probe(probe.stdout, site, wheel)
        script = _run([venv / "bin" / "lakecurate", "--version"], cwd=outside, env=_clean_env())
        assert script.returncode == 0, script.stderr
        assert script.stdout == f"lakecurate, version {__version__}\n"
        return

    # Fallback (the full install was too slow or had no index to reach): the wheel alone into a
    # folder, run by this interpreter, whose venv has the dependencies. PYTHONPATH comes before
    # site-packages, so the folder's lakecurate wins over the editable checkout; the probe checks
    # that it really is the installed copy that answered.
    target = tmp_path / "target"
    proc = _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, wheel],
        cwd=outside,
    )
    assert proc.returncode == 0, f"{proc.stderr[-2000:]}\n(full install failed: {reason})"
    env = _clean_env(PYTHONPATH=str(target))
    probe = _run([sys.executable, "-c", PROBE], cwd=outside, env=env)
    assert probe.returncode == 0, probe.stderr
    _check_probe(probe.stdout, target, wheel)
    script = _run([target / "bin" / "lakecurate", "--version"], cwd=outside, env=env)
    assert script.returncode == 0, script.stderr
    assert script.stdout == f"lakecurate, version {__version__}\n"
