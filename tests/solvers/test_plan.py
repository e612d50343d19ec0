"""Sweep plans: relabelling, proper colouring, prepared arrays, relabel-invariance of BCD."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from npkl_dist import (
    Constraints,
    NPKLProblem,
    ValidationError,
    fit_bcd,
    initial_V,
    knn_graph,
    laplacian,
    make_plan,
    objective,
    prepare,
    sample_constraints,
)

HYP = settings(max_examples=50, deadline=None)


@pytest.fixture
def rng(global_random_seed):
    """Seeded generator; NPKL_TESTS_GLOBAL_RANDOM_SEED=all runs every test over 100 seeds."""
    return np.random.default_rng(global_random_seed)


@st.composite
def small_problems(draw):
    """A random graph (possibly with isolated nodes) and random consistent constraints."""
    n = draw(st.integers(2, 20))
    all_pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    edges = draw(st.lists(st.sampled_from(all_pairs), max_size=3 * n, unique=True))
    weights = draw(st.lists(st.floats(0.1, 5.0), min_size=len(edges), max_size=len(edges)))
    S = np.zeros((n, n))
    for (a, b), w in zip(edges, weights):
        S[a, b] = S[b, a] = w
    labels = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    pairs = draw(st.lists(st.sampled_from(all_pairs), min_size=1, max_size=2 * n, unique=True))
    t = [1 if labels[a] == labels[b] else -1 for a, b in pairs]
    c = Constraints.from_arrays([a for a, _ in pairs], [b for _, b in pairs], t, n)
    L = laplacian(sp.csr_matrix(S), delta=0.01)
    return NPKLProblem.build(L, c, rank=1), S, pairs


def conflict_edges(S, pairs):
    """Every edge of manifold graph U constraint pairs, in original indices."""
    a, b = np.nonzero(np.triu(S, 1))
    return set(zip(a.tolist(), b.tolist())) | set(pairs)


def check_permutation(plan, n):
    assert plan.order.dtype == np.int64 and plan.rank_of.dtype == np.int64
    assert np.array_equal(np.sort(plan.order), np.arange(n))
    assert np.array_equal(plan.rank_of[plan.order], np.arange(n))
    assert np.array_equal(plan.order[plan.rank_of], np.arange(n))


@HYP
@given(small_problems(), st.sampled_from(["rcm", "none"]))
def test_plan_colouring_proper_and_partition(case, relabel):
    """The reference 'colours' scheme: a proper colouring of the conflict graph."""
    problem, S, pairs = case
    n = problem.n_points
    plan = make_plan(problem, relabel=relabel, scheme="colours")
    check_permutation(plan, n)
    if relabel == "none":
        assert np.array_equal(plan.order, np.arange(n))
        assert np.array_equal(plan.rank_of, np.arange(n))
    colour_of = plan.colour[plan.rank_of]  # colour of each original point
    edges = conflict_edges(S, pairs)
    for a, b in edges:
        assert colour_of[a] != colour_of[b], (a, b)
    # greedy bound: at most max degree + 1 colours
    deg = np.zeros(n, int)
    for a, b in edges:
        deg[a] += 1
        deg[b] += 1
    assert 1 <= plan.n_colours <= deg.max() + 1
    assert plan.colour.min() == 0 and plan.colour.max() == plan.n_colours - 1
    # colour_rows / colour_ptr partition all rows exactly once, every colour non-empty
    ptr = plan.colour_ptr
    assert ptr[0] == 0 and ptr[-1] == n and np.all(np.diff(ptr) > 0)
    assert np.array_equal(np.sort(plan.colour_rows), np.arange(n))
    seen = []
    for c in range(plan.n_colours):
        rows = plan.rows_of(c)
        assert np.all(plan.colour[rows] == c)
        assert np.all(np.diff(rows) > 0)
        seen.extend(rows.tolist())
    assert sorted(seen) == list(range(n))


def check_schedule(plan, S, pairs):
    """Brute force over every conflict edge (original indices): two rows that one step may
    update concurrently -- same colour, different blocks -- are never coupled; and the
    plan's rows, colours, blocks and units partition the rows exactly."""
    n = plan.n_points
    check_permutation(plan, n)
    bp = plan.block_ptr
    assert bp[0] == 0 and bp[-1] == n and np.all(np.diff(bp) > 0)
    block = np.searchsorted(bp, np.arange(n), side="right") - 1
    for a, b in conflict_edges(S, pairs):
        qa, qb = plan.rank_of[a], plan.rank_of[b]
        assert not (plan.colour[qa] == plan.colour[qb] and block[qa] != block[qb]), (a, b)
    ptr = plan.colour_ptr
    assert ptr[0] == 0 and ptr[-1] == n and np.all(np.diff(ptr) > 0)  # no empty colour
    assert np.array_equal(np.sort(plan.colour_rows), np.arange(n))
    for c in range(plan.n_colours):
        rows, uptr = plan.units(c)
        assert np.array_equal(rows, np.flatnonzero(plan.colour == c))
        assert uptr[0] == 0 and uptr[-1] == rows.size and np.all(np.diff(uptr) > 0)
        for u in range(uptr.size - 1):  # a unit = the colour's rows in exactly one block
            assert np.unique(block[rows[uptr[u] : uptr[u + 1]]]).size == 1
        assert np.unique(block[rows]).size == uptr.size - 1


