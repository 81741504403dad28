"""Each lower-layer failure (DuckDB, Arrow, Delta, the OS) reaches the user as its lakecurate
error, mapped where it enters, with a message that says what to do (like httpx's
tests/test_exceptions.py): each is the real failure, provoked on small real files. Then the
verdicts of ``chunk_failure``, the one place that decides whether a chunk error is retried.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from helpers import PROSE, SMALL_CONFIG, cli_env

from lakecurate import Lake, config
from lakecurate.errors import (
    BusyError,
    ConfigError,
    DiskFullError,
    InputError,
    LakecurateError,
    LakeError,
    LockedError,
    PermanentChunkError,
    QueryError,
    ReadOnlyError,
    TransientError,
    chunk_failure,
    disk_full,
)
from lakecurate.ingest.cutting import plan_file
from lakecurate.ingest.reader import read_chunk
from lakecurate.lake.delta import open_table
from lakecurate.lake.lock import LakeLock
from lakecurate.store import bloom
from lakecurate.store.state import StateStore
from lakecurate.types import ChunkSpec, Format

RECORDS = "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(PROSE))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lake of six documents (one chunk, one commit); tests that damage it use a copy."""
    tmp = tmp_path_factory.mktemp("errors")
    (tmp / "lakecurate.toml").write_text(SMALL_CONFIG, encoding="utf-8")
    (tmp / "in.jsonl").write_text(RECORDS, encoding="utf-8")
    report = Lake.open(tmp / "lake").ingest([tmp / "in.jsonl"], config=tmp / "lakecurate.toml")
    assert report.ok and report.rows_kept == len(PROSE)
    return tmp / "lake"


@pytest.fixture
def copy(lake: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(lake, tmp_path / "lake"))


@pytest.fixture(scope="module")
def held(lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the lake whose state.duckdb another process holds open for writing (as a
    running ingest does), without the lake lock: DuckDB's own file lock refuses everyone else."""
    root = Path(shutil.copytree(lake, tmp_path_factory.mktemp("held") / "lake"))
    code = "import sys; from lakecurate.store.state import StateStore as S; s = S.open(sys.argv[1])"
    argv = [sys.executable, "-c", code + "; print('open', flush=True); sys.stdin.read()"]
    pipe = subprocess.PIPE
    with subprocess.Popen(
        [*argv, str(root / "state.duckdb")], stdin=pipe, stdout=pipe, text=True, env=cli_env()
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "open\n"
        yield root
        proc.communicate(timeout=30)  # closes its stdin: the holder exits


def _plan(path: Path, fmt: Format) -> list[ChunkSpec]:
    return plan_file(str(path), fmt, 65536)[1]


# -- config.py: OSError, TOMLDecodeError -> ConfigError


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"[ingest\n", r"lakecurate\.toml is not valid TOML: .*line 1"),
        (None, "cannot read config .*: Is a directory"),  # unreadable, even for root
        pytest.param(b"# caf\xe9\n", "lakecurate.toml"),
        pytest.param(b'[filters]\nsteps = ["url_blocklist"]\n', "blocklist"),
    ],
    ids=["toml", "folder", "latin1", "latin1-blocklist"],
)
def test_bad_config_is_config_error(tmp_path: Path, content: bytes | None, said: str) -> None:
    cfg = tmp_path / "lakecurate.toml"
    (tmp_path / "block.txt").write_bytes("caf\xe9.example\n".encode("latin-1"))
    if content is None:
        cfg.mkdir()
    else:
        block = f'[filters.url_blocklist]\nfile = "{tmp_path / "block.txt"}"\n'
        cfg.write_bytes(content + (block.encode() if b"url_blocklist" in content else b""))
    with pytest.raises(ConfigError, match=said):
        config.load(cfg)


# -- ingest/chunking.py: a missing path, an unknown suffix, an unreadable Parquet -> InputError


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("nope.jsonl", r"nope\.jsonl: no such file or folder"),
        ("data.csv", r"data\.csv: unknown input format; lakecurate reads JSON lines \(\.jsonl"),
    ],
)
def test_missing_or_unknown_input_is_input_error(tmp_path: Path, name: str, said: str) -> None:
    (tmp_path / "data.csv").write_text("id,text\n", encoding="utf-8")
    with pytest.raises(InputError, match=said):
        Lake.open(tmp_path / "lake").ingest([tmp_path / name])
    assert not (tmp_path / "lake").exists()  # fails before a lake is created


