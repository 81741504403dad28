"""The band index's runs, and tier 2's keys, held by decider processes, partitioned by hash
(issue 14).

The band cache (``store.band_cache``) is the one part of the driver that grows with the lake:
about 17 bytes per band row, 16 rows per document with tokens, merged as it grows. With
``[ingest] deciders = K`` (K > 0) its rows live in K processes instead, shard ``i`` holding the
rows whose band hash is ``i`` modulo K: a chunk's lookups are split by hash, each shard searches
its part while the others search theirs, and the driver joins K short lists of pairs. What
the driver holds no longer grows with the lake, and its lookups and merges run in parallel.

A shard holds a cache, nothing else: the truth stays the band files and ``minhash_docs``, and
``BandCache`` still decides when its rows are stale. So a shard that dies (killed, out of
memory) loses nothing: every shard is started again, empty, and reads its part of the band
files again (``band_cache.HolderLostError``; ``BandCache`` does it once per lookup), and so
does a shard that falls silent at work (frozen: no beat for ``[ingest] heartbeat_timeout``).
Shards read the band files themselves, so a reload costs the driver no bytes. They stop with
the session, and on their own when the driver is gone (their pipe closes).

The same processes hold the membership index's keys (``store.key_cache``, a ``KeyHolder``):
shard ``i`` the keys whose high half is ``i`` modulo K, read from the key files by the shard
itself (at a load, and each new file at an add); a lookup sends each shard its part of the
keys the Bloom filter could not rule out. Shards that died lose both; ``generation`` tells
each cache so, and each gives them its rows again.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import resource
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from lakecurate.errors import LakeError
from lakecurate.lake.storage import Location
from lakecurate.steps.near.signatures import near_flags
from lakecurate.store.band_cache import (
    I64,
    U8,
    U64,
    BandSource,
    HolderLostError,
    Keep,
    Rows,
    Runs,
    by_hash,
    chunk_pairs,
    merged,
)
from lakecurate.store.key_cache import KeyRuns, Listed
from lakecurate.store.key_files import read_files
from lakecurate.store.signatures import ROW_BITS, ChunkSets, SignatureFiles, by_chunk

STOP_SECONDS = 5.0  # how long a shard may take to stop before it is killed
START_SECONDS = 120.0  # how long a shard may take to start (its imports) before it is given up
BEAT_SECONDS = 1.0  # how often a shard at work says it is alive
NEAR_SLICE = 20_000  # pairs a shard tests at once: their sets are read, then copied for the test


def part(rows: Rows, shard: int, shards: int) -> Rows:
    """The rows of ``shard`` (band hash modulo ``shards``); sorted rows stay sorted."""
    hashes, bands, seqs = rows
    mine = hashes % np.uint64(shards) == np.uint64(shard)
    return hashes[mine], bands[mine], seqs[mine]


def _my_keys(keys: pa.Table, shard: int, shards: int) -> pa.Table:
    """The keys of ``shard`` (high half modulo ``shards``)."""
    hi = np.asarray(keys["hi"].to_numpy(), dtype=np.uint64)
    return keys.filter(pa.array(hi % np.uint64(shards) == np.uint64(shard)))


def _near(
    folder: str, chunks: Sequence[tuple[int, str]], src: I64, dst: I64, params: dict[str, int]
) -> npt.NDArray[np.bool_]:
    """Which (document of a run of chunks, earlier document) pairs are near: the run's sets
    from its workers' sets files (``chunks``: each chunk's commit seq and file's uri), the
    earlier ones' from the lake's signature files, or from the run's files when the earlier
    one is the run's too (its own pairs, the label rounds).

    ``NEAR_SLICE`` pairs at a time, in the order of their run's document, each slice reading
    only its own documents' sets: reading every set of the request first held a run's whole
    sets at once, twice (a shard's peak RSS went from 640 to 1,099 MiB at 16x once runs of
    four chunks were matched as one, issue 14)."""
    run = {seq: ChunkSets.of_file(seq, Location(uri)) for seq, uri in chunks}
    lake = SignatureFiles(Path(folder))
    order = np.argsort(src, kind="stable")  # a slice's run documents are neighbours
    flags = np.zeros(len(src), dtype=bool)
    for lo in range(0, len(src), NEAR_SLICE):
        at = order[lo : lo + NEAR_SLICE]
        docs = np.union1d(src[at], dst[at])
        sets = _sets_of(docs, run, lake)
        held = sets["doc_seq"].to_numpy()
        if not np.array_equal(held, docs):  # the positions below assume it
            raise LakeError(f"commits {sorted(run)}: near-dedup sets out of order: report a bug")
        a, b = (sets["sets"].take(pa.array(np.searchsorted(held, side[at]))) for side in (src, dst))
        flags[at] = near_flags(a, b, params["min_matches"], params["num"], params["den"])
    return flags


def _sets_of(docs: I64, run: dict[int, ChunkSets], lake: SignatureFiles) -> pa.Table:
    """(doc_seq, sets) of ``docs`` (ascending, unique), ascending: the lake's read from its
    signature files, the run's from its chunks' sets files (a run's commit seqs are above
    every lake document's, so the lake's rows come first). A document without sets is an
    error (``IndexFilesError``), never a silent "not near"."""
    mine = np.isin(docs >> ROW_BITS, np.array(list(run), dtype=np.int64))
    parts = [_sets(lake.read(docs[~mine]))]
    for seq, asked in by_chunk(docs[mine]):
        parts.append(_sets(run[seq].read(asked)).cast(parts[0].schema))
    return pa.concat_tables(parts)


def _sets(table: pa.Table) -> pa.Table:
    """(doc_seq, sets) of a signature or sets file's rows, whatever its column's name."""
    return pa.table({"doc_seq": table["doc_seq"], "sets": table.column(1)})


class _RunRows:
    """This shard's part of the band rows of the run being decided, read once: a run's band
    files are looked up (``search_source``), paired within (``chunk_pairs``) and then pushed
    (``push_source``), and each read and sorted them again (half of a shard's CPU, and the
    driver waits on it, issue 14). Only the run's sources are held: a request for other
    sources forgets the rest, and a source pushed is forgotten."""

    def __init__(self, keep: Keep) -> None:
        self.keep = keep
        self.held: dict[tuple[str, str, BandSource], Rows] = {}

    def run(self, folder: str, column: str, sources: Sequence[BandSource]) -> Rows:
        """The run's rows, as one set sorted by hash."""
        keys = [(folder, column, source) for source in sources]
        self.held = {k: v for k, v in self.held.items() if k in keys}
        return merged([self._of(key) for key in keys])

    def take(self, folder: str, column: str, source: BandSource) -> Rows:
        """A source's rows, forgotten here (pushed into the runs, they are not asked again).
        A commit's stored band file (``uri`` None) is its worker's bands file placed byte for
        byte (``ChunkSets.store``): the run's source of the same seq holds its rows."""
        key = (folder, column, source)
        if source.uri is None:
            key = next((k for k in self.held if k[:2] == key[:2] and k[2].seq == source.seq), key)
        rows = self._of(key)
        del self.held[key]
        return rows

    def clear(self) -> None:
        self.held.clear()

    def _of(self, key: tuple[str, str, BandSource]) -> Rows:
        if key not in self.held:
            folder, column, source = key
            self.held[key] = source.rows(SignatureFiles(Path(folder), column), self.keep)
        return self.held[key]


