"""Candidate pools and the selection strategies of active constraint selection (issue 78;
docs/algorithms.md, "Active constraint selection").

Nothing here forms an n x n matrix: a pool is an explicit (m, 2) array of pairs (the graph's
edges, seeded uniform pairs, pairs at the most uncertain points), and K_kl = v_k . v_l is
computed from the rows of V for the pairs scored, in chunks.

Strategies (lower score = asked first; ties by pool order, so a selection is a function of V,
the pool and the constraints):

* ``random``: a seeded permutation of the pool.
* ``min_abs_k``: the least |K_kl| (active-kernel-learning-icml2008's AKL-min-|Z|, its
  Corollary 2: the min-max criterion (5) with the kernel held fixed).
* ``minmax``: AKL's min-max criterion, relaxed to the two rows of each pair, on the
  ``prefilter`` pairs of least |K_kl| (``_minmax``; the square loss).
* ``margin``: simplenpkl-jmlr2011 §5.3's per-point margin m_i = |sum_j T_ij K_ij| / l_i over
  the constraints at i (l_i of them; m_i = 0 for a point in none: nothing is known of it), a
  pair scored by its less certain end, min(m_k, m_l), ties by |K_kl|. §5.3 picks among given
  pairs; asked of a pool, the pairs at the least certain points come first.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._errors import ValidationError, fmt_value

STRATEGIES = ("random", "min_abs_k", "margin", "minmax")

#: minmax: the candidates of least |K_kl| whose two rows are re-solved (the paper's 200)
MINMAX_PREFILTER = 200

#: rows of V per chunk when scoring pairs (a (chunk, r) gather per side)
_CHUNK = 1 << 16


def _key(i, j, n):
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return lo.astype(np.int64) * np.int64(n) + hi.astype(np.int64)


def candidate_pool(
    n_points: int,
    *,
    graph=None,
    constraints=None,
    n_random: int = 0,
    seed=0,
) -> np.ndarray:
    """Candidate pairs (m, 2), i < j, distinct, none already constrained, never n^2 of them.

    Parameters
    ----------
    n_points : int
    graph : sparse matrix, optional
        Its edges (the upper triangle's nonzeros) join the pool: neighbours whose kernel
        entry decides the most.
    constraints : Constraints, optional
        Pairs already asked: left out.
    n_random : int
        Seeded uniform pairs added (drawn in rounds until that many distinct new ones, or the
        pairs left run out).
    seed : int or numpy.random.Generator

    Returns
    -------
    ndarray of int64, shape (m, 2), sorted by (i, j)
    """
    n = int(n_points)
    if n < 2:
        raise ValidationError(f"n_points: {fmt_value(n_points)}; pairs need at least 2 points")
    if isinstance(n_random, bool) or not isinstance(n_random, (int, np.integer)) or n_random < 0:
        raise ValidationError(
            f"n_random: expected a non-negative integer, got {fmt_value(n_random)}"
        )
    parts = []
    if graph is not None:
        G = sp.triu(sp.csr_matrix(graph), k=1).tocoo()
        if G.shape != (n, n):
            raise ValidationError(
                f"graph: shape {G.shape} for {n} points; pass the (n, n) graph of these points"
            )
        parts.append(_key(G.row, G.col, n))
    keys = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    taken = np.zeros(0, np.int64)
    if constraints is not None and constraints.m:
        taken = np.unique(_key(constraints.i, constraints.j, n))
        keys = keys[~np.isin(keys, taken)]
    if n_random:
        rng = np.random.default_rng(seed)
        room = n * (n - 1) // 2 - keys.size - taken.size
        want = min(int(n_random), max(room, 0))
        extra = np.zeros(0, np.int64)
        while extra.size < want:
            k = 2 * (want - extra.size) + 16
            a, b = rng.integers(0, n, k), rng.integers(0, n, k)
            cand = _key(a[a != b], b[a != b], n)
            cand = cand[~np.isin(cand, keys) & ~np.isin(cand, taken)]
            # the first draws of each new pair, in draw order (seeded)
            _, first = np.unique(np.concatenate([extra, cand]), return_index=True)
            merged = np.concatenate([extra, cand])[np.sort(first)]
            extra = merged[:want]
        keys = np.union1d(keys, extra)
    return np.column_stack([keys // n, keys % n]).astype(np.int64)


def drop_pairs(pool, pairs, n_points: int) -> np.ndarray:
    """The rows of ``pool`` that are not among ``pairs`` (either orientation): questions
    already asked, answered or skipped, are not asked again."""
    pool = np.asarray(pool, dtype=np.int64).reshape(-1, 2)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not pairs.size or not pool.size:
        return pool
    n = int(n_points)
    gone = np.isin(_key(pool[:, 0], pool[:, 1], n), _key(pairs[:, 0], pairs[:, 1], n))
    return pool[~gone]


def smallest(values, k: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")[:k]`` (ties by position) without sorting all of
    ``values``: a partition finds the k-th smallest value, and only the entries up to it are
    sorted (a pool of 10^6 pairs, 200 kept)."""
    values = np.asarray(values)
    k = int(k)
    if k >= values.size:
        return np.argsort(values, kind="stable")
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    kth = values[np.argpartition(values, k - 1)[k - 1]]
    cand = np.flatnonzero(values <= kth)  # ascending positions
    return cand[np.argsort(values[cand], kind="stable")[:k]]


def pair_kernel(V, pairs) -> np.ndarray:
    """K_kl = v_k . v_l for each pair (m,), in chunks of rows of V."""
    V = np.asarray(V)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    out = np.empty(pairs.shape[0], dtype=np.float64)
    for s in range(0, pairs.shape[0], _CHUNK):
        p = pairs[s : s + _CHUNK]
        out[s : s + p.shape[0]] = np.einsum("kr,kr->k", V[p[:, 0]], V[p[:, 1]])
    return out


def point_margins(V, constraints) -> np.ndarray:
    """simplenpkl §5.3's m_i = |sum_j T_ij K_ij| / l_i per point (0 where l_i = 0)."""
    n = np.asarray(V).shape[0]
    c = constraints
    if c is None or c.m == 0:
        return np.zeros(n)
    k = pair_kernel(V, np.column_stack([c.i, c.j])) * c.t
    both = np.concatenate([c.i, c.j])
    s = np.bincount(both, weights=np.concatenate([k, k]), minlength=n)
    cnt = np.bincount(both, minlength=n)
    return np.divide(np.abs(s), cnt, out=np.zeros(n), where=cnt > 0)


def pair_scores(V, pairs, strategy: str, *, constraints=None, seed=0) -> np.ndarray:
    """The strategy's score of each pair (lower: asked first); see the module docstring."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if strategy == "random":
        return np.random.default_rng(seed).permutation(pairs.shape[0]).astype(np.float64)
    if strategy == "min_abs_k":
        return np.abs(pair_kernel(V, pairs))
    if strategy == "margin":
        m = point_margins(V, constraints)
        return np.minimum(m[pairs[:, 0]], m[pairs[:, 1]])
    raise ValidationError(
        f"strategy: {strategy!r} is not one of {', '.join(map(repr, STRATEGIES))}"
    )


def select_pairs(
    V,
    pairs,
    batch: int,
    strategy: str = "min_abs_k",
    *,
    constraints=None,
    seed=0,
    problem=None,
    prefilter: int = MINMAX_PREFILTER,
    steps: int = 2,
    distinct: bool = True,
):
    """Indices into ``pairs`` of the ``batch`` pairs the strategy asks first (ties: pool
    order; the margin strategy breaks its ties by |K_kl| first). ``minmax`` needs the fit's
    ``problem`` (L, constraints, gamma; square loss) and re-solves the rows of the
    ``prefilter`` least-|K_kl| pairs ``steps`` times. ``distinct`` (the scored strategies; random
    pairs are drawn as they come): no point in two pairs of one batch (the pairs in score
    order, a pair skipped when a point of it is taken; the skipped ones, in order, only if
    the batch is not full otherwise). A batch is chosen at once from one V, so without it
    the top scores crowd onto the few points the kernel is least sure of, and the batch
    informs fewer of the kernel's rows (docs/decisions/active-selection.md)."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValidationError(f"batch: expected a positive integer, got {fmt_value(batch)}")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if strategy == "minmax":
        from ._minmax import check_minmax, minmax_deltas

        check_minmax(problem)
        near = smallest(np.abs(pair_kernel(V, pairs)), max(prefilter, batch))
        delta = minmax_deltas(
            V, pairs[near], problem.L, problem.constraints, problem.gamma, steps=steps
        )
        order = near[np.argsort(delta, kind="stable")]
    else:
        score = pair_scores(V, pairs, strategy, constraints=constraints, seed=seed)
        if strategy == "margin":
            order = np.lexsort((np.abs(pair_kernel(V, pairs)), score))
        elif strategy == "min_abs_k":
            return _least_first(pairs, score, int(batch), distinct)
        else:
            order = np.argsort(score, kind="stable")
    if distinct and strategy != "random":
        return _distinct_points(pairs, order, int(batch))
    return order[: min(int(batch), pairs.shape[0])]


def _least_first(pairs, score, batch, distinct):
    """The batch of least ``score`` (ties by pool order; ``distinct`` as select_pairs) from
    a prefix of the stable order, lengthened until the batch fills (the greedy pass reads
    the order only up to its last pick), without sorting a pool of 10^6."""
    m = pairs.shape[0]
    if not distinct:
        return smallest(score, min(batch, m))
    k = min(m, 8 * batch)
    while True:
        order = smallest(score, k)
        chosen = _distinct_points(pairs, order, batch, fill=k >= m)
        if chosen.size >= min(batch, m) or k >= m:
            return chosen
        k = min(m, 4 * k)


def _distinct_points(pairs, order, batch, fill=True):
    """The first ``batch`` of ``order`` whose pairs share no point, filled up with the
    skipped ones (in order) when too few are left (with ``fill``)."""
    taken: set = set()
    chosen, skipped = [], []
    for q in order:
        a, b = int(pairs[q, 0]), int(pairs[q, 1])
        if a in taken or b in taken:
            skipped.append(q)
            continue
        chosen.append(q)
        taken.update((a, b))
        if len(chosen) == batch:
            break
    if fill:
        chosen += skipped[: batch - len(chosen)]
    return np.asarray(chosen, dtype=np.int64)
