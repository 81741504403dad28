"""``engine.connect``: the one place DuckDB is opened, and what every connection is set to."""

from __future__ import annotations

from pathlib import Path

from lakecurate import engine


def test_no_connection_draws_duckdb_s_own_progress_bar(tmp_path: Path) -> None:
    """DuckDB's bar (on by default) would write over lakecurate's display from any process."""
    path = tmp_path / "x.duckdb"
    for con in (engine.connect(), engine.connect(path, threads=1)):
        with con:
            assert con.execute("SELECT current_setting('enable_progress_bar')").fetchall() == [
                (False,)
            ]
    with engine.connect(path, read_only=True) as con:
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchall() == [(False,)]
