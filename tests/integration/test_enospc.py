"""A full disk (issue 7): a run that hits ENOSPC stops with one clear line, leaves nothing partial
where a reader looks, and a re-run after space is freed gives the lake of a clean run.

Two ways to fill a disk:

* a real, size-limited ``tmpfs`` (needs root with CAP_SYS_ADMIN; skipped cleanly otherwise),
  mounted over ``LAKE/documents`` (delta-rs writing data files), over ``LAKE/staging`` (workers
  writing staged Parquet), or holding the whole lake with a ballast file (DuckDB: the state
  snapshot, an attached DuckDB database, is the first large write). Space is freed by
  remounting bigger (the files stay) or deleting the ballast.
* ``LAKECURATE_FAULT=point:enospc`` (lakecurate/faults.py) raising ``OSError(ENOSPC)`` at the
  staged write, inside ``DeltaStore.append``, right after the commit intent, and inside the
  DuckDB transaction after a commit: deterministic, and independent of sizes.

The message is one ``error:`` line (lakecurate.errors.DiskFullError); an ENOSPC in a worker stops
the run instead of burning the chunk's attempts, and a failed Delta write removes its partial
data files at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from helpers import assert_lake_consistent, run_lakecurate

from lakecurate.ingest.staging import read_staged_result
from lakecurate.lake.storage import Location

NO_SPACE = "no space left on device"


def _ingest(
    corpus: Path, lake: Path, small_cfg: Path, fault: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = ("ingest", corpus, "--lake", lake, "--config", small_cfg, "--workers", "2")
    return run_lakecurate(*args, env={"LAKECURATE_FAULT": fault} if fault else None)


def _rerun_gives_the_clean_lake(
    corpus: Path,
    lake: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
) -> None:
    """Once space is freed, a plain re-run succeeds and the lake is a clean run's."""
    again = _ingest(corpus, lake, small_cfg)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_lake_consistent(lake, small_reference)


Mount = Callable[[Path, str], None]


@pytest.fixture
def tmpfs() -> Iterator[Mount]:
    """``mount(dir, size)``: a size-limited tmpfs at ``dir``; skips the test where mounting is not
    allowed. Everything mounted is unmounted at teardown, whatever happened."""
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> None:
        where.mkdir(parents=True, exist_ok=True)
        if sys.platform != "linux" or os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root on Linux")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)

    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _grow(where: Path, size: str = "256m") -> None:
    """Free space: remount the tmpfs bigger; its files stay as they are."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


def _fill(where: Path, leave: int) -> Path:
    """A ballast file taking all free space of ``where``'s file system but ``leave`` bytes."""
    st = os.statvfs(where)
    ballast = where / "ballast"
    subprocess.run(
        ["fallocate", "-l", str(st.f_bavail * st.f_frsize - leave), str(ballast)], check=True
    )
    return ballast


def assert_nothing_partial_visible(lake: Path) -> None:
    """After the failed run: no temp file, staging holds only complete staged files, and the
    Delta table (if any) reads, every file its log names included."""
    temps = [str(p) for p in lake.rglob("*") if ".tmp" in p.name and p.name != "ballast"]
    assert temps == []
    staging = lake / "staging"
    for path in staging.iterdir() if staging.exists() else []:
        assert path.name.endswith(".parquet"), path
        assert read_staged_result(Location.of(path)) is not None, (
            f"{path} is not a complete staged file"
        )
        pq.read_table(path)
    try:
        dt = DeltaTable(str(lake / "documents"))
    except TableNotFoundError:
        return
    dt.to_pyarrow_table()
    for uri in dt.file_uris():
        pq.read_table(uri)


def assert_one_clear_line(done: subprocess.CompletedProcess[str]) -> None:
    """Exit code non-zero; one ``error:`` line naming the full disk and saying what to do."""
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    assert NO_SPACE in errors[0].lower(), errors[0]
    assert "re-run" in errors[0] or "free" in errors[0], errors[0]
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-1] == errors[0], out
    # Only delta-rs's tokio runtime may add lines: its Rust panic hook prints a background
    # thread's panic ("Already shut down") straight to fd 2, which Python cannot intercept.
    rust = [line for line in lines[:-1] if not _rust_panic_line(line)]
    assert rust == [], out


def _rust_panic_line(line: str) -> bool:
    stripped = line.strip()
    return (
        line.startswith("thread '")
        or stripped in ("Already shut down", "stack backtrace:")
        or stripped.startswith(("note: ", "at "))
        or stripped.split(":", 1)[0].isdigit()
    )


# -- a real full disk -------------------------------------------------------------------------


