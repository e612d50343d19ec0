"""The methods a user would pick instead of npkl: k-means, spectral clustering, PCKMeans,
COP-KMeans (PyPI ``active-semi-supervised-clustering``) and metric-learn's ITML + k-means.

``active-semi-supervised-clustering`` is installed with ``--no-deps``: its package
``__init__`` imports metric-learn (for other methods), which does not run with current
scikit-learn. We load only the PCKMeans / COP-KMeans modules, without that ``__init__``.

metric-learn 0.7.0 calls ``check_array(force_all_finite=...)``, removed from scikit-learn;
ITML therefore runs in its own environment (``bench/.venv-itml`` with scikit-learn 1.5.2),
in a subprocess that receives X and the pairs and returns the transformed X.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ITML_VENV = HERE.parent / ".venv-itml"
ITML_REQUIREMENTS = ["metric-learn==0.7.0", "scikit-learn==1.5.2", "numpy<2.3"]


class PeerUnavailable(RuntimeError):
    """A peer method cannot run here; the message says how to install it."""


#: the package's sub-packages each loader needs, as paths below its root
SEMI_SUPERVISED = ("", "semi_supervised", "semi_supervised/pairwise_constraints")
ACTIVE = ("active", "active/pairwise_constraints")


def _stub_packages(root: Path, subdirs) -> None:
    """Empty package objects with the real paths: submodules import, __init__ files do not
    run (the package's __init__ imports what --no-deps left out)."""
    for sub in subdirs:
        name = ".".join(["active_semi_clustering", *filter(None, sub.split("/"))])
        if name not in sys.modules or not hasattr(sys.modules[name], "__path__"):
            mod = types.ModuleType(name)
            mod.__path__ = [str(root / sub) if sub else str(root)]
            sys.modules[name] = mod


@functools.cache
def _load_asc():
    """PCKMeans and COPKMeans classes without executing the package __init__."""
    spec = importlib.util.find_spec("active_semi_clustering")
    if spec is None or not spec.submodule_search_locations:
        raise PeerUnavailable(
            "active-semi-supervised-clustering is missing: pip install --no-deps "
            "active-semi-supervised-clustering"
        )
    _stub_packages(Path(list(spec.submodule_search_locations)[0]), SEMI_SUPERVISED)
    from active_semi_clustering.semi_supervised.pairwise_constraints.copkmeans import COPKMeans
    from active_semi_clustering.semi_supervised.pairwise_constraints.pckmeans import PCKMeans

    return PCKMeans, COPKMeans


@functools.cache
def active_learners():
    """The package's active query strategies and what they need: (PCKMeans, ExampleOracle,
    MinMax, NPU), loaded as ``_load_asc`` loads PCKMeans."""
    PCKMeans, _ = _load_asc()
    _stub_packages(Path(sys.modules["active_semi_clustering"].__path__[0]), ACTIVE)
    from active_semi_clustering.active.pairwise_constraints.example_oracle import ExampleOracle
    from active_semi_clustering.active.pairwise_constraints.min_max import MinMax
    from active_semi_clustering.active.pairwise_constraints.npu import NPU

    return PCKMeans, ExampleOracle, MinMax, NPU


def _pairs(cons):
    ml = [(int(a), int(b)) for a, b, t in zip(cons.i, cons.j, cons.t) if t > 0]
    cl = [(int(a), int(b)) for a, b, t in zip(cons.i, cons.j, cons.t) if t < 0]
    return ml, cl


def kmeans(X, k, cons, seed):
    from sklearn.cluster import KMeans

    return KMeans(k, n_init=10, random_state=seed).fit_predict(X)


def spectral(X, k, cons, seed, knn=5):
    from sklearn.cluster import SpectralClustering

    sc = SpectralClustering(
        k,
        affinity="nearest_neighbors",
        n_neighbors=max(knn, 5),
        random_state=seed,
        assign_labels="kmeans",
    )
    return sc.fit_predict(X)


@contextlib.contextmanager
def _recursion_limit(depth):
    """Python's recursion limit raised to at least ``depth`` frames, restored on exit.

    The package closes the must-links transitively (``preprocess_constraints``) with a
    recursive depth-first search, one frame per point of a path, so a must-link component
    of more than about 1,000 points raises RecursionError under Python's default limit
    (simplenpkl's protocol on adult-a2a: one component of 1,687 points). Python 3.11 runs
    Python-to-Python calls without growing the C stack, so the higher limit is safe.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, depth))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _fit_asc(cls, X, k, cons, seed):
    ml, cl = _pairs(cons)
    np.random.seed(seed)  # the library draws from numpy's global generator
    with _recursion_limit(X.shape[0] + 1000):
        return np.asarray(cls(n_clusters=k).fit(X, ml=ml, cl=cl).labels_)


def pckmeans(X, k, cons, seed):
    return _fit_asc(_load_asc()[0], X, k, cons, seed)


def copkmeans(X, k, cons, seed):
    return _fit_asc(_load_asc()[1], X, k, cons, seed)


def ensure_asc():
    """Install active-semi-supervised-clustering (``--no-deps``, see above) if missing."""
    if importlib.util.find_spec("active_semi_clustering") is None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "active-semi-supervised-clustering",
            ],
            check=True,
        )
        importlib.invalidate_caches()
    _load_asc.cache_clear()
    _load_asc()  # raises PeerUnavailable if it still cannot be loaded


def ensure_itml_env():
    """Create ``ITML_VENV`` with ``ITML_REQUIREMENTS`` unless a completed install is there.

    Completion is marked by a file written after pip succeeds, so an install that died
    half-way is finished by the next call instead of leaving a python without metric-learn."""
    py = ITML_VENV / "bin" / "python"
    done = ITML_VENV / ".installed"
    if not done.exists():
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(ITML_VENV)], check=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "--quiet", *ITML_REQUIREMENTS], check=True
        )
        done.write_text(" ".join(ITML_REQUIREMENTS) + "\n")
    return py


_ITML_SCRIPT = r"""
import sys, numpy as np
from metric_learn import ITML
d = np.load(sys.argv[1])
X = d["X"]; pairs = d["pairs"]; y = d["y"]
itml = ITML(preprocessor=X, random_state=int(d["seed"]))
itml.fit(pairs, y)
np.save(sys.argv[2], itml.transform(X))
"""


def itml_pairs(X, cons):
    """ITML's input from the constraints: (pairs (m', 2), labels (m',) in {1, -1}, the
    number of cannot-link pairs dropped).

    Dropped: cannot-link pairs between two points with identical features. No Mahalanobis
    metric separates them (d_A(x, x) = 0 < any lower bound), and ITML's Bregman projection
    onto such a constraint divides by v'Av = 0: metric-learn 0.7.0 then fills A with NaN and
    fails in ``components_from_metric`` ("The input metric should be symmetric"). Every
    ITML failure in the harness's results (16 repetitions on adult, both protocols) had
    such a pair, and no successful repetition had one
    (docs/decisions/paper-replication-notes.md). A must-link pair of identical points is
    kept: its projection is a no-op (step min(lambda, inf) = 0)."""
    i, j, t = cons.i, cons.j, cons.t
    X = np.asarray(X)
    identical = np.all(X[i] == X[j], axis=1)
    keep = ~(identical & (t < 0))
    pairs = np.column_stack([i[keep], j[keep]]).astype(np.int64)
    return pairs, np.where(t[keep] > 0, 1, -1).astype(np.int64), int(np.count_nonzero(~keep))


def itml_kmeans(X, k, cons, seed):
    """metric-learn's ITML on the constraints (:func:`itml_pairs`), then k-means on the
    transformed X. Returns (labels, {"dropped_pairs": count})."""
    from sklearn.cluster import KMeans

    py = ITML_VENV / "bin" / "python"
    if not py.exists():
        raise PeerUnavailable(
            f"ITML environment missing: run `python -m bench.paper.run "
            f"--install` (creates {ITML_VENV})"
        )
    pairs, y, dropped = itml_pairs(X, cons)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npy"
        np.savez(src, X=X, pairs=pairs, y=y, seed=seed)
        proc = subprocess.run(
            [str(py), "-c", _ITML_SCRIPT, str(src), str(dst)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ITML failed: {proc.stderr.strip()[-500:]}")
        Xt = np.load(dst)
    return KMeans(k, n_init=10, random_state=seed).fit_predict(Xt), {"dropped_pairs": dropped}


PEERS = {
    "k-means": kmeans,
    "spectral": spectral,
    "PCKMeans": pckmeans,
    "COP-KMeans": copkmeans,
    "ITML+k-means": itml_kmeans,
}


def run_peer(method, X, k, cons, seed):
    """``PEERS[method]`` on one repetition: (labels, info), ``info`` a dict of what the
    peer reports for the results row (ITML: the pairs it had to drop), else empty."""
    out = PEERS[method](X, k, cons, seed)
    return out if isinstance(out, tuple) else (out, {})
