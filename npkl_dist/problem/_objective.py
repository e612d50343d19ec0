"""The NPKL objective, defined once. Every solver is tested against these functions.

``objective`` works on V in O(nnz(L) r + m r); ``objective_dense`` is the readable
reference over K = V V' (small n only).
"""

from __future__ import annotations

import numpy as np

__all__ = ["objective", "objective_dense", "loss_fn"]


def loss_fn(loss: str):
    """Vectorised loss of z = T_ij K_ij."""
    return {
        "hinge": lambda z: np.maximum(1.0 - z, 0.0),
        "squared_hinge": lambda z: np.maximum(1.0 - z, 0.0) ** 2,
        "square": lambda z: (1.0 - z) ** 2,
        "linear": lambda z: -z,
    }[loss]


def objective(problem, V) -> float:
    """tr(V'LV) + gamma sum_pairs loss(t v_i'v_j) for V of shape (n, r) (original order)."""
    V = np.asarray(V, dtype=np.float64)
    L = problem.L.astype(np.float64)
    c = problem.constraints
    smooth = float(np.sum(V * (L @ V)))
    z = c.t * np.einsum("kr,kr->k", V[c.i], V[c.j])
    return smooth + problem.gamma * float(np.sum(loss_fn(problem.loss)(z)))


def objective_dense(problem, K) -> float:
    """The same objective as a function of the kernel matrix K (n x n), eq. 3."""
    K = np.asarray(K, dtype=np.float64)
    L = problem.L.toarray().astype(np.float64)
    c = problem.constraints
    z = c.t * K[c.i, c.j]
    return float(np.trace(L @ K)) + problem.gamma * float(np.sum(loss_fn(problem.loss)(z)))
