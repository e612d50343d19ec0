"""Group memberships and the constraints they give (npkl_dist.embedding._groups): the readers
against each other and a dense indicator, the protocol's counts, determinism and invariances,
its pairs checked against brute-force set intersections, the law of the must-link draws on
both paths, and n = 10^6 nodes with 10^7 memberships."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from npkl_dist import ConstraintWarning, InputFileError, ValidationError
from npkl_dist.embedding import (
    Memberships,
    group_constraints,
    group_labels,
    memberships_from_arrays,
    read_group_indicator,
    read_memberships,
)
from npkl_dist.embedding._groups import share_group


def random_memberships(rng, n, n_groups, m):
    node = rng.integers(0, n, m)
    group = rng.integers(0, n_groups, m)
    return node, group


def dense_indicator(node, group, n):
    names = sorted(set(group.tolist()))
    col = {g: c for c, g in enumerate(names)}
    D = np.zeros((n, len(names)), dtype=np.int8)
    for v, g in zip(node.tolist(), group.tolist()):
        D[v, col[g]] = 1
    return D, names


def test_indicator_matches_dense(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    node, group = random_memberships(rng, 40, 7, 120)  # repeats and nodes in no group
    m = memberships_from_arrays(node, group, n_nodes=45)
    D, names = dense_indicator(node, group, 45)
    assert m.n_nodes == 45 and m.names.tolist() == names
    np.testing.assert_array_equal(m.indicator().toarray(), D)
    np.testing.assert_array_equal(m.sizes, D.sum(axis=0))
    np.testing.assert_array_equal(m.degree, D.sum(axis=1))
    assert m.n_duplicates == node.shape[0] - int(D.sum())
    gptr, members = m.by_group()
    for c in range(m.n_groups):
        np.testing.assert_array_equal(members[gptr[c] : gptr[c + 1]], np.flatnonzero(D[:, c]))


def test_readers_agree_and_ignore_row_order(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    node, gi = random_memberships(rng, 30, 5, 80)
    words = np.array(["bw", "catchy", "macro", "street", "zoo"])
    group = words[gi]
    (tmp_path / "m.csv").write_text(
        "node,group,extra\n" + "".join(f"{v},{g},x\n" for v, g in zip(node, group))
    )
    perm = rng.permutation(node.shape[0])
    pq.write_table(pa.table({"group": group[perm], "node": node[perm]}), tmp_path / "m.parquet")
    np.save(tmp_path / "m.npy", np.column_stack([node, gi]))
    a = read_memberships(tmp_path / "m.csv", n_nodes=32)
    b = read_memberships(tmp_path / "m.parquet", n_nodes=32)
    c = read_memberships(tmp_path / "m.npy", n_nodes=32)
    D, names = dense_indicator(node, group, 32)
    assert a.names.tolist() == b.names.tolist() == names
    np.testing.assert_array_equal(c.names, np.arange(5))
    for x in (a, b, c):
        np.testing.assert_array_equal(x.indicator().toarray(), D)
    Y, cols = read_group_indicator(tmp_path / "m.csv", n_nodes=32)
    assert Y.format == "csr" and Y.shape == (32, 5)
    np.testing.assert_array_equal(Y.toarray(), D)
    # constraints depend on the memberships, not on the file's row order or format
    ca = group_constraints(a, 15, 25, seed=7)
    cb = group_constraints(b, 15, 25, seed=7)
    np.testing.assert_array_equal(ca.to_table(), cb.to_table())


def test_mixed_object_groups():
    m = memberships_from_arrays([0, 1, 2, 3], np.array([2, "a", 2, (1, 2)], dtype=object))
    assert m.names.tolist() == [2, "a", (1, 2)]  # unorderable mix: by type name, then repr
    np.testing.assert_array_equal(m.indicator().toarray().sum(axis=0), [2, 1, 1])


@pytest.mark.parametrize(
    "node, group, kwargs, match",
    [
        ([0, -1], [1, 1], {}, r"^node: row 1 holds -1"),
        ([0, 1.5], [1, 1], {}, r"^node: row 1 holds 1\.5"),
        ([0, 7], [1, 1], {"n_nodes": 5}, r"^node: row 1 holds node 7, out of range"),
        ([0, 1], [1.0, np.nan], {}, r"^group: row 1 holds nan"),
        ([0, 1], [1], {}, r"^group: expected a 1-D column as long as node"),
        ([], [], {}, r"^memberships: no rows"),
        ([0, 1], [1, 1], {"n_nodes": 0}, r"^n_nodes: expected a positive integer"),
    ],
)
def test_bad_arrays_one_line(node, group, kwargs, match):
    with pytest.raises(ValidationError, match=match) as err:
        memberships_from_arrays(np.asarray(node), np.asarray(group), **kwargs)
    assert "\n" not in str(err.value)


def test_bad_files_one_line(tmp_path):
    (tmp_path / "a.csv").write_text("i,group\n0,1\n")
    (tmp_path / "b.csv").write_text("node,group\n0,1\n1,\n")
    (tmp_path / "c.csv").write_text("node,group\n")
    np.save(tmp_path / "d.npy", np.zeros((3, 3)))
    (tmp_path / "e.csv").write_text("node,group\n0,a\n1.5,b\n")
    cases = {
        "a.csv": r"lacks column\(s\) \['node'\]",
        "b.csv": r"column group .* is empty in data row 1",
        "c.csv": r"has no data rows",
        "d.npy": r"expected \(m, 2\) integer rows",
        "e.csv": r"cannot read",
        "missing.csv": r"does not exist",
    }
    for name, match in cases.items():
        with pytest.raises(InputFileError, match=match) as err:
            read_memberships(tmp_path / name)
        assert "\n" not in str(err.value), name


def shared_groups(D, a, b):
    return (D[a] & D[b]).sum(axis=-1)


def test_protocol_counts_and_pairs(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    n = 300
    node, group = random_memberships(rng, 250, 40, 500)  # overlapping; nodes 250.. in none
    m = memberships_from_arrays(node, group, n_nodes=n)
    D = m.indicator().toarray().astype(bool)
    c = group_constraints(m, 120, 200, seed=global_random_seed)
    assert (c.n_points, c.n_must, c.n_cannot) == (n, 120, 200)
    must, cannot = c.t > 0, c.t < 0
    assert np.all(shared_groups(D, c.i[must], c.j[must]) > 0)  # no must-link across groups
    assert np.all(shared_groups(D, c.i[cannot], c.j[cannot]) == 0)  # none within a group
    grouped = D.any(axis=1)
    assert grouped[c.i].all() and grouped[c.j].all()  # nodes in no group never sampled
    # deterministic per seed, different across seeds
    again = group_constraints(m, 120, 200, seed=global_random_seed)
    np.testing.assert_array_equal(c.to_table(), again.to_table())
    other = group_constraints(m, 120, 200, seed=global_random_seed + 1)
    assert not np.array_equal(c.to_table(), other.to_table())
    # defaults: round(0.6 n) of each type, as sample_constraints
    d = group_constraints(m, seed=0)
    assert d.n_must == d.n_cannot == 180


def test_overlapping_groups_respect_must_link_chains():
    """Groups {0,1}, {1,2}, {2,3}, ...: must-links chain along the path, so a cannot-link
    between two nodes sharing no group may still contradict transitivity; the protocol must
    reject those (Constraints.from_arrays would raise)."""
    n = 60
    node = np.r_[np.arange(n - 1), np.arange(1, n)]
    group = np.r_[np.arange(n - 1), np.arange(n - 1)]
    m = memberships_from_arrays(node, group)
    for seed in range(20):
        c = group_constraints(m, 40, 100, seed=seed)  # from_arrays checks transitivity
        assert c.n_must == 40 and c.n_cannot == 100
        assert np.all(np.abs(c.i[c.t > 0] - c.j[c.t > 0]) == 1)


def test_exhaustive_path_and_counts_too_large():
    # two disjoint groups of 4 and 3: 6 + 3 = 9 must-link pairs, 12 cannot-link pairs
    m = memberships_from_arrays(np.arange(7), [0, 0, 0, 0, 1, 1, 1], n_nodes=9)
    c = group_constraints(m, 9, 12, seed=0)
    assert c.n_must == 9 and c.n_cannot == 12
    allp = {(i, j) for i in range(7) for j in range(i + 1, 7)}
    assert set(zip(c.i.tolist(), c.j.tolist())) == allp
    with pytest.raises(ValidationError, match=r"^n_must: 10 must-link pairs wanted .* only 9"):
        group_constraints(m, 10, 0)
    with pytest.raises(
        ValidationError, match=r"^n_cannot: 13 cannot-link pairs wanted .* only 12"
    ):
        group_constraints(m, 0, 13)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = group_constraints(m, seed=0)  # defaults round(0.6 * 9) = 5 <= 9 and 12: no warning
    assert d.n_must == d.n_cannot == 5
    big = memberships_from_arrays(np.arange(4), [0, 0, 1, 1], n_nodes=40)  # 2 must, 4 cannot
    with pytest.warns(ConstraintWarning, match="sampling all 2"):
        c = group_constraints(big, None, 4, seed=1)
    assert c.n_must == 2


def test_one_group_has_no_cannot_links():
    m = memberships_from_arrays(np.arange(10), np.zeros(10, int))
    with pytest.raises(ValidationError, match=r"^n_cannot: 3 cannot-link pairs wanted .* only 0"):
        group_constraints(m, 3, 3)
    with pytest.raises(ValidationError, match=r"^n_must: expected a non-negative integer"):
        group_constraints(m, -1, 0)


@pytest.mark.parametrize("extra", [False, True])
def test_must_link_law(extra):
    """P(first must-link pair) = multiplicity / sum C(s, 2): pair (0, 1) is in groups A =
    {0, 1, 2} and B = {0, 1}. Without the extra group the pairs are few (cap 4 <= 4 n_must):
    the exhaustive path (Efraimidis-Spirakis), P = 2/4; with a group of 10 more (cap 49)
    the rejection path, P = 2/49."""
    node = [0, 1, 2, 0, 1] + (list(range(10, 20)) if extra else [])
    group = [0, 0, 0, 1, 1] + ([2] * 10 if extra else [])
    m = memberships_from_arrays(node, group)
    trials = 2000
    hits = 0
    for s in range(trials):
        c = group_constraints(m, 1, 0, seed=s)
        hits += (int(c.i[0]), int(c.j[0])) == (0, 1)
    p = 2 / 49 if extra else 2 / 4
    sd = np.sqrt(p * (1 - p) / trials)
    assert abs(hits / trials - p) < 4 * sd


def test_share_group_bruteforce(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    node, group = random_memberships(rng, 50, 12, 90)
    m = memberships_from_arrays(node, group, n_nodes=55)
    D = m.indicator().toarray().astype(bool)
    a = rng.integers(0, 55, 2000)
    b = rng.integers(0, 55, 2000)
    np.testing.assert_array_equal(share_group(m, a, b), shared_groups(D, a, b) > 0)


def test_group_labels():
    m = memberships_from_arrays([0, 0, 1, 3], ["x", "y", "y", "z"], n_nodes=5)
    Y, names = group_labels(m, ["z", "y"])
    assert names.tolist() == ["z", "y"]
    np.testing.assert_array_equal(Y.toarray(), [[0, 1], [0, 1], [0, 0], [1, 0], [0, 0]])
    with pytest.raises(ValidationError, match=r"^groups: \['w'\] are not groups"):
        group_labels(m, ["w"])
    with pytest.raises(ValidationError, match=r"^memberships: expected a Memberships"):
        group_labels([0, 1])


def test_million_nodes_ten_million_memberships():
    """n = 10^6, 10^7 memberships in 10^5 overlapping groups: build, sample the default
    600,000 + 600,000 pairs, check a sample of them by Python sets. Measured ~7-10 s on 2
    shared cores."""
    rng = np.random.default_rng(0)
    n, M = 1_000_000, 10_000_000
    node = rng.integers(0, n, M)
    group = rng.integers(0, 100_000, M)
    t0 = time.perf_counter()
    m = memberships_from_arrays(node, group, n_nodes=n)
    c = group_constraints(m, seed=0)
    elapsed = time.perf_counter() - t0
    assert isinstance(m, Memberships) and m.n_memberships + m.n_duplicates == M
    assert c.n_must == c.n_cannot == 600_000
    pick = rng.choice(c.m, 2000, replace=False)
    sets = {}

    def groups_of(v):
        if v not in sets:
            sets[v] = set(m.group[m.indptr[v] : m.indptr[v + 1]].tolist())
        return sets[v]

    for q in pick:
        common = groups_of(int(c.i[q])) & groups_of(int(c.j[q]))
        assert bool(common) == (c.t[q] > 0)
    assert elapsed < 60, f"group constraints at 10^6 took {elapsed:.1f} s"
