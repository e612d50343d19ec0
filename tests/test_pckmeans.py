"""Constrained k-means (PCK-means) on the rows of V: the compiled run against its numpy
reference, the penalised objective, constraints honoured, no empty cluster, dtypes, centres,
bad input (npkl_dist.evaluate.pck_kmeans, npkl_dist._pckmeans)."""

import warnings

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist._pckmeans import (
    closure_pairs,
    constraint_adjacency,
    constraint_closure,
    pck_objective,
    pck_run,
    pck_run_reference,
    run_objective,
)
from npkl_dist.evaluate import cluster_kernel


def _constraints(y, n_must, n_cannot, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nk.ConstraintWarning)
        return nk.sample_constraints(y, n_must, n_cannot, seed=seed)


def _problem(seed, n=None, k=None, r=None):
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(12, 60))
    k = k or int(rng.integers(2, 6))
    r = r or int(rng.integers(1, 5))
    y = rng.integers(0, k, n)
    X = rng.standard_normal((n, r)) + 0.8 * y[:, None]
    cons = _constraints(y, n // 3, n // 3, seed)
    return X, y, cons, k


@pytest.mark.parametrize("seed", range(12))
def test_compiled_run_equals_the_reference(seed):
    """Same labels, centres, objective and sweep count as the readable numpy form, from
    the same start and seed, for penalties from none to dominant."""
    X, _, cons, k = _problem(seed)
    rng = np.random.default_rng(100 + seed)
    C0 = X[rng.choice(X.shape[0], k, replace=False)]
    for w in (0.0, 0.7, 5.0):
        a = pck_run(np.ascontiguousarray(X), C0, constraint_adjacency(cons, X.shape[0]), w, seed)
        b = pck_run_reference(X, C0, cons, w, seed)
        assert np.array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-12)
        assert a[2] == pytest.approx(b[2], rel=1e-12)
        assert a[3] == b[3]
        # the objective returned is J written plainly, and the centres are the labels' means
        assert a[2] == pytest.approx(pck_objective(X, a[0], a[1], cons, w), rel=1e-12)
        for h in range(k):
            np.testing.assert_allclose(a[1][h], X[a[0] == h].mean(0), rtol=1e-12, atol=1e-12)


def test_empty_clusters_are_relocated_like_the_reference():
    """A start with centres far from every point leaves clusters empty after the first
    sweep: each takes a point (the farthest from its centre), in both forms, and no
    cluster ends empty."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    y = np.arange(40) % 4
    cons = _constraints(y, 10, 10, 0)
    C0 = np.array([[0.0, 0.0], [50.0, 50.0], [60.0, 60.0], [70.0, -70.0]])
    a = pck_run(np.ascontiguousarray(X), C0, constraint_adjacency(cons, 40), 0.5, 1)
    b = pck_run_reference(X, C0, cons, 0.5, 1)
    assert np.array_equal(a[0], b[0]) and a[2] == pytest.approx(b[2], rel=1e-12)
    assert np.bincount(a[0], minlength=4).min() >= 1


def test_no_empty_cluster_from_the_public_function():
    """More clusters than the data has groups, and many duplicate rows (PCKMeans's
    EmptyClustersException case): every cluster keeps at least one point."""
    X = np.repeat(np.eye(3), 20, axis=0)
    y = np.repeat(np.arange(3), 20)
    cons = _constraints(y, 15, 15, 0)
    labels = nk.pck_kmeans(X, 8, cons, seed=0)
    assert np.bincount(labels, minlength=8).min() >= 1


def test_dominant_penalty_honours_consistent_constraints():
    """Constraints from a labelling that disagrees with the geometry (two blobs, the
    classes cut across them), each point in at most one pair: with a dominant weight ICM
    satisfies every pair (a point's partner is labelled or not yet, and either way the point
    can agree with it; an agreeing pair is never broken again); with weight 0 it is plain
    k-means and about half are violated. On a denser constraint graph ICM is a local search
    (a point between two groups that were labelled apart can be stuck): there a dominant
    weight leaves fewer violations than none, not necessarily zero."""
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(0, 0.3, (30, 2)), rng.normal(3, 0.3, (30, 2))])
    y = np.arange(60) % 2  # classes cut across the blobs
    perm = rng.permutation(60)
    i, j = perm[:30], perm[30:]
    matching = nk.Constraints.from_arrays(i, j, np.where(y[i] == y[j], 1, -1), 60)
    dense = _constraints(y, 30, 30, 1)

    def violated(labels, cons):
        same = labels[cons.i] == labels[cons.j]
        return int(np.count_nonzero(same != (cons.t > 0)))

    assert violated(nk.pck_kmeans(X, 2, matching, seed=0, weight=0.0), matching) > 8
    assert violated(nk.pck_kmeans(X, 2, matching, seed=0, weight=100.0), matching) == 0
    free = violated(nk.pck_kmeans(X, 2, dense, seed=0, weight=0.0), dense)
    assert violated(nk.pck_kmeans(X, 2, dense, seed=0, weight=100.0), dense) < free / 2


def _every_start(X, cons, k, bound, spread, closure):
    """The penalised objectives of the runs pck_kmeans(seed=5, n_init=4) makes, reproduced
    by hand from its seeds (``bound``: the adjacency or closure pck_run takes), then kernel
    k-means' clustering as one more start and as it stands (the last)."""
    from sklearn.cluster import kmeans_plusplus

    from npkl_dist.evaluate import must_link_centres

    Xc = np.ascontiguousarray(X)
    rng = np.random.default_rng(5)
    objs = []
    for run in range(4):
        s = int(rng.integers(2**31))
        C0 = (
            must_link_centres(X, cons, k, seed=s)
            if run == 0
            else kmeans_plusplus(X, k, random_state=s)[0]
        )
        objs.append(pck_run(Xc, C0, bound, spread, s)[2])
    km, km_C = nk.kernel_kmeans(X, k, seed=5, constraints=cons, return_centres=True)
    s = int(rng.integers(2**31))
    objs.append(pck_run(Xc, np.ascontiguousarray(km_C), bound, spread, s)[2])
    objs.append(pck_objective(X, km, km_C, cons, spread, closure=closure))
    return objs


