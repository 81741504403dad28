"""The ``ray`` executor on real Ray (issue 15): a Ray instance started by the ingest, and a local
multi-node cluster started here (a head with no CPUs, two worker nodes) from which a node is
removed mid-run. Either way the lake must be the local executor's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assert_lake_consistent, cli_env, lake_rows, lakecurate_cmd, run_lakecurate
from s3server import S3Server

from lakecurate import Lake
from lakecurate.errors import UsageError

ray = pytest.importorskip("ray", reason="the test extra installs Ray: pip install -e '.[test]'")
from ray.cluster_utils import Cluster  # noqa: E402

# Ray >= 2.50 asks for a token on a cluster it did not start itself; these are loopback only.
QUIET = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture
def quiet_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in QUIET.items():
        monkeypatch.setenv(k, v)


def test_a_ray_run_equals_a_local_run(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    quiet_ray: None,
) -> None:
    report = Lake.open(tmp_path / "lake").ingest(
        [corpus], config=small_cfg, workers=2, executor="ray"
    )
    assert report.ok and report.chunks_committed == len({r[0] for r in small_reference})
    assert_lake_consistent(tmp_path / "lake", small_reference)
    assert not ray.is_initialized()  # the Ray it started is shut down again


def _cluster(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Iterator[Cluster]:
    """A head that runs nothing and two one-CPU worker nodes, on loopback, their processes
    started with ``env`` too."""
    for k, v in {**QUIET, **env}.items():
        monkeypatch.setenv(k, v)  # inherited by the nodes' processes
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        workers = [c.add_node(num_cpus=1) for _ in range(2)]
        c.wait_for_nodes()
        c.workers = workers  # type: ignore[attr-defined]
        yield c
    finally:
        c.shutdown()


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """``_cluster`` whose workers sleep a second per chunk (a ``sleep`` fault), so a node can
    be removed while it has work."""
    yield from _cluster(monkeypatch, {"LAKECURATE_FAULT": "worker:sleep"})


@pytest.fixture
def quick_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """``_cluster`` at full speed, for a test that removes no node."""
    yield from _cluster(monkeypatch, {})


@pytest.mark.slow  # 35 s; a Ray run and a Ray run into S3 stay in the default run
def test_removing_a_worker_node_mid_run_loses_and_doubles_nothing(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    cluster: Cluster,
) -> None:
    lake = tmp_path / "lake"
    cfg = tmp_path / "c.toml"  # a commit per chunk: the first one comes early in the run
    cfg.write_text(small_cfg.read_text().replace("[ingest]\n", "[ingest]\ncommit_chunks = 1\n"))
    args = ("ingest", corpus, "--lake", lake, "--config", cfg)
    cmd = lakecurate_cmd(*args, "--executor", "ray", "--address", cluster.address)
    driver = subprocess.Popen(
        cmd, env=cli_env(QUIET), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not _committed(lake) and time.monotonic() < deadline:  # mid-run: work on both nodes
        assert driver.poll() is None, driver.communicate()
        time.sleep(0.2)
    assert driver.poll() is None, driver.communicate()
    cluster.remove_node(cluster.workers[0], allow_graceful=False)  # type: ignore[attr-defined]
    removed_at = time.monotonic()
    out, err = driver.communicate(timeout=300)
    went_on = time.monotonic() - removed_at
    assert went_on > 2, f"the run ended {went_on:.1f} s after the node left: nothing was left"
    assert driver.returncode == 0, out + err
    assert_lake_consistent(lake, small_reference)
    assert lake_rows(lake) == small_reference


def test_a_ray_cluster_writes_an_s3_lake(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
    quick_cluster: Cluster,
) -> None:
    """The nodes write the data files and staged files straight to object storage (the
    cluster's processes got the S3 settings from the environment); the driver commits."""
    uri = f"s3://{s3.bucket()}/lake"
    report = Lake.open(uri).ingest(
        [corpus], config=small_cfg, executor="ray", address=quick_cluster.address
    )
    assert report.ok
    assert_lake_consistent(uri, small_reference)


def _committed(lake: Path) -> bool:
    """A first chunk is committed (read from the state's snapshot, as `status` does)."""
    if not (lake / "documents" / "_delta_log").is_dir():
        return False
    try:
        done = Lake.open(lake).sql("SELECT count(*) FROM chunks WHERE status = 'SUCCESS'")
    except Exception:  # the snapshot is not there yet
        return False
    return bool(done.rows[0][0])


def test_without_ray_the_error_says_how_to_install_it(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(UsageError, match=r"pip install 'lakecurate\[ray\]'"):
        Lake.open(tmp_path / "lake").ingest([corpus], executor="ray")
    assert not os.path.exists(tmp_path / "lake")  # refused before anything was written


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("127.0.0.1:{free}", "no Ray cluster answers at 127.0.0.1:"),
        ("not an address", "is not HOST:PORT"),
        ("10.0.0.5:99999", "is not HOST:PORT"),
    ],
)
def test_an_address_no_cluster_answers_at_is_refused_at_once(
    tmp_path: Path, corpus: Path, address: str, says: str
) -> None:
    """A typo in --address waited minutes in Ray's connect (nothing listens there) or raised a
    bare ValueError (malformed): now one line saying what to do, before any lake is made."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    started = time.monotonic()
    proc = run_lakecurate(
        "ingest",
        corpus,
        "--lake",
        tmp_path / "lake",
        "--executor",
        "ray",
        "--address",
        address.format(free=free),
        timeout=120,
    )
    assert proc.returncode != 0 and time.monotonic() - started < 60
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and says in last and "Traceback" not in proc.stderr
    assert not (tmp_path / "lake").exists()
