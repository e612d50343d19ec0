"""Constraints.from_arrays, sample_constraints and the constraint adjacency lists."""

from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npkl_dist import (
    ConstraintError,
    Constraints,
    ConstraintWarning,
    NpklError,
    NpklWarning,
    ValidationError,
    sample_constraints,
)

HYP = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def rng(global_random_seed):
    """Seeded generator; NPKL_TESTS_GLOBAL_RANDOM_SEED=all runs every test over 100 seeds."""
    return np.random.default_rng(global_random_seed)


# ---------------------------------------------------------------------------------------------
# brute-force oracle
# ---------------------------------------------------------------------------------------------


def oracle(i, j, t, n):
    """Readable reference of Constraints.from_arrays on integer rows (i, j, t in {+1, -1}).

    Returns ("error", kind, pairs) or ("ok", {(lo, hi): type}, n_duplicates).
    """
    rows = list(zip(i, j, t))
    for name, pos in (("i", 0), ("j", 1)):
        bad = [(a, b) for a, b, _ in rows if not 0 <= (a, b)[pos] < n]
        if bad:
            return ("error", f"index {name}", bad[:20])
    selfp = [(a, b) for a, b, _ in rows if a == b]
    if selfp:
        return ("error", "self-pair", selfp[:20])
    types = defaultdict(set)
    for a, b, s in rows:
        types[(min(a, b), max(a, b))].add(s)
    conflict = sorted(k for k, v in types.items() if len(v) == 2)
    if conflict:
        return ("error", "both must-link and cannot-link", conflict[:20])
    # must-link closure by Floyd-Warshall on booleans
    reach = np.eye(n, dtype=bool)
    for (a, b), v in types.items():
        if v == {1}:
            reach[a, b] = reach[b, a] = True
    for k in range(n):
        reach |= reach[:, [k]] & reach[[k], :]
    bad = sorted(k for k, v in types.items() if v == {-1} and reach[k])
    if bad:
        return ("error", "transitivity", bad[:20])
    return ("ok", {k: next(iter(v)) for k, v in types.items()}, len(rows) - len(types))


ENCODINGS = {
    "int": lambda s: s,
    "float": lambda s: float(s),
    "word": lambda s: "must" if s > 0 else "cannot",
    "short": lambda s: "ML" if s > 0 else " cl ",
    "long": lambda s: "Must-Link" if s > 0 else "cannot-link",
    "signed": lambda s: "+1" if s > 0 else "-1",
}


@st.composite
def constraint_rows(draw):
    """Random rows over n points; types follow a hidden labelling (so they are consistent)
    unless defects are injected: flipped types, contradicting repeats, must-link chains
    closed by a cannot-link (transitivity),
    out-of-range indices, self-pairs."""
    n = draw(st.integers(2, 7))
    m = draw(st.integers(1, 12))
    labels = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    i, j, t = [], [], []
    for _ in range(m):
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(0, n - 1).filter(lambda x, a=a: x != a))
        i.append(a)
        j.append(b)
        t.append(1 if labels[a] == labels[b] else -1)
    kinds = ["flip", "contradict", "chain", "oor_i", "oor_j", "self"]
    defects = {k for k in kinds if draw(st.integers(0, 4)) == 0}
    rows = st.lists(st.integers(0, m - 1), min_size=1, max_size=3)
    outside = st.sampled_from([-2, -1, n, n + 1])
    if "flip" in defects:
        for k in draw(rows):
            t[k] = -t[k]
    if "contradict" in defects:  # the same pair again, maybe reversed, with the other type
        for k in draw(rows):
            a, b = (j[k], i[k]) if draw(st.booleans()) else (i[k], j[k])
            i.append(a)
            j.append(b)
            t.append(-t[k])
    if "chain" in defects:  # must-link path inside one class closed by a cannot-link
        cls = [p for p in range(n) if labels[p] == labels[0]]
        if len(cls) >= 3:
            path = draw(st.permutations(cls))[: draw(st.integers(3, len(cls)))]
            for a, b in zip(path[:-1], path[1:]):
                i.append(a)
                j.append(b)
                t.append(1)
            i.append(path[-1])
            j.append(path[0])
            t.append(-1)
    if "self" in defects:
        for k in draw(rows):
            j[k] = i[k]
    for name, col in (("oor_i", i), ("oor_j", j)):
        if name in defects:
            for k in draw(rows):
                col[k] = draw(outside)
    encoding = draw(st.sampled_from(sorted(ENCODINGS)))
    return n, i, j, t, encoding


