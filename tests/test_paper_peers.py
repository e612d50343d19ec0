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
