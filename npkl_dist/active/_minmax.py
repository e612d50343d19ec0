"""AKL's min-max criterion (active-kernel-learning-icml2008 eq. (4)) on the low-rank kernel
K = V V', relaxed to the two rows of each candidate pair (docs/algorithms.md, "Active
constraint selection").

(4) asks for the pair (k, l) minimising kappa(k, l) = max_y omega((k, l), y), omega the
optimal objective once the pair is added with label y; the worst label is y* = -sign(K_kl)
(the paper's Theorem 1). Re-solving the whole problem for every candidate is what the paper
avoided with its convex relaxation (8) / dual (9); that relaxation is degenerate, though: for
a fixed kernel its h-subproblem (min sum eps^2 / h, sum h <= m^2, h >= 1) has h proportional
to eps with the bound h >= 1 slack (eps >= 1 and m >= 2), so every candidate's dual |W_kl|
takes the same value c sum(eps) / m^2, and "the largest |W_kl|" is decided by the solver's
rounding. What is used here instead, for the square loss F(V) = tr(V'LV) + gamma sum
(1 - t_ij v_i.v_j)^2 of this project:

    Delta(k, l) = min over v_k, v_l (every other row of V fixed) of
                  F(V) + gamma (1 - y* v_k.v_l)^2  -  F(V),

computed by ``steps`` alternating exact row solves (each an r x r system, the row problem
of BCD with the added pair). Restricting the minimisation over K to two rows of V bounds
omega from above, so Delta is an upper bound on kappa - F(V) whose ranking is asked for;
with ``steps = 0`` it is gamma (1 + |K_kl|)^2, the paper's Corollary 2 (least |K_kl|). As
the paper does, the candidates are first cut to the ``prefilter`` pairs of least |K_kl|.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._errors import ValidationError


def _row_parts(L, V, k):
    """(L_kk, b_k = sum_{j != k} L_kj v_j) of row k."""
    row = L.getrow(k)
    idx, val = row.indices, row.data
    diag = float(val[idx == k].sum())
    off = idx != k
    return diag, val[off] @ V[idx[off]]


def _pairs_at(constraints, n):
    """CSR of the constraints (both directions, values t) for the rows' pair terms."""
    c = constraints
    T = sp.coo_matrix(
        (np.concatenate([c.t, c.t]).astype(np.float64),
         (np.concatenate([c.i, c.j]), np.concatenate([c.j, c.i]))),
        shape=(n, n),
    )  # fmt: skip
    return T.tocsr()


def _row_value(diag, b, v, W, t, gamma):
    """The terms of F with row v: L_kk |v|^2 + 2 v.b + gamma sum (1 - t_j v.w_j)^2."""
    z = W @ v if W.shape[0] else np.zeros(0)
    return diag * (v @ v) + 2.0 * (v @ b) + gamma * float(np.sum((1.0 - t * z) ** 2))


def _solve_row(diag, b, W, t, gamma, r):
    """argmin_v of _row_value: (L_kk I + gamma W'W) v = -b + gamma W't."""
    A = diag * np.eye(r) + gamma * (W.T @ W)
    return np.linalg.solve(A, -b + gamma * (W.T @ t))


def minmax_deltas(
    V, pairs, L, constraints, gamma: float, steps: int = 2, rows: list | None = None
) -> np.ndarray:
    """Delta(k, l) of the module docstring for each pair (the square loss); ``rows``, if a
    list, receives each pair's re-solved (label, v_k, v_l)."""
    V = np.asarray(V, dtype=np.float64)
    n, r = V.shape
    L = sp.csr_matrix(L)
    T = _pairs_at(constraints, n)
    out = np.empty(len(pairs))
    for q, (k, l) in enumerate(np.asarray(pairs, dtype=np.int64).reshape(-1, 2)):
        k, l = int(k), int(l)
        y = -1.0 if V[k] @ V[l] > 0 else 1.0  # the worst label: -sign(K_kl), +1 at 0
        dk, bk = _row_parts(L, V, k)
        dl, bl = _row_parts(L, V, l)
        Lkl = float(L[k, l])
        bk_o, bl_o = bk - Lkl * V[l], bl - Lkl * V[k]  # b without the pair's own entry
        tk = T.getrow(k)
        tl = T.getrow(l)
        mk, ml = tk.indices != l, tl.indices != k  # an existing (k, l) pair: cannot be
        Wk, sk = V[tk.indices[mk]], tk.data[mk]  # a candidate (pools skip asked pairs)
        Wl, sl = V[tl.indices[ml]], tl.data[ml]
        vk, vl = V[k].copy(), V[l].copy()

        def local(vk, vl, with_pair):
            val = _row_value(dk, bk_o, vk, Wk, sk, gamma) + _row_value(dl, bl_o, vl, Wl, sl, gamma)
            val += 2.0 * Lkl * (vk @ vl)
            if with_pair:
                val += gamma * (1.0 - y * (vk @ vl)) ** 2
            return val

        before = local(vk, vl, False)
        for _ in range(int(steps)):
            vk = _solve_row(dk, bk_o + Lkl * vl, np.vstack([Wk, vl]), np.r_[sk, y], gamma, r)
            vl = _solve_row(dl, bl_o + Lkl * vk, np.vstack([Wl, vk]), np.r_[sl, y], gamma, r)
        out[q] = local(vk, vl, True) - before
        if rows is not None:
            rows.append((y, vk, vl))
    return out


def check_minmax(problem) -> None:
    if problem is None:
        raise ValidationError(
            "problem: strategy 'minmax' re-solves the rows of each candidate pair and needs "
            "the fit's NPKLProblem (its L, constraints and gamma); pass problem=..."
        )
    if problem.loss != "square":
        raise ValidationError(
            f"problem: strategy 'minmax' is derived for the square loss, got loss "
            f"{problem.loss!r}; fit with loss='square' or use strategy 'min_abs_k'"
        )