@HYP
@given(constraint_rows())
def test_from_arrays_matches_bruteforce_oracle(case):
    n, i, j, t, encoding = case
    t_in = [ENCODINGS[encoding](s) for s in t]
    expected = oracle(i, j, t, n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if expected[0] == "error":
            _, kind, pairs = expected
            with pytest.raises(ConstraintError) as info:
                Constraints.from_arrays(i, j, t_in, n)
            err = info.value
            assert err.pairs == pairs
            msg = str(err)
            assert msg.startswith("constraints:")
            assert kind in msg
            assert str(pairs[0]) in msg
            assert not [w for w in caught if issubclass(w.category, NpklWarning)]
            return
        c = Constraints.from_arrays(i, j, t_in, n)
    _, pairs, n_dup = expected
    got = {(int(a), int(b)): int(s) for a, b, s in zip(c.i, c.j, c.t)}
    assert got == pairs
    assert c.m == len(pairs)
    assert c.n_duplicates == n_dup
    assert c.n_points == n
    assert c.n_must == sum(1 for v in pairs.values() if v > 0)
    assert c.n_cannot == sum(1 for v in pairs.values() if v < 0)
    # canonical form: i < j, lexicographically sorted, fixed dtypes
    assert np.all(c.i < c.j)
    assert list(zip(c.i.tolist(), c.j.tolist())) == sorted(pairs)
    assert c.i.dtype == np.int64 and c.j.dtype == np.int64 and c.t.dtype == np.int8
    dup_warnings = [w for w in caught if issubclass(w.category, ConstraintWarning)]
    assert len(dup_warnings) == (1 if n_dup else 0)
    if n_dup:
        assert f"merged {n_dup} duplicate" in str(dup_warnings[0].message)


@HYP
@given(st.data())
def test_from_arrays_transitivity_matches_closure(data):
    """Distinct pairs with random types: the only possible problem is transitivity."""
    n = data.draw(st.integers(3, 8))
    all_pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    pairs = data.draw(st.lists(st.sampled_from(all_pairs), min_size=1, max_size=12, unique=True))
    t = data.draw(st.lists(st.sampled_from([1, 1, -1]), min_size=len(pairs), max_size=len(pairs)))
    flip = data.draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    i = [b if f else a for (a, b), f in zip(pairs, flip)]
    j = [a if f else b for (a, b), f in zip(pairs, flip)]
    expected = oracle(i, j, t, n)
    assert expected[0] == "ok" or expected[1] == "transitivity"
    if expected[0] == "error":
        with pytest.raises(ConstraintError, match="transitivity") as info:
            Constraints.from_arrays(i, j, t, n)
        assert info.value.pairs == expected[2]
    else:
        c = Constraints.from_arrays(i, j, t, n)
        assert c.to_table().tolist() == [[a, b, s] for (a, b), s in sorted(expected[1].items())]


@HYP
@given(st.data())
def test_from_arrays_consistent_labels_always_accepted(data):
    """Pairs drawn from a labelling never contradict each other; only duplicates are merged."""
    n = data.draw(st.integers(2, 10))
    labels = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    all_pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    rows = data.draw(st.lists(st.sampled_from(all_pairs), min_size=1, max_size=25))
    i = [a for a, _ in rows]
    j = [b for _, b in rows]
    t = [1 if labels[a] == labels[b] else -1 for a, b in rows]
    expected = oracle(i, j, t, n)
    assert expected[0] == "ok"
    c = Constraints.from_arrays(i, j, t, n, warn=False)
    assert {(int(a), int(b)): int(s) for a, b, s in zip(c.i, c.j, c.t)} == expected[1]
    assert c.n_duplicates == expected[2]


# ---------------------------------------------------------------------------------------------
# individual rules of from_arrays
# ---------------------------------------------------------------------------------------------


def test_error_hierarchy():
    assert issubclass(ConstraintError, ValidationError)
    assert issubclass(ConstraintError, ValueError)
    assert issubclass(ConstraintError, NpklError)
    assert issubclass(ConstraintWarning, NpklWarning)
    assert issubclass(ConstraintWarning, UserWarning)
    err = ConstraintError("x", pairs=[(0, 1)])
    assert err.pairs == [(0, 1)]
    assert ConstraintError("x").pairs == []
    with pytest.raises(ValueError):
        Constraints.from_arrays([0], [0], [1], 3)


@pytest.mark.parametrize(
    "must, cannot",
    [
        (1, -1),
        ("must", "cannot"),
        ("ml", "cl"),
        ("ML", "CL"),
        ("must-link", "cannot-link"),
        ("+1", "-1"),
        (" Must ", " Cannot "),
        (1.0, -1.0),
        (np.int8(1), np.int8(-1)),
    ],
)
def test_type_words_and_signs_accepted(must, cannot):
    c = Constraints.from_arrays([0, 2], [1, 3], [must, cannot], 4)
    assert c.t.tolist() == [1, -1]
    assert c.n_must == 1 and c.n_cannot == 1


@pytest.mark.parametrize(
    "bad",
    [
        ["must", "maybe"],
        ["must", ""],
        [1, 0],
        [1, 2],
        [1.0, 0.5],
        [1.0, np.nan],
        [1.0, np.inf],
        ["yes", "no"],
    ],
)
def test_garbage_types_rejected(bad):
    with pytest.raises(ConstraintError, match="type"):
        Constraints.from_arrays([0, 2], [1, 3], bad, 4)


def test_garbage_type_word_named_with_row():
    with pytest.raises(ConstraintError) as info:
        Constraints.from_arrays([0, 1, 2], [1, 2, 3], ["ml", "cl", "sometimes"], 4)
    assert "'sometimes'" in str(info.value)
    assert "row 2" in str(info.value)


@pytest.mark.parametrize("name", ["i", "j"])
@pytest.mark.parametrize("bad", [0.5, np.nan, np.inf, 2.0000001])
def test_non_integer_float_indices_rejected(name, bad):
    cols = {"i": [0.0, 1.0], "j": [2.0, 3.0]}
    cols[name] = [cols[name][0], bad]
    with pytest.raises(ConstraintError, match=f"column {name}"):
        Constraints.from_arrays(cols["i"], cols["j"], [1, -1], 5)


def test_whole_float_indices_accepted():
    c = Constraints.from_arrays(np.array([3.0, 0.0]), np.array([1.0, 2.0]), [1, -1], 4)
    assert c.i.dtype == np.int64
    assert list(zip(c.i.tolist(), c.j.tolist(), c.t.tolist())) == [(0, 2, -1), (1, 3, 1)]


@pytest.mark.parametrize(
    "bad", [np.array(["0", "1"]), np.array([True, False]), np.array([0, 1], dtype=object)]
)
def test_non_numeric_indices_rejected(bad):
    with pytest.raises(ConstraintError, match="column i"):
        Constraints.from_arrays(bad, [2, 3], [1, 1], 4)


def test_two_dimensional_index_column_rejected():
    with pytest.raises(ValidationError, match="column j must be one-dimensional"):
        Constraints.from_arrays([0, 1], [[2, 3]], [1, 1], 4)


def test_length_mismatch_rejected():
    with pytest.raises(ValidationError, match="same length") as info:
        Constraints.from_arrays([0, 1, 2], [1, 2], [1, -1], 4)
    assert "3, 2 and 2" in str(info.value)


@pytest.mark.parametrize("n_points", [1, 0, -3, True, 2.0, "5", None])
def test_bad_n_points_rejected(n_points):
    with pytest.raises(ValidationError, match="n_points"):
        Constraints.from_arrays([0], [1], [1], n_points)


def test_numpy_integer_n_points_accepted():
    c = Constraints.from_arrays([0], [1], [1], np.int32(3))
    assert c.n_points == 3 and isinstance(c.n_points, int)


def test_out_of_range_lists_offending_rows_in_order():
    with pytest.raises(ConstraintError, match="index j out of range") as info:
        Constraints.from_arrays([0, 1, 2, 0], [5, 2, 9, 1], [1, 1, -1, -1], 5)
    assert info.value.pairs == [(0, 5), (2, 9)]
    assert "[0, 5)" in str(info.value)
    with pytest.raises(ConstraintError, match="index i out of range") as info:
        Constraints.from_arrays([-1, 1], [2, 7], [1, 1], 5)
    assert info.value.pairs == [(-1, 2)]  # column i is checked first


def test_offending_pairs_truncated_to_twenty():
    n = 60
    i = np.arange(30)
    with pytest.raises(ConstraintError, match="30 self-pair") as info:
        Constraints.from_arrays(i, i, np.ones(30, int), n)
    assert info.value.pairs == [(k, k) for k in range(20)]


def test_direct_contradiction_listed_once_per_pair():
    with pytest.raises(ConstraintError, match="1 pair") as info:
        Constraints.from_arrays([3, 1, 1, 3], [1, 3, 3, 1], [1, -1, 1, -1], 5)
    assert info.value.pairs == [(1, 3)]


def test_transitivity_chain():
    # 0~1, 1~2, 2~3 but 0 !~ 3, and 4 !~ 0 is fine
    with pytest.raises(ConstraintError, match="transitivity") as info:
        Constraints.from_arrays([0, 1, 2, 3, 4], [1, 2, 3, 0, 0], [1, 1, 1, -1, -1], 5)
    assert info.value.pairs == [(0, 3)]
    ok = Constraints.from_arrays([0, 1, 2, 4], [1, 2, 3, 0], [1, 1, 1, -1], 5)
    assert ok.m == 4


def test_duplicates_merged_with_warning():
    with pytest.warns(ConstraintWarning, match="merged 3 duplicate") as rec:
        c = Constraints.from_arrays([0, 1, 0, 1, 2], [1, 0, 1, 0, 3], [1, 1, 1, 1, -1], 4)
    assert len(rec) == 1
    assert c.n_duplicates == 3
    assert c.m == 2
    assert c.to_table().tolist() == [[0, 1, 1], [2, 3, -1]]


def test_duplicates_merged_silently_with_warn_false():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = Constraints.from_arrays([0, 0], [1, 1], [-1, -1], 3, warn=False)
    assert c.n_duplicates == 1 and c.m == 1


def test_diagonal_flag_and_helpers():
    c = Constraints.from_arrays([4, 0], [2, 2], ["cl", "ml"], 6, diagonal=True)
    assert c.diagonal is True
    assert Constraints.from_arrays([4], [2], [1], 6).diagonal is False
    assert c.constrained_points().tolist() == [0, 2, 4]
    table = c.to_table()
    assert table.dtype == np.int64 and table.shape == (2, 3)
    assert table.tolist() == [[0, 2, 1], [2, 4, -1]]


@pytest.mark.parametrize("empty", [[], np.array([], dtype=np.int64)])
def test_empty_constraint_set_is_empty(empty):
    c = Constraints.from_arrays(empty, empty, empty, 5)
    assert c.m == 0 and c.n_duplicates == 0
    indptr, partner, sign = c.adjacency()
    assert indptr.tolist() == [0] * 6 and partner.size == 0 and sign.size == 0
    assert sample_constraints(np.array([0, 0, 1, 1]), 0, 0).m == 0


# ---------------------------------------------------------------------------------------------
# adjacency
# ---------------------------------------------------------------------------------------------


@HYP
@given(st.data())
def test_adjacency_symmetric_and_consistent(data):
    n = data.draw(st.integers(2, 12))
    labels = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    all_pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    rows = data.draw(st.lists(st.sampled_from(all_pairs), min_size=1, max_size=30, unique=True))
    flip = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    i = [b if f else a for (a, b), f in zip(rows, flip)]
    j = [a if f else b for (a, b), f in zip(rows, flip)]
    t = [1 if labels[a] == labels[b] else -1 for a, b in rows]
    c = Constraints.from_arrays(i, j, t, n)
    indptr, partner, sign = c.adjacency()
    assert indptr.shape == (n + 1,) and indptr[0] == 0 and indptr[-1] == 2 * c.m
    assert np.all(np.diff(indptr) >= 0)
    assert partner.dtype == np.int64 and sign.dtype == np.int8
    expected = defaultdict(list)
    for (a, b), s in zip(rows, t):
        expected[a].append((b, s))
        expected[b].append((a, s))
    for p in range(n):
        got = list(
            zip(
                partner[indptr[p] : indptr[p + 1]].tolist(),
                sign[indptr[p] : indptr[p + 1]].tolist(),
            )
        )
        assert got == sorted(expected[p])  # partners sorted per point
    # symmetry: q in list(p) with sign s <=> p in list(q) with sign s
    triples = {
        (p, int(partner[k]), int(sign[k]))
        for p in range(n)
        for k in range(indptr[p], indptr[p + 1])
    }
    assert triples == {(q, p, s) for p, q, s in triples}
    # cached: same object on the second call
    assert c.adjacency() is c.adjacency()


# ---------------------------------------------------------------------------------------------
# sample_constraints
# ---------------------------------------------------------------------------------------------


def _check_sample(c, labels):
    labels = np.asarray(labels)
    pairs = list(zip(c.i.tolist(), c.j.tolist()))
    assert len(set(pairs)) == len(pairs)  # distinct
    assert np.all(c.i < c.j)
    assert np.all(labels[c.i] >= 0) and np.all(labels[c.j] >= 0)  # labelled only
    same = labels[c.i] == labels[c.j]
    assert np.array_equal(c.t > 0, same)  # must = same class
    assert c.n_duplicates == 0
    assert c.n_points == labels.size


@pytest.mark.parametrize("n", [10, 33, 50, 101])
def test_sample_default_counts(n, rng):
    labels = rng.integers(0, 3, size=n)
    c = sample_constraints(labels, seed=5)
    assert c.n_must == round(0.6 * n)
    assert c.n_cannot == round(0.6 * n)
    _check_sample(c, labels)


def test_sample_never_uses_unlabelled_points(rng):
    labels = rng.integers(-1, 3, size=80)
    labels[:10] = -1
    c = sample_constraints(labels, 60, 60, seed=3)
    assert c.n_must == 60 and c.n_cannot == 60
    _check_sample(c, labels)
    assert not set(np.flatnonzero(labels < 0)) & set(c.constrained_points().tolist())


@HYP
@given(st.data())
def test_sample_properties_random_labels(data):
    n = data.draw(st.integers(2, 25))
    labels = np.array(data.draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n)))
    lab = labels[labels >= 0]
    within = sum(int(np.sum(lab == k)) * (int(np.sum(lab == k)) - 1) // 2 for k in range(4))
    across = lab.size * (lab.size - 1) // 2 - within
    n_must = data.draw(st.integers(0, within))
    n_cannot = data.draw(st.integers(0, across))
    if n_must + n_cannot == 0:
        return  # empty sets are covered (as a known bug) in test_empty_constraint_set...
    seed = data.draw(st.integers(0, 2**32 - 1))
    c = sample_constraints(labels, n_must, n_cannot, seed=seed)
    assert c.n_must == n_must and c.n_cannot == n_cannot
    _check_sample(c, labels)


def test_sample_can_exhaust_all_pairs():
    labels = np.array([0, 0, 0, 1, 1, -1])
    c = sample_constraints(labels, 4, 6, seed=0)
    assert set(zip(c.i.tolist(), c.j.tolist())) == {
        (a, b) for a in range(5) for b in range(a + 1, 5)
    }
    _check_sample(c, labels)


def test_sample_deterministic_per_seed(rng):
    labels = rng.integers(0, 4, size=120)
    a = sample_constraints(labels, seed=11)
    b = sample_constraints(labels, seed=11)
    other = sample_constraints(labels, seed=12)
    assert np.array_equal(a.to_table(), b.to_table())
    assert not np.array_equal(a.to_table(), other.to_table())
    g1 = sample_constraints(labels, seed=np.random.default_rng(7))
    g2 = sample_constraints(labels, seed=np.random.default_rng(7))
    assert np.array_equal(g1.to_table(), g2.to_table())


@pytest.mark.parametrize("name", ["n_must", "n_cannot"])
def test_sample_too_many_pairs(name):
    labels = np.array([0, 0, 0, 1, 1, -1, -1])  # 4 within-class pairs, 6 across
    avail = {"n_must": 4, "n_cannot": 6}
    kwargs = {"n_must": 1, "n_cannot": 1, name: avail[name] + 1}
    with pytest.raises(ValidationError, match=name) as info:
        sample_constraints(labels, seed=0, **kwargs)
    assert f"only {avail[name]}" in str(info.value)
    kwargs[name] = avail[name]
    c = sample_constraints(labels, seed=0, **kwargs)
    assert getattr(c, name) == avail[name]


def test_sample_default_too_many_for_tiny_classes():
    # 10 singleton classes: no must-link pair exists, the default asks for 6
    with pytest.raises(ValidationError, match="n_must") as info:
        sample_constraints(np.arange(10), seed=0)
    assert "allow none (no two share a class)" in str(info.value)
    assert "--n-must 0" in str(info.value)


@pytest.mark.parametrize(
    "labels, kwargs, why",
    [
        (np.zeros(10, int), {}, "all in one class"),
        (np.r_[0, -np.ones(9, int)], {"n_must": 0, "n_cannot": 3}, "fewer than two"),
    ],
)
def test_sample_no_cannot_link_pair_possible(labels, kwargs, why):
    with pytest.raises(ValidationError, match="n_cannot") as info:
        sample_constraints(labels, seed=0, **kwargs)
    assert f"allow{'s' if (labels >= 0).sum() == 1 else ''} none ({why})" in str(info.value)
    assert "--n-cannot 0" in str(info.value)


def test_sample_default_lowered_to_the_pairs_few_labels_allow():
    # 200 points, 10 labelled per class: 2 x C(10, 2) = 90 must-link and 100 cannot-link
    # pairs exist, fewer than the default round(0.6 n) = 120 of each
    labels = np.full(200, -1)
    labels[:100:10], labels[100::10] = 0, 1
    with pytest.warns(ConstraintWarning) as rec:
        c = sample_constraints(labels, seed=0)
    text = " ".join(str(w.message) for w in rec)
    assert "n_must: the default round(0.6 n) = 120" in text and "sampling all 90" in text
    assert "n_cannot: the default round(0.6 n) = 120" in text and "sampling all 100" in text
    assert "(n_must=...)" in text and "(n_cannot=...)" in text  # Python's syntax here
    assert c.n_must == 90 and c.n_cannot == 100  # every pair the labels allow, once
    _check_sample(c, labels)
    # an explicit count is the user's: no lowering, an error naming the option
    with pytest.raises(ValidationError, match="--n-must") as info:
        sample_constraints(labels, 120, seed=0)
    assert "20 labelled points allow only 90" in str(info.value)
    # a default the labels allow is sampled as asked, without a warning
    full = np.repeat([0, 1], 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = sample_constraints(full, seed=0)
    assert c.n_must == c.n_cannot == 120


@pytest.mark.parametrize("name", ["n_must", "n_cannot"])
@pytest.mark.parametrize("bad", [-1, 2.0, True, "3"])
def test_sample_bad_counts(name, bad):
    with pytest.raises(ValidationError, match=name):
        sample_constraints(np.array([0, 0, 1, 1, 2, 2]), **{name: bad})


@pytest.mark.parametrize(
    "labels", [np.array([0.0, 1.0, 1.0]), np.array([[0, 1], [1, 0]]), np.array(["a", "b", "a"])]
)
def test_sample_bad_labels(labels):
    with pytest.raises(ValidationError, match="labels"):
        sample_constraints(labels, 1, 1)


@pytest.mark.parametrize("diagonal", [True, False])
def test_sample_diagonal_flag(diagonal, rng):
    labels = rng.integers(0, 2, size=30)
    c = sample_constraints(labels, seed=1, diagonal=diagonal)
    assert c.diagonal is diagonal
    _check_sample(c, labels)
