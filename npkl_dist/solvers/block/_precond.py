"""Preconditioners of the U block L_UU: Jacobi and smoothed-aggregation AMG on the free rows
(the hierarchy cached across fits), and the preconditioned CG loop."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import numpy as np
import pyamg
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cho_factor

from ...linalg._aggregation import plain_aggregation_hierarchy
from ...linalg._blas import _OneBlasThread
from ...linalg._memory import populated_empty
from .._plan import split_nonzero
from ._kernel_set import kernels
from ._kernels import (
    RB,
    _cg_update,
    _cholesky_solve_block,
    _colsum,
    _direction,
    _matvec_dot,
    _restriction_plan,
)
from ._layout import free_matrix, whole_free_blocks

# --------------------------------------------------------------------------------------------
# preconditioners (symmetric positive definite, act on all columns at once)
# --------------------------------------------------------------------------------------------


def _int64_csr(M):
    M = sp.csr_matrix(M, dtype=np.float64)
    M.sort_indices()
    M.indptr = M.indptr.astype(np.int64)
    M.indices = M.indices.astype(np.int64)
    return M


_GLOBAL_RANDOM_LOCK = threading.RLock()


@contextmanager
def seeded_global_random(seed: int = 0):
    """pyamg draws from numpy's global generator (spectral-radius estimates, LOBPCG's
    preconditioner set-up): seed it for the block and restore the caller's state, so that
    fits are reproducible bit for bit. Holds a process-wide lock meanwhile: Dask actors
    sharing a worker process build their preconditioners on concurrent threads."""
    with _GLOBAL_RANDOM_LOCK:
        saved = np.random.get_state()
        np.random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(saved)


class JacobiPreconditioner:
    """Z = D^{-1} R."""

    name = "jacobi"

    def __init__(self, A_diag, serial: bool = False):
        self.dinv = 1.0 / np.asarray(A_diag, np.float64)
        self.setup_seconds = 0.0
        self.K = kernels(serial)
        # no coarse correction: P with empty rows
        self._no_P = (
            np.zeros(self.dinv.shape[0] + 1, np.int64),
            np.empty(0, np.int64),
            np.empty(0),
            np.empty((0, 0)),
        )

    def apply_dots(self, R, Z, part_rz, part_rr):
        ptr, idx, val, X = self._no_P
        self.K.additive_dots(self.dinv, R, ptr, idx, val, X, Z, part_rz, part_rr)


# pyamg's aggregation reads only the sparsity pattern of its strength matrix and skips the
# diagonal, and the default strength (symmetric, theta = 0) keeps every entry: so A itself
# (strength=None) gives the same aggregates and the same hierarchy, bit for bit, without
# the pass that computes and row-scales a strength matrix (tested;
# docs/decisions/block-fit-at-1e6.md).
AMG_OPTIONS = {"strength": None}


#: A row of L_UU whose off-diagonal entries sum (in absolute value) to at most this times its
#: diagonal is decoupled for the AMG preconditioner (``AMGPreconditioner``'s fallback).
DECOUPLED_RTOL = float(np.sqrt(np.finfo(np.float64).eps))


def _decoupled_rows(A: sp.csr_matrix, rtol: float = DECOUPLED_RTOL) -> np.ndarray:
    """Mask of the rows of A whose off-diagonal absolute sum is at most ``rtol`` times the
    diagonal (none, or Gaussian weights of far neighbours, ~1e-20: they round away next to
    the diagonal)."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    off = A.indices != rows
    mass = np.bincount(rows[off], weights=np.abs(A.data[off]), minlength=A.shape[0])
    return mass <= rtol * np.abs(A.diagonal())


#: The AMG hierarchies' coarsest size and depth (pyamg's defaults).
AMG_MAX_COARSE = 500
AMG_MAX_LEVELS = 10

#: Key of a block fit's cache holding the AMG matrix (L_UU with its diagonal, canonical) from
#: :func:`whole_free_blocks` until the session's preconditioner takes it.
_AMG_MATRIX_KEY = "free matrix"

#: Key of a block fit's cache holding L_UU's plain-aggregation hierarchy from the
#: 'coarse-free' start until the session's preconditioner takes it.
HIERARCHY_KEY = "free hierarchy"


