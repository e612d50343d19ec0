"""The inductive kernel with S = J L J' (inductive-lt-kernel-nips2010 §3.2): fit and model.

Learned kernel, for any points x, y (seen in training or not)::

    kappa_W(x, y) = alpha kappa(x, y) + psi(x)' L psi(y),    psi(x) = J' k_B(x)

k_B(x) = (kappa(x, b))_{b in B}: the base kernel against the basis points B (the landmarks,
or a sample the cluster indicators J are defined on); L is r x r. With G = (J'K_BB J)^{1/2}
(eigen-floored: directions below ``RANK_FLOOR`` of the largest are dropped) and the basis
coordinates q(x) = G^+ psi(x), every spectral regulariser of the paper's Theorem 2 is a
function of the r x r matrix M = alpha I + G L G only (the remaining n - r eigenvalues of
K^{-1/2} K_W K^{-1/2} stay at alpha, a constant of the objective), and a pair's learned
squared distance is alpha (d_kappa - |q_x - q_y|^2) + (q_x - q_y)' M (q_x - q_y).

The explicit feature map is z(x) = M^{1/2} q(x): z(x)'z(y) = kappa_W(x, y) exactly for the
learned part psi'L psi, and for the alpha part with kappa(x, y) replaced by its projection
onto the span of the basis functions sum_b J_bk phi(x_b) in the base kernel's feature space
(q(x)'q(y) = psi(x)'(J'K_BB J)^+ psi(y): the Nystroem approximation when J selects landmarks).
``kernel`` and ``pair_distance`` are exact; ``transform`` returns z.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..._errors import ValidationError, fix, fmt_value
from ...graph._graph import apply_feature_scale, feature_scale
from ...problem._constraints import Constraints
from . import _kernels as K
from ._regularizers import REGULARIZERS, itml, objective, penalised

BASES = ("kmeans++", "kmeans", "random", "clusters")
#: basis directions kept: eigenvalues of J'K_BB J above this fraction of the largest
RANK_FLOOR = 1e-10
#: model file format (save/load)
MODEL_VERSION = 1
#: bounds from percentiles of base-kernel distances over this many sampled pairs
BOUND_PAIRS = 20000
#: cluster indicators: basis sample of this many points per cluster
CLUSTER_SAMPLE_PER = 10


@dataclass(repr=False)
class InductiveKernel:
    """A learned kernel function (fit_inductive). Arrays are float64.

    basis : (b, d) basis points B;  F : (r', b) maps k_B(x) to q(x);  M : (r', r') learned;
    T : (k, b) maps k_B(x) to z(x) = M^{1/2} q(x) (k = rank of M)."""

    base_kernel: str
    bandwidth: float | None
    alpha: float
    regularizer: str
    basis: np.ndarray
    F: np.ndarray
    M: np.ndarray
    T: np.ndarray
    info: dict = field(default_factory=dict)
    #: feature scaling applied to every input row first (graph.feature_scale's dict) or None
    scaling: dict | None = None

    def __repr__(self):
        return (
            f"InductiveKernel(regularizer={self.regularizer!r}, kernel={self.base_kernel!r}, "
            f"bandwidth={self.bandwidth if self.bandwidth is None else round(self.bandwidth, 6)}, "
            f"basis={self.basis.shape[0]}x{self.basis.shape[1]}, dim={self.dim}, "
            f"alpha={self.alpha:g})"
        )

    @property
    def n_features(self) -> int:
        return int(self.basis.shape[1])

    @property
    def dim(self) -> int:
        """Dimension of the feature map z."""
        return int(self.T.shape[0])

    @property
    def L(self) -> np.ndarray:
        """The learned matrix of kappa_W in the coordinates k_B (b x b: J L J'); with psi = J'k_B,
        psi' L psi = k_B' F'(M - alpha I)F k_B."""
        r = self.M.shape[0]
        return self.F.T @ (self.M - self.alpha * np.eye(r)) @ self.F

    # -- the map ----------------------------------------------------------------------
    def _check_X(self, X, name="X"):
        X = np.asarray(X) if not hasattr(X, "shape") else X
        if len(X.shape) != 2 or X.shape[1] != self.n_features:
            width = X.shape[1] if len(X.shape) == 2 else f"a {len(X.shape)}-D array"
            raise ValidationError(
                f"{name}: the model was fitted on {self.n_features} features, got {width}; "
                "give the same columns in the same order as in training"
            )
        return X

    def _prep(self, rows):
        """Input rows as float64 in the model's (scaled) feature space."""
        rows = np.asarray(rows, dtype=np.float64)
        return rows if self.scaling is None else apply_feature_scale(rows, self.scaling)

    @property
    def _b_sq(self):
        return np.einsum("ij,ij->i", self.basis, self.basis)

    def _map(self, X, W, start=0, threads=1):
        """k_B(x) W' for the rows of X, in fixed tiles (kernels.map_tiles)."""
        X = self._check_X(X)
        b_sq = self._b_sq

        def fn(tile):
            kb = K.kernel_block(
                self.base_kernel, self.bandwidth, self._prep(tile), self.basis, b_sq
            )
            return kb @ W.T

        out = K.map_tiles(fn, X, start=start, threads=threads)
        return np.zeros((0, W.shape[0])) if out is None else out

    def transform(self, X, *, start: int = 0, threads: int = 1) -> np.ndarray:
        """z(X), shape (n, dim). Row results are bitwise independent of how X is chunked when
        chunks start at multiples of ``TILE`` (pass each chunk's first row position as
        ``start``), and of ``threads``."""
        return self._map(X, self.T, start, threads)

    def coordinates(self, X) -> np.ndarray:
        """q(X): the orthonormal basis coordinates (before M)."""
        return self._map(X, self.F)

    def kernel(self, X, Y=None) -> np.ndarray:
        """kappa_W(X, Y) exactly (dense |X| x |Y|)."""
        X = np.asarray(self._check_X(X), dtype=np.float64)
        Y = X if Y is None else np.asarray(self._check_X(Y, "Y"), dtype=np.float64)
        qx, qy = self.coordinates(X), self.coordinates(Y)
        r = self.M.shape[0]
        out = qx @ (self.M - self.alpha * np.eye(r)) @ qy.T
        if self.alpha:
            out += self.alpha * K.kernel_block(
                self.base_kernel, self.bandwidth, self._prep(X), self._prep(Y)
            )
        return out

    def pair_distance(self, X, Y) -> np.ndarray:
        """Learned squared distance kappa_W(x,x) + kappa_W(y,y) - 2 kappa_W(x,y), row by row."""
        X = np.asarray(self._check_X(X), dtype=np.float64)
        Y = np.asarray(self._check_X(Y, "Y"), dtype=np.float64)
        if X.shape[0] != Y.shape[0]:
            raise ValidationError(
                f"Y: expected as many rows as X ({X.shape[0]}), got {Y.shape[0]}"
            )
        dq = self.coordinates(X) - self.coordinates(Y)
        r = self.M.shape[0]
        out = np.einsum("ij,ij->i", dq @ (self.M - self.alpha * np.eye(r)), dq)
        if self.alpha:
            out += self.alpha * base_distance(
                self.base_kernel, self.bandwidth, self._prep(X), self._prep(Y)
            )
        return out

    # -- files ------------------------------------------------------------------------
    def save(self, path):
        """A versioned .npz (arrays and the JSON of the settings)."""
        import json

        meta = {
            "format": "npkl-inductive-kernel",
            "version": MODEL_VERSION,
            "kernel": self.base_kernel,
            "bandwidth": self.bandwidth,
            "alpha": self.alpha,
            "regularizer": self.regularizer,
            "scaling": self.scaling,
            "info": _jsonable(self.info),
        }
        arrays = dict(basis=self.basis, F=self.F, M=self.M, T=self.T)
        if hasattr(path, "write"):  # a file object (the run store's bytes)
            np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
            return
        with open(path, "wb") as fh:  # exactly this name (np.savez would add .npz)
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path):
        import json

        try:
            with np.load(path, allow_pickle=False) as d:
                meta = json.loads(str(d["meta"]))
                arrays = {k: d[k] for k in ("basis", "F", "M", "T")}
        except (OSError, KeyError, ValueError) as exc:
            raise ValidationError(
                f"path: {str(path)!r} is not an inductive-kernel model file ({exc}); give a "
                "model.npz written by "
                + fix("InductiveKernel.save", "a fit with --solver inductive --out DIR")
            ) from None
        if meta.get("format") != "npkl-inductive-kernel" or meta.get("version") != MODEL_VERSION:
            raise ValidationError(
                f"path: {str(path)!r} holds model format {meta.get('format')!r} version "
                f"{meta.get('version')!r}; this npkl-dist reads version {MODEL_VERSION}: refit "
                "the model with this version"
            )
        return cls(
            meta["kernel"],
            meta["bandwidth"],
            meta["alpha"],
            meta["regularizer"],
            info=meta["info"],
            scaling=meta.get("scaling"),
            **arrays,
        )


def _jsonable(d):
    out = {}
    for k, v in d.items():
        if isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, np.ndarray):
            v = v.tolist()
        out[k] = v
    return out


