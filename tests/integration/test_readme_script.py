"""The README's Python snippet, saved as a script and run as one (issue 16, item 1).

Workers start with ``spawn`` and run the main script again: without its ``if __name__ ==
"__main__":`` guard, every worker re-ran the ingest, died on the lake's lock and was replaced,
forever. The snippet is read from README.md, so the README cannot drift from what is tested.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import ROOT, SMALL_CONFIG, cli_env

from lakecurate import Lake

GUARD = 'if __name__ == "__main__":'


def _readme_snippet() -> str:
    """The Python block of the README's "The same from Python" paragraph."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"The same from Python.*?```python\n(.*?)```", readme, re.DOTALL)
    assert m, "README.md has no Python snippet after 'The same from Python'"
    return m.group(1)


def _without_guard(snippet: str) -> str:
    """The snippet as a user who leaves out the guard writes it: the block's body dedented."""
    head, guard, body = snippet.partition(GUARD)
    assert guard, f"the README snippet has no `{GUARD}` guard"
    return head + textwrap.dedent(body.split("\n", 1)[1])


@pytest.fixture
def workdir(corpus: Path, tmp_path: Path) -> Path:
    """A folder holding what the snippet names: data/ and lakecurate.toml (its lake is ./lake)."""
    shutil.copytree(corpus, tmp_path / "data")
    (tmp_path / "lakecurate.toml").write_text(SMALL_CONFIG, encoding="utf-8")
    return tmp_path


def _run(
    workdir: Path, *args: str, timeout: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=workdir,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc, time.monotonic() - started


def test_the_readme_snippet_works_as_a_script(workdir: Path) -> None:
    (workdir / "curate.py").write_text(_readme_snippet(), encoding="utf-8")
    proc, _ = _run(workdir, "curate.py", timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows_in, rows_kept, dead = proc.stdout.splitlines()[0].split(" ", 2)
    kept = Lake.open(workdir / "lake").sql("SELECT count(*) FROM docs").rows[0][0]
    assert int(rows_kept) == kept > 0
    assert int(rows_in) > kept  # the corpus is dirty on purpose
    assert dead == "[]"
    assert f"[({kept},)]" in proc.stdout  # the snippet's own query printed the same count


def test_without_the_guard_the_script_fails_at_once_naming_the_guard(workdir: Path) -> None:
    script = workdir / "curate.py"
    script.write_text(_without_guard(_readme_snippet()), encoding="utf-8")
    proc, seconds = _run(workdir, "curate.py", timeout=120)
    assert proc.returncode != 0
    assert seconds < 30, f"took {seconds:.0f} s: it must fail before any worker starts"
    (line,) = [ln for ln in proc.stderr.splitlines() if GUARD in ln]
    assert line.startswith("lakecurate.errors.UsageError: Lake.ingest is called from the top")
    assert str(script) in line
    assert proc.stderr.count("Traceback") == 1  # the script's own, once: no storm of workers'
    assert "LockedError" not in proc.stderr
    assert proc.stdout == ""
    assert not (workdir / "lake").exists()  # refused before anything is written


def test_an_unguarded_ingest_where_workers_do_not_rerun_it_still_works(workdir: Path) -> None:
    """``python -c`` has no file for a worker to run again: no guard needed, none demanded."""
    proc, _ = _run(workdir, "-c", _without_guard(_readme_snippet()), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert Lake.open(workdir / "lake").sql("SELECT count(*) FROM docs").rows[0][0] > 0