def test_restarts_keep_the_lowest_objective():
    """n_init runs: the result's objective is the minimum over the runs (each run
    reproduced by hand from the public function's seeds)."""
    X, _, cons, k = _problem(3, n=80, k=4, r=3)
    labels, C = nk.pck_kmeans(X, k, cons, seed=5, n_init=4, return_centres=True)
    spread = ((X - X.mean(0)) ** 2).sum(1).mean()
    objs = _every_start(X, cons, k, constraint_adjacency(cons, X.shape[0]), spread, False)
    km_J = objs[-1]
    got = pck_objective(X, labels, C, cons, spread)
    assert got == pytest.approx(min(objs), rel=1e-12)
    assert got <= km_J  # never above the clustering that ignores the pairs


def test_float32_input_gives_the_float64_result():
    X, _, cons, k = _problem(4, n=100, k=3, r=4)
    a = nk.pck_kmeans(X, k, cons, seed=0)
    b = nk.pck_kmeans(X.astype(np.float32).astype(np.float64), k, cons, seed=0)
    c = nk.pck_kmeans(X.astype(np.float32), k, cons, seed=0)
    assert np.array_equal(b, c)
    assert nk.clustering_metrics(a, c)["ari"] > 0.95  # float32 rounding of X only


def test_scale_free_weight():
    """The penalty is relative to the rows' spread: scaling V changes nothing."""
    X, _, cons, k = _problem(6, n=90, k=3, r=3)
    a = nk.pck_kmeans(X, k, cons, seed=1)
    b = nk.pck_kmeans(X * 1000.0, k, cons, seed=1)
    assert np.array_equal(a, b)


def test_centres_and_assign_clusters():
    """return_centres (both methods): the centres are the clusters' means, and
    assign_clusters puts each training row back in its own cluster when it is nearest to
    its centre (all of them for well-separated blobs); normalize measures unit rows."""
    rng = np.random.default_rng(2)
    centres = np.array([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0]])
    y = np.repeat(np.arange(3), 30)
    V = centres[y] + 0.3 * rng.standard_normal((90, 3))
    cons = _constraints(y, 20, 20, 2)
    for labels, C in (
        nk.kernel_kmeans(V, 3, seed=0, return_centres=True),
        nk.pck_kmeans(V, 3, cons, seed=0, return_centres=True),
    ):
        for h in range(3):
            np.testing.assert_allclose(C[h], V[labels == h].mean(0), atol=1e-10)
        assert np.array_equal(nk.assign_clusters(V, C), labels)
    labels, C = nk.pck_kmeans(V, 3, cons, seed=0, normalize=True, return_centres=True)
    assert np.allclose(np.linalg.norm(C, axis=1), 1.0, atol=0.05)  # means of unit rows
    assert np.array_equal(nk.assign_clusters(10.0 * V, C, normalize=True), labels)
    assert nk.kernel_kmeans(V, 3, seed=0).shape == (90,)  # default: labels only, as before


