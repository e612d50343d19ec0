"""Active constraint selection (issue 78, first part): pools without n^2 pairs, the
strategies against dense references on small n, the labels oracle, and the loop (its
rounds tied to direct warm-started fits, deterministic, never asking a pair twice)."""

from __future__ import annotations

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist import ValidationError
from npkl_dist.active import (
    active_learning,
    add_answers,
    candidate_pool,
    labels_oracle,
    pair_kernel,
    point_margins,
    select_pairs,
)

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")


def _blobs(n_per=40, k=4, seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(3.0 * c, 1.0, size=(n_per, 2)) for c in range(k)])
    return X, np.repeat(np.arange(k), n_per)


def test_pool_has_graph_edges_and_distinct_random_pairs_never_the_constrained_ones():
    X, y = _blobs()
    n = y.size
    g = nk.knn_graph(X, 5, warn=False)
    cons = nk.sample_constraints(y, 30, 30, seed=0)
    pool = candidate_pool(n, graph=g.S, constraints=cons, n_random=500, seed=1)
    assert (pool[:, 0] < pool[:, 1]).all()
    keys = pool[:, 0] * n + pool[:, 1]
    assert np.unique(keys).size == keys.size and np.all(np.diff(keys) > 0)
    asked = {tuple(sorted(p)) for p in zip(cons.i, cons.j)}
    assert not asked & set(map(tuple, pool))
    edges = {tuple(p) for p in np.argwhere(np.triu(g.S.toarray(), 1) > 0)}
    assert edges - asked <= set(map(tuple, pool))
    assert len(pool) == len(edges - asked) + 500  # 500 new pairs besides the edges
    again = candidate_pool(n, graph=g.S, constraints=cons, n_random=500, seed=1)
    other = candidate_pool(n, graph=g.S, constraints=cons, n_random=500, seed=2)
    assert np.array_equal(pool, again) and not np.array_equal(pool, other)
    # a tiny problem: every pair, however many are asked for
    assert len(candidate_pool(5, n_random=1000)) == 10


def test_pair_kernel_and_margins_equal_the_dense_references():
    rng = np.random.default_rng(3)
    V = rng.standard_normal((50, 4))
    K = V @ V.T
    pairs = rng.integers(0, 50, (200, 2))
    np.testing.assert_allclose(pair_kernel(V, pairs), K[pairs[:, 0], pairs[:, 1]], rtol=1e-12)
    y = rng.integers(0, 3, 50)
    y[:10] = -1
    cons = nk.sample_constraints(y, 40, 40, seed=0)
    T = np.zeros((50, 50))
    T[cons.i, cons.j] = T[cons.j, cons.i] = cons.t
    cnt = (T != 0).sum(axis=1)
    ref = np.divide(np.abs((T * K).sum(axis=1)), cnt, out=np.zeros(50), where=cnt > 0)
    np.testing.assert_allclose(point_margins(V, cons), ref, rtol=1e-12, atol=1e-15)
    assert (point_margins(V, cons)[cnt == 0] == 0).all()


def test_selections_equal_brute_force_orders():
    rng = np.random.default_rng(4)
    V = rng.standard_normal((60, 3))
    K = V @ V.T
    pool = candidate_pool(60, n_random=300, seed=0)
    got = select_pairs(V, pool, 20, "min_abs_k", distinct=False)
    ref = np.argsort(np.abs(K[pool[:, 0], pool[:, 1]]), kind="stable")[:20]
    np.testing.assert_array_equal(got, ref)
    y = rng.integers(0, 2, 60)
    cons = nk.sample_constraints(y, 20, 20, seed=1)
    m = point_margins(V, cons)
    score = np.minimum(m[pool[:, 0]], m[pool[:, 1]])
    ref = np.lexsort((np.abs(K[pool[:, 0], pool[:, 1]]), score))[:20]
    np.testing.assert_array_equal(
        select_pairs(V, pool, 20, "margin", constraints=cons, distinct=False), ref
    )
    a = select_pairs(V, pool, 20, "random", seed=5)
    assert np.array_equal(a, select_pairs(V, pool, 20, "random", seed=5))
    assert not np.array_equal(a, select_pairs(V, pool, 20, "random", seed=6))