def _documents_full(
    corpus: Path, small_cfg: Path, lake: Path, tmpfs: Mount
) -> subprocess.CompletedProcess[str]:
    tmpfs(lake / "documents", "256k")  # a few commits fit, then delta-rs hits ENOSPC
    done = _ingest(corpus, lake, small_cfg)
    assert done.returncode != 0, done.stdout
    assert NO_SPACE in (done.stdout + done.stderr).lower()
    return done


def test_documents_volume_full_message_no_orphan_then_freed(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    tmpfs: Mount,
) -> None:
    """One run that fills the documents volume (each check below reads, none writes): its one
    error line, no orphan data file, nothing partial visible; then space is freed."""
    lake = tmp_path / "lake"
    assert_one_clear_line(_documents_full(corpus, small_cfg, lake, tmpfs))
    has_log = any((lake / "documents" / "_delta_log").glob("*.json"))  # no group fitted: none
    dt = DeltaTable(str(lake / "documents")) if has_log else None
    referenced = {os.path.normpath(u) for u in dt.file_uris()} if dt else set()
    on_disk = {os.path.normpath(str(p)) for p in (lake / "documents").rglob("*.parquet")}
    assert on_disk == referenced
    assert_nothing_partial_visible(lake)
    _grow(lake / "documents")
    _rerun_gives_the_clean_lake(corpus, lake, small_cfg, small_reference)


def test_staging_volume_full_then_freed(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    tmpfs: Mount,
) -> None:
    lake = tmp_path / "lake"
    tmpfs(lake / "staging", "8k")  # smaller than any staged file
    done = _ingest(corpus, lake, small_cfg)
    assert_nothing_partial_visible(lake)
    assert_one_clear_line(done)
    _grow(lake / "staging")
    _rerun_gives_the_clean_lake(corpus, lake, small_cfg, small_reference)


def _lake_volume_full(
    corpus: Path, small_cfg: Path, disk: Path, tmpfs: Mount
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    tmpfs(disk, "32m")
    ballast = _fill(disk, 512 * 1024)  # less than the state snapshot needs
    lake = disk / "lake"
    done = _ingest(corpus, lake, small_cfg)
    assert done.returncode != 0, done.stdout
    assert NO_SPACE in (done.stdout + done.stderr).lower()
    return ballast, done


def test_lake_volume_full_message_then_freed(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    tmpfs: Mount,
) -> None:
    ballast, done = _lake_volume_full(corpus, small_cfg, tmp_path / "disk", tmpfs)
    assert_one_clear_line(done)
    lake = ballast.parent / "lake"
    assert_nothing_partial_visible(lake)
    ballast.unlink()
    _rerun_gives_the_clean_lake(corpus, lake, small_cfg, small_reference)


# -- injected ENOSPC at each write --------------------------------------------------------------

# The default run keeps the state update; the Delta write hits a real full disk in
# test_documents_volume_full_message_no_orphan_then_freed (and this fault again, with a full
# index volume, in test_first_full_disk_error_is_the_one_reported).
INJECTED = [
    pytest.param("staged_write:enospc:web_a_00002", id="staged-parquet", marks=pytest.mark.slow),
    pytest.param("delta_write:enospc:web_a_00002", id="delta-commit", marks=pytest.mark.slow),
    pytest.param(
        "before_delta_commit:enospc:web_a_00002", id="after-intent", marks=pytest.mark.slow
    ),
    pytest.param("during_state_update:enospc:web_a_00002", id="duckdb-state-update"),
]


@pytest.mark.parametrize("fault", INJECTED)
def test_injected_enospc_stops_with_one_line_then_freed(
    fault: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    done = _ingest(corpus, lake, small_cfg, fault)
    assert done.returncode != 0 and NO_SPACE in (done.stdout + done.stderr).lower()
    assert_one_clear_line(done)
    assert_nothing_partial_visible(lake)
    _rerun_gives_the_clean_lake(corpus, lake, small_cfg, small_reference)


def test_first_full_disk_error_is_the_one_reported(
    corpus: Path, small_cfg: Path, tmp_path: Path, tmpfs: Mount
) -> None:
    """D21: the Delta write hits ENOSPC first, then the Bloom cache save in the clean-up fails
    on a full index volume too; the error line names the first failure, not the cache."""
    lake = tmp_path / "lake"
    tmpfs(lake / "index", "64k")  # smaller than one Bloom file
    done = _ingest(corpus, lake, small_cfg, "delta_write:enospc:web_a_00002")
    assert_one_clear_line(done)
    line = next(ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("error:"))
    assert "Bloom" not in line and "Delta commit" in line, line
