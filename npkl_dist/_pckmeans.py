"""Pairwise-constrained k-means (PCK-means, Basu, Banerjee & Mooney, SDM 2004) on the rows
of a factor V, compiled.

Objective over labels l and centres mu (each constraint counted once):

    J(l, mu) = sum_i ||x_i - mu_{l_i}||^2 + w * #{must-links (i, j): l_i != l_j}
                                          + w * #{cannot-links (i, j): l_i == l_j}

One run alternates (a) an ICM assignment sweep: the points are visited in a random order
(drawn per sweep from the run's seeded generator) and each takes the cluster h minimising
||x_i - mu_h||^2 + w * (its must-link partners labelled other than h) + w * (its cannot-link
partners labelled h), given the partners' current labels (unlabelled partners, in the first
sweep, count nothing); on a tie the point keeps its label, else the lowest h wins; and (b)
the centres become the means of their clusters. With the centres fixed, a point's local cost
differs from J by terms that do not involve it, so (a) never raises J; (b) minimises the
inertia for fixed labels and leaves the penalties alone. A cluster left empty takes the point
farthest from its own centre (scikit-learn's relocation), so no cluster is ever empty.
It stops when a sweep changes no label (or after ``max_iter`` sweeps).

Cost per sweep: O(n r k) for the distances, one matrix product (BLAS) since the centres are
fixed during a sweep, plus O(n k + m) for the sequential assignment over the constraints' CSR
adjacency; memory O(n k) for the distances.
The rows are clustered in float64 (one compiled specialisation per kernel; float32 input is
converted once). ``pck_run_reference`` is the slow, readable form of the same run that the
tests hold the compiled one to. Choice of w and of the starts:
docs/decisions/constrained-clustering.md.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["constraint_adjacency", "pck_run", "pck_run_reference", "pck_objective"]


def constraint_adjacency(constraints, n: int):
    """Symmetric CSR adjacency of the constraints over ``n`` points: ``(indptr, partner,
    sign)``, int64 / int64 / int8, sign +1 for a must-link and -1 for a cannot-link. Pairs
    (i, i) (KL-ADMM's K_ii = 1 targets) are not constraints between two points and are left
    out."""
    i = np.asarray(constraints.i, dtype=np.int64)
    j = np.asarray(constraints.j, dtype=np.int64)
    t = np.sign(np.asarray(constraints.t)).astype(np.int8)
    off = i != j
    i, j, t = i[off], j[off], t[off]
    A = sp.csr_matrix(
        (np.concatenate([t, t]), (np.concatenate([i, j]), np.concatenate([j, i]))),
        shape=(n, n),
    )
    A.sort_indices()
    return A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data.astype(np.int8)


def sq_distances(X, C, xx):
    """Squared distances of the rows of X to the centres C, (n, k), by one matrix product
    (BLAS): xx - 2 X C' + |c|^2 with ``xx`` the rows' squared norms. The centres are fixed
    during an assignment sweep, so one product serves the whole sweep."""
    return xx[:, None] - 2.0 * (X @ C.T) + np.einsum("ij,ij->i", C, C)[None, :]


@njit(cache=True, nogil=True)
def _assign(D, indptr, partner, sign, w, order, labels, cost):  # pragma: no cover
    """One ICM sweep in ``order``. IN: D (n, k) squared distances to the centres, indptr,
    partner, sign, w, order (n,). INOUT: labels (n,) (-1: not yet labelled). OUT: cost (k,)
    scratch. Returns the number of labels changed."""
    k = D.shape[1]
    changed = 0
    for p in range(order.shape[0]):
        i = order[p]
        for h in range(k):
            cost[h] = D[i, h]
        for e in range(indptr[i], indptr[i + 1]):
            lj = labels[partner[e]]
            if lj < 0:
                continue
            if sign[e] > 0:  # must-link: every cluster but lj pays w
                for h in range(k):
                    if h != lj:
                        cost[h] += w
            else:  # cannot-link: lj pays w
                cost[lj] += w
        cur = labels[i]
        best = 0
        for h in range(1, k):
            if cost[h] < cost[best]:
                best = h
        if cur >= 0 and cost[cur] <= cost[best]:
            best = cur
        if best != cur:
            labels[i] = best
            changed += 1
    return changed


@njit(cache=True, nogil=True)
def _means(X, labels, C, counts):  # pragma: no cover
    """IN: X (n, r), labels (n,). OUT: C (k, r) the means of the clusters (rows of empty
    clusters left zero), counts (k,)."""
    C[:] = 0.0
    counts[:] = 0
    for i in range(X.shape[0]):
        h = labels[i]
        counts[h] += 1
        for t in range(X.shape[1]):
            C[h, t] += X[i, t]
    for h in range(C.shape[0]):
        if counts[h] > 0:
            for t in range(X.shape[1]):
                C[h, t] /= counts[h]


@njit(cache=True, nogil=True)
def _objective(X, C, labels, indptr, partner, sign, w, d2):  # pragma: no cover
    """IN: X, C, labels, indptr, partner, sign, w. OUT: d2 (n,) each point's squared
    distance to its centre. Returns J (each constraint counted once)."""
    inertia = 0.0
    for i in range(X.shape[0]):
        h = labels[i]
        s = 0.0
        for t in range(X.shape[1]):
            z = X[i, t] - C[h, t]
            s += z * z
        d2[i] = s
        inertia += s
    violated = 0
    for i in range(X.shape[0]):
        for e in range(indptr[i], indptr[i + 1]):
            j = partner[e]
            if j > i and (labels[i] == labels[j]) != (sign[e] > 0):
                violated += 1
    return inertia + w * violated


def _relocate(X, labels, C, counts, d2):
    """Give every empty cluster the point farthest from its centre among clusters of more
    than one point (scikit-learn's rule), then recompute the means. Returns True if any
    point moved."""
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return False
    far = np.argsort(-d2, kind="stable")
    p = 0
    for h in empty:
        while counts[labels[far[p]]] <= 1:
            p += 1
        i = far[p]
        counts[labels[i]] -= 1
        labels[i] = h
        counts[h] = 1
        p += 1
    return True


def pck_run(X, C0, adjacency, w: float, seed: int, max_iter: int = 100):
    """One PCK-means run from centres ``C0`` (k, r). ``X`` float64 C-contiguous (n, r);
    ``adjacency`` from :func:`constraint_adjacency`; ``seed`` draws the sweep orders.
    Returns (labels int64 (n,), centres float64 (k, r) the means of the labels, objective,
    sweeps)."""
    indptr, partner, sign = adjacency
    n, k = X.shape[0], C0.shape[0]
    rng = np.random.default_rng(seed)
    labels = np.full(n, -1, dtype=np.int64)
    C = np.array(C0, dtype=np.float64, order="C")
    cost = np.empty(k)
    counts = np.zeros(k, dtype=np.int64)
    d2 = np.empty(n)
    xx = np.einsum("ij,ij->i", X, X)
    sweeps = 0
    for sweeps in range(1, max_iter + 1):  # noqa: B007 -- the count is returned
        order = rng.permutation(n)
        D = sq_distances(X, C, xx)
        changed = _assign(D, indptr, partner, sign, float(w), order, labels, cost)
        _means(X, labels, C, counts)
        if np.any(counts == 0):
            _objective(X, C, labels, indptr, partner, sign, float(w), d2)
            _relocate(X, labels, C, counts, d2)
            _means(X, labels, C, counts)
            changed += 1
        if changed == 0:
            break
    J = _objective(X, C, labels, indptr, partner, sign, float(w), d2)
    return labels, C, float(J), sweeps


def pck_objective(X, labels, C, constraints, w: float) -> float:
    """J(labels, C) written plainly (numpy; for tests and the reference)."""
    X = np.asarray(X, dtype=np.float64)
    i, j, t = constraints.i, constraints.j, constraints.t
    off = i != j
    i, j, t = i[off], j[off], t[off]
    same = labels[i] == labels[j]
    violated = np.count_nonzero(same != (t > 0))
    return float(((X - C[labels]) ** 2).sum() + w * violated)


def pck_run_reference(X, C0, constraints, w: float, seed: int, max_iter: int = 100):
    """The slow, readable form of :func:`pck_run` (numpy, Python loops over points and
    pairs; small problems only): the same orders, ties and relocations."""
    X = np.asarray(X, dtype=np.float64)
    n, k = X.shape[0], C0.shape[0]
    pairs = [[] for _ in range(n)]
    for a, b, t in zip(constraints.i.tolist(), constraints.j.tolist(), constraints.t.tolist()):
        if a != b:
            pairs[a].append((b, t > 0))
            pairs[b].append((a, t > 0))
    rng = np.random.default_rng(seed)
    labels = np.full(n, -1, dtype=np.int64)
    C = np.array(C0, dtype=np.float64)
    xx = np.einsum("ij,ij->i", X, X)
    sweeps = 0
    for sweeps in range(1, max_iter + 1):  # noqa: B007
        changed = 0
        order = rng.permutation(n)
        D = sq_distances(X, C, xx)  # (the compiled run's distances, so ties break alike)
        for i in order:
            cost = D[i].copy()
            for j, must in pairs[i]:
                if labels[j] >= 0:
                    if must:
                        cost += w * (np.arange(k) != labels[j])
                    else:
                        cost[labels[j]] += w
            best = int(np.argmin(cost))
            if labels[i] >= 0 and cost[labels[i]] <= cost[best]:
                best = int(labels[i])
            if best != labels[i]:
                labels[i] = best
                changed += 1
        counts = np.bincount(labels, minlength=k)
        C = np.array(
            [X[labels == h].mean(0) if counts[h] else np.zeros(X.shape[1]) for h in range(k)]
        )
        if np.any(counts == 0):
            d2 = ((X - C[labels]) ** 2).sum(1)
            for h in np.flatnonzero(counts == 0):
                for i in np.argsort(-d2, kind="stable"):
                    if counts[labels[i]] > 1:
                        break
                counts[labels[i]] -= 1
                labels[i] = h
                counts[h] = 1
                d2[i] = -np.inf  # taken
            C = np.array([X[labels == h].mean(0) for h in range(k)])
            changed += 1
        if changed == 0:
            break
    return labels, C, pck_objective(X, labels, C, constraints, w), sweeps