def test_cluster_kernel_default_method():
    """cluster_kernel: pck when the constraints hold a pair, kernel k-means without."""
    X, _, cons, k = _problem(7, n=80, k=3, r=3)
    assert np.array_equal(
        cluster_kernel(X, k, seed=2, constraints=cons), nk.pck_kmeans(X, k, cons, seed=2)
    )
    assert np.array_equal(
        cluster_kernel(X, k, seed=2, constraints=cons, method="kmeans"),
        nk.kernel_kmeans(X, k, seed=2, constraints=cons),
    )
    assert np.array_equal(cluster_kernel(X, k, seed=2), nk.kernel_kmeans(X, k, seed=2))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"weight": -1.0}, r"weight: expected a finite number >= 0 .*got -1\.0"),
        ({"weight": float("nan")}, r"weight: expected a finite number >= 0"),
        ({"n_init": 0}, r"n_init: expected an integer >= 1, got 0"),
        ({"max_iter": 1.5}, r"max_iter: expected an integer >= 1, got 1\.5"),
    ],
)
def test_bad_options(kwargs, match):
    X, _, cons, k = _problem(8, n=30, k=2, r=2)
    with pytest.raises(nk.ValidationError, match=match):
        nk.pck_kmeans(X, k, cons, **kwargs)


def test_bad_inputs():
    X, _, cons, k = _problem(9, n=30, k=2, r=2)
    with pytest.raises(nk.ValidationError, match=r"constraints: expected a Constraints over 29"):
        nk.pck_kmeans(X[:-1], k, cons)
    with pytest.raises(nk.ValidationError, match=r"V: holds NaN or inf in row\(s\) \[0\]"):
        nk.pck_kmeans(np.where(np.arange(30)[:, None] == 0, np.nan, X), k, cons)
    with pytest.raises(nk.ValidationError, match=r"clusters: expected an integer in \[1, 30\]"):
        nk.pck_kmeans(X, 31, cons)
    with pytest.raises(nk.ValidationError, match=r"method: expected one of 'kmeans', 'pck'"):
        cluster_kernel(X, k, constraints=cons, method="pckmeans")
    with pytest.raises(nk.ValidationError, match=r"method: 'pck' clusters with the constraints"):
        cluster_kernel(X, k, method="pck")
    with pytest.raises(nk.ValidationError, match=r"V_new: expected rows of length 2"):
        nk.assign_clusters(np.ones((3, 4)), np.ones((2, 2)))


# -- the transitive closure (closure=True) -----------------------------------------------