def base_distance(kernel, sigma, X, Y):
    """kappa(x,x) + kappa(y,y) - 2 kappa(x,y), row by row."""
    if kernel == "linear":
        D = X - Y
        return np.einsum("ij,ij->i", D, D)
    sq = np.einsum("ij,ij->i", X - Y, X - Y)
    return 2.0 - 2.0 * np.exp(-sq / (2.0 * sigma * sigma))


def _positive_int(name, v, hi=None, what=""):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValidationError(f"{name}: expected a positive integer, got {fmt_value(v)}")
    if hi is not None and v > hi:
        raise ValidationError(f"{name}: {v} is larger than {what} ({hi}); give at most {hi}")


def choose_basis(X, r, basis, seed):
    """(basis points B (b, d), J (b, r) or None for J = I)."""
    n = X.shape[0]
    rng = np.random.default_rng(seed)
    if basis == "random":
        idx = np.sort(rng.choice(n, r, replace=False))
        return K.take_rows(X, idx), None
    if basis == "kmeans++":
        from sklearn.cluster import kmeans_plusplus

        # k-means++ costs O(sample r d log r): 4 candidates per landmark are plenty
        sample = _sample(X, max(4 * r, 4000), rng)
        _, idx = kmeans_plusplus(sample, r, random_state=int(rng.integers(2**31 - 1)))
        return np.asarray(sample[np.sort(idx)], dtype=np.float64), None
    sample = _sample(X, max(CLUSTER_SAMPLE_PER * r, 10000 if basis == "kmeans" else 0), rng)
    from sklearn.cluster import MiniBatchKMeans

    km = MiniBatchKMeans(
        r, random_state=int(rng.integers(2**31 - 1)), n_init=3, batch_size=4096
    ).fit(sample)
    if basis == "kmeans":
        return np.asarray(km.cluster_centers_, dtype=np.float64), None
    # cluster indicators over the sample: column k sums the kernel to cluster k's members
    lab = km.labels_
    J = np.zeros((sample.shape[0], r))
    J[np.arange(sample.shape[0]), lab] = 1.0
    J = J[:, np.bincount(lab, minlength=r) > 0]
    return np.asarray(sample, dtype=np.float64), J