@HYP
@given(
    small_problems(),
    st.sampled_from(["rcm", "none"]),
    st.integers(1, 8),
    st.sampled_from([1, 2, 3]),
)
def test_block_plan_schedule_is_valid(case, relabel, n_blocks, align):
    """Blocks scheme on random graphs and constraints, any block count and alignment:
    deferral leaves no conflict between rows of one step in different blocks."""
    problem, S, pairs = case
    plan = make_plan(problem, relabel=relabel, scheme="blocks", n_blocks=n_blocks, align=align)
    assert plan.scheme == "blocks"
    check_schedule(plan, S, pairs)
    n = problem.n_points
    eff = align if n >= 2 * align else 1
    assert plan.n_blocks <= min(n_blocks, -(-n // eff))
    assert np.all(plan.block_ptr[1:-1] % eff == 0)


@HYP
@given(small_problems(), st.sampled_from(["rcm", "none"]))
def test_colour_plan_schedule_is_valid(case, relabel):
    problem, S, pairs = case
    check_schedule(make_plan(problem, relabel=relabel, scheme="colours"), S, pairs)


@pytest.mark.parametrize("n_blocks", [2, 3, 8, 16])
def test_block_plan_on_long_range_graph(rng, n_blocks):
    """A kNN graph plus random long edges (RCM bandwidth ~ n) and random pairs: many graph
    edges clash and are deferred too; the schedule stays valid, most rows stay in blocks,
    and the block steps come first (colour 0 = even blocks, colour 1 = odd blocks)."""
    n = 600
    X = rng.normal(size=(n, 2))
    S = knn_graph(X, 5, warn=False).S.tolil()
    for a, b in rng.integers(0, n, size=(15, 2)):
        if a != b:
            S[a, b] = S[b, a] = 0.5
    S = S.tocsr()
    labels = rng.integers(0, 3, n)
    c = sample_constraints(labels, 60, 60, seed=1)
    problem = NPKLProblem.build(laplacian(S), c, rank=2)
    plan = make_plan(problem, n_blocks=n_blocks, align=1)
    pairs = list(zip(c.i.tolist(), c.j.tolist()))
    check_schedule(plan, S.toarray(), pairs)
    assert plan.n_blocks == n_blocks
    block = np.searchsorted(plan.block_ptr, np.arange(n), side="right") - 1
    kept = plan.colour < 2
    assert np.all(plan.colour[kept] == block[kept] % 2)
    assert kept.mean() > 0.5
    if n_blocks <= 2:
        assert kept.all()  # two blocks: nothing can clash


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"scheme": "stripes"}, "scheme"),
        ({"scheme": None}, "scheme"),
        ({"n_blocks": 0}, "n_blocks"),
        ({"n_blocks": 2.5}, "n_blocks"),
        ({"n_blocks": True}, "n_blocks"),
        ({"align": 0}, "align"),
        ({"align": "1024"}, "align"),
    ],
)
def test_make_plan_bad_scheme_arguments(kwargs, match):
    c = Constraints.from_arrays([0], [1], [1], 4)
    problem = NPKLProblem.build(laplacian(sp.csr_matrix(np.ones((4, 4)) - np.eye(4))), c, rank=1)
    with pytest.raises(ValidationError, match=match):
        make_plan(problem, **kwargs)