def _closure_problem(seed, dtype=np.float64):
    """A random problem whose closure adds pairs: several must-link components of two or
    more points, and cannot-links between components of which some are entailed."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 60))
    k = int(rng.integers(2, 6))
    r = int(rng.integers(1, 5))
    y = rng.integers(0, k, n)
    X = (rng.standard_normal((n, r)) + 0.8 * y[:, None]).astype(dtype)
    cons = _constraints(y, n // 3, n // 3, seed)
    return X, y, cons, k


def _closure_adds(cons, n):
    """(components of two or more points, closure must-links, closure cannot-links) beyond
    the given pairs."""
    cl = constraint_closure(cons, n)
    _, _, t = closure_pairs(cons, n)
    return (
        int(np.count_nonzero(cl.size > 1)),
        int(np.count_nonzero(t > 0)) - cons.n_must,
        int(np.count_nonzero(t < 0)) - cons.n_cannot,
    )


@pytest.mark.parametrize("seed", range(12))
def test_closure_compiled_run_equals_the_reference(seed):
    """With the closure, the compiled run (per-component counts) and the reference (the
    closure's pairs enumerated) give the same labels, centres, objective and sweep count,
    from the same start and seed, for penalties from none to dominant; float32 rows too."""
    X, _, cons, k = _closure_problem(seed, np.float32 if seed % 3 == 2 else np.float64)
    n = X.shape[0]
    groups, more_must, more_cannot = _closure_adds(cons, n)
    assert groups >= 2 and more_must > 0 and more_cannot > 0  # the closure is not the pairs
    closure = constraint_closure(cons, n)
    X64 = np.ascontiguousarray(X, dtype=np.float64)
    rng = np.random.default_rng(100 + seed)
    C0 = X64[rng.choice(n, k, replace=False)]
    for w in (0.0, 0.3, 0.7, 5.0):
        a = pck_run(X64, C0, closure, w, seed)
        b = pck_run_reference(X, C0, cons, w, seed, closure=True)
        assert np.array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-12)
        assert a[2] == pytest.approx(b[2], rel=1e-12)
        assert a[3] == b[3]
        J = pck_objective(X, a[0], a[1], cons, w, closure=True)
        assert a[2] == pytest.approx(J, rel=1e-12)
        assert run_objective(X64, a[0], a[1], closure, w) == pytest.approx(J, rel=1e-12)
        for h in range(k):
            np.testing.assert_allclose(a[1][h], X64[a[0] == h].mean(0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_closure_objective_counts_the_closure_pairs_exactly(seed):
    """The compiled objective's penalty, from the components' cluster counts, is exactly the
    number of violated pairs of the enumerated closure (zero rows: J is the count)."""
    X, _, cons, k = _closure_problem(seed)
    n = X.shape[0]
    closure = constraint_closure(cons, n)
    i, j, t = closure_pairs(cons, n)
    zeros = np.zeros((n, 1))
    rng = np.random.default_rng(seed)
    for _ in range(5):
        labels = rng.integers(0, k, n)
        count = int(np.count_nonzero((labels[i] == labels[j]) != (t > 0)))
        assert run_objective(zeros, labels, np.zeros((k, 1)), closure, 1.0) == count
        assert pck_objective(zeros, labels, np.zeros((k, 1)), cons, 1.0, closure=True) == count


def test_closure_pairs_by_hand():
    """Must-links 0-1, 1-2 and a cannot-link 2-3, 3-4 must-linked: the closure holds
    0-1, 0-2, 1-2, 3-4 (must) and the six pairs across {0, 1, 2} x {3, 4} (cannot)."""
    cons = nk.Constraints.from_arrays([0, 1, 2, 3], [1, 2, 3, 4], [1, 1, -1, 1], 6)
    i, j, t = closure_pairs(cons, 6)
    must = {(a, b) for a, b, s in zip(i.tolist(), j.tolist(), t.tolist()) if s > 0}
    cannot = {(a, b) for a, b, s in zip(i.tolist(), j.tolist(), t.tolist()) if s < 0}
    assert must == {(0, 1), (0, 2), (1, 2), (3, 4)}
    assert cannot == {(a, b) for a in (0, 1, 2) for b in (3, 4)}
    closure = constraint_closure(cons, 6)
    assert closure.size[closure.comp].tolist() == [3, 3, 3, 2, 2, 1]  # 5 is on its own
    # labels 0 0 1 | 1 0 | 0: must 0-2, 1-2 and 3-4 apart (3); cannot 0-4, 1-4 and 2-3
    # together (3); the given pairs alone count 1-2, 3-4 apart (2) and 2-3 together (1)
    labels = np.array([0, 0, 1, 1, 0, 0])
    X, C = np.zeros((6, 1)), np.zeros((2, 1))
    assert pck_objective(X, labels, C, cons, 1.0, closure=True) == 6.0
    assert run_objective(X, labels, C, closure, 1.0) == 6.0
    assert pck_objective(X, labels, C, cons, 1.0) == 3.0


@pytest.mark.parametrize("seed", range(8))
def test_closure_objective_never_rises(seed):
    """From any labelling and centres, an ICM sweep on the closure's counts and then the
    mean update each leave J_cl where it was or lower (the local cost of a point differs from
    J_cl by terms that do not involve it)."""
    from npkl_dist._pckmeans import _assign_closure, _closure_state, sq_distances

    X, _, cons, k = _closure_problem(seed)
    n = X.shape[0]
    cl = constraint_closure(cons, n)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n).astype(np.int64)
    labels[:k] = np.arange(k)  # no empty cluster, so the means are defined
    C = rng.standard_normal((k, X.shape[1]))
    members = np.zeros((cl.size.size, k), dtype=np.int64)
    pressure = np.zeros_like(members)
    labelled = np.zeros(cl.size.size, dtype=np.int64)
    for w in (0.1, 1.0, 10.0):
        J = pck_objective(X, labels, C, cons, w, closure=True)
        for _ in range(4):
            _closure_state(labels, cl.comp, cl.indptr, cl.partner, members, labelled, pressure)
            D = sq_distances(X, C, np.einsum("ij,ij->i", X, X))
            order = rng.permutation(n)
            _assign_closure(
                D, cl.comp, cl.indptr, cl.partner, w, order, labels, members, labelled,
                pressure, np.empty(k),
            )  # fmt: skip
            after_sweep = pck_objective(X, labels, C, cons, w, closure=True)
            assert after_sweep <= J + 1e-9 * abs(J)
            if np.bincount(labels, minlength=k).min() == 0:
                break  # (an empty cluster has no mean: pck_run relocates a point)
            C = np.array([X[labels == h].mean(0) for h in range(k)])
            J = pck_objective(X, labels, C, cons, w, closure=True)
            assert J <= after_sweep + 1e-9 * abs(after_sweep)


def test_closure_changes_the_answer():
    """A must-link chain of ten points, five in each of two far blobs, joined by one pair
    across: as given, cutting the chain costs w once, less than moving five points across,
    and pck cuts it; the closure counts the 25 pairs across the cut, and pck keeps the chain
    whole (as PCKMeans, whose objective this is)."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 0.2, (20, 2)), rng.normal((6, 0), 0.2, (20, 2))])
    chain = np.r_[0:5, 20:25]
    cons = nk.Constraints.from_arrays(chain[:-1], chain[1:], np.ones(9, dtype=int), 40)
    for closure, whole in ((False, False), (True, True)):
        labels = nk.pck_kmeans(X, 2, cons, seed=0, weight=2.0, closure=closure)
        assert (np.unique(labels[chain]).size == 1) == whole
        assert np.array_equal(labels[5:20] == labels[5], np.ones(15, bool))  # blobs intact
        assert np.array_equal(labels[25:] == labels[25], np.ones(15, bool))


def test_closure_equals_the_pairs_when_it_adds_none():
    """Each point in at most one pair: the closure is the given pairs, every count is 0 or 1,
    and a run on either gives the same result bit for bit; the public function the same
    clustering (its pick among runs of equal objective compares kernel k-means' J computed
    in numpy with the pairs, compiled with the closure, so the cluster ids may differ)."""
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(0, 0.5, (30, 2)), rng.normal(2, 0.5, (30, 2))])
    y = np.arange(60) % 2
    perm = rng.permutation(60)
    i, j = perm[:30], perm[30:]
    cons = nk.Constraints.from_arrays(i, j, np.where(y[i] == y[j], 1, -1), 60)
    assert _closure_adds(cons, 60)[1:] == (0, 0)
    C0 = X[rng.choice(60, 3, replace=False)]
    for w in (0.5, 5.0):
        a = pck_run(X, C0, constraint_adjacency(cons, 60), w, 2)
        b = pck_run(X, C0, constraint_closure(cons, 60), w, 2)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert a[2:] == b[2:]
    a = nk.pck_kmeans(X, 2, cons, seed=3, closure=False)
    b = nk.pck_kmeans(X, 2, cons, seed=3, closure=True)
    assert nk.clustering_metrics(a, b)["ari"] == 1.0


