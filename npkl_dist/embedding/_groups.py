"""Side information from groups: node-group memberships and the constraints they give
(issue 77 item 3; simplenpkl-jmlr2011 §7.5, the Flickr interest groups).

A memberships table has one row per (node, group): nodes are 0-based integers, a node may be
in several groups or in none, groups are any integers or strings. Group names are coded
0..g-1 in sorted order, so the codes (and every sample drawn from them) depend on the set of
memberships, never on the order of the rows.

The seeded protocol of :func:`group_constraints` (only nodes in at least one group are ever
sampled; nodes in none carry no side information):

* **must-link**: a group c is drawn with probability C(s_c, 2) / sum_c' C(s_c', 2) (s_c its
  size), then a uniform pair of its members; repeated pairs are dropped, keeping first
  draws, until ``n_must`` distinct pairs are held. A pair sharing q groups is therefore q
  times as likely as one sharing one group, and the sample is multiplicity-weighted sampling
  without replacement. Where the within-group pairs are few (sum C(s_c, 2) <= 4 n_must), or
  the draws stall, they are enumerated instead (O(sum C(s_c, 2)), never n^2 pairs) and the same
  law is drawn at once by Efraimidis-Spirakis keys log(u) / q.
* **cannot-link**: ordered pairs (a, b) of grouped nodes are drawn uniformly and kept when
  a != b, a and b share no group, and no chain of the sampled must-links joins them (with
  overlapping groups must-links chain across groups, and a cannot-link inside a chain
  contradicts must-link transitivity, which :class:`~npkl_dist.Constraints` refuses);
  repeated pairs are dropped until ``n_cannot`` distinct pairs are held: a uniform sample
  without replacement of the eligible pairs. Where the grouped nodes are few (C(n_g, 2) <=
  4 n_cannot) or the draws stall, the eligible pairs are enumerated (only when C(n_g, 2) <=
  ``ENUM_LIMIT``) and a uniform subset is taken.

Must-links are drawn first, then cannot-links, from one ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._errors import (
    ConstraintWarning,
    InputFileError,
    ValidationError,
    fmt_value,
)
from ..graph._io import _load_npy, _path, _suffix
from ..problem._constraints import Constraints

__all__ = [
    "ENUM_LIMIT",
    "Memberships",
    "group_constraints",
    "group_labels",
    "memberships_from_arrays",
    "read_group_indicator",
    "read_memberships",
]

#: Largest candidate-pair count the exhaustive paths of :func:`group_constraints` enumerate.
ENUM_LIMIT = 4_000_000

#: Candidate pairs drawn per round of rejection sampling, at most (bounded memory).
_ROUND_MAX = 1 << 22


@dataclass(frozen=True, eq=False)  # identity equality and hash: fields are arrays
class Memberships:
    """Validated node-group memberships, stored by node (CSR).

    Attributes
    ----------
    indptr : ndarray of int64, shape (n_nodes + 1,)
        The groups of node v are ``group[indptr[v]:indptr[v + 1]]``.
    group : ndarray of int64, shape (n_memberships,)
        Group codes 0..n_groups-1, increasing within each node, no repeats.
    names : ndarray, shape (n_groups,)
        The group of each code, sorted (integers or strings as given).
    n_duplicates : int
        Repeated (node, group) rows dropped when the table was read.
    """

    indptr: np.ndarray
    group: np.ndarray
    names: np.ndarray
    n_duplicates: int = 0
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def n_groups(self) -> int:
        return int(self.names.shape[0])

    @property
    def n_memberships(self) -> int:
        return int(self.group.shape[0])

    @property
    def degree(self) -> np.ndarray:
        """Groups per node, shape (n_nodes,) int64."""
        return np.diff(self.indptr)

    @property
    def sizes(self) -> np.ndarray:
        """Members per group, shape (n_groups,) int64."""
        return np.bincount(self.group, minlength=self.n_groups).astype(np.int64)

    def by_group(self) -> tuple[np.ndarray, np.ndarray]:
        """``(gptr, members)``: the members of group c are ``members[gptr[c]:gptr[c + 1]]``,
        increasing (the CSC form)."""
        cached = self._cache.get("csc")
        if cached is None:
            C = self.indicator().tocsc()  # scipy's counting sort: rows stay increasing
            cached = (C.indptr.astype(np.int64), C.indices.astype(np.int64))
            self._cache["csc"] = cached
        return cached

    def indicator(self, dtype=np.int8) -> sp.csr_matrix:
        """The n_nodes x n_groups 0/1 indicator (CSR): entry (v, c) is 1 when v is in c."""
        data = np.ones(self.n_memberships, dtype=dtype)
        return sp.csr_matrix(
            (data, self.group.copy(), self.indptr.copy()), shape=(self.n_nodes, self.n_groups)
        )


# ------------------------------------------------------------------------------ building
def memberships_from_arrays(node, group, n_nodes: int | None = None) -> Memberships:
    """Memberships from two columns, one row per (node, group).

    Parameters
    ----------
    node : array-like of int, shape (m,)
        0-based node numbers (whole floats are accepted).
    group : array-like, shape (m,)
        Group of each row: integers, strings or any sortable values (NaN and None refused).
    n_nodes : int, optional
        Number of nodes (nodes in no group count); default ``max(node) + 1``.

    Returns
    -------
    Memberships
        Repeated rows are dropped (``n_duplicates`` counts them).
    """
    node = _node_column(node)
    codes, names = _code_groups(group, node.shape[0])
    return _assemble(node, codes, names, n_nodes)


def _node_column(node, where: str = "") -> np.ndarray:
    arr = np.asarray(node)
    if arr.ndim != 1:
        raise ValidationError(
            f"node: expected a 1-D column of node numbers, got shape {arr.shape}{where}; pass "
            f"one node per membership row"
        )
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValidationError(
                f"node: row {k}{where} holds {float(arr[k])!r}; node numbers must be whole 0-based "
                f"integers"
            )
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        raise ValidationError(
            f"node: expected integer node numbers, got dtype {arr.dtype}{where}; nodes are 0-based "
            f"row numbers of the graph"
        )
    arr = arr.astype(np.int64, copy=False)
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        raise ValidationError(
            f"node: row {int(neg[0])}{where} holds {int(arr[neg[0]])}; node numbers are 0-based "
            f"(>= 0)"
        )
    return arr


def _code_groups(group, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes 0..g-1 of a group column and the sorted names."""
    arr = np.asarray(group)
    if arr.ndim != 1 or arr.shape[0] != m:
        raise ValidationError(
            f"group: expected a 1-D column as long as node ({m}), got shape {arr.shape}; pass "
            f"one group per membership row"
        )
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise ValidationError(
                f"group: row {int(bad[0])} holds {float(arr[bad[0]])!r}; every row needs a group "
                f"(drop the rows of nodes in no group)"
            )
    if arr.dtype.kind in "iufUSb":
        names, codes = _unique_inverse(arr)
        return codes, names
    # object column: any hashable, sorted (mixed types by type name, then value)
    values = arr.tolist()
    for k, v in enumerate(values):
        if v is None or (isinstance(v, float) and not np.isfinite(v)):
            raise ValidationError(
                f"group: row {k} holds {v!r}; every row needs a group (drop the rows of nodes "
                f"in no group)"
            )
    uniq = list(dict.fromkeys(values))
    try:
        uniq.sort()
    except TypeError:
        uniq.sort(key=lambda v: (type(v).__name__, repr(v)))
    index = {v: c for c, v in enumerate(uniq)}
    codes = np.fromiter((index[v] for v in values), dtype=np.int64, count=len(values))
    names = np.empty(len(uniq), dtype=object)
    names[:] = uniq
    return codes, names