def _serve(conn: multiprocessing.connection.Connection, shard: int, shards: int) -> None:
    """A shard's loop: one request, one answer, until ``stop`` or the driver is gone. While
    it works on a request a thread beats every ``BEAT_SECONDS``: a shard frozen (stopped, or
    stuck in C) falls silent, and the driver kills it."""
    runs = Runs()
    keys: dict[str, KeyRuns] = {}  # tier 2's keys of this shard, by space
    lock, working = threading.Lock(), threading.Event()

    def keep(rows: Rows) -> Rows:
        return part(rows, shard, shards)

    run_rows = _RunRows(keep)

    def send(message: tuple[str, Any]) -> None:
        with lock:
            conn.send(message)

    def beat() -> None:
        while True:
            time.sleep(BEAT_SECONDS)
            if working.is_set():
                with contextlib.suppress(OSError):
                    send(("beat", None))

    threading.Thread(target=beat, name="beat", daemon=True).start()
    send(("ready", None))  # imports done: from now on a silence at work means frozen
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return  # the driver is gone
        working.set()
        try:
            out: Any = None
            if op == "stop":
                send(("ok", None))
                return
            if op == "clear":
                runs.clear()
                run_rows.clear()
            elif op == "push":
                hashes, bands, seqs = args
                runs.push(hashes, bands, seqs, ordered=True)
            elif op == "load":
                folder, column, seqs = args
                runs.load(SignatureFiles(Path(folder), column), seqs, keep)
            elif op == "search":
                out = runs.search(*args)
            elif op == "push_source":  # a commit's band file: this shard's part of it
                runs.push(*run_rows.take(*args), ordered=True)
            elif op == "search_source":  # a run's band files: its part of the needles
                folder, column, sources, below = args
                out = runs.search(*run_rows.run(folder, column, sources), below)
            elif op == "chunk_pairs":  # the run's own pairs, in this shard's buckets
                out = chunk_pairs(run_rows.run(*args))
            elif op == "near":  # pairs of a chunk's documents and earlier ones: which are near
                out = _near(*args)
            elif op in ("keys_load", "keys_add"):  # this shard's part of the files listed:
                folder, space, listed = args  # exactly the registry's (load), or one more (add)
                if op == "keys_load" or space not in keys:
                    keys[space] = KeyRuns(space)
                keys[space].hold(_my_keys(read_files(Path(folder), space, listed), shard, shards))
            elif op == "keys_find":
                space, hi, lo = args
                out = keys.setdefault(space, KeyRuns(space)).find(hi, lo)
            elif op == "keys_held":
                out = len(keys[args[0]]) if args[0] in keys else 0
            elif op == "rows":
                out = len(runs)
            elif op == "usage":  # CPU seconds, peak RSS in KiB (Linux)
                use = resource.getrusage(resource.RUSAGE_SELF)
                out = (use.ru_utime + use.ru_stime, use.ru_maxrss)
            else:
                raise ValueError(f"unknown request {op!r}")
            send(("ok", out))
        except Exception as exc:  # the driver raises it; the shard stays up
            try:
                send(("error", exc))  # its own class: IndexFilesError says what to do
            except Exception:  # not picklable
                send(("error", LakeError(f"{type(exc).__name__}: {exc}")))
        finally:
            working.clear()


