"""Sweep plans: pure data describing one Gauss-Seidel sweep of BCD.

A plan fixes (a) a locality-improving relabelling of the points (reverse Cuthill-McKee of the
manifold graph), (b) a partition of the relabelled rows into contiguous *blocks* and (c) a
colour ("step") for every row. A sweep runs the colours one after the other, in an order drawn
per sweep from the run's seeded generator. Within colour c, the rows of c that lie in one block
form a *unit*: a unit's rows are updated one after the other in ascending order (Gauss-Seidel),
and different units of c run concurrently. The plan guarantees that no conflict edge (manifold
edge or constraint pair) joins two rows of one colour in different blocks, so the units of a
colour are independent and any executor -- one thread, many threads, Dask blocks -- gets the
same result bitwise. In other words, the colours are a proper colouring of the *block-quotient
conflict graph* whose nodes are the units.

Two schemes:

``'blocks'`` (default)
    RCM order cut into ``n_blocks`` contiguous blocks (boundaries multiples of ``align``).
    Colour 0 = the even blocks, colour 1 = the odd blocks: a block step is a plain row-order
    Gauss-Seidel pass over a contiguous slab of V, as cache-friendly as a sparse product.
    Blocks of one parity are non-adjacent, so only edges that jump over a block clash; one end
    of each such edge (a greedy vertex cover, mostly constraint pairs -- the graph's edges stay
    within the RCM bandwidth) is *deferred*: it leaves its block step and is updated in one of
    a few extra colours, a greedy proper colouring of the conflict graph induced on the
    deferred rows.
``'colours'`` (the reference scheme)
    A greedy proper colouring of the conflict graph; every row is its own node, blocks are just
    the SUM_BLOCK chunks of the row index. Each colour step streams most of V through the
    caches, so a sweep costs several sparse products.

Executors (in-process, Dask) run the same plan on the same ``PreparedProblem``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from .._errors import ValidationError, fmt_value
from ..linalg._csr import (
    RADIX_MIN_ROW,
    csr_row_ptr,
    radix_passes,
    radix_sort_row,
    sort_row,
)
from ..linalg._rowops import SUM_BLOCK, serial_variant
from ..linalg._simd import prefetch_rows_ahead
from ..problem._problem import NPKLProblem
from ..problem._terms import LOSS_CODES
from ._colouring import block_deferral, greedy_colouring

__all__ = ["SweepPlan", "PreparedProblem", "make_plan", "prepare", "concurrent_conflicts"]

RELABELLINGS = ("rcm", "none")
SCHEMES = ("blocks", "colours")

#: Default number of blocks of the 'blocks' scheme (fewer when the RCM bandwidth is large:
#: a block holds at least a bandwidth of rows, so graph edges rarely clash). 16 blocks give
#: each of two threads four blocks per step (docs/decisions/sweep-scheme.md).
DEFAULT_BLOCKS = 16

#: Fewest rows of a block when the block count is chosen automatically (small problems):
#: below this a block step is mostly parallel overhead.
MIN_BLOCK_ROWS = 256


def chunk_bounds(n: int) -> np.ndarray:
    """0, SUM_BLOCK, 2 SUM_BLOCK, ..., n: the blocks of the 'colours' scheme."""
    return np.unique(np.append(np.arange(0, n, SUM_BLOCK, dtype=np.int64), n))


@dataclass(frozen=True)
class SweepPlan:
    """Relabelling, blocks and colouring of one problem.

    Attributes
    ----------
    order : (n,) int64
        ``order[q]`` is the original index of internal row q.
    rank_of : (n,) int64
        Inverse of ``order``: internal row of original point i.
    colour : (n,) int64
        Colour (sweep step) of each internal row.
    colour_ptr : (n_colours + 1,) int64
    colour_rows : (n,) int64
        Internal rows sorted by (colour, row); colour c is
        ``colour_rows[colour_ptr[c]:colour_ptr[c + 1]]``.
    block_ptr : (n_blocks + 1,) int64
        Block boundaries in internal order (0 first, n last). Default: :func:`chunk_bounds`.
    scheme : {'blocks', 'colours'}
    """

    order: np.ndarray
    rank_of: np.ndarray
    colour: np.ndarray
    colour_ptr: np.ndarray
    colour_rows: np.ndarray
    block_ptr: np.ndarray | None = None
    scheme: str = "colours"
    _units: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.block_ptr is None:
            object.__setattr__(self, "block_ptr", chunk_bounds(self.order.shape[0]))

    @property
    def n_points(self) -> int:
        return int(self.order.shape[0])

    @property
    def n_colours(self) -> int:
        return int(self.colour_ptr.shape[0] - 1)

    @property
    def n_blocks(self) -> int:
        return int(self.block_ptr.shape[0] - 1)

    def rows_of(self, c: int) -> np.ndarray:
        return self.colour_rows[self.colour_ptr[c] : self.colour_ptr[c + 1]]

    def units(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, ptr)``: the rows of colour c (ascending) and the bounds of its non-empty
        units, unit u being ``rows[ptr[u]:ptr[u + 1]]`` (the rows of c in one block)."""
        got = self._units.get(c)
        if got is None:
            rows = self.rows_of(c)
            ptr = np.unique(np.searchsorted(rows, self.block_ptr)).astype(np.int64)
            got = self._units[c] = (rows, ptr)
        return got

    def colour_order(self, rng: np.random.Generator) -> np.ndarray:
        """The seeded random colour (step) order of one sweep."""
        return rng.permutation(self.n_colours)