@HYP
@given(small_problems(), st.sampled_from(["rcm", "none"]), st.integers(0, 2**32 - 1))
def test_relabel_round_trip_and_prepared_arrays(case, relabel, seed):
    problem, S, pairs = case
    n = problem.n_points
    plan = make_plan(problem, relabel=relabel)
    v = np.random.default_rng(seed).standard_normal((n, 3))
    internal = v[plan.order]
    back = np.empty_like(internal)
    back[plan.order] = internal  # the way fit_bcd undoes the relabelling
    assert np.array_equal(back, v)
    assert np.array_equal(internal[plan.rank_of], v)

    prep = prepare(problem, plan)
    assert prep.n_points == n
    # L in internal order = off-diagonal CSR + diagonal
    off = sp.csr_matrix((prep.data, prep.indices, prep.indptr), shape=(n, n)).toarray()
    assert np.all(np.diag(off) == 0)
    Lp = problem.L.toarray()[np.ix_(plan.order, plan.order)]
    np.testing.assert_array_equal(off + np.diag(prep.diag), Lp)
    # constraint pairs and symmetric lists in internal order
    c = problem.constraints
    assert np.array_equal(prep.pi, plan.rank_of[c.i])
    assert np.array_equal(prep.pj, plan.rank_of[c.j])
    assert np.array_equal(prep.pt, c.t)
    sign = {(a, b): s for a, b, s in zip(c.i.tolist(), c.j.tolist(), c.t.tolist())}
    expected = {q: [] for q in range(n)}
    for (a, b), s in sign.items():
        expected[int(plan.rank_of[a])].append((int(plan.rank_of[b]), s))
        expected[int(plan.rank_of[b])].append((int(plan.rank_of[a]), s))
    for q in range(n):
        got = list(
            zip(
                prep.cidx[prep.cptr[q] : prep.cptr[q + 1]].tolist(),
                prep.csgn[prep.cptr[q] : prep.cptr[q + 1]].tolist(),
            )
        )
        assert got == sorted(expected[q])
    assert prep.pmax == max(len(v) for v in expected.values())
    # the plan with L in its order (fit_bcd and fit_admm permute L once for both): the same
    # plan, and prepare gives the same arrays from that matrix
    plan2, Lp2 = make_plan(problem, relabel=relabel, return_matrix=True)
    for f in ("order", "colour", "colour_ptr", "colour_rows", "block_ptr"):
        assert np.array_equal(getattr(plan2, f), getattr(plan, f))
    np.testing.assert_array_equal(Lp2.tocsr().toarray(), Lp)
    prep2 = prepare(problem, plan2, Lp2)
    for f in ("indptr", "indices", "data", "diag", "cptr", "cidx", "csgn"):
        assert np.array_equal(getattr(prep2, f), getattr(prep, f))


def test_rcm_recovers_shuffled_path(rng):
    """RCM of a randomly numbered path graph has bandwidth 1; the identity does not."""
    n = 30
    perm = rng.permutation(n)
    S = np.zeros((n, n))
    for a, b in zip(perm[:-1], perm[1:]):
        S[a, b] = S[b, a] = 1.0
    c = Constraints.from_arrays([int(perm[0])], [int(perm[-1])], [-1], n)
    problem = NPKLProblem.build(laplacian(sp.csr_matrix(S)), c, rank=1)

    def bandwidth(order):
        rank_of = np.argsort(order)
        a, b = np.nonzero(S)
        return int(np.max(np.abs(rank_of[a] - rank_of[b])))

    rcm = make_plan(problem, relabel="rcm")
    check_permutation(rcm, n)
    assert bandwidth(rcm.order) == 1
    assert bandwidth(make_plan(problem, relabel="none").order) > 1
    assert make_plan(problem).order.tolist() == rcm.order.tolist()  # 'rcm' is the default