def _assemble(node, codes, names, n_nodes) -> Memberships:
    m = node.shape[0]
    top = int(node.max()) + 1 if m else 0
    if n_nodes is None:
        n_nodes = top
    elif isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ValidationError(
            f"n_nodes: expected a positive integer, got {fmt_value(n_nodes)}; pass the graph's "
            f"number of nodes"
        )
    elif top > n_nodes:
        k = int(np.argmax(node))
        raise ValidationError(
            f"node: row {k} holds node {int(node[k])}, out of range for n_nodes={int(n_nodes)}; "
            f"pass n_nodes > {int(node[k])} or drop the row"
        )
    n_nodes = int(n_nodes)
    if m == 0:
        raise ValidationError("memberships: no rows; pass at least one (node, group) row")
    g = int(names.shape[0])
    # one sort of node * g + group orders by node, then group, and finds repeated rows
    key = _sorted_unique(node * g + codes)
    n_dup = m - int(key.shape[0])
    node_sorted, group = np.divmod(key, g)
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(node_sorted, minlength=n_nodes), out=indptr[1:])
    return Memberships(indptr, group.astype(np.int64), names, n_dup)


# ------------------------------------------------------------------------------ reading
def read_memberships(path, n_nodes: int | None = None) -> Memberships:
    """Memberships from a file: ``.csv`` or ``.parquet`` with columns ``node, group`` (a
    header is required; other columns are ignored), or ``.npy`` of shape (m, 2) integers.

    Parameters
    ----------
    path : str or os.PathLike
    n_nodes : int, optional
        Number of nodes; default the largest node number + 1.

    Returns
    -------
    Memberships
    """
    p = _path(path, "memberships")
    s = _suffix(p, "memberships", (".npy", ".csv", ".parquet"))
    where = f" of {str(p)!r}"
    if s == ".npy":
        arr = _load_npy(p, "memberships")
        if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype.kind not in "iuf":
            raise InputFileError(
                f"memberships: {str(p)!r} holds a {arr.dtype} array of shape {arr.shape}; "
                f"expected (m, 2) integer rows node, group"
            )
        node = _node_column(arr[:, 0], where)
        codes, names = _code_groups(arr[:, 1], node.shape[0])
        return _assemble(node, codes, names, n_nodes)
    import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet
    import pyarrow.csv as pacsv  # lazy: pyarrow loads only to read CSV / Parquet
    import pyarrow.parquet as pq  # lazy: pyarrow loads only to read CSV / Parquet

    try:
        if s == ".parquet":
            table = pq.read_table(p, columns=None)
        else:
            table = pacsv.read_csv(
                p, convert_options=pacsv.ConvertOptions(column_types={"node": pa.int64()})
            )
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(
            f"memberships: cannot read {str(p)!r}: {' '.join(str(exc).split())}; expected a "
            f"header node,group and one (node, group) row per line with whole node numbers"
        ) from None
    missing = [c for c in ("node", "group") if c not in table.column_names]
    if missing:
        raise InputFileError(
            f"memberships: {str(p)!r} lacks column(s) {missing}; expected a header with node, "
            f"group (found {table.column_names[:6]})"
        )
    if table.num_rows == 0:
        raise InputFileError(
            f"memberships: {str(p)!r} has no data rows; add one (node, group) row per membership"
        )
    for name in ("node", "group"):
        col = table.column(name)
        if col.null_count:
            k = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputFileError(
                f"memberships: column {name} of {str(p)!r} is empty in data row {k}; every row "
                f"needs a node and a group (drop the rows of nodes in no group)"
            )
    node = _node_column(table.column("node").to_numpy(), where)
    gcol = table.column("group")
    if pa.types.is_string(gcol.type) or pa.types.is_large_string(gcol.type):
        # pyarrow's dictionary encoding, then the (small) dictionary sorted: no Python objects
        enc = gcol.combine_chunks().dictionary_encode()
        names = enc.dictionary.to_numpy(zero_copy_only=False).astype(str)
        order = np.argsort(names, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        codes = rank[enc.indices.to_numpy(zero_copy_only=False)].astype(np.int64)
        return _assemble(node, codes, names[order], n_nodes)
    codes, names = _code_groups(gcol.to_numpy(), node.shape[0])
    return _assemble(node, codes, names, n_nodes)


def read_group_indicator(path, n_nodes: int | None = None) -> tuple[sp.csr_matrix, np.ndarray]:
    """The n_nodes x n_groups 0/1 indicator (CSR, int8) of a memberships file, and the group
    names of its columns (sorted). See :func:`read_memberships` for the formats."""
    m = read_memberships(path, n_nodes)
    return m.indicator(), m.names


def group_labels(memberships, groups=None) -> tuple[sp.csr_matrix, np.ndarray]:
    """Multi-label targets for node classification: the indicator restricted to ``groups``.

    Parameters
    ----------
    memberships : Memberships or str or os.PathLike
    groups : sequence, optional
        Group names to keep, in this column order; default all groups.

    Returns
    -------
    Y : scipy.sparse.csr_matrix of int8, shape (n_nodes, n_kept)
        Y[v, c] = 1 when node v is in group ``names[c]``; a row of zeros is an unlabelled node
        (:func:`~npkl_dist.embedding.node_classification` leaves it out).
    names : ndarray, shape (n_kept,)
    """
    m = _as_memberships(memberships)
    Y = m.indicator()
    if groups is None:
        return Y, m.names
    wanted = list(groups)
    index = {v: c for c, v in enumerate(m.names.tolist())}
    missing = [g for g in wanted if g not in index]
    if missing:
        raise ValidationError(
            f"groups: {fmt_value(missing[:5])} are not groups of the memberships; pick from "
            f"memberships.names (e.g. {fmt_value(m.names[:5].tolist())})"
        )
    cols = np.array([index[g] for g in wanted], dtype=np.int64)
    return Y[:, cols].tocsr(), m.names[cols]


def _as_memberships(memberships) -> Memberships:
    if isinstance(memberships, Memberships):
        return memberships
    if isinstance(memberships, (str, os.PathLike)):
        return read_memberships(memberships)
    raise ValidationError(
        f"memberships: expected a Memberships or a file path, got {type(memberships).__name__}; "
        f"build one with memberships_from_arrays(node, group) or read_memberships(path)"
    )


# ------------------------------------------------------------------------------ constraints
def group_constraints(
    memberships,
    n_must: int | None = None,
    n_cannot: int | None = None,
    *,
    seed=0,
    diagonal: bool = False,
) -> Constraints:
    """Must-link / cannot-link pairs from group memberships, by the module's seeded protocol.

    Must-link pairs share a group (drawn per group in proportion to its pair count);
    cannot-link pairs are uniform among pairs of grouped nodes that share no group and that
    no chain of the sampled must-links joins. Nodes in no group are never sampled. The
    sample is a function of ``seed`` and of the set of memberships (not their row order).
    Work is O(n_nodes + n_memberships + n_must + n_cannot) per round of draws; no n x n pairs.

    Parameters
    ----------
    memberships : Memberships or str or os.PathLike
        See :func:`memberships_from_arrays` and :func:`read_memberships`.
    n_must, n_cannot : int, optional
        Distinct pairs of each type; default ``round(0.6 * n_nodes)`` each, as
        :func:`~npkl_dist.sample_constraints`. A default larger than the pairs the groups
        allow is lowered to all of them with a :class:`~npkl_dist.ConstraintWarning`; an
        explicit count larger than that is a :class:`~npkl_dist.ValidationError`.
    seed : int or numpy.random.Generator
    diagonal : bool
        Add KL-ADMM's ``(i, i) = 1`` targets.

    Returns
    -------
    Constraints
        On ``n_nodes`` points.
    """
    m = _as_memberships(memberships)
    n = m.n_nodes
    if n < 2:
        raise ValidationError(
            f"memberships: {n} node(s); pairs need n_nodes >= 2 (pass n_nodes=... to "
            f"memberships_from_arrays / read_memberships)"
        )
    default = int(round(0.6 * n))
    defaulted = {"n_must": n_must is None, "n_cannot": n_cannot is None}
    want = {
        "n_must": default if n_must is None else n_must,
        "n_cannot": default if n_cannot is None else n_cannot,
    }
    for name, val in want.items():
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise ValidationError(
                f"{name}: expected a non-negative integer, got {fmt_value(val)}; pass e.g. "
                f"{name}={default}"
            )
        want[name] = int(val)
    rng = np.random.default_rng(seed)
    must = _sample_must(m, want["n_must"], defaulted["n_must"], rng)
    if must.shape[0]:
        g = sp.coo_matrix(
            (np.ones(must.shape[0], np.int8), (must[:, 0], must[:, 1])), shape=(n, n)
        )
        comp = connected_components(g, directed=False)[1].astype(np.int64)
    else:
        comp = np.arange(n, dtype=np.int64)
    cannot = _sample_cannot(m, comp, want["n_cannot"], defaulted["n_cannot"], rng)
    ij = np.concatenate([must, cannot]).reshape(-1, 2)
    t = np.r_[np.ones(must.shape[0], np.int8), -np.ones(cannot.shape[0], np.int8)]
    return Constraints.from_arrays(ij[:, 0], ij[:, 1], t, n, diagonal=diagonal, warn=False)


def _too_many(name, want, have, defaulted, kind, why) -> int:
    """The count to sample when only ``have`` pairs exist: all of them for a default count
    (with a warning), an error for an explicit one."""
    if defaulted and have > 0:
        warnings.warn(
            f"{name}: the default round(0.6 n) = {want} is more than the {have} distinct "
            f"{kind} pairs the groups allow ({why}); sampling all {have}. Set {name}=... "
            f"to choose the count",
            ConstraintWarning,
            stacklevel=4,
        )
        return have
    raise ValidationError(
        f"{name}: {want} {kind} pairs wanted but the groups allow only {have} ({why}); pass "
        f"{name}={have} or fewer"
    )


def first_distinct(seen: np.ndarray, new: np.ndarray, want: int) -> np.ndarray:
    """``seen`` extended by the new keys not already in it, in draw order, at most ``want``
    (``seen`` holds distinct keys)."""
    allk = np.concatenate([seen, new])
    order = np.argsort(allk, kind="stable")  # stable: the first draw of a key leads
    s = allk[order]
    lead = np.ones(s.shape[0], dtype=bool)
    lead[1:] = s[1:] != s[:-1]
    return allk[np.sort(order[lead])][:want]


def _sorted_unique(x: np.ndarray, return_counts: bool = False):
    """``np.unique`` by one sort (numpy 2.4's hashing ``np.unique`` of 10^7 int64 keys took
    26 s against 0.4 s for the sort)."""
    s = np.sort(x)
    lead = np.ones(s.shape[0], dtype=bool)
    lead[1:] = s[1:] != s[:-1]
    if not return_counts:
        return s[lead]
    return s[lead], np.diff(np.r_[np.flatnonzero(lead), s.shape[0]])


def _unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(names, codes): the sorted distinct values of x and x's index into them."""
    if x.dtype.kind in "iu" and x.shape[0] and x.min() >= 0 and x.max() < 4 * x.shape[0] + 1024:
        present = np.bincount(x) > 0  # small non-negative integers: one counting pass
        names = np.flatnonzero(present).astype(x.dtype)
        return names, (np.cumsum(present) - 1)[x].astype(np.int64)
    order = np.argsort(x, kind="stable")
    s = x[order]
    lead = np.ones(s.shape[0], dtype=bool)
    lead[1:] = s[1:] != s[:-1]
    codes = np.empty(x.shape[0], dtype=np.int64)
    codes[order] = np.cumsum(lead) - 1
    return s[lead], codes


def _sample_must(m: Memberships, want: int, defaulted: bool, rng) -> np.ndarray:
    """(k, 2) int64 must-link pairs i < j (module docstring, "must-link")."""
    n = m.n_nodes
    gptr, members = m.by_group()
    sizes = np.diff(gptr)
    pairs_per_group = sizes * (sizes - 1) // 2
    cap = int(pairs_per_group.sum())  # pairs with multiplicity: >= the distinct ones
    if want == 0:
        return np.empty((0, 2), np.int64)
    if cap == 0:
        want = _too_many("n_must", want, 0, defaulted, "must-link", "no group has two members")
    if cap > 4 * want:
        keys = np.empty(0, np.int64)
        p = pairs_per_group / cap
        draws, budget = 0, 64 * want + (1 << 16)
        while keys.shape[0] < want and draws < budget:
            k = min(max(2 * (want - keys.shape[0]), 1024), _ROUND_MAX)
            c = rng.choice(sizes.shape[0], size=k, p=p)
            s = sizes[c]
            x = rng.integers(0, s)
            y = rng.integers(0, s - 1)
            y = y + (y >= x)  # uniform over the other members
            a, b = members[gptr[c] + x], members[gptr[c] + y]
            keys = first_distinct(keys, np.minimum(a, b) * n + np.maximum(a, b), want)
            draws += k
        if keys.shape[0] == want:
            return np.column_stack(np.divmod(keys, n))
        if cap > ENUM_LIMIT:
            raise ValidationError(
                f"n_must: found only {keys.shape[0]} of {want} distinct must-link pairs in "
                f"{draws} draws (the groups overlap heavily); pass a smaller n_must"
            )
    # exhaustive: every within-group pair with its multiplicity q, then the same law
    # (weighted sampling without replacement) by Efraimidis-Spirakis keys log(u) / q
    keys = _within_group_keys(gptr, members, sizes, n)
    keys, q = _sorted_unique(keys, return_counts=True)
    if want > keys.shape[0]:
        want = _too_many(
            "n_must",
            want,
            int(keys.shape[0]),
            defaulted,
            "must-link",
            "pairs of nodes that share a group",
        )
    es = np.log(rng.random(keys.shape[0])) / q
    pick = np.argpartition(-es, want - 1)[:want] if want < keys.shape[0] else slice(None)
    return np.column_stack(np.divmod(np.sort(keys[pick]), n))


def _within_group_keys(gptr, members, sizes, n) -> np.ndarray:
    """Codes lo * n + hi of every within-group pair, repeated once per group holding it."""
    out = []
    for s in _sorted_unique(sizes[sizes >= 2]):
        groups = np.flatnonzero(sizes == s)
        a, b = np.triu_indices(int(s), 1)
        base = gptr[groups][:, None]
        u, v = members[base + a], members[base + b]  # members increase: u < v
        out.append((u * n + v).ravel())
    return np.concatenate(out) if out else np.empty(0, np.int64)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[k], starts[k] + lengths[k])``."""
    total = int(lengths.sum())
    shift = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return shift + np.arange(total, dtype=np.int64)


def share_group(m: Memberships, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether nodes ``a[k]`` and ``b[k]`` are in a common group, shape (k,) bool.

    Each pair's groups are coded pair * n_groups + group; both code lists increase, so one
    binary search of a's codes in b's finds the common groups (O(total degree log))."""
    k = a.shape[0]
    deg = m.degree
    da, db = deg[a], deg[b]
    pair_a = np.repeat(np.arange(k, dtype=np.int64), da)
    ka = pair_a * m.n_groups + m.group[_ranges(m.indptr[a], da)]
    kb = (
        np.repeat(np.arange(k, dtype=np.int64), db) * m.n_groups
        + m.group[_ranges(m.indptr[b], db)]
    )
    pos = np.minimum(np.searchsorted(kb, ka), max(kb.shape[0] - 1, 0))
    hit = (kb[pos] == ka) if kb.shape[0] else np.zeros(ka.shape[0], bool)
    out = np.zeros(k, dtype=bool)
    out[pair_a[hit]] = True
    return out


