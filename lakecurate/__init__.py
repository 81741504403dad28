"""lakecurate: raw text corpora into a curated, versioned, crash-safe data lake."""

__version__ = "0.1.0"

from lakecurate.api import Lake, LakeStatus  # noqa: E402
from lakecurate.config import Config  # noqa: E402
from lakecurate.errors import LakecurateError  # noqa: E402
from lakecurate.runner import IngestReport  # noqa: E402

__all__ = ["Config", "IngestReport", "Lake", "LakeStatus", "LakecurateError", "__version__"]
