"""The NPKL problem: manifold Laplacian, constraints, loss and parameters, validated once.

    min_V  tr(V L V') + gamma * sum_{(i,j) in T} loss(T_ij v_i'v_j)      (bcdkl-tnnls2015 eq. 10)

with K = V'V. Here V is stored as an (n, r) array, one row per point. The constraint sum
runs once over each unordered pair. For the linear loss every row also obeys ||v_i|| <= b.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from numbers import Real

import numpy as np
import scipy.sparse as sp

from .._errors import ConstraintWarning, ValidationError, fmt_value
from ..linalg._csr import csr_laplacian_stats
from ._constraints import Constraints
from ._objective import objective

__all__ = ["NPKLProblem", "LOSSES", "default_rank", "RANK_CAP"]

LOSSES = ("hinge", "squared_hinge", "square", "linear")

#: Cap of the default rank. The papers take the largest r with r(r+1)/2 <= m (Pataki's bound
#: on the rank of an SDP solution with m constraints); beyond 128 that bound grows with
#: sqrt(m) while memory grows as n*r, so the default stops there. Pass ``rank`` to go higher.
RANK_CAP = 128


def default_rank(m: int, n: int, cap: int = RANK_CAP) -> int:
    """Largest r with r(r+1)/2 <= m, capped at ``cap`` and at n; at least 1."""
    # r(r+1)/2 <= m  <=>  (2r+1)^2 <= 8m+1: exact in integers (math, not a numpy scalar
    # call, dear on small fits: docs/decisions/small-fit-times.md)
    r = (math.isqrt(8 * int(m) + 1) - 1) // 2
    return max(1, min(r, cap, n))


@dataclass(frozen=True)
class NPKLProblem:
    """A validated NPKL problem.

    Attributes
    ----------
    L : scipy.sparse.csr_matrix, shape (n, n)
        Symmetric positive definite Laplacian (sorted indices, explicit diagonal).
    constraints : Constraints
    loss : {'hinge', 'squared_hinge', 'square', 'linear'}
    gamma : float
    rank : int
    bound : float
        b of the linear loss (||v_i|| <= b).
    seed : int
    dtype : numpy dtype (float32 or float64)
    """

    L: sp.csr_matrix
    constraints: Constraints
    loss: str
    gamma: float
    rank: int
    bound: float
    seed: int
    dtype: np.dtype

    @property
    def n_points(self) -> int:
        return int(self.L.shape[0])

    @classmethod
    def build(
        cls,
        L,
        constraints: Constraints,
        *,
        loss: str = "square",
        gamma: float = 1.0,
        rank: int | None = None,
        bound: float = 1.0,
        seed: int = 0,
        dtype="float64",
    ):
        """Validate the parameters and return a problem (the public boundary)."""
        if not sp.issparse(L) or L.ndim != 2 or L.shape[0] != L.shape[1]:
            raise ValidationError(
                f"L: expected a square scipy sparse matrix, got {type(L).__name__} "
                f"{getattr(L, 'shape', '')}; build it with npkl_dist.laplacian(S)"
            )
        n = L.shape[0]
        if not isinstance(constraints, Constraints):
            raise ValidationError(
                f"constraints: expected a Constraints object, got {type(constraints).__name__}; "
                f"build one with Constraints.from_arrays or sample_constraints"
            )
        if constraints.n_points != n:
            raise ValidationError(
                f"constraints: built for {constraints.n_points} points but L has {n}; use the "
                f"same point set for both"
            )
        if constraints.m == 0 and not constraints.diagonal:
            warnings.warn(
                "constraints: the set is empty, so the kernel is learned from the graph alone "
                "(its smoothest directions, no side information); label some points or give "
                "must-link / cannot-link pairs",
                ConstraintWarning,
                stacklevel=2,
            )
        if loss not in LOSSES:
            raise ValidationError(f"loss: {loss!r} is not one of {', '.join(LOSSES)}")
        for name, val in (("gamma", gamma), ("bound", bound)):
            if (
                isinstance(val, bool)
                or not isinstance(val, Real)
                or not math.isfinite(val)
                or val <= 0
            ):
                raise ValidationError(
                    f"{name}: expected a finite number > 0, got {fmt_value(val)}"
                )
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        # `None in (float32, float64)` is True in numpy (None means float64): test explicitly
        if dt is None or dt.kind != "f" or dt.itemsize not in (4, 8):
            raise ValidationError(
                f"dtype: expected 'float32' or 'float64', got {fmt_value(dtype)}"
            )
        if rank is None:
            # Pataki's bound counts the fitted entries of K. BCD's objective has one term per
            # unordered pair (bcdkl §IV-A: m = 0.6n + 0.6n). KL-ADMM's diagonal protocol sums
            # over the ordered pairs of T plus (i, i): kl-admm Table 1 counts m = 2 * pairs + n
            # (chessboard: 340 for 100 points, r = 25).
            m_fit = 2 * constraints.m + n if constraints.diagonal else constraints.m
            rank = default_rank(m_fit, n)
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise ValidationError(f"rank: expected a positive integer, got {fmt_value(rank)}")
        if rank > n:
            raise ValidationError(
                f"rank: {rank} is larger than possible for {n} points (K = V'V has rank <= n); "
                f"pass rank <= {n}"
            )
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValidationError(f"seed: expected a non-negative integer, got {fmt_value(seed)}")
        if not (isinstance(L, sp.csr_matrix) and L.dtype == dt):
            L = sp.csr_matrix(L, dtype=dt)  # (a CSR matrix of that dtype shares its arrays)
        L.sum_duplicates()  # canonical: sorted indices, no duplicates (and sums them)
        finite, diag_positive, biggest, asymmetry = csr_laplacian_stats(
            L.indptr, L.indices, L.data
        )
        if not finite:
            raise ValidationError("L: holds NaN or inf entries; rebuild it from finite data")
        if not diag_positive:
            diag = L.diagonal()
            bad = np.flatnonzero(diag <= 0)[:10].tolist()
            raise ValidationError(
                f"L: diagonal entries must be > 0 (positive definite Laplacian), rows {bad} are "
                f"not; build L with laplacian(S, delta > 0)"
            )
        if asymmetry > 1e-6 * max(1.0, biggest):
            raise ValidationError("L: is not symmetric; symmetrise the graph (S = max(S, S'))")
        return cls(L, constraints, loss, float(gamma), int(rank), float(bound), int(seed), dt)

    def objective(self, V) -> float:
        """The NPKL objective of V, shape (n, r), in original point order (sparse, O(nnz r))."""

        return objective(self, V)
