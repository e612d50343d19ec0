"""The row blocks of V on Dask workers: partitions, block specs and the actors' row
exchange, shared by the Dask executor's BCD, block and KL-ADMM sessions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import ValidationError, fmt_value
from ..linalg._rowops import SUM_BLOCK


def partition_rows(n: int, n_blocks: int, align: int = SUM_BLOCK) -> np.ndarray:
    """Block boundaries ``starts`` (length n_blocks + 1), interior ones multiples of ``align``."""
    if n_blocks < 1:
        raise ValidationError(f"blocks: expected a positive integer, got {fmt_value(n_blocks)}")
    units = -(-n // align)
    n_blocks = min(n_blocks, units)
    cuts = [round(k * units / n_blocks) * align for k in range(n_blocks)] + [n]
    starts = np.unique(np.minimum(np.asarray(cuts, dtype=np.int64), n))
    return starts


def partition_plan(plan, n_blocks: int, align: int = SUM_BLOCK) -> np.ndarray:
    """Block boundaries for BCD: at most ``n_blocks`` blocks cut at those boundaries of the
    plan's blocks that are multiples of ``align``, each cut the one nearest an even split.

    A plan whose blocks are not aligned (small n, or made with another ``align``) gives fewer
    Dask blocks, down to one: still exact, less parallel."""
    if n_blocks < 1:
        raise ValidationError(f"blocks: expected a positive integer, got {fmt_value(n_blocks)}")
    n = plan.n_points
    cand = plan.block_ptr[
        (plan.block_ptr % align == 0) & (plan.block_ptr > 0) & (plan.block_ptr < n)
    ]
    cuts = []
    if cand.size:
        for k in range(1, n_blocks):
            cuts.append(int(cand[np.argmin(np.abs(cand - k * n / n_blocks))]))
    return np.unique(np.asarray([0, *cuts, n], dtype=np.int64))


@dataclass
class BlockSpec:
    """Everything one block actor needs (plain arrays; built on the driver)."""

    b: int
    start: int
    stop: int
    halo: np.ndarray  # global internal rows held as halo, sorted
    indptr: np.ndarray  # local CSR of L's off-diagonal, columns in local numbering
    indices: np.ndarray
    data: np.ndarray
    diag: np.ndarray
    cptr: np.ndarray
    cidx: np.ndarray
    csgn: np.ndarray
    colour_rows: list  # per colour: local rows of that colour (sorted)
    unit_ptr: list  # per colour: bounds of its units in colour_rows
    send: list  # per colour: list of (target block, local rows to send)
    recv: list  # per colour: list of (source block, local halo positions)
    send_all: list  # all halo-relevant own rows: (target, local rows), for ADMM
    recv_all: list  # (source, local positions)
    pair_own: np.ndarray  # local index of the owner row of each pair owned here
    pair_other: np.ndarray  # local index of its partner
    pair_t: np.ndarray
    pmax: int

    @property
    def n_own(self) -> int:
        return self.stop - self.start


def build_blocks(prep, plan, starts) -> list:
    """Split a PreparedProblem into block specs (pure numpy, O(nnz + m))."""
    n = prep.n_points
    n_blocks = len(starts) - 1
    block_of = np.searchsorted(starts, np.arange(n), side="right") - 1
    colour = plan.colour
    n_colours = plan.n_colours
    specs = []
    halos = []
    for b in range(n_blocks):
        s, e = int(starts[b]), int(starts[b + 1])
        cols = prep.indices[prep.indptr[s] : prep.indptr[e]]
        parts = prep.cidx[prep.cptr[s] : prep.cptr[e]]
        ref = np.unique(np.concatenate([cols, parts]))
        halo = ref[(ref < s) | (ref >= e)]
        halos.append(halo)
    for b in range(n_blocks):
        s, e = int(starts[b]), int(starts[b + 1])
        nb = e - s
        halo = halos[b]

        # global -> local: own rows first, then halo rows in sorted order
        def to_local(g, s=s, e=e, nb=nb, halo=halo):
            g = np.asarray(g)
            own = (g >= s) & (g < e)
            out = np.empty(g.shape, np.int64)
            out[own] = g[own] - s
            out[~own] = nb + np.searchsorted(halo, g[~own])
            return out

        lo, hi = prep.indptr[s], prep.indptr[e]
        indptr = (prep.indptr[s : e + 1] - lo).astype(np.int64)
        indices = to_local(prep.indices[lo:hi])
        clo, chi = prep.cptr[s], prep.cptr[e]
        cptr = (prep.cptr[s : e + 1] - clo).astype(np.int64)
        cidx = to_local(prep.cidx[clo:chi])
        colour_rows, unit_ptr = [], []
        for c in range(n_colours):
            rows, ptr = plan.units(c)
            first, last = np.searchsorted(rows, [s, e])
            colour_rows.append((rows[first:last] - s).astype(np.int64))
            unit_ptr.append(np.unique(np.clip(ptr, first, last) - first).astype(np.int64))
        # pairs owned by this block: the first index (pi) lies in it
        mine = (prep.pi >= s) & (prep.pi < e)
        specs.append(
            BlockSpec(
                b=b,
                start=s,
                stop=e,
                halo=halo,
                indptr=indptr,
                indices=indices,
                data=prep.data[lo:hi].copy(),
                diag=prep.diag[s:e].copy(),
                cptr=cptr,
                cidx=cidx,
                csgn=prep.csgn[clo:chi].copy(),
                colour_rows=colour_rows,
                unit_ptr=unit_ptr,
                send=[[] for _ in range(n_colours)],
                recv=[[] for _ in range(n_colours)],
                send_all=[],
                recv_all=[],
                pair_own=(prep.pi[mine] - s).astype(np.int64),
                pair_other=to_local(prep.pj[mine]),
                pair_t=prep.pt[mine].copy(),
                pmax=int(np.diff(cptr).max()) if cptr[-1] else 0,
            )
        )
    # halo routes: rows of block a that block b reads, per colour and in total
    for b in range(n_blocks):
        halo = halos[b]
        src = block_of[halo]
        for a in np.unique(src):
            rows = halo[src == a]  # sorted global rows
            pos = specs[b].n_own + np.searchsorted(halo, rows)
            specs[a].send_all.append((b, rows - specs[a].start))
            specs[b].recv_all.append((int(a), pos))
            cols = colour[rows]
            for c in np.unique(cols):
                sel = cols == c
                specs[a].send[c].append((b, rows[sel] - specs[a].start))
                specs[b].recv[c].append((int(a), pos[sel]))
    return specs


def local_rows(V, spec: BlockSpec):
    """A block's rows of V in its local order: the own rows, then the halo."""
    return np.concatenate([V[spec.start : spec.stop], V[spec.halo]])


def write_actor_blocks(ex, actors, specs, store, ckpt_id, row_block):
    """Every actor writes its own rows into checkpoint ``ckpt_id`` of ``store``."""
    if any(sp.start % row_block for sp in specs):
        raise ValidationError(
            f"row_block: {row_block} does not divide the Dask block starts "
            f"{[sp.start for sp in specs]}; use a divisor of {SUM_BLOCK}"
        )
    ex._gather(
        lambda: [
            a.write_blocks(store.url, ckpt_id, row_block, getattr(store, "storage_options", None))
            for a in actors
        ]
    )


def _recv_positions(spec: BlockSpec, source: int, colour: int):
    for src, pos in spec.recv[colour]:
        if src == source:
            return pos
    raise AssertionError("halo route missing")  # internal invariant of build_blocks


def _recv_all_positions(spec: BlockSpec, source: int):
    for src, pos in spec.recv_all:
        if src == source:
            return pos
    raise AssertionError("halo route missing")