def test_colour_order_is_seeded_permutation(rng):
    X = rng.normal(size=(40, 2))
    g = knn_graph(X, 5, warn=False)
    c = sample_constraints(rng.integers(0, 2, size=40), seed=1)
    plan = make_plan(NPKLProblem.build(g.laplacian(), c, rank=2))
    assert plan.n_colours >= 2
    a = plan.colour_order(np.random.default_rng(5))
    b = plan.colour_order(np.random.default_rng(5))
    assert np.array_equal(a, b)
    assert np.array_equal(np.sort(a), np.arange(plan.n_colours))


@pytest.mark.parametrize("relabel", ["RCM", "amd", None, ""])
def test_make_plan_bad_relabel(relabel, rng):
    c = Constraints.from_arrays([0], [1], [1], 4)
    problem = NPKLProblem.build(laplacian(sp.csr_matrix(np.ones((4, 4)) - np.eye(4))), c, rank=1)
    with pytest.raises(ValidationError, match="relabel"):
        make_plan(problem, relabel=relabel)
    with pytest.raises(ValidationError, match="relabel"):
        fit_bcd(problem, relabel=relabel)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fit_bcd_same_objective_with_and_without_relabelling(seed):
    """Both relabellings run exact BCD; from one V0 they reach the same objective.

    Measured: relative difference <= 1.2e-15 at convergence (tol=1e-9, gamma=5, n=40);
    the assertion allows 1e-6.
    """
    data_rng = np.random.default_rng(seed)
    X = np.r_[data_rng.normal(size=(20, 2)), data_rng.normal(size=(20, 2)) + 4]
    labels = np.repeat([0, 1], 20)
    g = knn_graph(X, 5, warn=False)
    c = sample_constraints(labels, 15, 15, seed=seed)
    problem = NPKLProblem.build(g.laplacian(), c, loss="square", gamma=5.0, rank=3, seed=seed)
    V0 = initial_V(problem, np.random.default_rng(seed + 100))
    results = {
        rl: fit_bcd(problem, V0=V0, relabel=rl, max_sweeps=3000, tol=1e-9)
        for rl in ("rcm", "none")
    }
    a, b = results["rcm"], results["none"]
    assert a.converged and b.converged
    assert a.objective < a.objective_initial
    assert a.objective_initial == pytest.approx(b.objective_initial, rel=1e-12)
    assert abs(a.objective - b.objective) <= 1e-6 * abs(a.objective)
    # V comes back in original order: its objective is the reported one
    for r in (a, b):
        assert r.V.shape == (40, 3)
        assert objective(problem, r.V) == pytest.approx(r.objective, rel=1e-9)


