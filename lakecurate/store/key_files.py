"""Tier 2's truth in files: the membership index's keys in Parquet files beside the state.

The index's keys (a 128-bit key per document id, and per kept content with the document id it
stands for) were two DuckDB tables, written by the driver for every chunk: each row once to the
WAL and again at the checkpoint, about 150 bytes a document, most of the driver's writes
(issue 14). Here a batch of index rows is one Parquet file under ``index/keys``, written whole
(temp, fsync, rename) and never changed, and the ``index_files`` table says which commit seqs
of which file are in the index: one row per (file, seq), inserted in the caller's state
transaction, so the index still commits or rolls back with the chunks' statuses. Forgetting a
commit deletes its registry rows, not its keys: a file's rows count only for its registered
seqs. A file no registry row names (a rolled-back batch, a forgotten commit's last file) is a
leftover that ``sweep`` deletes under the writer's lock.

Keys are stored as their two 64-bit halves (``hi``, ``lo``: the SQL key is ``hi << 64 | lo``),
the commit ``seq`` and for the content space the document ``doc_id``. Readers' copies of the
state (``lakecurate sql``) still see tables ``content_hashes`` (hash, doc_id, seq) and
``doc_ids`` (hash, seq), made from the files by DuckDB (``views.copy_content_hashes``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import engine, faults
from lakecurate.errors import LakeError
from lakecurate.lake import atomic
from lakecurate.lake.paths import key_folder

SPACES = ("content", "ids")  # the keys of `state.KEY_TABLES`
KEY_FILE_ROWS = 4_000_000
"""Keys ``KeyFiles.compact`` puts in one file: about 130 MB of memory while it merges them."""


def _schema(space: str) -> pa.Schema:
    fields = [("hi", pa.uint64()), ("lo", pa.uint64()), ("seq", pa.int64())]
    return pa.schema(fields + ([("doc_id", pa.string())] if space == "content" else []))


class KeyFiles:
    """The key files of the state on ``con`` (a file database: the folder is beside it)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, folder: Path | None = None) -> None:
        self.con = con
        if folder is None:
            ((path,),) = con.execute(engine.q("index.database_path")).fetchall()
            if not path:
                raise ValueError("the membership index needs a state database on disk")
            folder = key_folder(path)
        self.folder = folder

    # -- writes (inside the caller's transaction) ------------------------------------------
    def write(self, space: str, keys: pa.Table) -> str:
        """Index ``keys`` (hi, lo, seq[, doc_id]) under their seqs: one new file, one registry
        row per seq; returns the file's name ("" for no keys)."""
        if not keys.num_rows:
            return ""
        table = keys.select(_schema(space).names).cast(_schema(space))
        seq = table["seq"].to_numpy()
        name = f"{space}-{int(seq.min()):08d}-{uuid.uuid4().hex[:12]}.parquet"
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(self.folder / name) as tmp:
            pq.write_table(
                table,
                tmp,
                compression="zstd",
                use_dictionary=["seq"],
                write_statistics=["seq"],
            )
        faults.hit("key_file_written", name)  # placed, not registered yet: a leftover if killed
        seqs, counts = np.unique(seq, return_counts=True)
        rows = pa.table(
            {
                "seq": pa.array(seqs, pa.int64()),
                "rows": pa.array(counts, pa.int64()),
            }
        )
        self.con.register("key_file_rows", rows)
        try:
            self.con.execute(engine.q("index.register_file"), {"space": space, "file": name})
        finally:
            self.con.unregister("key_file_rows")
        return name

    def compact(self, space: str, target_rows: int | None = None) -> tuple[int, int]:
        """Merge runs of consecutive small files of ``space`` into files of about
        ``target_rows`` keys (in the caller's transaction; the merged files become leftovers
        for ``sweep``); returns (files before, after). An ingest writes a file per batch and
        every load of a key cache opens each one (about 0.7 ms a file), so a long-lived lake
        gathers thousands; a file at the target already is never read again. Keys keep
        their order, and only the rows of registered seqs are copied."""
        target_rows = KEY_FILE_ROWS if target_rows is None else target_rows
        sizes = dict(self.con.execute(engine.q("index.file_rows"), {"space": space}).fetchall())
        listed = self.listed(space)
        groups: list[list[tuple[str, list[int]]]] = [[]]
        rows = 0
        for name, seqs in listed:
            if rows + sizes[name] > target_rows and groups[-1]:
                groups.append([])
                rows = 0
            groups[-1].append((name, seqs))
            rows += sizes[name]
        after = len(listed)
        for group in groups:
            if len(group) < 2:
                continue
            keys = read_files(self.folder, space, group)
            self.con.execute(
                engine.q("index.unregister_files"),
                {"space": space, "files": [name for name, _ in group]},
            )
            self.write(space, keys)
            after -= len(group) - 1
        return len(listed), after

    def forget(self, seqs: Sequence[int], space: str | None = None) -> None:
        """The commits ``seqs`` leave the index (of ``space``, or of both)."""
        for s in (space,) if space else SPACES:
            self.con.execute(engine.q("index.forget_seqs"), {"space": s, "seqs": list(seqs)})

    def clear(self, space: str) -> None:
        """Every key of ``space`` leaves the index (a rebuild writes them again)."""
        self.con.execute(engine.q("index.forget_space"), {"space": space})

    # -- reads ------------------------------------------------------------------------------
    def fingerprint(self, space: str) -> tuple[int, int]:
        """(keys, largest seq) of ``space`` from the registry alone (-1: none)."""
        ((rows, top),) = self.con.execute(
            engine.q("index.files_fingerprint"), {"space": space}
        ).fetchall()
        return int(rows), int(top)

    def listed(self, space: str, since: int = -1) -> list[tuple[str, list[int]]]:
        """The files of ``space`` with keys of a seq above ``since``, in the order they were
        written, and those seqs of each."""
        return [
            (name, list(seqs))
            for name, seqs in self.con.execute(
                engine.q("index.registered_files"), {"space": space, "since": since}
            ).fetchall()
        ]

    def read(self, space: str, since: int = -1) -> pa.Table:
        """The keys of ``space`` with a seq above ``since`` (hi, lo, seq[, doc_id]), file by
        file in the order they were written."""
        return read_files(self.folder, space, self.listed(space, since))

    def missing(self) -> list[str]:
        """The registered files that are not there (the index folder deleted, a file lost)."""
        named = [f for (f,) in self.con.execute(engine.q("index.named_files")).fetchall()]
        return [f for f in named if not (self.folder / f).exists()]

    def leftovers(self) -> list[Path]:
        """The key files no registry row names: a batch rolled back or killed before its
        transaction committed, or commits forgotten since (temp files are the writers'
        clean-up's, as under the rest of the index folder)."""
        if not self.folder.is_dir():
            return []
        named = {f for (f,) in self.con.execute(engine.q("index.named_files")).fetchall()}
        return [
            path
            for path in sorted(self.folder.iterdir())
            if path.name not in named and path.suffix == ".parquet" and not atomic.is_temp(path)
        ]

    def sweep(self) -> int:
        """Delete the ``leftovers`` (only the lake's writer calls this: a concurrent writer's
        new file is not registered until its transaction commits)."""
        gone = self.leftovers()
        for path in gone:
            path.unlink(missing_ok=True)
        return len(gone)


