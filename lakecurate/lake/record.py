"""The commit record: what lakecurate writes into a Delta commit's commitInfo, and reads back.

Every commit lakecurate makes carries ``lakecurate.*`` keys: its seq (the app transaction that
makes it exactly-once), its run, and for each chunk it adds (one commit carries a group of
chunks, each with its own seq, the commit's seq being the group's last) the chunk's spec,
counts, funnel and config. They are what lets the state be rebuilt from the log alone, so they
are written and parsed here only. Commits written before groups (one chunk each, under
``lakecurate.chunk_key`` / ``lakecurate.result``) still read back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SEQ_KEY = "lakecurate.seq"
CHUNKS_KEY = "lakecurate.chunks"
"""JSON list, one object per chunk of the commit: key, seq, rows_in, rows_kept, result."""
CHUNK_KEY = "lakecurate.chunk_key"  # before groups: the commit's one chunk
RUN_KEY = "lakecurate.run_id"
CONFIG_HASH_KEY = "lakecurate.config_hash"
ROWS_IN_KEY = "lakecurate.rows_in"
ROWS_KEPT_KEY = "lakecurate.rows_kept"
RESULT_KEY = "lakecurate.result"
CONFIG_KEY = "lakecurate.config"
"""The pipeline config's TOML text: a lake whose lakecurate.toml was lost gets it back."""
REDECIDED_KEY = "lakecurate.redecided"
SUPERSEDED_KEY = "lakecurate.superseded"
RESTORED_KEY = "lakecurate.restored"
MAINTENANCE_KEY = "lakecurate.maintenance"

APPEND, REDECIDE, SUPERSEDE, RESTORE = "APPEND", "REDECIDE", "SUPERSEDE", "RESTORE"
CHUNK_KINDS = (APPEND, REDECIDE)


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk of a commit: its seq (the order near dedup follows), its counts, and its
    result (spec, funnel, redactions, ...)."""

    chunk_key: str
    seq: int | None = None
    rows_in: int | None = None
    rows_kept: int | None = None
    result: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.chunk_key,
            "seq": self.seq,
            "rows_in": self.rows_in,
            "rows_kept": self.rows_kept,
            "result": self.result,
        }


@dataclass(frozen=True)
class CommitRecord:
    """One commit as lakecurate sees it. ``kind`` is APPEND (a group of chunks), REDECIDE (a
    chunk's rows decided again), SUPERSEDE, RESTORE, the maintenance command (COMPACT,
    VACUUM), or ``""`` for a commit lakecurate did not make."""

    kind: str
    run_id: str | None = None
    seq: int | None = None
    chunks: tuple[ChunkRecord, ...] = ()
    config_hash: str | None = None
    config_text: str | None = None
    superseded: tuple[str, ...] = ()
    restored: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # keys of a newer lakecurate

    @property
    def chunk_keys(self) -> list[str]:
        """The chunks this commit wrote or removed."""
        return [c.chunk_key for c in self.chunks] if self.chunks else list(self.superseded)

    @property
    def rows_in(self) -> int | None:
        """Documents the commit's chunks brought (None when not a chunk commit)."""
        return sum(c.rows_in or 0 for c in self.chunks) if self.chunks else None

    @property
    def rows_kept(self) -> int | None:
        return sum(c.rows_kept or 0 for c in self.chunks) if self.chunks else None

    def chunk(self, seq: int) -> ChunkRecord | None:
        """The chunk of this commit that carried ``seq``."""
        return next((c for c in self.chunks if c.seq == seq), None)

    def metadata(self) -> dict[str, str]:
        """The commitInfo keys of this record (the seq is added by the Delta commit itself)."""
        out: dict[str, str] = {}
        if self.run_id is not None:
            out[RUN_KEY] = self.run_id
        if self.kind in CHUNK_KINDS:
            assert self.chunks
            out |= {
                CHUNKS_KEY: json.dumps([c.as_json() for c in self.chunks]),
                CONFIG_HASH_KEY: self.config_hash or "",
                ROWS_IN_KEY: str(self.rows_in),
                ROWS_KEPT_KEY: str(self.rows_kept),
            }
            if self.config_text:
                out[CONFIG_KEY] = self.config_text
            if self.kind == REDECIDE:
                out[REDECIDED_KEY] = "true"
        elif self.kind == SUPERSEDE:
            out[SUPERSEDED_KEY] = ",".join(self.superseded)
        elif self.kind == RESTORE:
            out[RESTORED_KEY] = str(self.restored)
        elif self.kind:
            out[MAINTENANCE_KEY] = self.kind.lower()
        return out | dict(self.extra)

    @classmethod
    def parse(cls, entry: Mapping[str, Any]) -> CommitRecord:
        """The record of a commitInfo entry (from ``DeltaTable.history``); a commit without
        lakecurate keys gives kind ``""``."""
        seq = _int(entry.get(SEQ_KEY))
        chunks = _chunks(entry, seq)
        if chunks:
            kind = REDECIDE if REDECIDED_KEY in entry else APPEND
        elif SUPERSEDED_KEY in entry:
            kind = SUPERSEDE
        elif RESTORED_KEY in entry:
            kind = RESTORE
        elif MAINTENANCE_KEY in entry:
            kind = str(entry[MAINTENANCE_KEY]).upper()
        else:
            kind = ""
        return cls(
            kind=kind,
            run_id=entry.get(RUN_KEY),
            seq=seq,
            chunks=chunks,
            config_hash=entry.get(CONFIG_HASH_KEY) or None,
            config_text=entry.get(CONFIG_KEY) or None,
            superseded=tuple(k for k in str(entry.get(SUPERSEDED_KEY, "")).split(",") if k),
            restored=_int(entry.get(RESTORED_KEY)),
        )


def _chunks(entry: Mapping[str, Any], seq: int | None) -> tuple[ChunkRecord, ...]:
    """The chunk records of a commitInfo entry, in either format (a damaged result reads as
    missing, never raises: the rows in the table still say what the chunk holds)."""
    if CHUNKS_KEY in entry:
        try:
            items = json.loads(str(entry[CHUNKS_KEY]))
        except ValueError:
            items = []
        return tuple(
            ChunkRecord(
                str(c["key"]),
                _int(c.get("seq")),
                _int(c.get("rows_in")),
                _int(c.get("rows_kept")),
                c["result"] if isinstance(c.get("result"), dict) else None,
            )
            for c in (items if isinstance(items, list) else [])
            if isinstance(c, dict) and c.get("key")
        )
    key = entry.get(CHUNK_KEY)
    if not key:
        return ()
    result = entry.get(RESULT_KEY)
    return (
        ChunkRecord(
            str(key),
            seq,
            _int(entry.get(ROWS_IN_KEY)),
            _int(entry.get(ROWS_KEPT_KEY)),
            _json(result) if result else None,
        ),
    )


def _int(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def _json(text: object) -> Mapping[str, Any] | None:
    try:
        value = json.loads(str(text))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
