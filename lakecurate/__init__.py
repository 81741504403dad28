"""lakecurate: raw text corpora into a curated, versioned, crash-safe data lake."""

__version__ = "0.1.0"

from lakecurate.api import IngestReport, Lake, LakeStatus
from lakecurate.config import Config
from lakecurate.errors import LakecurateError

__all__ = ["Config", "IngestReport", "Lake", "LakeStatus", "LakecurateError", "__version__"]