def _joined(found: list[tuple[I64, I64]]) -> tuple[I64, I64]:
    """The shards' (src, dst) answers as one pair of arrays."""
    return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])


class Shards:
    """K decider processes holding the band cache's rows (a ``band_cache.Holder``), started
    on first use."""

    def __init__(self, count: int, silence: float = 60.0) -> None:
        """``silence``: how long a shard at work may say nothing before it is killed (the
        ``[ingest] heartbeat_timeout`` of the workers)."""
        if count < 1:
            raise ValueError("a sharded band cache needs at least one shard")
        self.count = count
        self.silence = silence
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[multiprocessing.connection.Connection] = []
        self.starts = 0  # times the shards were (re)started, for tests
        self.generation = 0  # one more each time the shards lost what they held
        # Of the shards stopped so far, for benchmarks: their CPU time, the largest peak RSS.
        self.cpu_seconds = 0.0
        self.peak_rss_kib = 0

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # no copy of the driver's memory
        for shard in range(self.count):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_serve,
                args=(theirs, shard, self.count),
                name=f"lakecurate-decider-{shard}",
                daemon=True,  # never outlives the driver
            )
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(mine)
        self.starts += 1
        # Started together, then each waited for: a shard's imports are not work, and took
        # more than a short heartbeat_timeout on a loaded machine (it was taken for frozen).
        for conn in self._conns:
            if not conn.poll(START_SECONDS) or conn.recv()[0] != "ready":
                raise TimeoutError(f"a decider process did not start within {START_SECONDS:g} s")

    def _ask(self, requests: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Send one request to each shard, then take each answer: the shards work at once."""
        try:
            if not self._procs:
                self._start()
            for conn, request in zip(self._conns, requests, strict=True):
                conn.send(request)
            answers = [self._answer(conn) for conn in self._conns]
        except (EOFError, OSError, TimeoutError) as exc:
            dead = [f"{p.name} (exit code {p.exitcode})" for p in self._procs if not p.is_alive()]
            self._kill()  # the others too: their pipes may hold answers nobody will read
            why = str(exc) if isinstance(exc, TimeoutError) else type(exc).__name__
            raise HolderLostError(
                f"a decider process holding part of the lake's index stopped "
                f"({', '.join(dead) or why}); it is started again and reads its part of the "
                "index files again"
            ) from exc
        errors = [value for kind, value in answers if kind != "ok"]
        if errors:
            raise errors[0]  # as the driver would have raised it
        return [value for _, value in answers]

    def _answer(self, conn: multiprocessing.connection.Connection) -> tuple[str, Any]:
        """A shard's answer, past its beats; ``TimeoutError`` when it falls silent."""
        while True:
            if not conn.poll(self.silence):
                raise TimeoutError(f"silent for {self.silence:g} s at work: frozen, killed")
            kind, value = conn.recv()
            if kind != "beat":
                return kind, value

    def clear(self) -> None:
        self._ask([("clear", ())] * self.count)

    def push(self, hashes: U64, bands: U8, seqs: I64, *, ordered: bool = False) -> None:
        rows: Rows = (hashes, bands, seqs) if ordered else by_hash((hashes, bands, seqs))
        self._ask([("push", part(rows, i, self.count)) for i in range(self.count)])

    def load(self, files: SignatureFiles, seqs: Sequence[int]) -> None:
        if files.folder is None:
            raise ValueError("shards read the band files: an index in memory has none")
        request = ("load", (str(files.folder), files.column, [int(s) for s in seqs]))
        self._ask([request] * self.count)

    def search(self, hashes: U64, bands: U8, srcs: I64, below: int) -> tuple[I64, I64]:
        parts = [part((hashes, bands, srcs), i, self.count) for i in range(self.count)]
        found = self._ask([("search", (*p, below)) for p in parts])
        return _joined(found)

    def push_source(self, files: SignatureFiles, source: BandSource) -> None:
        self._ask([("push_source", (str(files.folder), files.column, source))] * self.count)

    def search_source(
        self, files: SignatureFiles, sources: Sequence[BandSource], below: int
    ) -> tuple[I64, I64]:
        request = ("search_source", (str(files.folder), files.column, tuple(sources), below))
        found = self._ask([request] * self.count)
        return _joined(found)

    def chunk_pairs(self, files: SignatureFiles, sources: Sequence[BandSource]) -> tuple[I64, I64]:
        request = ("chunk_pairs", (str(files.folder), files.column, tuple(sources)))
        return _joined(self._ask([request] * self.count))

    def near(
        self,
        files: SignatureFiles,
        chunks: Sequence[tuple[int, str]],
        pairs: tuple[I64, I64],
        params: dict[str, int],
    ) -> npt.NDArray[np.bool_]:
        """Which of ``pairs`` (a document of a run of chunks, ``chunks`` their commit seqs and
        the uris of their workers' sets files; an earlier document) are near
        (``steps.near.signatures.near_flags``): the shards test a slice each, reading the sets
        themselves."""
        cuts = np.linspace(0, len(pairs[0]), self.count + 1).astype(np.int64)
        folder, run = str(files.folder), tuple(chunks)
        asked = [
            ("near", (folder, run, pairs[0][a:b], pairs[1][a:b], params))
            for a, b in itertools.pairwise(cuts.tolist())
        ]
        return np.concatenate(self._ask(asked)).astype(bool)

    def __len__(self) -> int:
        return int(sum(self._ask([("rows", ())] * self.count)))

    def __bool__(self) -> bool:
        """A holder is one whatever it holds (``__len__`` alone made an empty one false: a
        session's ``deciders or 0`` then gave the band index none)."""
        return True

    # -- tier 2's keys (``key_cache.KeyHolder``) ----------------------------------------------
    def keys_load(self, folder: Path, space: str, listed: Listed) -> None:
        self._key_files("keys_load", folder, space, listed)

    def keys_add(self, folder: Path, space: str, listed: Listed, keys: pa.Table) -> None:
        self._key_files("keys_add", folder, space, listed)  # the shards read the file

    def _key_files(self, op: str, folder: Path, space: str, listed: Listed) -> None:
        """Every shard reads the files ``listed`` and keeps its part: names cross, not keys."""
        listed = [(name, [int(s) for s in seqs]) for name, seqs in listed]
        self._ask([(op, (str(folder), space, listed))] * self.count)

    def keys_find(
        self, space: str, hi: U64, lo: U64
    ) -> tuple[npt.NDArray[np.bool_], pa.Array | None]:
        """Each key asked of its shard; the answers put back in the keys' order."""
        shard = (hi % np.uint64(self.count)).astype(np.int64)
        picks = [np.flatnonzero(shard == i) for i in range(self.count)]
        answers = self._ask([("keys_find", (space, hi[at], lo[at])) for at in picks])
        found = np.zeros(len(hi), dtype=bool)
        for at, (mine, _) in zip(picks, answers, strict=True):
            found[at[mine]] = True
        if space != "content":
            return found, None
        # Each shard's document ids are in the order of its found keys: put them in the order
        # of all the found keys.
        where = np.concatenate([at[mine] for at, (mine, _) in zip(picks, answers, strict=True)])
        ids = pa.concat_arrays([a for _, a in answers]) if answers else pa.array([], pa.string())
        return found, ids.take(pa.array(np.argsort(where, kind="stable")))

    def keys_held(self, space: str) -> int:
        return int(sum(self._ask([("keys_held", (space,))] * self.count)))

    def _kill(self) -> None:
        """Kill every shard at once, without a word to any (after one was lost)."""
        if self._procs:
            self.generation += 1
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
            proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []

    def close(self) -> None:
        """Stop the shards (killed when they do not stop within ``STOP_SECONDS``), counting
        what they used into ``cpu_seconds`` and ``peak_rss_kib``."""
        with contextlib.suppress(LakeError):
            if self._procs:
                usage = self._ask([("usage", ())] * self.count)
                self.cpu_seconds += sum(cpu for cpu, _ in usage)
                self.peak_rss_kib = max([self.peak_rss_kib, *(rss for _, rss in usage)])
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", ()))
        for proc in self._procs:
            proc.join(STOP_SECONDS)
        self._kill()  # those that did not stop
