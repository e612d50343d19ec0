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

Transitive closure (``constraint_closure``; PCKMeans's ``preprocess_constraints``). The
must-links' connected components c(i) (a point in none is a component of its own) are taken
as must-linked throughout, and a cannot-link between two components cannot-links every pair
across them; J then counts the closure's pairs:

    J_cl(l, mu) = sum_i ||x_i - mu_{l_i}||^2
                  + w * sum_c #{i < j in c: l_i != l_j}
                  + w * sum_{a ~ b} #{i in a, j in b: l_i == l_j}

over the unique cannot-linked component pairs a ~ b. With n_ch the labelled members of
component c in cluster h, point i's local cost of cluster h is ||x_i - mu_h||^2 +
w * (#other labelled members of c(i) not in h) + w * sum_{b ~ c(i)} n_bh, and the sweep keeps
the tables n_ch and P_ch = sum_{b ~ c} n_bh current as labels change: O(k) per point visited and O(deg(c)) per label
changed, never the closure's pair list (quadratic in a component's size: 0.6n random
must-links join most of a class into one component). The penalty is w times an integer count
in both forms, so the reference, which enumerates the closure's pairs, makes the same
floating-point sums. A cannot-link inside a must-link component contradicts the closure;
``Constraints`` refuses such a set, and ``constraint_closure`` raises ``ConstraintError`` for
one built around that check.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.sparse.csgraph import connected_components

from ._errors import ConstraintError

__all__ = [
    "Closure",
    "closure_pairs",
    "constraint_adjacency",
    "constraint_closure",
    "pck_objective",
    "pck_run",
    "pck_run_reference",
    "run_objective",
]


def constraint_adjacency(constraints, n: int):
    """Symmetric CSR adjacency of the constraints over ``n`` points: ``(indptr, partner,
    sign)``, int64 / int64 / int8, sign +1 for a must-link and -1 for a cannot-link. Pairs
    (i, i) (KL-ADMM's K_ii = 1 targets) are not constraints between two points and are left
    out."""
    i, j, t = _pairs_between_points(constraints)
    A = sp.csr_matrix(
        (np.concatenate([t, t]), (np.concatenate([i, j]), np.concatenate([j, i]))),
        shape=(n, n),
    )
    A.sort_indices()
    return A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data.astype(np.int8)


class Closure(NamedTuple):
    """The transitive closure of the constraints over n points, by must-link components
    (:func:`constraint_closure`).

    comp : int64 (n,), each point's must-link component (a point in no must-link is a
        component of its own); size : int64 (n_comp,), the components' sizes; indptr, partner:
        int64, the symmetric CSR adjacency of the components joined by at least one
        cannot-link (each pair of components once per side, no self-loop)."""

    comp: np.ndarray
    size: np.ndarray
    indptr: np.ndarray
    partner: np.ndarray


def _pairs_between_points(constraints):
    i = np.asarray(constraints.i, dtype=np.int64)
    j = np.asarray(constraints.j, dtype=np.int64)
    t = np.sign(np.asarray(constraints.t)).astype(np.int8)
    off = i != j
    return i[off], j[off], t[off]


def constraint_closure(constraints, n: int) -> Closure:
    """PCKMeans's transitive closure of the constraints over ``n`` points, kept by components
    (never as the closure's pair list). Raises ConstraintError for a cannot-link inside a
    must-link component (``Constraints.from_arrays`` refuses such a set; this catches one
    built around it), as the closure cannot hold both."""
    i, j, t = _pairs_between_points(constraints)
    ml = t > 0
    _, comp = connected_components(
        sp.coo_matrix((np.ones(int(ml.sum())), (i[ml], j[ml])), shape=(n, n)), directed=False
    )
    comp = comp.astype(np.int64)
    n_comp = int(comp.max()) + 1 if n else 0
    a, b = comp[i[~ml]], comp[j[~ml]]
    inside = np.flatnonzero(a == b)
    if inside.size:
        listed = [(int(i[~ml][q]), int(j[~ml][q])) for q in inside[:20]]
        raise ConstraintError(
            f"constraints: {inside.size} cannot-link pair(s) join points that must-link "
            f"transitivity puts together (a~b, b~c but a!~c): {listed}; the transitive "
            f"closure cannot hold them; remove them or the must-links that connect them, or "
            f"cluster with closure=False",
            pairs=listed,
        )
    A = sp.csr_matrix(
        (np.ones(2 * a.size, dtype=np.int64), (np.r_[a, b], np.r_[b, a])), shape=(n_comp,) * 2
    )
    A.sum_duplicates()
    A.sort_indices()
    return Closure(
        comp,
        np.bincount(comp, minlength=n_comp).astype(np.int64),
        A.indptr.astype(np.int64),
        A.indices.astype(np.int64),
    )


def closure_pairs(constraints, n: int):
    """Every pair of the transitive closure, enumerated (slow, for tests and the reference):
    ``(i, j, t)`` with i < j sorted, t = +1 for the pairs inside a must-link component and -1
    for those across two components a cannot-link joins."""
    cl = constraint_closure(constraints, n)
    members = [np.flatnonzero(cl.comp == c) for c in range(cl.size.size)]
    pairs = {}
    for c, pts in enumerate(members):
        for x in range(pts.size):
            for y in range(x + 1, pts.size):
                pairs[(int(pts[x]), int(pts[y]))] = 1
        for b in cl.partner[cl.indptr[c] : cl.indptr[c + 1]]:
            for p in pts:
                for q in members[b]:
                    pairs[(min(int(p), int(q)), max(int(p), int(q)))] = -1
    keys = sorted(pairs)
    i = np.array([a for a, _ in keys], dtype=np.int64)
    j = np.array([b for _, b in keys], dtype=np.int64)
    return i, j, np.array([pairs[q] for q in keys], dtype=np.int8)


def sq_distances(X, C, xx):
    """Squared distances of the rows of X to the centres C, (n, k), by one matrix product
    (BLAS): xx - 2 X C' + |c|^2 with ``xx`` the rows' squared norms. The centres are fixed
    during an assignment sweep, so one product serves the whole sweep."""
    return xx[:, None] - 2.0 * (X @ C.T) + np.einsum("ij,ij->i", C, C)[None, :]


@njit(cache=True, nogil=True, inline="always")
def _least_cost(cost, cur):  # pragma: no cover
    """The cluster of least ``cost`` (the first on a tie), or ``cur`` (the point's label, -1
    for none) if it costs no more: a point keeps its label on a tie."""
    best = 0
    for h in range(1, cost.shape[0]):
        if cost[h] < cost[best]:
            best = h
    if cur >= 0 and cost[cur] <= cost[best]:
        best = cur
    return best


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
        best = _least_cost(cost, cur)
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


@njit(cache=True, nogil=True, inline="always")
def _inertia(X, C, labels, d2):  # pragma: no cover
    """IN: X, C, labels. OUT: d2 (n,) each point's squared distance to its centre. Returns
    their sum, in point order (both objectives' inertia)."""
    inertia = 0.0
    for i in range(X.shape[0]):
        h = labels[i]
        s = 0.0
        for t in range(X.shape[1]):
            z = X[i, t] - C[h, t]
            s += z * z
        d2[i] = s
        inertia += s
    return inertia


@njit(cache=True, nogil=True)
def _objective(X, C, labels, indptr, partner, sign, w, d2):  # pragma: no cover
    """IN: X, C, labels, indptr, partner, sign, w. OUT: d2 (n,) each point's squared
    distance to its centre. Returns J (each constraint counted once)."""
    inertia = _inertia(X, C, labels, d2)
    violated = 0
    for i in range(X.shape[0]):
        for e in range(indptr[i], indptr[i + 1]):
            j = partner[e]
            if j > i and (labels[i] == labels[j]) != (sign[e] > 0):
                violated += 1
    return inertia + w * violated


@njit(cache=True, nogil=True)
def _closure_state(labels, comp, indptr, partner, members, labelled, pressure):  # pragma: no cover
    """IN: labels (n,) (-1: not yet labelled), comp, indptr, partner (the closure). OUT:
    members (n_comp, k) the labelled members of each component per cluster, labelled
    (n_comp,) their totals, pressure (n_comp, k) = sum over the cannot-linked components b of
    members[b] (a point of component a labelled h violates pressure[a, h] closure pairs)."""
    members[:] = 0
    labelled[:] = 0
    pressure[:] = 0
    for i in range(labels.shape[0]):
        h = labels[i]
        if h >= 0:
            members[comp[i], h] += 1
            labelled[comp[i]] += 1
    for a in range(members.shape[0]):
        for e in range(indptr[a], indptr[a + 1]):
            b = partner[e]
            for h in range(members.shape[1]):
                pressure[a, h] += members[b, h]


@njit(cache=True, nogil=True)
def _assign_closure(
    D, comp, indptr, partner, w, order, labels, members, labelled, pressure, cost
):  # pragma: no cover
    """One ICM sweep in ``order`` on the closure's counts. IN: D (n, k), comp, indptr,
    partner, w, order (n,). INOUT: labels (n,), members, labelled, pressure (from
    :func:`_closure_state`, kept current as labels change). OUT: cost (k,) scratch. Returns
    the number of labels changed."""
    k = D.shape[1]
    changed = 0
    for p in range(order.shape[0]):
        i = order[p]
        c = comp[i]
        cur = labels[i]
        others = labelled[c] - (1 if cur >= 0 else 0)
        for h in range(k):
            # the other labelled members of c not in h, and the cannot-linked points in h:
            # an integer count of violated closure pairs, times w (as the reference sums)
            same = members[c, h] - (1 if h == cur else 0)
            cost[h] = D[i, h] + w * (others - same + pressure[c, h])
        best = _least_cost(cost, cur)
        if best != cur:
            if cur >= 0:
                members[c, cur] -= 1
            else:
                labelled[c] += 1
            members[c, best] += 1
            for e in range(indptr[c], indptr[c + 1]):
                b = partner[e]
                if cur >= 0:
                    pressure[b, cur] -= 1
                pressure[b, best] += 1
            labels[i] = best
            changed += 1
    return changed


@njit(cache=True, nogil=True)
def _objective_closure(
    X, C, labels, comp, size, indptr, partner, w, d2, members
):  # pragma: no cover
    """IN: X, C, labels (all labelled), comp, size, indptr, partner, w. OUT: d2 (n,) each
    point's squared distance to its centre, members (n_comp, k) scratch. Returns J_cl: the
    inertia plus w times the closure's violated pairs, counted from the members table
    (C(s_c, 2) - sum_h C(n_ch, 2) inside component c; sum_h n_ah n_bh across a ~ b)."""
    inertia = _inertia(X, C, labels, d2)
    members[:] = 0
    for i in range(X.shape[0]):
        members[comp[i], labels[i]] += 1
    violated = 0
    for a in range(members.shape[0]):
        apart = size[a] * (size[a] - 1) // 2
        for h in range(members.shape[1]):
            apart -= members[a, h] * (members[a, h] - 1) // 2
        violated += apart
        for e in range(indptr[a], indptr[a + 1]):
            b = partner[e]
            if b > a:
                for h in range(members.shape[1]):
                    violated += members[a, h] * members[b, h]
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


def _bind(adjacency, n_clusters: int, w: float):
    """The sweep and the objective of a run on ``adjacency``, the pairs as given (the triple
    of :func:`constraint_adjacency`) or their closure (a :class:`Closure`), picked once:
    ``sweep(D, order, labels, cost) -> changed`` and ``objective(X, C, labels, d2) -> J``."""
    if isinstance(adjacency, Closure):
        comp, size, indptr, partner = adjacency
        members = np.zeros((size.shape[0], n_clusters), dtype=np.int64)
        pressure = np.zeros_like(members)
        labelled = np.zeros(size.shape[0], dtype=np.int64)

        def sweep(D, order, labels, cost):
            # the counts are rebuilt from the labels each sweep: a relocation moves points
            # outside the sweep; O(n + k * cannot-linked component pairs)
            _closure_state(labels, comp, indptr, partner, members, labelled, pressure)
            return _assign_closure(
                D, comp, indptr, partner, w, order, labels, members, labelled, pressure, cost
            )

        def objective(X, C, labels, d2):
            return _objective_closure(X, C, labels, comp, size, indptr, partner, w, d2, members)

        return sweep, objective
    indptr, partner, sign = adjacency

    def sweep(D, order, labels, cost):
        return _assign(D, indptr, partner, sign, w, order, labels, cost)

    def objective(X, C, labels, d2):
        return _objective(X, C, labels, indptr, partner, sign, w, d2)

    return sweep, objective


def pck_run(X, C0, adjacency, w: float, seed: int, max_iter: int = 100):
    """One PCK-means run from centres ``C0`` (k, r). ``X`` float64 C-contiguous (n, r);
    ``adjacency`` the pairs as given (:func:`constraint_adjacency`) or their transitive
    closure (:func:`constraint_closure`); ``seed`` draws the sweep orders.
    Returns (labels int64 (n,), centres float64 (k, r) the means of the labels, objective,
    sweeps)."""
    n, k = X.shape[0], C0.shape[0]
    sweep, objective = _bind(adjacency, k, float(w))
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
        changed = sweep(D, order, labels, cost)
        _means(X, labels, C, counts)
        if np.any(counts == 0):
            objective(X, C, labels, d2)
            _relocate(X, labels, C, counts, d2)
            _means(X, labels, C, counts)
            changed += 1
        if changed == 0:
            break
    J = objective(X, C, labels, d2)
    return labels, C, float(J), sweeps


def run_objective(X, labels, C, adjacency, w: float) -> float:
    """J (or J_cl for a :class:`Closure`) of ``labels`` and centres ``C``, compiled, as
    :func:`pck_run` returns it: from the pair adjacency or the closure's counts, never the
    closure's pair list. ``X`` float64 C-contiguous (n, r)."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    C = np.ascontiguousarray(C, dtype=np.float64)
    _, objective = _bind(adjacency, C.shape[0], float(w))
    return float(objective(X, C, labels, np.empty(X.shape[0])))


def pck_objective(X, labels, C, constraints, w: float, closure: bool = False) -> float:
    """J(labels, C) written plainly (numpy; for tests and the reference); with ``closure``,
    J_cl over the closure's pairs enumerated by :func:`closure_pairs` (small n only)."""
    X = np.asarray(X, dtype=np.float64)
    if closure:
        i, j, t = closure_pairs(constraints, X.shape[0])
    else:
        i, j, t = _pairs_between_points(constraints)
    same = labels[i] == labels[j]
    violated = np.count_nonzero(same != (t > 0))
    return float(((X - C[labels]) ** 2).sum() + w * violated)


def pck_run_reference(
    X, C0, constraints, w: float, seed: int, max_iter: int = 100, closure: bool = False
):
    """The slow, readable form of :func:`pck_run` (numpy, Python loops over points and
    pairs; small problems only): the same orders, ties and relocations. With ``closure``,
    over the closure's pairs enumerated (:func:`closure_pairs`), a point's violated pairs
    per cluster counted as integers and then multiplied by w, as the compiled closure sweep
    does."""
    X = np.asarray(X, dtype=np.float64)
    n, k = X.shape[0], C0.shape[0]
    if closure:
        given = closure_pairs(constraints, n)
    else:
        given = (constraints.i, constraints.j, constraints.t)
    pairs = [[] for _ in range(n)]
    for a, b, t in zip(*(np.asarray(v).tolist() for v in given)):
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
            if closure:
                violated = np.zeros(k, dtype=np.int64)
                for j, must in pairs[i]:
                    if labels[j] >= 0:
                        if must:
                            violated += np.arange(k) != labels[j]
                        else:
                            violated[labels[j]] += 1
                cost = D[i] + w * violated
            else:
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
    return labels, C, pck_objective(X, labels, C, constraints, w, closure=closure), sweeps