def _greedy_distinct(pairs, order, batch):
    """The slow reference: walk the order, keep a pair whose points are both new."""
    used, keep = [], []
    for q in order:
        if pairs[q, 0] not in used and pairs[q, 1] not in used:
            keep.append(q)
            used += [pairs[q, 0], pairs[q, 1]]
    rest = [q for q in order if q not in keep]
    return np.array((keep + rest)[:batch])


@pytest.mark.parametrize("strategy", ["min_abs_k", "margin", "random", "minmax"])
def test_distinct_batches_take_each_point_once(strategy):
    """distinct=True (the default): the strategy's order with a pair skipped when one of its
    points is already in the batch; filled from the skipped pairs (in order) only when the
    pool runs out of pairs of new points. Random draws are taken as they come."""
    X, y = _blobs(n_per=15)
    n = y.size
    g = nk.knn_graph(X, 5, warn=False)
    cons = nk.sample_constraints(y, 20, 20, seed=0)
    p = nk.NPKLProblem.build(g.laplacian(1e-3), cons, rank=4, seed=0)
    V = nk.fit_bcd(p).V
    pool = candidate_pool(n, graph=g.S, constraints=cons, n_random=200, seed=0)
    kw = dict(constraints=cons, seed=3, problem=p, prefilter=60)
    full = select_pairs(V, pool, len(pool), strategy, distinct=False, **kw)  # (minmax: 60)
    got = select_pairs(V, pool, 12, strategy, **kw)  # distinct by default
    if strategy == "random":  # drawn as they come
        np.testing.assert_array_equal(got, full[:12])
        return
    np.testing.assert_array_equal(got, _greedy_distinct(pool, list(full), 12))
    assert np.unique(pool[got].ravel()).size == 24
    assert not np.array_equal(got, full[:12])  # the plain batch repeats a point here
    # a star: every pair shares point 0, so the batch is the order itself
    star = np.column_stack([np.zeros(9, np.int64), np.arange(1, 10)])
    np.testing.assert_array_equal(
        select_pairs(V, star, 4, "min_abs_k"),
        select_pairs(V, star, 4, "min_abs_k", distinct=False),
    )


def test_labels_oracle_and_adding_answers():
    ask = labels_oracle(np.array([0, 0, 1, -1]))
    np.testing.assert_array_equal(ask([[0, 1], [0, 2], [1, 3]]), [1, -1, 0])
    cons = nk.sample_constraints(np.array([0, 0, 1, 1]), 1, 1, seed=0)
    more = add_answers(cons, [[0, 3], [1, 2]], [-1, 0])
    pairs = {(int(a), int(b)): int(t) for a, b, t in zip(more.i, more.j, more.t)}
    assert more.m == cons.m + 1 and pairs[(0, 3)] == -1 and (1, 2) not in pairs