def free_hierarchy(prep, n_free: int, cache=None):
    """The plain-aggregation hierarchy of L_UU (rows and columns 0..n_free of the prepared L,
    U-first) that the default preconditioner ('amg-additive', and 'amg-plain') builds: the
    same matrix (``free_operator`` over every row, then ``free_matrix``) and the same
    ``plain_aggregation_hierarchy``, bit for bit. ``cache``: a block fit's; the U-block
    operator is taken from it, or left in it under the session's key ('operator') with the
    C columns of the U rows ('uc'), all three from one pass (:func:`whole_free_blocks`)."""
    if cache is not None and CANONICAL_OPERATOR_KEY in cache:
        A = cache[CANONICAL_OPERATOR_KEY]
    elif cache is not None and "operator" in cache:
        A = free_matrix(*cache["operator"], np.asarray(prep.diag[:n_free], np.float64))
    else:
        A = _free_blocks_into(cache, prep.indptr, prep.indices, prep.data, prep.diag, n_free)
    return plain_aggregation_hierarchy(A, AMG_MAX_COARSE, AMG_MAX_LEVELS)


def _free_blocks_into(cache, indptr, indices, data, diag, n_free):
    """:func:`whole_free_blocks`: the operator and the C columns left in ``cache`` (if any)
    under the session's keys ('operator', or ``CANONICAL_OPERATOR_KEY`` where the AMG matrix
    serves as the operator; 'uc'); returns the AMG matrix."""
    bounds = None
    if cache is not None:
        nu = int(n_free)
        bounds = (np.empty(nu), np.empty(nu))
    ops, A, uc = whole_free_blocks(indptr, indices, data, diag, n_free, bounds)
    if cache is not None:
        cache[_FINEST_BOUNDS_KEY] = (A.data, A.indptr) + bounds
        cache["uc"] = uc
        if ops is None:
            cache[CANONICAL_OPERATOR_KEY] = A
        else:
            cache["operator"] = ops
    return A


#: A fit cache's key for the AMG matrix's diagonal and Gershgorin ratios from the pass that
#: formed it (``whole_free_blocks(bounds=...)``): (A.data, A.indptr, diag, ratio), until the
#: session's preconditioner takes them for its finest level.
_FINEST_BOUNDS_KEY = "free matrix bounds"

#: A fit cache's key for the AMG matrix of L_UU where it also serves as the U block's
#: operator (:func:`whole_free_blocks`; the product then skips its diagonal entries).
CANONICAL_OPERATOR_KEY = "operator (AMG matrix)"