def _sample(X, size, rng):
    n = X.shape[0]
    if n <= size:
        return K.take_rows(X, np.arange(n))
    return K.take_rows(X, np.sort(rng.choice(n, size, replace=False)))


def default_bounds(kernel, sigma, X, seed, pairs=BOUND_PAIRS):
    """(u, l): the 5th and 95th percentiles of base-kernel squared distances over seeded
    random pairs (the paper's experiments; ITML's default, in squared units here)."""
    d = base_distance(kernel, sigma, *K.sample_pairs(X, pairs, seed, 7))
    u, l = np.percentile(d, [5, 95])
    return float(max(u, 1e-9)), float(max(l, 1e-9))


DEFAULT_LANDMARKS = 256  # r when not given (n when X has fewer rows)


def default_max_iter(regularizer: str) -> int:
    """The iteration cap when none is given: ITML passes for logdet, FISTA steps otherwise."""
    return 1000 if regularizer == "logdet" else 5000


def fit_inductive(
    X,
    constraints: Constraints,
    *,
    regularizer: str = "logdet",
    kernel: str = "rbf",
    bandwidth: float | str = "median",
    landmarks: int | None = None,
    basis: str = "kmeans++",
    gamma: float = 1.0,
    bounds: tuple[float, float] | None = None,
    tau: float = 1e-3,
    max_iter: int | None = None,
    tol: float | None = None,
    seed: int = 0,
    progress=None,
    basis_points=None,
    scale: str = "none",
) -> InductiveKernel:
    """Learn the inductive kernel kappa_W = alpha kappa + psi' L psi from pairwise constraints.

    Parameters
    ----------
    X : array (n, d)
        Training features (any array with row slicing: numpy, memmap, Zarr).
    constraints : Constraints
        Must-link / cannot-link pairs over the rows of X.
    regularizer : {'logdet', 'frobenius', 'trace'}
        LogDet (ITML; alpha = 1), Frobenius (alpha = 0) or trace (low rank; alpha = 0).
    kernel : {'rbf', 'linear'}
        Base kernel kappa; rbf: exp(-|x - y|^2 / (2 bandwidth^2)).
    bandwidth : float, 'median' or 'knn'
        RBF bandwidth sigma. 'median' (default): 2 sigma^2 = the median squared distance over
        20,000 seeded random pairs (the median pair has kernel 1/e); 'knn': the kNN graph's rule
        (half the mean distance to the 10 nearest neighbours), which makes kappa nearly zero
        between most pairs: a local kernel for graphs, poor as a global one
        (docs/decisions/inductive.md).
    landmarks : int, optional
        r, the number of basis functions (columns of J). Default: 256, or n when X has fewer
        rows (every point a landmark).
    basis : {'kmeans++', 'kmeans', 'random', 'clusters'}
        Landmarks by k-means++ seeding on a sample, k-means centres on a sample, a random
        subset of the points; or cluster indicators (J) over a sample of 10 r points.
    gamma : float
        Slack: larger enforces the constraints more (ITML's gamma; the weight of the squared
        hinge for frobenius / trace).
    bounds : (u, l), optional
        Must-link pairs: d_W <= u; cannot-link: d_W >= l (squared kernel distances). Default:
        the 5th and 95th percentiles of base-kernel distances over sampled pairs.
    tau : float
        trace only: the small Frobenius term.
    basis_points : array (b, d), optional
        Give B (J = I) instead of choosing landmarks (e.g. the training points themselves:
        the full problem of the paper's Theorem 1).
    scale : {'none', 'standard'}
        Feature scaling fitted on X and applied to every row the model sees (training and new
        points): 'standard' centres each column and divides it by its standard deviation.

    Returns
    -------
    InductiveKernel
    """
    t0 = time.perf_counter()
    if regularizer not in REGULARIZERS:
        raise ValidationError(
            f"regularizer: {regularizer!r} is not one of {', '.join(map(repr, REGULARIZERS))}"
        )
    if basis not in BASES:
        raise ValidationError(f"basis: {basis!r} is not one of {', '.join(map(repr, BASES))}")
    K.check_kernel(kernel, bandwidth)
    if not hasattr(X, "shape") or len(X.shape) != 2:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValidationError(f"X: expected a 2-D array (points x features), got {X.ndim}-D")
    n, d = X.shape
    if not isinstance(constraints, Constraints):
        raise ValidationError(
            f"constraints: expected npkl_dist.Constraints, got {type(constraints).__name__}; "
            "build one with Constraints.from_arrays(i, j, t, n_points) or sample_constraints"
        )
    if constraints.n_points != n:
        raise ValidationError(
            f"constraints: they refer to {constraints.n_points} points but X has {n} rows; "
            "give the features of the points the pairs index"
        )
    if constraints.m == 0:
        raise ValidationError("constraints: no pairs; give at least one must-link or cannot-link")
    if basis_points is None:
        if landmarks is None:
            landmarks = min(DEFAULT_LANDMARKS, n)
        _positive_int("landmarks", landmarks, n, "the number of points")
    if not (np.isfinite(gamma) or np.isinf(gamma)) or gamma <= 0:
        raise ValidationError(f"gamma: expected a positive number, got {fmt_value(gamma)}")
    scaling = feature_scale(X if isinstance(X, np.ndarray) else np.asarray(X[:]), scale)
    if scaling is not None:
        X = _Scaled(X, scaling)
    alpha = 1.0 if regularizer == "logdet" else 0.0
    sigma = None
    if kernel == "rbf":
        sigma = K.resolve_bandwidth(X, bandwidth, seed)
    if max_iter is None:
        max_iter = default_max_iter(regularizer)
    if tol is None:
        tol = 1e-3 if regularizer == "logdet" else 1e-7

    # 1. the basis and its orthonormal coordinates q = F k_B
    if basis_points is not None:
        B = np.asarray(basis_points, dtype=np.float64)
        J = None
    else:
        B, J = choose_basis(X, int(landmarks), basis, seed)
    KBB = K.kernel_block(kernel, sigma, B, B)
    KJ = KBB if J is None else J.T @ KBB @ J
    w, U = np.linalg.eigh(0.5 * (KJ + KJ.T))
    keep = w > RANK_FLOOR * max(w[-1], 1e-300)
    P = (U[:, keep] / np.sqrt(w[keep])).T  # (r', r): q = P psi
    F = P if J is None else P @ J.T  # (r', b)

    # 2. the constraints in q-coordinates
    ci, cj, ct = constraints.i, constraints.j, constraints.t
    pts = np.unique(np.concatenate([ci, cj]))
    Xp = K.take_rows(X, pts)
    b_sq = np.einsum("ij,ij->i", B, B)
    Qp = K.map_tiles(lambda t: K.kernel_block(kernel, sigma, t, B, b_sq) @ F.T, Xp)
    pos = np.searchsorted(pts, ci), np.searchsorted(pts, cj)
    Qd = (Qp[pos[0]] - Qp[pos[1]]).T  # (r', m)
    if bounds is None:
        bounds = default_bounds(kernel, sigma, X, seed)
    u, l = (float(v) for v in bounds)
    if not (u > 0 and l > 0):
        raise ValidationError(f"bounds: expected two positive numbers (u, l), got {bounds!r}")
    b = np.where(ct > 0, u, l).astype(np.float64)
    offsets = np.zeros(constraints.m)
    if alpha:
        base = base_distance(kernel, sigma, Xp[pos[0]], Xp[pos[1]])
        offsets = alpha * np.maximum(base - np.einsum("kc,kc->c", Qd, Qd), 0.0)
    t1 = time.perf_counter()

    # 3. the r' x r' problem
    if regularizer == "logdet":
        M, iters, converged = itml(
            Qd, ct, b, offsets, gamma=gamma, max_iter=max_iter, tol=tol, progress=progress
        )
    else:
        M, iters, converged = penalised(
            Qd,
            ct,
            b,
            regularizer,
            gamma=gamma,
            tau=tau,
            max_iter=max_iter,
            tol=tol,
            progress=progress,
        )
    obj = objective(M, Qd, ct, b, offsets, regularizer, gamma, tau)
    # z = M^{1/2} q, keeping M's positive directions
    wm, Um = np.linalg.eigh(0.5 * (M + M.T))
    pos_dir = wm > RANK_FLOOR * max(wm[-1], 1e-300)
    R = (Um[:, pos_dir] * np.sqrt(wm[pos_dir])).T  # (k, r'): R'R = M on its range
    T = R @ F
    t2 = time.perf_counter()
    info = {
        "n_points": int(n),
        "n_features": int(d),
        "n_constraints": constraints.m,
        "basis": basis if basis_points is None else "given",
        "landmarks": int(B.shape[0]) if J is None else int(J.shape[1]),
        "basis_rank": int(keep.sum()),
        "rank": int(T.shape[0]),
        "bounds": [u, l],
        "gamma": float(gamma),
        "objective": float(obj),
        "iterations": int(iters),
        "converged": bool(converged),
        "setup_seconds": t1 - t0,
        "solve_seconds": t2 - t1,
        "fit_seconds": t2 - t0,
        "seed": seed,
    }
    return InductiveKernel(kernel, sigma, alpha, regularizer, B, F, M, T, info, scaling)


class _Scaled:
    """Rows of X scaled on access (the fit reads X by rows only)."""

    def __init__(self, X, scaling):
        self.X, self.scaling, self.shape = X, scaling, X.shape

    def __getitem__(self, idx):
        rows = K.take_rows(self.X, idx) if isinstance(idx, np.ndarray) else self.X[idx]
        return apply_feature_scale(np.asarray(rows, dtype=np.float64), self.scaling)