def test_permute_and_split_equal_scipys_fancy_indexing_and_coo_route():
    """The set-up's fast permutation (rows gathered, columns renamed) equals
    L[order][:, order], and the row-wise split of the diagonal equals the COO route, also
    for unsorted rows with duplicate entries."""
    import scipy.sparse as sp

    from npkl_dist.solvers._plan import _bandwidth, _split, permute

    rng = np.random.default_rng(5)
    n = 300
    rows, cols = rng.integers(0, n, 4000), rng.integers(0, n, 4000)
    A = sp.coo_matrix((rng.standard_normal(4000), (rows, cols)), shape=(n, n))
    A = sp.csr_matrix(A + A.T + sp.identity(n) * 5.0)
    # the last row once more holds its last column (a duplicate), rows stored reversed
    dup = sp.csr_matrix(
        (
            np.r_[A.data, 1.5],
            np.r_[A.indices, A.indices[-1]],
            np.r_[A.indptr[:-1], A.indptr[-1] + 1],
        ),
        shape=(n, n),
    )
    for i in range(n):
        sl = slice(dup.indptr[i], dup.indptr[i + 1])
        dup.indices[sl], dup.data[sl] = dup.indices[sl][::-1].copy(), dup.data[sl][::-1].copy()
    dup.has_sorted_indices = False
    assert not dup.has_canonical_format
    for M in (A, dup):
        order = rng.permutation(n)
        want = sp.csr_matrix(M.toarray()[order][:, order])
        got = permute(M, order)
        assert got.has_sorted_indices
        np.testing.assert_array_equal(got.toarray(), want.toarray())
        off, d = _split(got)
        dense = got.toarray()
        np.testing.assert_array_equal(d, np.diag(dense))
        np.testing.assert_array_equal(off.toarray(), dense - np.diag(np.diag(dense)))
        assert np.all(np.diff(off.indices[off.indptr[0] : off.indptr[1]]) > 0)
        assert not np.any(np.repeat(np.arange(n), np.diff(off.indptr)) == off.indices)
        # the plan's bandwidth pass against numpy
        rows = np.repeat(np.arange(n), np.diff(got.indptr))
        assert _bandwidth(got.indptr.astype(np.int64), got.indices.astype(np.int64)) == int(
            np.abs(rows - got.indices).max()
        )
    assert _bandwidth(np.zeros(4, np.int64), np.zeros(0, np.int64)) == 0  # no entries


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_permute_split_is_permute_then_split(dtype, global_random_seed):
    """The set-up's one-pass permutation and split equals ``_split(permute(...))`` array for
    array (sorted rows, int64 indices): with explicit zeros, rows without their diagonal, an
    empty row, and an input with duplicates and unsorted rows."""
    import scipy.sparse as sp

    from npkl_dist.solvers._plan import _split, permute, permute_split

    rng = np.random.default_rng(global_random_seed)
    n = 257
    rows, cols = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    A = sp.coo_matrix((rng.standard_normal(3000), (rows, cols)), shape=(n, n))
    A = sp.csr_matrix(A + A.T, dtype=dtype)
    A.sum_duplicates()
    A.data[::7] = 0.0  # explicit zeros are kept
    A = A.tolil()
    A[5, :] = 0.0  # an empty row
    A = A.tocsr()
    A.sum_duplicates()
    dup = sp.csr_matrix(
        (
            np.r_[A.data, dtype(1.5)],
            np.r_[A.indices, A.indices[-1]],
            np.r_[A.indptr[:-1], A.indptr[-1] + 1],
        ),
        shape=(n, n),
    )
    for i in range(n):
        sl = slice(dup.indptr[i], dup.indptr[i + 1])
        dup.indices[sl], dup.data[sl] = dup.indices[sl][::-1].copy(), dup.data[sl][::-1].copy()
    dup.has_sorted_indices = False
    assert np.count_nonzero(A.diagonal() == 0) > 0  # some rows without their diagonal
    for M in (A, dup):
        order = rng.permutation(n)
        off, diag = _split(permute(M, order))
        got = permute_split(M, order)
        assert got.indptr.dtype == got.indices.dtype == np.int64
        assert got.data.dtype == got.diag.dtype == dtype
        np.testing.assert_array_equal(got.indptr, off.indptr)
        np.testing.assert_array_equal(got.indices, off.indices)
        np.testing.assert_array_equal(got.data, off.data)
        np.testing.assert_array_equal(got.diag, diag)
        np.testing.assert_array_equal(got.tocsr().toarray(), M.toarray()[order][:, order])


