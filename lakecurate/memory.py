"""Hand the memory a phase of a large chunk freed back to the operating system.

A worker's peak is what it holds plus what its allocators kept: Arrow's pool (mimalloc) keeps
the pages of freed buffers, and glibc keeps freed heap blocks under the ones still in use. On
a 256 MiB chunk the decide's freed input and the signature batches' freed shingles made about
a fifth of the stage's peak (946 MiB, 747 MiB once released between phases). ``malloc_trim``
walks the heap (milliseconds), so callers release only after work on large data.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import pyarrow as pa

LARGE_BYTES = 16 << 20
"""Work on at least this many bytes is worth a release afterwards."""


def _trimmer() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl): the heap stays
        return None
    return trim


_MALLOC_TRIM = _trimmer()


def release() -> None:
    """Return the freed pages of Arrow's pool and of the C heap to the system."""
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
