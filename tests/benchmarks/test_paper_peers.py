"""The harness's PCKMeans and COP-KMeans peers (bench/paper/peers.py)."""

import sys

import numpy as np
import pytest

import npkl_dist as nk
from bench.paper import peers


@pytest.fixture(scope="module")
def asc():
    try:
        return peers._load_asc()
    except peers.PeerUnavailable as exc:  # pragma: no cover - the test group installs it
        pytest.skip(str(exc))


def _two_paths(n_per, seed=0):
    """Two well-separated classes whose must-links form one path each (0-1-2-..., so the
    package's DFS, started at point 0, goes n_per frames deep), and one cannot-link."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(0.0, 1.0, (n_per, 2)), rng.normal(12.0, 1.0, (n_per, 2))])
    y = np.repeat([0, 1], n_per)
    i = np.concatenate([np.arange(n_per - 1), np.arange(n_per, 2 * n_per - 1), [0]])
    j = np.concatenate([i[:-1] + 1, [n_per]])
    t = np.concatenate([np.ones(2 * (n_per - 1)), [-1.0]])
    return X, y, nk.Constraints.from_arrays(i, j, t, 2 * n_per, warn=False)


@pytest.mark.parametrize("method", ["PCKMeans", "COP-KMeans"])
def test_must_link_path_longer_than_the_recursion_limit(asc, method):
    # simplenpkl's protocol on adult-a2a makes a must-link component of 1,687 points; the
    # package closes it with a recursive DFS, which hit RecursionError under the default limit
    limit = sys.getrecursionlimit()
    n_per = limit + 200
    X, y, cons = _two_paths(n_per)
    labels = peers.PEERS[method](X, 2, cons, 0)
    assert sys.getrecursionlimit() == limit  # restored
    assert labels.shape == (2 * n_per,)
    # every must-link path is one cluster, the two paths are different clusters
    assert len(set(labels[y == 0])) == 1 and len(set(labels[y == 1])) == 1
    assert labels[y == 0][0] != labels[y == 1][0]


def test_recursion_limit_restored_on_error():
    limit = sys.getrecursionlimit()
    with pytest.raises(ValueError):
        with peers._recursion_limit(limit + 5000):
            assert sys.getrecursionlimit() == limit + 5000
            raise ValueError("inside")
    assert sys.getrecursionlimit() == limit


def test_itml_pairs_drop_only_cannot_links_between_identical_points():
    X = np.array([[0.0, 1.0], [0.0, 1.0], [2.0, 3.0], [0.0, 1.0], [5.0, 5.0]])
    # pairs: identical cannot-link (dropped), identical must-link (kept), distinct
    # cannot-link (kept), identical cannot-link again (dropped), distinct must-link (kept)
    i = np.array([0, 0, 1, 1, 2])
    j = np.array([1, 3, 2, 3, 4])
    t = np.array([-1.0, 1.0, -1.0, -1.0, 1.0])
    cons = nk.Constraints.from_arrays(i, j, t, 5, warn=False)
    pairs, y, dropped = peers.itml_pairs(X, cons)
    assert dropped == 2
    kept = {(int(a), int(b), int(c)) for (a, b), c in zip(pairs, y)}
    want = {
        (int(a), int(b), 1 if c > 0 else -1)
        for a, b, c in zip(cons.i, cons.j, cons.t)
        if not (np.array_equal(X[a], X[b]) and c < 0)
    }
    assert kept == want and len(want) == 3
    assert pairs.dtype == np.int64 and y.dtype == np.int64 and set(y) <= {-1, 1}
    # without such pairs nothing is dropped
    ok = nk.Constraints.from_arrays(
        np.array([0, 2]), np.array([2, 4]), np.array([-1.0, 1.0]), 5, warn=False
    )
    assert peers.itml_pairs(X, ok)[2] == 0


def test_run_peer_returns_labels_and_what_the_peer_reports(monkeypatch):
    monkeypatch.setitem(peers.PEERS, "k-means", lambda X, k, cons, seed: np.zeros(3, int))
    monkeypatch.setitem(
        peers.PEERS,
        "ITML+k-means",
        lambda X, k, cons, seed: (np.ones(3, int), {"dropped_pairs": 2}),
    )
    labels, info = peers.run_peer("k-means", None, 2, None, 0)
    assert labels.tolist() == [0, 0, 0] and info == {}
    labels, info = peers.run_peer("ITML+k-means", None, 2, None, 0)
    assert labels.tolist() == [1, 1, 1] and info == {"dropped_pairs": 2}


def test_itml_fails_on_a_cannot_link_between_identical_points_and_runs_without_it():
    """metric-learn's own behaviour, the reason for ``itml_pairs`` (needs the ITML
    environment, ``python -m bench.paper --install``)."""
    import subprocess
    import tempfile
    from pathlib import Path

    py = peers.ITML_VENV / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no ITML environment at {peers.ITML_VENV}")
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (20, 3)), rng.normal(5, 1, (20, 3))])
    X[21] = X[1]  # a point of class 1 with the features of a point of class 0
    y = np.repeat([0, 1], 20)
    i = np.array([0, 2, 4, 25, 1, 3])
    j = np.array([5, 7, 30, 35, 21, 33])
    t = np.where(y[i] == y[j], 1.0, -1.0)
    cons = nk.Constraints.from_arrays(i, j, t, 40, warn=False)

    def fit(pairs, labels):
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npy"
            np.savez(src, X=X, pairs=pairs, y=labels, seed=0)
            return subprocess.run(
                [str(py), "-c", peers._ITML_SCRIPT, str(src), str(dst)],
                capture_output=True,
                text=True,
            )

    raw = fit(np.column_stack([i, j]).astype(np.int64), np.where(t > 0, 1, -1))
    assert raw.returncode != 0 and "symmetric" in raw.stderr
    pairs, labels, dropped = peers.itml_pairs(X, cons)
    assert dropped == 1
    assert fit(pairs, labels).returncode == 0
    got, info = peers.run_peer("ITML+k-means", X, 2, cons, 0)
    assert info == {"dropped_pairs": 1} and got.shape == (40,)


def test_ensure_itml_env_finishes_an_install_that_died(tmp_path, monkeypatch):
    """A python without the completion mark gets pip again; a completed one is left alone."""
    calls = []

    def fake_run(cmd, check):
        calls.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            (tmp_path / "itml" / "bin").mkdir(parents=True)
            (tmp_path / "itml" / "bin" / "python").touch()
        elif "install" in cmd and len(calls) == 2:
            raise RuntimeError("pip died")  # the first install dies half-way

    monkeypatch.setattr(peers, "ITML_VENV", tmp_path / "itml")
    monkeypatch.setattr(peers.subprocess, "run", fake_run)
    with pytest.raises(RuntimeError, match="pip died"):
        peers.ensure_itml_env()
    assert not (tmp_path / "itml" / ".installed").exists()
    py = peers.ensure_itml_env()  # the venv is there: only pip again
    assert py == tmp_path / "itml" / "bin" / "python"
    assert [c[1:4] for c in calls] == [
        ["-m", "venv", str(tmp_path / "itml")],
        ["-m", "pip", "install"],
        ["-m", "pip", "install"],
    ]
    assert calls[-1][-len(peers.ITML_REQUIREMENTS) :] == peers.ITML_REQUIREMENTS
    assert (tmp_path / "itml" / ".installed").exists()
    peers.ensure_itml_env()
    assert len(calls) == 3