def test_closure_restarts_keep_the_lowest_objective():
    """closure=True: the result's J_cl is the minimum over the runs (each reproduced by hand
    from the public function's seeds on the closure), kernel k-means' clustering included,
    so never above kernel k-means' J_cl."""
    X, _, cons, k = _problem(3, n=80, k=4, r=3)
    labels, C = nk.pck_kmeans(X, k, cons, seed=5, n_init=4, closure=True, return_centres=True)
    spread = ((X - X.mean(0)) ** 2).sum(1).mean()
    objs = _every_start(X, cons, k, constraint_closure(cons, X.shape[0]), spread, True)
    km_J = objs[-1]
    got = pck_objective(X, labels, C, cons, spread, closure=True)
    assert got == pytest.approx(min(objs), rel=1e-12)
    assert got <= km_J * (1 + 1e-12)


def test_closure_float32_input_gives_the_float64_result():
    X, _, cons, k = _problem(4, n=100, k=3, r=4)
    b = nk.pck_kmeans(X.astype(np.float32).astype(np.float64), k, cons, seed=0, closure=True)
    c = nk.pck_kmeans(X.astype(np.float32), k, cons, seed=0, closure=True)
    assert np.array_equal(b, c)


def test_closure_refuses_a_cannot_link_inside_a_must_link_component():
    """Must-links 0-1, 1-2 and a cannot-link 0-2 (a set Constraints.from_arrays refuses,
    built around it): the closure cannot hold it, ConstraintError; the pairs as given run."""
    X, _, _, _ = _problem(10, n=12, k=2, r=2)
    cons = nk.Constraints(
        np.array([0, 0, 1]), np.array([1, 2, 2]), np.array([1, -1, 1], dtype=np.int8), 12
    )
    with pytest.raises(nk.ConstraintError, match=r"1 cannot-link pair\(s\) join .*\[\(0, 2\)\]"):
        nk.pck_kmeans(X, 2, cons, closure=True)
    assert nk.pck_kmeans(X, 2, cons, closure=False).shape == (12,)


def test_closure_bad_option():
    X, _, cons, k = _problem(8, n=30, k=2, r=2)
    with pytest.raises(nk.ValidationError, match=r"closure: expected True or False, got 'yes'"):
        nk.pck_kmeans(X, k, cons, closure="yes")
