"""Progress is an object passed in: the library reports, the CLI draws; the library never prints."""

from __future__ import annotations

from typing import Protocol


class Reporter(Protocol):
    """Receives the events of a long operation."""

    def file_planned(self, path: str, done: int, total: int, was_read: bool) -> None:
        """An input's chunks are known: ``done`` of ``total`` inputs (``was_read``: it was
        read now, not vouched for by the stat cache)."""
        ...

    def planned(self, chunks_total: int, chunks_todo: int, bytes_todo: int) -> None:
        """The chunks known so far, and those to do; called again as inputs are cut."""
        ...

    def chunk_done(
        self, chunk_key: str, input_bytes: int, rows_in: int, rows_kept: int
    ) -> None: ...

    def chunk_progress(self, running: dict[str, tuple[float, int]]) -> None:
        """The chunks being worked on: how far each is (0..1) and its input bytes."""
        ...

    def chunk_failed(self, chunk_key: str, error: str, dead: bool) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


class NullReporter:
    """Reports nothing (the default for library callers)."""

    def file_planned(self, path: str, done: int, total: int, was_read: bool) -> None:
        pass

    def planned(self, chunks_total: int, chunks_todo: int, bytes_todo: int) -> None:
        pass

    def chunk_done(self, chunk_key: str, input_bytes: int, rows_in: int, rows_kept: int) -> None:
        pass

    def chunk_progress(self, running: dict[str, tuple[float, int]]) -> None:
        pass

    def chunk_failed(self, chunk_key: str, error: str, dead: bool) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass
