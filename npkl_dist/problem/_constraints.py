"""Pairwise must-link / cannot-link constraints: construction, sampling and validation.

A constraint set holds unordered pairs ``(i, j)`` with ``i != j`` and a type ``t = +1``
(must-link) or ``t = -1`` (cannot-link). The NPKL objective sums the loss once per pair.
KL-ADMM's protocol also fits the diagonal, ``K_ii = 1`` for every point; that is kept as a
flag (``diagonal``), never as self-pairs, so that the BCD problem stays well defined.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._errors import ConstraintError, ConstraintWarning, ValidationError, fix, fmt_value

__all__ = ["Constraints", "sample_constraints"]

_MAX_LISTED = 20


@dataclass(frozen=True, eq=False)  # identity equality and hash: fields are arrays
class Constraints:
    """A validated set of unordered pairwise constraints.

    Attributes
    ----------
    i, j : ndarray of int64, shape (m,)
        Point indices with ``i < j``, sorted lexicographically, no duplicates.
    t : ndarray of int8, shape (m,)
        +1 for must-link, -1 for cannot-link.
    n_points : int
        Number of points the indices refer to.
    n_duplicates : int
        How many duplicate rows were merged when the set was built.
    diagonal : bool
        KL-ADMM protocol: also fit ``K_ii = 1`` for every point.
    """

    i: np.ndarray
    j: np.ndarray
    t: np.ndarray
    n_points: int
    n_duplicates: int = 0
    diagonal: bool = False
    _adjacency: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def m(self) -> int:
        """Number of distinct pairs."""
        return int(self.i.shape[0])

    @property
    def n_must(self) -> int:
        return int(np.count_nonzero(self.t > 0))

    @property
    def n_cannot(self) -> int:
        return int(np.count_nonzero(self.t < 0))

    @classmethod
    def from_arrays(cls, i, j, t, n_points: int, *, diagonal: bool = False, warn=True):
        """Build and validate a constraint set.

        Parameters
        ----------
        i, j : array-like of int, shape (m,)
        t : array-like, shape (m,)
            +1 / -1, or the strings ``"must"`` / ``"cannot"`` (also ``ml`` / ``cl``).
        n_points : int
        diagonal : bool
            Add KL-ADMM's ``(i, i) = 1`` targets.
        """
        n_points = _check_n_points(n_points)
        i = _as_index_array(i, "i")
        j = _as_index_array(j, "j")
        t = _as_type_array(t)
        if not (i.shape == j.shape == t.shape):
            raise ValidationError(
                f"constraints: i, j and type must have the same length, got {i.shape[0]}, "
                f"{j.shape[0]} and {t.shape[0]}; pass one entry per pair"
            )
        for name, idx in (("i", i), ("j", j)):
            bad = np.flatnonzero((idx < 0) | (idx >= n_points))
            if bad.size:
                listed = [(int(i[k]), int(j[k])) for k in bad[:_MAX_LISTED]]
                raise ConstraintError(
                    f"constraints: {bad.size} pair(s) have index {name} out of range "
                    f"[0, {n_points}), e.g. {listed}; indices are 0-based row numbers of "
                    f"the data",
                    pairs=listed,
                )
        self_pairs = np.flatnonzero(i == j)
        if self_pairs.size:
            listed = [(int(i[k]), int(j[k])) for k in self_pairs[:_MAX_LISTED]]
            raise ConstraintError(
                f"constraints: {self_pairs.size} self-pair(s) (i == j), e.g. {listed}; a point "
                f"is always linked to itself, remove these rows (KL-ADMM's diagonal targets "
                f"are requested with diagonal=True, not as pairs)",
                pairs=listed,
            )
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        if lo.size == 0:
            return cls(lo, hi, t, n_points, 0, bool(diagonal))
        # Group identical unordered pairs: contradictions have both types, duplicates one.
        order = np.lexsort((t, hi, lo))
        lo, hi, t = lo[order], hi[order], t[order]
        same_pair = np.r_[False, (lo[1:] == lo[:-1]) & (hi[1:] == hi[:-1])]
        conflict = same_pair & np.r_[False, t[1:] != t[:-1]]
        if conflict.any():
            k = np.flatnonzero(conflict)
            listed = [(int(lo[q]), int(hi[q])) for q in k[:_MAX_LISTED]]
            raise ConstraintError(
                f"constraints: {k.size} pair(s) are both must-link and cannot-link: {listed}; "
                f"keep one type per pair",
                pairs=listed,
            )
        dup = same_pair & ~conflict
        n_dup = int(dup.sum())
        keep = ~dup
        lo, hi, t = lo[keep], hi[keep], t[keep]
        _check_transitivity(lo, hi, t, n_points)
        if n_dup and warn:
            warnings.warn(
                f"constraints: merged {n_dup} duplicate pair(s); {lo.size} distinct pairs remain",
                ConstraintWarning,
                stacklevel=2,
            )
        return cls(lo, hi, t, n_points, n_dup, bool(diagonal))

    def adjacency(self):
        """Symmetric per-point constraint lists in CSR form.

        Returns
        -------
        indptr : ndarray of int64, shape (n_points + 1,)
        partner : ndarray of int64, shape (2m,)
        sign : ndarray of int8, shape (2m,)
        """
        cached = self._adjacency.get("csr")
        if cached is None:
            rows = np.concatenate([self.i, self.j])
            cols = np.concatenate([self.j, self.i])
            sign = np.concatenate([self.t, self.t])
            order = np.lexsort((cols, rows))
            rows, cols, sign = rows[order], cols[order], sign[order]
            indptr = np.zeros(self.n_points + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=self.n_points), out=indptr[1:])
            cached = (indptr, cols.astype(np.int64), sign.astype(np.int8))
            self._adjacency["csr"] = cached
        return cached

    def constrained_points(self) -> np.ndarray:
        """Sorted indices of the points that appear in at least one pair."""
        return np.unique(np.concatenate([self.i, self.j]))

    def to_table(self) -> np.ndarray:
        """``(m, 3)`` int64 array of ``i, j, type`` rows."""
        return np.column_stack([self.i, self.j, self.t.astype(np.int64)])


def _check_n_points(n_points) -> int:
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)) or n_points < 2:
        raise ValidationError(
            f"n_points: expected an integer >= 2, got {fmt_value(n_points)}; pass the number "
            f"of data points"
        )
    return int(n_points)


def _as_index_array(values, name) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValidationError(
            f"constraints: column {name} must be one-dimensional, got shape {arr.shape}"
        )
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            bad = arr[~np.isfinite(arr) | (arr != np.round(arr))][:5]
            raise ConstraintError(
                f"constraints: column {name} holds non-integer values {bad.tolist()}; indices "
                f"must be whole 0-based row numbers"
            )
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        raise ConstraintError(
            f"constraints: column {name} has dtype {arr.dtype}; expected integer indices"
        )
    return arr.astype(np.int64, copy=False)


_TYPE_WORDS = {
    "must": 1,
    "must-link": 1,
    "ml": 1,
    "+1": 1,
    "1": 1,
    "cannot": -1,
    "cannot-link": -1,
    "cl": -1,
    "-1": -1,
}


def _as_type_array(values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "OUS":
        words = np.char.lower(np.char.strip(arr.astype(str)))
        out = np.zeros(words.shape, dtype=np.int8)
        for k, w in enumerate(words):
            code = _TYPE_WORDS.get(str(w))
            if code is None:
                raise ConstraintError(
                    f"constraints: type {str(w)!r} in row {k} is not recognised; use "
                    f"'must'/'cannot' or +1/-1"
                )
            out[k] = code
        return out
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ConstraintError("constraints: column type holds NaN/inf; use +1 or -1")
    bad = ~np.isin(arr, (1, -1))
    if bad.any():
        raise ConstraintError(
            f"constraints: type values {np.unique(arr[bad])[:5].tolist()} are not +1/-1; use "
            f"+1 (must-link) or -1 (cannot-link)"
        )
    return arr.astype(np.int8)


def _check_transitivity(lo, hi, t, n_points):
    """Cannot-links inside one must-link component contradict must-link transitivity."""
    must = t > 0
    if not must.any() or must.all():
        return
    g = sp.coo_matrix(
        (np.ones(int(must.sum()), dtype=np.int8), (lo[must], hi[must])), shape=(n_points,) * 2
    )
    _, comp = connected_components(g, directed=False)
    cannot = ~must
    bad = np.flatnonzero(cannot)[comp[lo[cannot]] == comp[hi[cannot]]]
    if bad.size:
        listed = [(int(lo[k]), int(hi[k])) for k in bad[:_MAX_LISTED]]
        raise ConstraintError(
            f"constraints: {bad.size} cannot-link pair(s) join points that must-link "
            f"transitivity puts together (a~b, b~c but a!~c): {listed}; remove them or the "
            f"must-links that connect them",
            pairs=listed,
        )


def sample_constraints(
    labels,
    n_must: int | None = None,
    n_cannot: int | None = None,
    *,
    seed=0,
    diagonal: bool = False,
) -> Constraints:
    """Sample must-link / cannot-link pairs from (partial) labels, the papers' protocol.

    Parameters
    ----------
    labels : array-like of int, shape (n_points,)
        Class of each point; negative values mark unlabelled points, never sampled.
    n_must, n_cannot : int, optional
        Number of distinct pairs of each type; default ``round(0.6 * n_points)`` each
        (bcdkl-tnnls2015 §IV-A, kl-admm-ijcai2013 §5). Where few points are labelled, a
        default larger than the distinct pairs the labels allow is lowered to all of them,
        with a :class:`ConstraintWarning`; an explicit count larger than that is an error.
    seed : int or numpy Generator
    diagonal : bool
        Add KL-ADMM's ``(i, i) = 1`` targets.

    Returns
    -------
    Constraints
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise ValidationError(
            f"labels: expected a 1-D integer array, got dtype {labels.dtype} shape "
            f"{labels.shape}; encode classes as 0..K-1 and unlabelled points as -1"
        )
    n = labels.shape[0]
    default = int(round(0.6 * n))
    defaulted = {"n_must": n_must is None, "n_cannot": n_cannot is None}
    n_must = default if n_must is None else n_must
    n_cannot = default if n_cannot is None else n_cannot
    for name, val in (("n_must", n_must), ("n_cannot", n_cannot)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise ValidationError(f"{name}: expected a non-negative integer, got {fmt_value(val)}")
    rng = np.random.default_rng(seed)
    labelled = np.flatnonzero(labels >= 0)
    classes, counts = np.unique(labels[labelled], return_counts=True)
    members = [labelled[labels[labelled] == c] for c in classes]
    within = counts * (counts - 1) // 2
    total_pairs = labelled.size * (labelled.size - 1) // 2
    avail = {"n_must": int(within.sum()), "n_cannot": int(total_pairs - within.sum())}
    flag = {"n_must": "--n-must", "n_cannot": "--n-cannot"}
    wanted = {"n_must": n_must, "n_cannot": n_cannot}
    for name, val in wanted.items():
        if val <= avail[name]:
            continue
        kind = "must-link" if name == "n_must" else "cannot-link"
        if defaulted[name] and avail[name] > 0:
            # the papers' 0.6 n assumes every point labelled; with a few labels, all the
            # pairs they allow is what a user who gave no count wants
            warnings.warn(
                f"{name}: the default round(0.6 n) = {val} is more than the {avail[name]} "
                f"distinct {kind} pairs that the {labelled.size} labelled points allow; "
                f"sampling all {avail[name]}. Label more points for more pairs, or set the "
                f"count ({fix(f'{name}=...', f'{flag[name]} ...', f'[input] {name}')})",
                ConstraintWarning,
                stacklevel=2,
            )
            wanted[name] = avail[name]
            continue
        if avail[name] == 0:
            why = (
                "no two share a class"
                if name == "n_must"
                else "fewer than two"
                if labelled.size < 2
                else "all in one class"
            )
            allow = "point allows" if labelled.size == 1 else "points allow"
            raise ValidationError(
                f"{name}: {'the default round(0.6 n) = ' if defaulted[name] else ''}{val} "
                f"{kind} pairs wanted, but the {labelled.size} labelled {allow} none ({why}); "
                f"label more points, or set {name}=0 (npkl fit {flag[name]} 0, [input] "
                f"{name} = 0) to fit without {kind} pairs"
            )
        raise ValidationError(
            f"{name}: asked for {val} distinct {kind} pairs but the {labelled.size} labelled "
            f"points allow only {avail[name]}; lower {name} (npkl fit {flag[name]}, [input] "
            f"{name}) or label more points"
        )
    n_must, n_cannot = wanted["n_must"], wanted["n_cannot"]

    # members of every class laid end to end, so a within-class pair is two offsets
    flat = np.concatenate(members) if members else np.empty(0, np.int64)
    starts = np.r_[0, np.cumsum(counts)[:-1]] if members else np.empty(0, np.int64)

    def draw_must(k):
        c = rng.choice(classes.size, size=k, p=within / within.sum())
        size = counts[c]
        x = rng.integers(0, size)
        y = rng.integers(0, size - 1)
        y = y + (y >= x)  # uniform over the other members
        return flat[starts[c] + x], flat[starts[c] + y]

    def draw_cannot(k):
        a = rng.choice(labelled, size=k)
        b = rng.choice(labelled, size=k)
        ok = labels[a] != labels[b]
        return a[ok], b[ok]

    pairs = []
    for want, draw, sign in ((n_must, draw_must, 1), (n_cannot, draw_cannot, -1)):
        seen = np.empty((0, 2), np.int64)
        while seen.shape[0] < want:
            a, b = draw(max(2 * (want - seen.shape[0]), 16))
            new = np.column_stack([np.minimum(a, b), np.maximum(a, b)])
            # keep first occurrences in draw order so the sample is a function of the seed
            allp = np.concatenate([seen, new])
            _, first = np.unique(allp, axis=0, return_index=True)
            seen = allp[np.sort(first)][:want]
        pairs.append((seen, np.full(seen.shape[0], sign, np.int8)))
    ij = np.concatenate([p[0] for p in pairs])
    t = np.concatenate([p[1] for p in pairs])
    return Constraints.from_arrays(ij[:, 0], ij[:, 1], t, n, diagonal=diagonal, warn=False)