def test_loop_rounds_are_direct_warm_fits_deterministic_and_never_repeat_a_pair():
    X, y = _blobs()
    n = y.size
    g = nk.knn_graph(X, 5, warn=False)
    L = g.laplacian()
    part = np.where(np.arange(n) % 8 == 0, y, -1)
    cons = nk.sample_constraints(part, 10, 10, seed=0)
    pool = candidate_pool(n, graph=g.S, constraints=cons, n_random=2000, seed=0)
    kw = dict(rounds=3, batch=10, strategy="min_abs_k", eval_labels=y, max_sweeps=200)
    seen = []
    res = active_learning(L, cons, labels_oracle(y), pool, callback=seen.append, **kw)
    assert [r.round for r in res.rounds] == [0, 1, 2, 3] == [r.round for r in seen]
    asked = np.vstack([r.queries for r in res.rounds[1:]])
    keys = asked[:, 0] * n + asked[:, 1]
    assert np.unique(keys).size == 30
    assert not np.isin(keys, np.minimum(cons.i, cons.j) * n + np.maximum(cons.i, cons.j)).any()
    assert res.constraints.m == cons.m + 30  # every point labelled: no skips
    assert all(r.metrics is not None for r in res.rounds)
    # round 1 is the fit of the initial pairs plus round 1's answers, from round 0's V
    from npkl_dist.problem._problem import default_rank
    from npkl_dist.solvers.bcd._fit import fit_bcd

    rank = default_rank(cons.m + 30, n)  # fixed for the loop, so that V carries over
    V0 = fit_bcd(nk.NPKLProblem.build(L, cons, rank=rank), max_sweeps=200).V
    np.testing.assert_array_equal(pool[select_pairs(V0, pool, 10, "min_abs_k")],
                                  res.rounds[1].queries)  # fmt: skip
    c1 = add_answers(cons, res.rounds[1].queries, res.rounds[1].answers)
    r1 = fit_bcd(nk.NPKLProblem.build(L, c1, rank=rank), max_sweeps=200, V0=V0)
    assert res.rounds[1].objective == float(r1.objective)
    again = active_learning(L, cons, labels_oracle(y), pool, **kw)
    np.testing.assert_array_equal(again.V, res.V)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"strategy": "minimax"}, "strategy: 'minimax' is not one of"),
        ({"strategy": "minmax", "loss": "hinge"}, "strategy: 'minmax' is derived for the square"),
        ({"batch": 0}, "batch: expected a positive integer, got 0"),
        (
            {"oracle": lambda p: np.full(len(p), 2)},
            "oracle: 20 of 20 answers are not +1, -1 or 0 (the first: 2 for pair",
        ),
        ({"oracle": "labels.npy"}, "oracle: expected a callable"),
    ],
)
def test_loop_errors_are_one_line(kw, message):
    X, y = _blobs(20, 2)
    g = nk.knn_graph(X, 5, warn=False)
    cons = nk.sample_constraints(y, 5, 5, seed=0)
    pool = candidate_pool(y.size, graph=g.S, constraints=cons, n_random=50)
    args = {"oracle": labels_oracle(y), **kw}
    oracle = args.pop("oracle")
    with pytest.raises(ValidationError) as info:
        active_learning(g.laplacian(), cons, oracle, pool, rounds=1, max_sweeps=20, **args)
    assert message in str(info.value) and "\n" not in str(info.value)


def _fitted(n_per=15, k=3, seed=0):
    X, y = _blobs(n_per, k, seed)
    g = nk.knn_graph(X, 5, warn=False)
    cons = nk.sample_constraints(y, 12, 12, seed=seed)
    p = nk.NPKLProblem.build(g.laplacian(), cons, rank=4, gamma=2.0)
    return p, nk.fit_bcd(p, max_sweeps=300).V, y


def test_minmax_deltas_are_the_objective_change_and_reach_the_two_row_optimum():
    """Delta(k, l) = F(V' with the pair added at its worst label) - F(V), V' = V with rows
    k and l re-solved: checked against the project's objective, and against scipy's
    minimisation over those two rows (the alternating exact solves reach its optimum and
    every step only lowers it); with 0 steps Delta = gamma (1 + |K_kl|)^2 (Corollary 2)."""
    from scipy.optimize import minimize

    from npkl_dist.active._minmax import minmax_deltas
    from npkl_dist.problem._objective import objective

    p, V, _ = _fitted()
    n, r = V.shape
    pool = candidate_pool(n, constraints=p.constraints, n_random=6, seed=3)
    K = np.einsum("kr,kr->k", V[pool[:, 0]], V[pool[:, 1]])
    d0 = minmax_deltas(V, pool, p.L, p.constraints, p.gamma, steps=0)
    np.testing.assert_allclose(d0, p.gamma * (1 + np.abs(K)) ** 2, rtol=1e-12)
    F = objective(p, V)
    for steps in (1, 40):
        rows = []
        d = minmax_deltas(V, pool, p.L, p.constraints, p.gamma, steps=steps, rows=rows)
        for (k, l), (y, vk, vl), dq in zip(pool, rows, d):
            plus = add_answers(p.constraints, [[k, l]], [int(y)])
            q = nk.NPKLProblem.build(p.L, plus, rank=r, gamma=p.gamma)
            W = V.copy()
            W[k], W[l] = vk, vl
            assert objective(q, W) - F == pytest.approx(dq, rel=1e-9, abs=1e-9)
            if steps == 40:

                def f(x):
                    U = V.copy()
                    U[k], U[l] = x[:r], x[r:]
                    return objective(q, U) - F

                best = minimize(f, np.r_[V[k], V[l]], method="BFGS", options={"gtol": 1e-10})
                assert dq <= best.fun + 1e-7 and dq >= best.fun - 1e-6 * (1 + abs(best.fun))
    assert (d <= minmax_deltas(V, pool, p.L, p.constraints, p.gamma, steps=1) + 1e-12).all()


