"""lakecurate: raw text corpora into a curated, versioned, crash-safe data lake.

The public names are resolved on first use (PEP 562), so ``import lakecurate`` (and with it the
``lakecurate`` command's ``--help``) does not pay for DuckDB, Delta Lake and Arrow up front;
``from lakecurate import Lake`` works as before.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lakecurate.api import IngestReport, Lake, LakeStatus
    from lakecurate.config import Config
    from lakecurate.errors import LakecurateError

__all__ = ["Config", "IngestReport", "Lake", "LakeStatus", "LakecurateError", "__version__"]

# Public name -> the module that defines it (imported when the name is first asked for).
_LAZY = {
    "IngestReport": "lakecurate.api",
    "Lake": "lakecurate.api",
    "LakeStatus": "lakecurate.api",
    "Config": "lakecurate.config",
    "LakecurateError": "lakecurate.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once resolved, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
