"""The commit record: what lakecurate writes into a Delta commit's commitInfo, and reads back.

Every commit lakecurate makes carries ``lakecurate.*`` keys: its seq (the app transaction that
makes it exactly-once), its run, and for a chunk its spec, counts, funnel and config. They are
what lets the state be rebuilt from the log alone, so they are written and parsed here only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SEQ_KEY = "lakecurate.seq"
CHUNK_KEY = "lakecurate.chunk_key"
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
class CommitRecord:
    """One commit as lakecurate sees it. ``kind`` is APPEND, REDECIDE (a chunk's rows decided
    again), SUPERSEDE, RESTORE, the maintenance command (COMPACT, VACUUM), or ``""`` for a
    commit lakecurate did not make."""

    kind: str
    run_id: str | None = None
    seq: int | None = None
    chunk_key: str | None = None
    config_hash: str | None = None
    rows_in: int | None = None
    rows_kept: int | None = None
    result: Mapping[str, Any] | None = None  # the chunk's spec, counts, funnel, redactions...
    config_text: str | None = None
    superseded: tuple[str, ...] = ()
    restored: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # keys of a newer lakecurate

    @property
    def chunk_keys(self) -> list[str]:
        """The chunks this commit wrote or removed."""
        return [self.chunk_key] if self.chunk_key else list(self.superseded)

    def metadata(self) -> dict[str, str]:
        """The commitInfo keys of this record (the seq is added by the Delta commit itself)."""
        out: dict[str, str] = {}
        if self.run_id is not None:
            out[RUN_KEY] = self.run_id
        if self.kind in CHUNK_KINDS:
            assert self.chunk_key is not None and self.result is not None
            out |= {
                CHUNK_KEY: self.chunk_key,
                CONFIG_HASH_KEY: self.config_hash or "",
                ROWS_IN_KEY: str(self.rows_in),
                ROWS_KEPT_KEY: str(self.rows_kept),
                RESULT_KEY: json.dumps(self.result),
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
        key = entry.get(CHUNK_KEY) or None
        if key:
            kind = REDECIDE if REDECIDED_KEY in entry else APPEND
        elif SUPERSEDED_KEY in entry:
            kind = SUPERSEDE
        elif RESTORED_KEY in entry:
            kind = RESTORE
        elif MAINTENANCE_KEY in entry:
            kind = str(entry[MAINTENANCE_KEY]).upper()
        else:
            kind = ""
        result = entry.get(RESULT_KEY)
        return cls(
            kind=kind,
            run_id=entry.get(RUN_KEY),
            seq=int(entry[SEQ_KEY]) if SEQ_KEY in entry else None,
            chunk_key=key,
            config_hash=entry.get(CONFIG_HASH_KEY) or None,
            rows_in=_int(entry.get(ROWS_IN_KEY)),
            rows_kept=_int(entry.get(ROWS_KEPT_KEY)),
            result=_json(result) if result else None,
            config_text=entry.get(CONFIG_KEY) or None,
            superseded=tuple(k for k in str(entry.get(SUPERSEDED_KEY, "")).split(",") if k),
            restored=_int(entry.get(RESTORED_KEY)),
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