def test_minmax_selects_the_least_delta_among_the_prefiltered_pairs():
    from npkl_dist.active._minmax import minmax_deltas

    p, V, _ = _fitted()
    pool = candidate_pool(V.shape[0], constraints=p.constraints, n_random=300, seed=0)
    got = select_pairs(V, pool, 5, "minmax", problem=p, prefilter=40, distinct=False)
    near = np.argsort(np.abs(pair_kernel(V, pool)), kind="stable")[:40]
    d = minmax_deltas(V, pool[near], p.L, p.constraints, p.gamma)
    np.testing.assert_array_equal(got, near[np.argsort(d, kind="stable")[:5]])
    with pytest.raises(ValidationError, match="needs the fit's NPKLProblem"):
        select_pairs(V, pool, 5, "minmax")


@pytest.mark.parametrize("strategy", ["random", "min_abs_k", "margin", "minmax"])
def test_every_strategy_runs_in_the_loop(strategy):
    p, _, y = _fitted()
    g_pool = candidate_pool(y.size, constraints=p.constraints, n_random=400, seed=1)
    res = active_learning(p.L, p.constraints, labels_oracle(y), g_pool, rounds=2, batch=6,
                          strategy=strategy, gamma=2.0, max_sweeps=100, eval_labels=y)  # fmt: skip
    asked = np.vstack([r.queries for r in res.rounds[1:]])
    assert asked.shape == (12, 2) and np.unique(asked[:, 0] * y.size + asked[:, 1]).size == 12
    assert res.constraints.m == p.constraints.m + 12
    assert 0.0 <= res.rounds[-1].metrics["rand_accuracy"] <= 1.0


@pytest.mark.parametrize("seed", range(6))
def test_smallest_equals_a_stable_argsort_prefix(seed):
    from npkl_dist.active._select import smallest

    rng = np.random.default_rng(seed)
    vals = rng.integers(0, 5, 300).astype(float)  # many ties
    if seed % 2:
        vals = rng.random(300)
    for k in (0, 1, 7, 60, 299, 300, 400):
        np.testing.assert_array_equal(smallest(vals, k), np.argsort(vals, kind="stable")[:k])


@pytest.mark.parametrize("distinct", [True, False])
def test_least_abs_k_from_a_prefix_equals_the_whole_sort(distinct):
    """min_abs_k reads a prefix of the order (lengthened until the batch fills): the same
    batch as the greedy pass over the whole stable sort, on a pool where the first pairs
    share their points (a prefix of 8 x batch is not enough) and with tied scores."""
    from npkl_dist.active._select import _distinct_points

    rng = np.random.default_rng(0)
    n = 400
    V = np.zeros((n, 2))
    V[:, 0] = np.round(rng.random(n), 1)  # tied products
    V[:200, 0] = 0.0  # K = 0 for every pair at a point below 200
    star = np.column_stack([np.zeros(199, np.int64), np.arange(1, 200)])  # share point 0
    pool = np.vstack([star, candidate_pool(n, n_random=3000, seed=1)])
    full = np.argsort(np.abs(pair_kernel(V, pool)), kind="stable")
    for batch in (1, 5, 20, 150):
        ref = _distinct_points(pool, full, batch) if distinct else full[:batch]
        got = select_pairs(V, pool, batch, "min_abs_k", distinct=distinct)
        np.testing.assert_array_equal(got, ref)


def test_loop_never_asks_a_skipped_pair_again():
    """A pair answered 0 (skip) adds no constraint, but is not asked again: with every
    answer a skip, five rounds of min_abs_k ask 5 x 8 distinct pairs (before, the same
    least-|K| pairs came back every round)."""
    X, y = _blobs()
    n = y.size
    g = nk.knn_graph(X, 5, warn=False)
    cons = nk.sample_constraints(y, 20, 20, seed=0)
    pool = candidate_pool(n, graph=g.S, constraints=cons, n_random=300, seed=0)
    res = active_learning(g.laplacian(1e-3), cons, lambda q: np.zeros(len(q), np.int8), pool,
                          rounds=5, batch=8, strategy="min_abs_k")  # fmt: skip
    asked = np.vstack([r.queries for r in res.rounds[1:]])
    keys = {tuple(sorted(map(int, p))) for p in asked}
    assert len(asked) == 40 and len(keys) == 40
    assert res.constraints.m == cons.m