@dataclass(frozen=True)
class PreparedProblem:
    """A problem's arrays in internal order, ready for the kernels.

    ``indptr, indices, data``: off-diagonal part of L (CSR); ``diag``: its diagonal;
    ``cptr, cidx, csgn``: symmetric constraint lists; ``pi, pj, pt``: the pairs once each.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    diag: np.ndarray
    cptr: np.ndarray
    cidx: np.ndarray
    csgn: np.ndarray
    pi: np.ndarray
    pj: np.ndarray
    pt: np.ndarray
    pmax: int
    loss_code: int
    gamma: float
    bound: float

    @property
    def n_points(self) -> int:
        return int(self.diag.shape[0])


def _split(L: sp.csr_matrix, serial: bool = False):
    """(off-diagonal part with sorted indices, diagonal) of a CSR matrix without duplicate
    entries, filtered row by row in one compiled pass (no COO round trip; ``serial``:
    without threads, for Dask block actors)."""
    L = _canonical(L)
    n = L.shape[0]
    split_rows = _split_rows_serial if serial else _split_rows
    ptr, idx, val, diag = split_rows(L.indptr, L.indices, L.data, n)
    off = sp.csr_matrix((val, idx, ptr), shape=L.shape)
    off.has_sorted_indices = True
    return off, diag


def _canonical(L) -> sp.csr_matrix:
    """L as CSR with sorted indices and no duplicates (summed, as scipy sums them)."""
    L = sp.csr_matrix(L)
    if not L.has_canonical_format:
        L = L.copy()
        L.sum_duplicates()
    return L


@njit(nogil=True, cache=True, parallel=True)
def _split_rows(indptr, indices, data, n):
    cnt = np.zeros(n, np.int64)
    diag = np.zeros(n, data.dtype)
    for i in prange(n):
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] == i:
                diag[i] = data[p]
            else:
                c += 1
        cnt[i] = c
    ptr = csr_row_ptr(cnt)
    idx = np.empty(ptr[n], indices.dtype)
    val = np.empty(ptr[n], data.dtype)
    for i in prange(n):
        q = ptr[i]
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] != i:
                idx[q] = indices[p]
                val[q] = data[p]
                q += 1
    return ptr, idx, val, diag


_split_rows_serial = serial_variant(_split_rows)


def split_nonzero(A: sp.csr_matrix, serial: bool = False):
    """``_split(_nonzero(A))`` -- the off-diagonal part without explicit zeros, each row
    sorted by column, and the diagonal -- as ``(indptr, indices, data), diag`` with int64
    indices, in one compiled pass over rows in parallel, for a CSR matrix whose rows are
    unsorted but hold no duplicate columns (an AMG hierarchy's coarse levels:
    ``galerkin_plain`` stores rows in scipy's product order). The same values as that route
    (where scipy sorts the rows serially; docs/decisions/block-fit-at-1e6.md); a matrix with
    duplicates takes that route."""
    A = sp.csr_matrix(A)
    n = A.shape[0]
    split_rows = _sorted_split_rows_serial if serial else _sorted_split_rows
    ptr, idx, val, diag, dup = split_rows(A.indptr, A.indices, A.data, n)
    if dup:
        off, diag = _split(_nonzero(A), serial=serial)
        ptr, idx, val = (off.indptr.astype(np.int64), off.indices.astype(np.int64), off.data)
    return (ptr, idx, val), diag


def _nonzero(A: sp.csr_matrix) -> sp.csr_matrix:
    """A without explicit zeros (a copy only if it holds some)."""
    if A.nnz and not np.all(A.data):
        A = A.copy()
        A.eliminate_zeros()
    return A


#: Rows per unit of ``_sorted_split_rows``'s fill pass (each unit sorts in its own scratch).
SPLIT_UNIT = 512


@njit(nogil=True, cache=True, parallel=True)
def _sorted_split_rows(indptr, indices, data, n):
    """(ptr, idx, val, diag, duplicates): the off-diagonal nonzeros of each row sorted by
    column (an insertion sort up to ``RADIX_MIN_ROW`` entries, a radix sort above: coarse
    rows hold about a hundred, in no order), the diagonal (0 where a row stores none or
    stores 0); ``duplicates``: some row holds a column twice (the arrays are then not what
    scipy's route gives)."""
    cnt = np.zeros(n, np.int64)
    diag = np.zeros(n, data.dtype)
    for i in prange(n):
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] == i:
                diag[i] = data[p]
            elif data[p] != 0:
                c += 1
        cnt[i] = c
    ptr = csr_row_ptr(cnt)
    idx = np.empty(ptr[n], np.int64)
    val = np.empty(ptr[n], data.dtype)
    dup = np.zeros(n, np.bool_)
    width = max(1, cnt.max()) if n else 1
    passes = radix_passes(n)
    n_units = (n + SPLIT_UNIT - 1) // SPLIT_UNIT
    for u in prange(n_units):
        kbuf = np.empty(width, np.int64)
        vbuf = np.empty(width, data.dtype)
        hist = np.empty(256, np.int64)
        for i in range(u * SPLIT_UNIT, min(n, (u + 1) * SPLIT_UNIT)):
            q = ptr[i]
            for p in range(indptr[i], indptr[i + 1]):
                if indices[p] != i and data[p] != 0:
                    idx[q], val[q] = indices[p], data[p]
                    q += 1
            if q - ptr[i] > RADIX_MIN_ROW:
                radix_sort_row(idx, val, ptr[i], q, kbuf, vbuf, hist, passes)
            else:
                sort_row(idx, val, ptr[i], q)
            for a in range(ptr[i] + 1, q):
                if idx[a] == idx[a - 1]:
                    dup[i] = True
    return ptr, idx, val, diag, bool(np.any(dup))


_sorted_split_rows_serial = serial_variant(_sorted_split_rows)


def permute(
    L: sp.csr_matrix, order: np.ndarray, rank_of: np.ndarray | None = None
) -> sp.csr_matrix:
    """``L[order][:, order]`` (CSR, sorted indices; the set-ups use :func:`permute_split`,
    and this is its reference in the tests): rows gathered, then column indices
    renamed through ``rank_of`` (the inverse of ``order``) instead of scipy's column fancy
    indexing, which builds and multiplies a selection matrix."""
    L = sp.csr_matrix(L)
    order = np.asarray(order, np.int64)
    if rank_of is None:
        rank_of = np.empty(order.shape[0], np.int64)
        rank_of[order] = np.arange(order.shape[0], dtype=np.int64)
    R = L[order]
    idx_dtype = R.indices.dtype
    out = sp.csr_matrix(
        (R.data, rank_of[R.indices].astype(idx_dtype, copy=False), R.indptr), shape=L.shape
    )
    out.sum_duplicates()  # sorted, one entry per (row, column)
    return out


class SplitL(NamedTuple):
    """L in a plan's order as its off-diagonal part (CSR, int64, each row sorted by column)
    and its diagonal: what :func:`prepare` keeps, from :func:`permute_split`."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    diag: np.ndarray

    def tocsr(self) -> sp.csr_matrix:
        """off-diagonal + diag as one CSR matrix (for tests and inspection)."""
        n = self.diag.shape[0]
        off = sp.csr_matrix((self.data, self.indices, self.indptr), shape=(n, n))
        return (off + sp.diags(self.diag)).tocsr()


def permute_split(
    L: sp.csr_matrix, order: np.ndarray, rank_of: np.ndarray | None = None
) -> SplitL:
    """``_split(permute(L, order, rank_of))`` in one compiled pass, with int64 indices: row q
    of the result is row ``order[q]`` of L with its columns renamed through ``rank_of`` and
    sorted, the diagonal apart, faster than the two steps (docs/decisions/block-fit-at-1e6.md;
    the rows' counts and diagonals are read in L's own order, not gathered from rows at
    random), and the set-up no longer copies L's indices to int64 for the colouring and for
    ``prepare``. ``L``: canonical (sorted, no duplicates; an NPKLProblem's L is); otherwise it
    is made so first."""
    L = _canonical(sp.csr_matrix(L))
    order = np.asarray(order, np.int64)
    if rank_of is None:
        rank_of = np.empty(order.shape[0], np.int64)
        rank_of[order] = np.arange(order.shape[0], dtype=np.int64)
    ptr, idx, val, diag = _permute_split_rows(
        L.indptr, L.indices, L.data, order, _compact_ranks(rank_of)
    )
    return SplitL(ptr, idx, val, diag)


def _compact_ranks(rank_of: np.ndarray) -> np.ndarray:
    """``rank_of`` as int32 where it fits: the permutations' lookups of new column numbers
    are scattered, and half the bytes keep more of them in cache."""
    n = rank_of.shape[0]
    return np.asarray(rank_of, np.int32 if n < 2**31 else np.int64)


#: Rows per unit of ``_permute_split_rows``'s fill pass (each unit sorts in its own scratch).
PERMUTE_UNIT = 4096


@njit(nogil=True, cache=True, parallel=True)
def _permute_split_rows(indptr, indices, data, order, rank_of):
    n = order.shape[0]
    # each row's off-diagonal count and diagonal, read in L's own order (sequential), then
    # gathered: a first pass over the rows in the new order read every row twice at random
    off = np.empty(n, np.int64)
    dg = np.zeros(n, data.dtype)
    for i in prange(n):
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] == i:
                dg[i] = data[p]
            else:
                c += 1
        off[i] = c
    cnt = np.empty(n, np.int64)
    diag = np.empty(n, data.dtype)
    for q in prange(n):
        i = order[q]
        cnt[q] = off[i]
        diag[q] = dg[i]
    ptr = csr_row_ptr(cnt)
    width = max(1, cnt.max()) if n else 1
    idx = np.empty(ptr[n], np.int64)
    val = np.empty(ptr[n], data.dtype)
    n_units = (n + PERMUTE_UNIT - 1) // PERMUTE_UNIT
    nothing = np.empty(0, rank_of.dtype)
    for u in prange(n_units):
        keys = np.empty(width, np.int64)
        vals = np.empty(width, data.dtype)
        end = min(n, (u + 1) * PERMUTE_UNIT)
        for q in range(u * PERMUTE_UNIT, end):
            # rows ahead in the new order: bounds, entries, the new numbers of the columns
            prefetch_rows_ahead(indptr, indices, data, order, q, end, rank_of, nothing)
            i = order[q]
            k = 0
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if j != i:
                    keys[k] = rank_of[j]
                    vals[k] = data[p]
                    k += 1
            # each entry's place = how many of the row's new columns are smaller (a canonical
            # row has distinct columns): a branch-free count, about twice as fast at n = 1e6
            # as an insertion sort, whose data-dependent branches mispredict
            start = ptr[q]
            for a in range(k):
                ka = keys[a]
                r = 0
                for b in range(k):
                    r += keys[b] < ka
                idx[start + r] = ka
                val[start + r] = vals[a]
    return ptr, idx, val, diag


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValidationError(f"{name}: expected an integer >= {low}, got {fmt_value(value)}")
    return int(value)


def relabel_order(problem: NPKLProblem, relabel: str = "rcm") -> np.ndarray:
    """The locality order of a plan alone (internal row q is point ``order[q]``): reverse
    Cuthill-McKee of L, or the identity. Block solves need only this, not the colouring."""
    if relabel not in RELABELLINGS:
        raise ValidationError(f"relabel: {relabel!r} is not one of {RELABELLINGS}")
    if relabel == "rcm":
        return reverse_cuthill_mckee(sp.csr_matrix(problem.L))
    return np.arange(problem.n_points, dtype=np.int64)


def reverse_cuthill_mckee(L: sp.csr_matrix) -> np.ndarray:
    """scipy's ``reverse_cuthill_mckee(L, symmetric_mode=True)`` (int64): the same
    permutation, element for element, in a fraction of its time
    (docs/decisions/block-fit-at-1e6.md).

    scipy's algorithm, step for step: node degrees (row lengths, plus one where the diagonal
    is stored), ``np.argsort`` of them as int32 (the same sort on the same array, so the
    same seeds in the same order), then for each unvisited seed a breadth-first search
    whose newly found neighbours of each node are insertion-sorted by degree (stable, so
    ties keep the row's stored order), the whole order reversed. The one change is the
    visited test: a byte per node instead of scipy's two chained lookups in (n,) index
    arrays, which at n = 1e6 are two cache misses per edge; and the search prefetches the
    queue ahead of it (``prefetch_rows_ahead``: the search is serial and waits on scattered
    reads)."""
    n = L.shape[0]
    degree = np.empty(n, np.int32)
    _rcm_degrees(L.indptr, L.indices, degree)
    seeds = np.argsort(degree)
    order = np.empty(n, np.int64)
    _cuthill_mckee(L.indptr, L.indices, degree, seeds, order)
    return order[::-1].copy()


@njit(nogil=True, cache=True)
def _rcm_degrees(indptr, indices, degree):
    """degree[i] = the length of row i, plus one when row i stores its diagonal (scipy's
    ``_node_degrees``).  OUT (n,) int32."""
    for i in range(degree.shape[0]):
        d = indptr[i + 1] - indptr[i]
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] == i:
                d += 1
                break
        degree[i] = d


@njit(nogil=True, cache=True)
def _cuthill_mckee(indptr, indices, degree, seeds, order):
    """Cuthill-McKee order (not yet reversed) into ``order`` (n,) int64 OUT: components
    started from the unvisited node of lowest degree in ``seeds`` order, each node's new
    neighbours sorted by degree by a stable insertion sort, as scipy's
    ``_reverse_cuthill_mckee``."""
    n = order.shape[0]
    # degrees of the current node's new neighbours: at most its row length <= its degree
    key = np.empty(max(1, degree.max()) if n else 1, np.int64)
    visited = np.zeros(n, np.bool_)
    nodata = np.empty(0)
    found = 0
    for z in range(n):
        seed = seeds[z]
        if visited[seed]:
            continue
        order[found] = seed
        visited[seed] = True
        found += 1
        level_start = found - 1
        level_end = found
        while level_start < level_end:
            for q in range(level_start, level_end):
                # the queue ahead: a node's row bounds, its row, its neighbours' flags and
                # degrees (a hint to the CPU: no value changes)
                prefetch_rows_ahead(indptr, indices, nodata, order, q, found, visited, degree)
                i = order[q]
                first = found
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    if not visited[j]:
                        visited[j] = True
                        order[found] = j
                        key[found - first] = degree[j]
                        found += 1
                for a in range(1, found - first):  # insertion sort by degree, stable
                    d = key[a]
                    node = order[first + a]
                    b = a
                    while b > 0 and d < key[b - 1]:
                        key[b] = key[b - 1]
                        order[first + b] = order[first + b - 1]
                        b -= 1
                    key[b] = d
                    order[first + b] = node
            level_start = level_end
            level_end = found
        if found == n:
            break


def make_plan(
    problem: NPKLProblem,
    relabel: str = "rcm",
    scheme: str = "blocks",
    n_blocks: int | None = None,
    align: int = SUM_BLOCK,
    return_matrix: bool = False,
):
    """Relabel, cut into blocks and colour a problem (pure; cheap relative to a fit).

    Parameters
    ----------
    problem : NPKLProblem
    relabel : {'rcm', 'none'}
    scheme : {'blocks', 'colours'}
        See the module docstring; 'colours' is the reference scheme.
    n_blocks : int, optional
        'blocks' scheme: number of blocks. Default ``clip(n // max(bandwidth, align,
        MIN_BLOCK_ROWS), 2, DEFAULT_BLOCKS)``, bandwidth that of L in the relabelled order.
    align : int
        'blocks' scheme: interior block boundaries are multiples of ``align`` (1 when
        n < 2 align). The Dask executor cuts its row blocks at block boundaries that are
        multiples of its own alignment (SUM_BLOCK, or a run's checkpoint shard height), so
        a plan meant for a run store is made with ``align`` = that shard height.
    return_matrix : bool
        Also return L in the plan's order (what ``prepare`` would compute again), as
        ``(plan, Lp)`` with Lp a :class:`SplitL`.
    """
    if relabel not in RELABELLINGS:
        raise ValidationError(f"relabel: {relabel!r} is not one of {RELABELLINGS}")
    if scheme not in SCHEMES:
        raise ValidationError(f"scheme: {scheme!r} is not one of {SCHEMES}")
    align = _check_int("align", align, 1)
    if n_blocks is not None:
        n_blocks = _check_int("n_blocks", n_blocks, 1)
    n = problem.n_points
    L = problem.L
    order = relabel_order(problem, relabel)
    rank_of = np.empty(n, np.int64)
    rank_of[order] = np.arange(n, dtype=np.int64)
    Lp = permute_split(L, order, rank_of)
    indptr, indices = Lp.indptr, Lp.indices  # the off-diagonal: no step reads the diagonal
    cptr, cidx, _ = _constraint_lists(problem, rank_of)
    colour = np.empty(n, np.int64)
    if scheme == "colours":
        block_ptr = chunk_bounds(n)
        greedy_colouring(n, indptr, indices, cptr, cidx, np.ones(n, np.bool_), colour)
    else:
        bandwidth = _bandwidth(indptr, indices)
        block_ptr = _block_bounds(n, bandwidth, n_blocks, align)
        block = np.repeat(np.arange(block_ptr.shape[0] - 1, dtype=np.int64), np.diff(block_ptr))
        deferred = np.empty(n, np.bool_)
        block_deferral(n, indptr, indices, cptr, cidx, block, deferred)
        greedy_colouring(n, indptr, indices, cptr, cidx, deferred, colour)
        colour = np.where(deferred, colour + 2, block % 2)
        # drop empty colours (e.g. every row of the odd blocks deferred)
        colour = np.unique(colour, return_inverse=True)[1].astype(np.int64)
    n_colours = int(colour.max()) + 1
    # rows by colour, ascending within a colour: a stable sort (radix on few colours)
    key = colour.astype(np.int16) if n_colours <= np.iinfo(np.int16).max else colour
    colour_rows = np.argsort(key, kind="stable").astype(np.int64)
    colour_ptr = np.zeros(n_colours + 1, np.int64)
    np.cumsum(np.bincount(colour, minlength=n_colours), out=colour_ptr[1:])
    plan = SweepPlan(order, rank_of, colour, colour_ptr, colour_rows, block_ptr, scheme)
    return (plan, Lp) if return_matrix else plan


@njit(nogil=True, cache=True)
def _bandwidth(indptr, indices):
    """max |i - j| over the entries (i, j) of a CSR pattern (0 when it has none)."""
    b = 0
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            d = abs(i - indices[p])
            if d > b:
                b = d
    return b


def _block_bounds(n: int, bandwidth: int, n_blocks: int | None, align: int) -> np.ndarray:
    if n < 2 * align:
        align = 1
    if n_blocks is None:
        n_blocks = int(np.clip(n // max(bandwidth, align, MIN_BLOCK_ROWS), 2, DEFAULT_BLOCKS))
    n_units = -(-n // align)
    n_blocks = max(1, min(n_blocks, n_units))
    cuts = np.rint(np.arange(n_blocks + 1) * (n_units / n_blocks)).astype(np.int64) * align
    return np.unique(np.minimum(cuts, n))


def concurrent_conflicts(plan: SweepPlan, prep: PreparedProblem) -> np.ndarray:
    """Conflict edges (manifold edges and constraint pairs, internal rows) joining two rows
    that a sweep may update concurrently: same colour, different blocks. (k, 2) int64; a
    valid plan has none."""
    n = plan.n_points
    block = np.repeat(np.arange(plan.n_blocks, dtype=np.int64), np.diff(plan.block_ptr))
    a = np.concatenate([np.repeat(np.arange(n, dtype=np.int64), np.diff(prep.indptr)), prep.pi])
    b = np.concatenate([prep.indices, prep.pj])
    bad = (plan.colour[a] == plan.colour[b]) & (block[a] != block[b])
    return np.stack([a[bad], b[bad]], axis=1)


def _constraint_lists(problem, rank_of):
    c = problem.constraints
    n = problem.n_points
    pi, pj = rank_of[c.i], rank_of[c.j]
    rows = np.concatenate([pi, pj])
    cols = np.concatenate([pj, pi])
    sign = np.concatenate([c.t, c.t]).astype(np.int8)
    order = np.lexsort((cols, rows))
    cptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=cptr[1:])
    return cptr, cols[order].astype(np.int64), sign[order]


def prepare(
    problem: NPKLProblem, plan: SweepPlan, Lp: SplitL | sp.csr_matrix | None = None
) -> PreparedProblem:
    """The problem's arrays in the plan's internal order (``Lp``: L already in that order,
    ``L[plan.order][:, plan.order]``, if the caller has it: a :class:`SplitL` as
    ``make_plan(..., return_matrix=True)`` gives it, or a CSR matrix)."""
    if Lp is None:
        Lp = permute_split(problem.L, plan.order, plan.rank_of)
    elif not isinstance(Lp, SplitL):
        off, diag = _split(Lp)
        Lp = SplitL(off.indptr, off.indices, off.data, diag)
    cptr, cidx, csgn = _constraint_lists(problem, plan.rank_of)
    c = problem.constraints
    pmax = int(np.diff(cptr).max()) if cptr[-1] else 0
    return PreparedProblem(
        indptr=Lp.indptr.astype(np.int64, copy=False),
        indices=Lp.indices.astype(np.int64, copy=False),
        data=Lp.data.astype(problem.dtype, copy=False),
        diag=Lp.diag.astype(problem.dtype, copy=False),
        cptr=cptr,
        cidx=cidx,
        csgn=csgn,
        pi=plan.rank_of[c.i],
        pj=plan.rank_of[c.j],
        pt=c.t.astype(np.int8),
        pmax=pmax,
        loss_code=LOSS_CODES[problem.loss],
        gamma=problem.gamma,
        bound=problem.bound,
    )