def read_files(folder: Path, space: str, listed: Sequence[tuple[str, Sequence[int]]]) -> pa.Table:
    """The rows of ``listed`` ((file name, its registered seqs)) under ``folder``; a missing
    or unreadable file is a ``LakeError`` saying how to rebuild the index."""
    parts = []
    for name, seqs in listed:
        try:
            with pq.ParquetFile(folder / name) as file:  # one small file: no dataset scanner
                table = file.read(use_threads=False).cast(_schema(space))
        except (OSError, pa.ArrowException) as exc:
            why = "is missing" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc})"
            raise LakeError(
                f"the membership index's key file {folder / name} {why}: run "
                "`lakecurate verify --repair` to write the index again from the table"
            ) from exc
        keep = pc.is_in(table["seq"], pa.array(list(seqs), pa.int64()))
        parts.append(table.filter(keep))
    return pa.concat_tables(parts) if parts else _schema(space).empty_table()


def move_out(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """Move the keys of the layout before (DuckDB tables ``content_hashes``, ``doc_ids``) into
    key files, once: the files first, then one transaction registers them and drops the
    tables (a kill in between leaves leftovers ``sweep`` deletes, and the tables)."""
    if not con.execute(engine.q("index.has_key_tables")).fetchall()[0][0]:
        return
    files = KeyFiles(con, folder)
    con.begin()
    try:
        for space in SPACES:
            old = engine.q({"content": "index.old_content", "ids": "index.old_ids"}[space])
            files.write(space, con.sql(old).to_arrow_table())
        con.execute(engine.q("index.drop_key_tables"))
    except BaseException:
        con.rollback()
        raise
    con.commit()