def _same_array(a, b) -> bool:
    """Whether ``a`` and ``b`` are the same memory (one array, or views of all of it)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


class AMGPreconditioner:
    """One symmetric V-cycle of smoothed-aggregation AMG (pyamg hierarchy), all columns at once.

    pyamg builds the hierarchy (aggregation, smoothed prolongators, Galerkin coarse operators)
    once per graph; a plain-aggregation one (``smooth=None``) comes from pyamg's steps with
    compiled Galerkin products (:mod:`npkl_dist.linalg._aggregation`). pyamg's own cycle works on one
    vector at a time, so the cycle here applies the same hierarchy to an (n, r) block: damped
    Jacobi pre- and post-smoothing (weight 4/(3 rho), rho = the Gershgorin bound on the
    spectral radius of D^{-1}A, which keeps the cycle SPD), Galerkin restriction P', and a
    dense Cholesky solve on the coarsest level.
    ``additive``: the finest level takes its Jacobi weights plus the coarse correction
    instead of smoothing (see :meth:`_additive`).
    """

    name = "amg"

    def __init__(
        self,
        A: sp.csr_matrix,
        max_coarse: int = AMG_MAX_COARSE,
        max_levels: int = AMG_MAX_LEVELS,
        smooth="jacobi",
        serial: bool = False,
        additive: bool = False,
        hierarchy=None,
        finest_bounds=None,
    ):
        """``hierarchy``: A's plain-aggregation hierarchy (``smooth=None``), already built
        with these ``max_coarse`` and ``max_levels`` (:func:`free_hierarchy`, which the
        'coarse-free' start builds first); used instead of building it again.
        ``finest_bounds``: (data, indptr, diag, ratio), ``_diag_gershgorin`` of the matrix
        whose ``data`` and ``indptr`` arrays these are (:func:`whole_free_blocks`); taken
        for the finest level if that level's matrix holds these very arrays."""

        t0 = time.perf_counter()
        self.K = kernels(serial)
        self.additive = bool(additive)
        A = sp.csr_matrix(A, dtype=np.float64)
        if hierarchy is not None and smooth is not None:
            raise ValueError(
                "AMGPreconditioner: a given hierarchy is a plain-aggregation one (smooth=None)"
            )
        if smooth == "jacobi":
            # local (row-sum) weights instead of a power-iteration spectral radius:
            # same hierarchy quality here at a fraction of the set-up time
            smooth = ("jacobi", {"weighting": "local"})
        opts = dict(max_coarse=max_coarse, smooth=smooth, max_levels=max_levels)
        self._finest_bounds = finest_bounds
        self._split = None
        if not self._build(A, opts, hierarchy):
            # a degenerate hierarchy: rows of A coupled to the rest by nothing, or by weights
            # that round away next to their diagonal (two points joined only by a Gaussian
            # weight of 1e-20), made an aggregate whose prolongator column the local Jacobi
            # smoothing cancelled to exactly zero; the next level had a zero row and the cycle
            # gave NaN (6,000 points, 40% of them constrained: tests/solvers/block/test_blocksolve.py).
            # Such rows are taken as decoupled: solved by their diagonal, the hierarchy built
            # on the others.
            iso = _decoupled_rows(A)
            keep = np.flatnonzero(~iso)
            self._split = (keep, np.flatnonzero(iso), 1.0 / A.diagonal()[iso])
            if keep.size == 0:  # a diagonal block: no hierarchy at all
                self.levels, self.coarse, self.n_levels = [], None, 0
                self.operator_complexity = 1.0
            elif not self._build(A[keep][:, keep].tocsr(), opts):
                raise ValueError(
                    "precond: the AMG hierarchy of the unconstrained block is degenerate (a "
                    "coarse level with a zero diagonal); fit with precond='jacobi'"
                )
        self._finest_bounds = None  # held by the finest level where taken
        self.setup_seconds = time.perf_counter() - t0

    def _build(self, A, opts, hierarchy=None) -> bool:
        """The hierarchy of A (pyamg, or ``hierarchy`` if given) and its levels; False where
        it is degenerate (a level with a non-positive diagonal, or a coarsest matrix that is
        not positive definite)."""

        # pyamg estimates spectral radii from np.random's global generator: seed it for the
        # set-up (restoring the caller's state) so that the hierarchy, and with it every fit
        # and every resume, is reproducible bit for bit.
        with seeded_global_random():
            if hierarchy is not None:
                ml = hierarchy
            elif opts["smooth"] is None:
                # plain aggregation: pyamg's steps, with the Galerkin products compiled
                # (npkl_dist.linalg._aggregation; the same hierarchy bit for bit)
                ml = plain_aggregation_hierarchy(
                    A, opts["max_coarse"], opts["max_levels"], serial=self.K.serial
                )
            else:
                ml = pyamg.smoothed_aggregation_solver(
                    A, symmetry="hermitian", keep=False, **opts, **AMG_OPTIONS
                )
            try:
                return self._setup_levels(ml)
            except LinAlgError:  # the coarsest matrix is not positive definite
                return False

    def _setup_levels(self, ml) -> bool:
        """The levels of pyamg's hierarchy ``ml`` as the cycle uses them; False (nothing
        usable set) where a level has a non-positive diagonal."""

        self.levels = []
        for k, lev in enumerate(ml.levels[:-1]):
            A = sp.csr_matrix(lev.A)
            # the diagonal and the Gershgorin bound on rho(D^-1 A) in one pass: cheap, and a
            # smaller weight keeps the smoother convergent and the cycle SPD
            given = self._finest_bounds if k == 0 else None
            if (
                given is not None
                and _same_array(A.data, given[0])
                and _same_array(A.indptr, given[1])
            ):
                d, ratio = given[2], given[3]  # from the pass that wrote A
            else:
                d, ratio = np.empty(A.shape[0]), np.empty(A.shape[0])
                self.K.diag_gershgorin(A.indptr, A.indices, A.data, d, ratio)
            if np.any(d <= 0):
                return False
            level = {"diag": d, "w": (4.0 / (3.0 * ratio.max())) / d, "P": _int64_csr(lev.P)}
            level["scatter"] = _restriction_plan(level["P"], self.K.serial)
            if level["scatter"] is None:  # restricted by the product with R = P'
                level["R"] = _int64_csr(lev.P.T)
            if not (self.additive and k == 0):  # the additive finest level never smooths
                # the off-diagonal part (sorted rows, no explicit zeros) its smoothing reads
                (ptr, idx, val), _ = split_nonzero(A, serial=self.K.serial)
                level.update(indptr=ptr, indices=idx, data=val)
            self.levels.append(level)
        coarse = ml.levels[-1].A.toarray()
        # lower Cholesky factor; solved by a compiled substitution, not LAPACK: a threaded
        # BLAS on a busy machine (or from Dask actor threads) made it many times slower

        with _OneBlasThread():  # tiny: threads only contend
            Lc = np.tril(cho_factor(coarse, lower=True)[0])
        self.coarse = (np.ascontiguousarray(Lc), np.ascontiguousarray(Lc.T))
        self.operator_complexity = float(ml.operator_complexity())
        self._work_r, self._work_arrays = None, None
        self.n_levels = len(ml.levels)
        return True

    def _work(self, r):
        """Per-level work arrays for r columns, allocated once and reused: a fresh (n, r)
        array per cycle meant fresh pages from the OS each time
        (docs/decisions/block-fit-at-1e6.md). Level k: x, res (its size), the restricted
        residual and the coarse correction (the next level's size)."""
        if self._work_r != r:
            self._work_arrays = []
            for k, lev in enumerate(self.levels):
                # the additive cycle never smooths on the finest level
                n_k = 0 if self.additive and k == 0 else lev["diag"].shape[0]
                n_c = lev["P"].shape[1]
                # base pages, mapped at once (npkl_dist.linalg._memory): level 1 at n = 1e6 holds
                # four 4.4 MB arrays, fresh memory that huge pages make dear in this VM
                self._work_arrays.append(
                    (
                        populated_empty((n_k, r)),
                        populated_empty((n_k, r)),
                        populated_empty((n_c, r)),
                        populated_empty((n_c, r)),
                    )
                )
            self._work_r = r
        return self._work_arrays

    def _restrict(self, lev, b, out):
        """out = P' b: by the level's scatter plan where it has one, else the product
        with R = P' (the same sums, bitwise)."""
        plan = lev.get("scatter")
        if plan is not None:
            P_ = lev["P"]
            self.K.restrict_scatter(*plan, P_.indptr, P_.indices, P_.data, b, out)
        else:
            R_ = lev["R"]
            self.K.csr_mm(R_.indptr, R_.indices, R_.data, b, out, False)

    def _cycle(self, k, b, out, work):
        """out = the V-cycle from level k applied to b (out must not alias b)."""
        if k == len(self.levels):
            _cholesky_solve_block(*self.coarse, b, out)
            return
        lev = self.levels[k]
        args = (lev["indptr"], lev["indices"], lev["data"], lev["diag"], lev["w"])
        K = self.K
        x, res, coarse_b, coarse_x = work[k]
        K.pre_smooth(*args, b, x, res)  # x = w b (one Jacobi step from 0), res = b - A x
        P_ = lev["P"]
        self._restrict(lev, res, coarse_b)
        self._cycle(k + 1, coarse_b, coarse_x, work)
        K.csr_mm(P_.indptr, P_.indices, P_.data, coarse_x, x, True)
        K.post_smooth(*args, b, x, out)  # out = x + w (b - A x)

    def apply_to(self, R, Z):
        """Z = M R for an (n, r) block (Z may be a view, e.g. the own rows of a longer
        array; it must not alias R)."""
        if self._split is not None:  # decoupled rows exactly, the hierarchy on the rest
            keep, iso, inv = self._split
            Z[iso] = R[iso] * inv[:, None]
            if keep.size:
                Zk = np.empty((keep.size, R.shape[1]))
                self._apply(np.ascontiguousarray(R[keep]), Zk)
                Z[keep] = Zk
            return
        self._apply(R, Z)

    def _apply(self, R, Z):
        if not self.levels:
            if Z.dtype != np.float64:  # the substitutions accumulate in their output
                Z64 = np.empty(R.shape)
                _cholesky_solve_block(*self.coarse, R, Z64)
                Z[...] = Z64
                return
            _cholesky_solve_block(*self.coarse, R, Z)
        elif self.additive:
            self._additive(R, Z, self._work(R.shape[1]))
        else:
            self._cycle(0, R, Z, self._work(R.shape[1]))

    def _additive(self, b, out, work, part_rz=None, part_rr=None):
        """out = W b + P M_1 P' b: the finest level additive (its Jacobi weights W plus the
        coarse correction, the V-cycle from level 1), so no product with the finest matrix.
        A sum of two SPD operators: SPD, a valid PCG preconditioner. Weaker per step than
        the V-cycle, but each outer iteration of a block solve then makes one pass over
        L_UU instead of three; see ``precond`` in ``fit_bcd``. With ``part_rz, part_rr``:
        the finest level fused with the b*out and b*b chunk sums (``_additive_dots``)."""
        lev = self.levels[0]
        _, _, coarse_b, coarse_x = work[0]
        P_ = lev["P"]
        self._restrict(lev, b, coarse_b)
        self._cycle(1, coarse_b, coarse_x, work)
        if part_rz is not None:
            self.K.additive_dots(
                lev["w"], b, P_.indptr, P_.indices, P_.data, coarse_x, out, part_rz, part_rr
            )
            return
        self.K.scale_rows(lev["w"], b, out)
        self.K.csr_mm(P_.indptr, P_.indices, P_.data, coarse_x, out, True)

    def apply_dots(self, R, Z, part_rz, part_rr):
        """Z = M R with the R*Z and R*R chunk sums (``_dots``). The additive cycle's finest
        level, which only scales R and adds the prolongated coarse correction, is fused with
        the sums (``_additive_dots``: the same numbers as ``apply_to`` then ``_dots``, in one
        pass over the rows instead of three; docs/decisions/block-fit-at-1e6.md)."""
        if self._split is None and self.levels and self.additive:
            self._additive(R, Z, self._work(R.shape[1]), part_rz, part_rr)
            return
        self.apply_to(R, Z)
        self.K.dots(R, Z, part_rz, part_rr)