def test_parquet_that_is_not_parquet_is_input_error(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_bytes(b"not a parquet file at all")  # ArrowInvalid
    with pytest.raises(InputError, match=r"not a readable Parquet file .*magic bytes"):
        _plan(tmp_path / "x.parquet", Format.PARQUET)


# -- ingest/reader.py: the input changed, vanished, is corrupt -> Permanent- or TransientError


@pytest.mark.parametrize(
    ("change", "error", "said"),
    [
        ("rewrite", PermanentChunkError, "changed after it was planned .*re-run the same ingest"),
        ("delete", PermanentChunkError, "disappeared after planning: restore it or re-run"),
        ("folder", TransientError, r"cannot open .*in\.jsonl: Is a directory"),  # other OSError
    ],
)
def test_input_changed_after_planning(
    tmp_path: Path, change: str, error: type[Exception], said: str
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(RECORDS, encoding="utf-8")
    specs = _plan(src, Format.JSONL)
    if change == "rewrite":
        src.write_text(RECORDS.replace("river", "creek"), encoding="utf-8")
    else:
        src.unlink()
        if change == "folder":
            src.mkdir()
    with pytest.raises(error, match=said):
        read_chunk(specs[0])


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda b: b[:20] + bytes(x ^ 0x55 for x in b[20:-10]) + b[-10:], "Error -3"),  # zlib
        (lambda b: b[: len(b) // 2], "ended before the end-of-stream"),  # EOFError
        (lambda b: b"this is not gzip\n", "Not a gzipped file"),  # gzip.BadGzipFile (OSError)
    ],
    ids=["flipped", "truncated", "not-gzip"],
)
def test_corrupt_gzip_is_permanent(
    tmp_path: Path, damage: Callable[[bytes], bytes], said: str
) -> None:
    src = tmp_path / "in.jsonl.gz"
    src.write_bytes(damage(gzip.compress(RECORDS.encode())))
    with pytest.raises(PermanentChunkError, match="corrupt or truncated gzip") as info:
        read_chunk(_plan(src, Format.JSONL_GZ)[0])
    assert said in str(info.value) and "fix or remove the file and re-run" in str(info.value)


def test_corrupt_gzip_chunk_goes_dead_after_one_attempt(tmp_path: Path) -> None:
    packed = gzip.compress(RECORDS.encode())
    (tmp_path / "in.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "lakecurate.toml").write_text(SMALL_CONFIG, encoding="utf-8")  # 3 attempts
    lk = Lake.open(tmp_path / "lake")
    report = lk.ingest([tmp_path / "in.jsonl.gz"], config=tmp_path / "lakecurate.toml", workers=1)
    assert report.outcome == "DEAD_CHUNKS" and "PermanentChunkError" in report.dead[0][1]
    assert lk.sql("SELECT status, attempts FROM chunks").rows == [("DEAD", 1)]


# -- engine.py, store/state.py, ops/verify.py: a held or garbage state.duckdb -> LakeError


@pytest.mark.parametrize(
    ("via", "error", "said"),
    [
        ("open", LakeError, "open for writing by another process .*wait for it to finish"),
        ("verify", BusyError, r"is busy: another process holds it \(pid \d+.*wait for"),
        pytest.param("open", BusyError, "wait"),
        pytest.param("sql", BusyError, "wait"),
    ],
    ids=["open", "verify", "open-busy", "sql-busy"],
)
def test_state_held_by_another_process(
    held: Path, via: str, error: type[Exception], said: str
) -> None:
    call = {
        "open": lambda: StateStore.open(held / "state.duckdb"),
        "verify": lambda: Lake.open(held).verify(),
        "sql": lambda: Lake.open(held).sql("SELECT count(*) FROM chunks"),
    }[via]
    with pytest.raises(error, match=said):
        call()


@pytest.mark.parametrize("said", ["not a valid DuckDB database", pytest.param("verify --repair")])
def test_garbage_state_is_lake_error(copy: Path, said: str) -> None:
    (copy / "state.duckdb").write_bytes(b"\x13\x37garbage" * 512)
    with pytest.raises(LakeError, match=said):
        StateStore.open(copy / "state.duckdb")


# -- lake/delta.py, lake/lock.py, read/query.py


def test_unreadable_delta_log_is_lake_error(copy: Path) -> None:
    for entry in (copy / "documents" / "_delta_log").glob("*.json"):
        entry.write_text("{torn", encoding="utf-8")
    with pytest.raises(LakeError, match=r"cannot open the Delta table .*verify --repair"):
        open_table(copy / "documents")
    with pytest.raises(LakeError, match=r"cannot open the Delta table .*verify --repair"):
        Lake.open(copy).sql("SELECT count(*) FROM documents")


def test_held_lake_lock_is_locked_error(lake: Path) -> None:
    with LakeLock.acquire(lake / "lock", "ingest"), pytest.raises(LockedError) as info:
        Lake.open(lake).ingest([lake.parent / "in.jsonl"], config=lake.parent / "lakecurate.toml")
    assert "one writer at a time; wait for it to finish" in str(info.value)


@pytest.mark.parametrize(
    ("text", "as_of", "error", "said"),
    [
        ("SELEC 1", None, QueryError, r'SQL error: .*syntax error at or near "SELEC"'),
        ("DELETE FROM chunks", None, ReadOnlyError, "read-only: DELETE statements are"),
        ("SELECT 1", "soon", LakeError, r"'soon' is not a time: use e\.g\. '2026"),
    ],
    ids=["syntax", "write", "as-of"],
)
def test_bad_query_through_sql(
    lake: Path, text: str, as_of: str | None, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=said):
        Lake.open(lake).sql(text, as_of=as_of)


@pytest.mark.parametrize("keep_footer", [False, True], ids=["footer", "pages"])
def test_damaged_data_file_is_lake_error(copy: Path, keep_footer: bool) -> None:
    data = next((copy / "documents").rglob("*.parquet"))
    raw = data.read_bytes()
    end = len(raw) - 8 - (int.from_bytes(raw[-8:-4], "little") if keep_footer else 0)
    data.write_bytes(raw[:4] + bytes(x ^ 0x5A for x in raw[4:end]) + raw[end:])
    with pytest.raises(LakeError, match="verify --deep"):
        Lake.open(copy).sql("SELECT max(text) FROM documents")


# -- OSError(ENOSPC) -> DiskFullError; store/bloom.py: a damaged Bloom file -> BloomFileError


def test_enospc_is_disk_full_error() -> None:
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as info:
            os.write(fd, b"x")  # the kernel's own ENOSPC
    finally:
        os.close(fd)
    assert info.value.errno == errno.ENOSPC
    err = disk_full(info.value, "writing the lake")
    assert isinstance(err, DiskFullError)
    assert str(err).startswith("no space left on device while writing the lake")
    assert "free space (or move the lake with --lake) and re-run the same command" in str(err)


def test_bloom_file_with_a_flipped_byte_is_bloom_file_error(tmp_path: Path) -> None:
    bloom.BloomFilter(1000, 0.01).save(tmp_path / "f.bloom", 7)
    raw = (tmp_path / "f.bloom").read_bytes()
    (tmp_path / "f.bloom").write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # one bit of the bits
    with pytest.raises(bloom.BloomFileError, match=r"fails its checksum.*delete it") as info:
        bloom.load(tmp_path / "f.bloom")
    assert isinstance(info.value, LakecurateError) and info.value.problem == "checksum"


# -- chunk_failure: stop (full disk), final (PermanentChunkError), retry (everything else)


def _raised(exc: BaseException, context: BaseException) -> BaseException:
    """``exc`` raised while handling ``context``, as a real ``raise`` chains them."""
    try:
        try:
            raise context
        except BaseException:
            raise exc  # noqa: B904 (the implicit __context__ is the point)
    except BaseException as out:
        return out


ENOSPC = OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("exc", "verdict"),
    [
        (ENOSPC, "stop"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "stop"),
        (RuntimeError("IO Error: could not write file: No space left on device"), "stop"),
        (_raised(TransientError("staged write failed"), ENOSPC), "stop"),
        (_raised(PermanentChunkError("x"), ENOSPC), "stop"),  # the full disk wins
        (PermanentChunkError("in.jsonl changed after it was planned"), "final"),
        (pickle.loads(pickle.dumps(PermanentChunkError("x"))), "final"),  # from a worker
        (TransientError("cannot open in.jsonl: Input/output error"), "retry"),
        (BrokenProcessPool("a worker process died"), "retry"),
        (OSError(errno.EIO, "Input/output error"), "retry"),
        (ValueError("a bug"), "retry"),
        (_raised(ValueError("a bug"), PermanentChunkError("x")), "retry"),  # the type decides
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_chunk_failure(exc: BaseException, verdict: str) -> None:
    assert chunk_failure(exc) == verdict