@pytest.mark.parametrize("serial", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n, nnz", [(301, 4000), (301, 40000), (200, 30000)])
def test_split_nonzero_of_unsorted_rows_is_the_scipy_route(
    serial, index_dtype, n, nnz, global_random_seed
):
    """The AMG levels' compiled sorted split equals ``_split(_nonzero(A))`` array for array on
    rows stored in scrambled order: explicit zeros off and on the diagonal, rows without a
    diagonal, an empty row; a matrix with a duplicate column takes that route itself. Rows
    of about 26 entries (insertion sort), and of 100-200 (radix sort; two byte passes at
    n = 301, one at n = 200)."""
    from npkl_dist.linalg._csr import RADIX_MIN_ROW
    from npkl_dist.solvers._plan import _nonzero, _split, split_nonzero

    rng = np.random.default_rng(global_random_seed)
    rows, cols = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    A = sp.coo_matrix((rng.standard_normal(nnz), (rows, cols)), shape=(n, n))
    A = sp.csr_matrix(A + A.T)
    A.sum_duplicates()
    A = A.tolil()
    A[7, :] = 0.0  # an empty row
    A = A.tocsr()
    A.sum_duplicates()
    A.data[::5] = 0.0  # explicit zeros (some on the diagonal)
    assert np.count_nonzero(A.diagonal() == 0) > 0
    for i in range(n):  # each row in a random order, as a coarse level stores it
        sl = slice(A.indptr[i], A.indptr[i + 1])
        p = rng.permutation(sl.stop - sl.start)
        A.indices[sl], A.data[sl] = A.indices[sl][p], A.data[sl][p]
    A.has_sorted_indices = False
    A.indices = A.indices.astype(index_dtype)
    A.indptr = A.indptr.astype(index_dtype)
    dup = A.copy()
    dup.indices[dup.indptr[3] + 1] = dup.indices[dup.indptr[3]]  # row 3 holds a column twice
    dup.has_canonical_format = False
    for M in (A, dup):
        want, wdiag = _split(_nonzero(M.copy()))
        (ptr, idx, val), diag = split_nonzero(M, serial=serial)
        assert ptr.dtype == idx.dtype == np.int64
        np.testing.assert_array_equal(ptr, want.indptr)
        np.testing.assert_array_equal(idx, want.indices)
        np.testing.assert_array_equal(val, want.data)
        np.testing.assert_array_equal(diag, wdiag)
        assert np.all(val != 0)
        for i in range(n):
            assert np.all(np.diff(idx[ptr[i] : ptr[i + 1]]) > 0)
    long_rows = np.diff(A.indptr) > RADIX_MIN_ROW + 1
    assert long_rows.any() if nnz > 10000 else not long_rows.all()


@pytest.mark.parametrize("passes", [1, 2, 3])
def test_radix_sort_row_is_a_stable_sort(passes, global_random_seed):
    """radix_sort_row sorts a slice of a longer array by key (values along, equal keys in
    their order: a stable sort), leaves the rest untouched, for keys of 1-3 bytes (an odd
    count of passes ends in the scratch and is copied back)."""
    from npkl_dist.linalg._csr import radix_passes, radix_sort_row

    rng = np.random.default_rng(global_random_seed)
    hi = 256**passes
    assert radix_passes(hi) == passes and radix_passes(hi + 1) == passes + 1
    for k in (0, 1, 2, 33, 150, 400):
        keys = rng.integers(0, hi, k + 10)
        keys[5 : 5 + k // 2] = keys[5 + k // 2 : 5 + 2 * (k // 2)]  # equal keys in pairs
        vals = rng.standard_normal(k + 10)
        want_k, want_v = keys.copy(), vals.copy()
        o = np.argsort(keys[5 : 5 + k], kind="stable")
        want_k[5 : 5 + k], want_v[5 : 5 + k] = keys[5 : 5 + k][o], vals[5 : 5 + k][o]
        radix_sort_row(
            keys,
            vals,
            5,
            5 + k,
            np.empty(k + 1, np.int64),
            np.empty(k + 1),
            np.empty(256, np.int64),
            passes,
        )
        np.testing.assert_array_equal(keys, want_k)
        np.testing.assert_array_equal(vals, want_v)


def _scipy_rcm(M):
    from scipy.sparse.csgraph import reverse_cuthill_mckee as scipy_rcm

    return scipy_rcm(M, symmetric_mode=True)


def _random_symmetric_graph(rng, n, density, diagonal, components):
    """A random symmetric pattern on n nodes in ``components`` blocks of consecutive
    nodes, numbered at random, with or without stored diagonal entries."""
    parts = np.array_split(np.arange(n), components)
    blocks = [sp.random(len(p), len(p), density=density, random_state=rng) for p in parts]
    A = sp.block_diag(blocks).tocsr()
    A = A + A.T
    if diagonal:
        A = A + sp.diags(rng.uniform(1.0, 2.0, n))
    perm = rng.permutation(n)
    return sp.csr_matrix(A[perm][:, perm])


def test_rcm_equals_scipys_order(rng):
    """The compiled reverse Cuthill-McKee gives scipy's permutation element for element:
    connected and disconnected graphs, isolated nodes, with and without stored diagonals,
    rows stored in scrambled order, int32 and int64 indices, and kNN Laplacians."""
    from npkl_dist.solvers._plan import reverse_cuthill_mckee

    cases = []
    for n, density, diagonal, components in [
        (1, 0.0, True, 1),
        (2, 0.0, False, 1),
        (40, 0.05, False, 1),
        (200, 0.02, True, 3),
        (500, 0.004, False, 5),
        (300, 0.05, True, 1),
    ]:
        cases.append(_random_symmetric_graph(rng, n, density, diagonal, components))
    X = rng.standard_normal((600, 3))
    cases.append(sp.csr_matrix(knn_graph(X, k=6).laplacian()))
    scrambled = cases[4].copy()  # each row's entries stored in a random order
    for i in range(scrambled.shape[0]):
        sl = slice(scrambled.indptr[i], scrambled.indptr[i + 1])
        scrambled.indices[sl] = rng.permutation(scrambled.indices[sl])
    scrambled.has_sorted_indices = False
    cases.append(scrambled)
    wide = cases[3].copy()
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    cases.append(wide)
    for M in cases:
        got = reverse_cuthill_mckee(M)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _scipy_rcm(M))


@HYP
@given(st.data())
def test_rcm_equals_scipys_order_on_random_patterns(data):
    """Any symmetric pattern (ties in degree everywhere on small graphs)."""
    from npkl_dist.solvers._plan import reverse_cuthill_mckee

    n = data.draw(st.integers(1, 25))
    pairs = [(a, b) for a in range(n) for b in range(a, n)]
    edges = data.draw(st.lists(st.sampled_from(pairs), max_size=4 * n, unique=True))
    a = np.array([e[0] for e in edges] + [e[1] for e in edges], np.int64)
    b = np.array([e[1] for e in edges] + [e[0] for e in edges], np.int64)
    M = sp.csr_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
    np.testing.assert_array_equal(reverse_cuthill_mckee(M), _scipy_rcm(M))


@pytest.mark.parametrize("src_dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("dtype", [None, np.float32, np.float64])
def test_row_relabelling_equals_numpys_fancy_indexing(src_dtype, dtype, global_random_seed):
    """take_rows (a fit's relabelling of V into its internal order, and back through the
    inverse order; compiled for float32/float64) gives numpy's A[idx] and out[perm] = A bit
    for bit, with the dtype conversion rounded as numpy's astype; other inputs take numpy's
    route."""
    from npkl_dist.linalg._rowops import take_rows

    rng = np.random.default_rng(global_random_seed)
    n, r = 1000, 7
    A = (rng.standard_normal((n, r)) * 1e3).astype(src_dtype)
    want_dtype = A.dtype if dtype is None else np.dtype(dtype)
    for perm in (rng.permutation(n), rng.permutation(n).astype(np.int32)):
        got = take_rows(A, perm, dtype)
        assert got.dtype == want_dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, A[perm].astype(want_dtype))
        back = take_rows(got, np.argsort(perm))  # out[perm] = got
        assert back.dtype == want_dtype
        np.testing.assert_array_equal(back, A.astype(want_dtype))
    # a subset, repeats and negative indices (numpy's semantics), a Fortran-ordered source
    idx = np.r_[rng.integers(-n, n, 50), 3, 3]
    np.testing.assert_array_equal(take_rows(A, idx, dtype), A[idx].astype(want_dtype))
    F = np.asfortranarray(A)
    np.testing.assert_array_equal(take_rows(F, perm, dtype), A[perm].astype(want_dtype))
    with pytest.raises(IndexError):
        take_rows(A, np.array([0, n]), dtype)
    assert take_rows(A, np.zeros(0, np.int64), dtype).shape == (0, r)