def _sample_cannot(m: Memberships, comp, want: int, defaulted: bool, rng) -> np.ndarray:
    """(k, 2) int64 cannot-link pairs i < j (module docstring, "cannot-link")."""
    n = m.n_nodes
    if want == 0:
        return np.empty((0, 2), np.int64)
    grouped = np.flatnonzero(m.degree > 0)
    ng = grouped.shape[0]
    cap = ng * (ng - 1) // 2  # pairs of grouped nodes: >= the eligible ones

    def eligible(a, b):
        return (a != b) & (comp[a] != comp[b]) & ~share_group(m, a, b)

    if cap > 4 * want:
        keys = np.empty(0, np.int64)
        draws, budget = 0, 64 * want + (1 << 16)
        while keys.shape[0] < want and draws < budget:
            k = min(max(2 * (want - keys.shape[0]), 1024), _ROUND_MAX)
            a = grouped[rng.integers(0, ng, k)]
            b = grouped[rng.integers(0, ng, k)]
            ok = eligible(a, b)
            a, b = a[ok], b[ok]
            keys = first_distinct(keys, np.minimum(a, b) * n + np.maximum(a, b), want)
            draws += k
        if keys.shape[0] == want:
            return np.column_stack(np.divmod(keys, n))
        if cap > ENUM_LIMIT:
            raise ValidationError(
                f"n_cannot: found only {keys.shape[0]} of {want} distinct cannot-link pairs in "
                f"{draws} draws (most pairs of grouped nodes share a group or a must-link "
                f"chain); pass a smaller n_cannot"
            )
    # exhaustive: every pair of grouped nodes, in chunks, the eligible kept
    keep = []
    for start in range(0, ng, max(1, ENUM_LIMIT // max(ng, 1))):
        rows = np.arange(start, min(ng, start + max(1, ENUM_LIMIT // max(ng, 1))))
        ia = np.repeat(rows, ng - 1 - rows)
        ib = _ranges(rows + 1, ng - 1 - rows)
        a, b = grouped[ia], grouped[ib]
        ok = eligible(a, b)
        keep.append(a[ok] * n + b[ok])
    keys = np.concatenate(keep) if keep else np.empty(0, np.int64)
    if want > keys.shape[0]:
        want = _too_many(
            "n_cannot",
            want,
            int(keys.shape[0]),
            defaulted,
            "cannot-link",
            "pairs of grouped nodes sharing no group and no must-link chain",
        )
    pick = rng.permutation(keys.shape[0])[:want]
    return np.column_stack(np.divmod(np.sort(keys[pick]), n))
