"""``require_main_guard``'s worker-side check: a worker that re-runs the main script while
``spawn`` bootstraps it is refused at once, naming the guard (the script-side check, which
reads the script's source, is tested on the README's snippet in
tests/integration/test_readme_script.py)."""

from __future__ import annotations

import multiprocessing

import pytest

from lakecurate.errors import UsageError
from lakecurate.ingest.runner import require_main_guard


def test_a_worker_being_bootstrapped_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # multiprocessing.spawn sets this flag on the process while it re-runs the main script.
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(UsageError, match=r'worker process re-ran.*`if __name__ == "__main__":`'):
        require_main_guard()


def test_pytest_itself_is_not_refused() -> None:
    require_main_guard()  # pytest's entry point is guarded, or a package __main__