# --------------------------------------------------------------------------------------------
# block PCG
# --------------------------------------------------------------------------------------------


def pcg_loop(precondition, matvec, update, B_norm, *, rtol: float, maxiter: int) -> int:
    """Warm-started PCG on every column at once, written against three operations so that
    one loop serves the in-process solve and the partitioned (Dask) one:

    precondition() -> (rz, rr)        Z = M R; per-column R'Z and R'R
    matvec(beta) -> pq                P = Z (beta None) or Z + beta P; Q = A P; per-column P'Q
    update(alpha, precondition) -> (rz, rr) or None
                                      X += alpha P, R -= alpha Q, then (if asked) Z = M R

    Stops when every column has ||R_c|| <= rtol ||B_c|| (``B_norm`` None: the initial
    residual's norms) or after ``maxiter`` iterations. Returns the number of iterations.
    """
    rz, rr = precondition()
    target = rtol * (np.sqrt(rr) if B_norm is None else B_norm)
    if np.all(np.sqrt(rr) <= target):
        return 0
    it = 0
    beta = None
    while it < maxiter:
        it += 1
        pq = matvec(beta)
        alpha = np.where(pq > 0, rz / np.where(pq > 0, pq, 1.0), 0.0)
        if it == maxiter:  # no next iteration: skip the preconditioner
            update(alpha, False)
            break
        rz_new, rr = update(alpha, True)
        if np.all(np.sqrt(rr) <= target):
            break
        beta = np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        rz = rz_new
    return it


def block_pcg(A_off, A_diag, M, X, R, B_norm, *, rtol: float, maxiter: int, work=None):
    """Warm-started PCG on every column of A X = B, given the residual R = B - A X.

    X and R are updated in place. Stops when every column has ||R_c|| <= rtol ||B_c|| or after
    ``maxiter`` iterations. Returns the number of iterations.
    """
    n, r = X.shape
    n_ch = (n + RB - 1) // RB
    if work is None:
        work = (np.empty_like(X), np.empty_like(X), np.empty_like(X))
    Z, P, Q = work
    part_a = np.empty((n_ch, r))
    part_b = np.empty((n_ch, r))

    def precondition():
        M.apply_dots(R, Z, part_a, part_b)
        return _colsum(part_a), _colsum(part_b)

    def matvec(beta):
        if beta is None:
            P[...] = Z
        else:
            _direction(P, Z, beta)
        _matvec_dot(A_off.indptr, A_off.indices, A_off.data, A_diag, P, Q, part_a)
        return _colsum(part_a)

    def update(alpha, again):
        _cg_update(X, R, P, Q, alpha)
        return precondition() if again else None

    return pcg_loop(precondition, matvec, update, B_norm, rtol=rtol, maxiter=maxiter)
