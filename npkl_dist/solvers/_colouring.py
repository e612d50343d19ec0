"""Greedy colouring of the conflict graph (graph edges and constraint pairs) and the deferral of
rows whose block would clash: the colours make a sweep step's units independent."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def greedy_colouring(n, indptr, indices, cptr, cidx, active, colour):
    """Greedy proper colouring of the subgraph induced by the ``active`` vertices of the union
    of two symmetric graphs (CSR ``indptr/indices`` and ``cptr/cidx``), in index order.

    active : (n,) bool. colour : (n,) int64 OUT (-1 at inactive vertices). Returns the number
    of colours.
    """
    forbidden = np.full(n + 1, -1, np.int64)
    n_colours = 0
    for i in range(n):
        colour[i] = -1
        if not active[i]:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            if k < i and active[k]:
                forbidden[colour[k]] = i
        for p in range(cptr[i], cptr[i + 1]):
            k = cidx[p]
            if k < i and active[k]:
                forbidden[colour[k]] = i
        c = 0
        while forbidden[c] == i:
            c += 1
        colour[i] = c
        if c + 1 > n_colours:
            n_colours = c + 1
    return n_colours


@njit(nogil=True, cache=True)
def _clashes(a, b, block):
    """Rows in two different blocks of the same parity: updated concurrently by a block step."""
    return block[a] != block[b] and (block[a] - block[b]) % 2 == 0


@njit(nogil=True, cache=True)
def block_deferral(n, indptr, indices, cptr, cidx, block, deferred):
    """Greedy vertex cover of the conflict edges (graph edges and constraint pairs) that join
    two different blocks of the same parity: for each such edge (i, k), i < k, in index order
    with neither end yet deferred, k is deferred.

    block : (n,) int64 block of each row. deferred : (n,) bool OUT. Returns the count.
    """
    count = 0
    for i in range(n):
        deferred[i] = False
    for i in range(n):
        if deferred[i]:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            if k > i and not deferred[k] and _clashes(i, k, block):
                deferred[k] = True
                count += 1
        for p in range(cptr[i], cptr[i + 1]):
            k = cidx[p]
            if k > i and not deferred[k] and _clashes(i, k, block):
                deferred[k] = True
                count += 1
    return count
