"""Block-exact BCD (``npkl_dist.solvers.block``) on Dask workers.

The rows of the U-first layout are cut into contiguous blocks (boundaries multiples of the
executor's ``align``, so checkpoint shards and reduction chunks line up). Each block lives in
one Dask actor as a :class:`~npkl_dist.solvers.block._session.BlockPart`: its rows of V followed by
its halo, its part of L and of the constraint lists (``build_blocks``, as for the sweeps),
its own block of L_UU with a local preconditioner, and the CG and subspace-search work
arrays. The driver runs :class:`~npkl_dist.solvers.block._session.BlockSession`'s algorithm; every
call goes to all actors at once and returns partial sums, which the driver adds in row
order (global reductions on the driver):

* PCG: two round trips per iteration -- ``pcg_matvec`` (P = Z + beta P, Q = L_UU P, P'Q)
  and ``pcg_update`` (X, R, then Z = M R, R'Z, R'R). The halo of P is never sent: the
  actors send the U rows of Z that other blocks hold, and every holder forms
  P = Z + beta P for its halo rows with the owner's arithmetic.
* The preconditioner is block-Jacobi (additive Schwarz without overlap): a local AMG
  V-cycle (pyamg on the block's own diagonal block of L_UU) or Jacobi in each block. With
  one block it is the in-process preconditioner, and Jacobi is the same for any blocks.
* Constrained rows: one call per colour of C, the updated rows sent to their holders (the
  sweeps' halo exchange); V_U's halo rows after each block solve the same way.
* Subspace search: partial sums of the 2 x 2 quadratic and every pair's coefficients go to
  the driver, which finds the step; halo rows of V and of the previous step S are updated
  by their holders with the owner's arithmetic, so no exchange follows.

Halo rows ride on the next call to their holder (as in the sweeps). A dead worker becomes
:class:`~npkl_dist.executors._dask.WorkerLostError`; fits resume from checkpoints (width
4r: V, S, L S and the residual R, written shard by shard by the actors).
"""

from __future__ import annotations

import numpy as np

from ..solvers.block._layout import colour_units
from ..solvers.block._session import BlockPart, BlockSession
from ..store import RunStore
from ._dask_rows import (
    _recv_positions,
    build_blocks,
    local_rows,
    partition_rows,
    write_actor_blocks,
)

__all__ = ["BlockSolveActor", "DaskBlockSession"]


class _LayoutPlan:
    """``build_blocks``' view of a BlockLayout: C's colours, then one pseudo-colour holding
    every U row (its halo route carries Z during PCG and V_U after each block solve)."""

    def __init__(self, layout, n):
        nc = layout.n_colours
        self.layout, self.n_colours, self.n_free = layout, nc + 1, layout.n_free
        self.colour = np.full(n, nc, np.int64)
        self.colour[layout.c_colour_rows] = np.repeat(np.arange(nc), np.diff(layout.c_colour_ptr))

    def units(self, c):
        if c == self.layout.n_colours:
            return (np.arange(self.n_free, dtype=np.int64), np.array([0, self.n_free], np.int64))
        return colour_units(self.layout, c)


class BlockSolveActor:
    """One row block of a block solve in a worker's memory (serial kernels)."""

    def __init__(
        self,
        spec,
        n_free,
        V_local,
        loss_code,
        gamma,
        bound,
        precond,
        extrapolate,
        inner_maxiter=None,
    ):
        self.spec = spec
        nc = len(spec.colour_rows) - 1  # the last route is U's
        nu = int(np.clip(n_free - spec.start, 0, spec.n_own))
        self.part = BlockPart(
            V=np.array(V_local),
            n_own=spec.n_own,
            n_free=nu,
            n_free_halo=int(np.searchsorted(spec.halo, n_free)),
            base=spec.start,
            indptr=spec.indptr,
            indices=spec.indices,
            data=spec.data,
            diag=spec.diag,
            cptr=spec.cptr,
            cidx=spec.cidx,
            csgn=spec.csgn,
            pmax=spec.pmax,
            colour_rows=spec.colour_rows[:nc],
            unit_ptr=spec.unit_ptr[:nc],
            pair_own=spec.pair_own,
            pair_other=spec.pair_other,
            pair_t=spec.pair_t,
            loss_code=loss_code,
            gamma=gamma,
            bound=bound,
            precond=precond,
            extrapolate=extrapolate,
            serial=True,
            inner_maxiter=inner_maxiter,
        )

    def call(self, name, args, incoming, kind, route):
        """Apply the halo rows sent since the last call, run ``part.name(*args)``, return
        (its result, [(target block, rows)]) with the rows of ``kind`` ('V' or 'Z') on
        ``route`` that other blocks hold."""
        part, spec = self.part, self.spec
        for what, pos, rows in incoming:
            if what == "V":
                part.V[pos] = rows
            else:  # U rows: halo k sits at n_own + k in V, at nu + k in Z
                part.Z[pos - spec.n_own + part.nu] = rows
        result = getattr(part, name)(*args)
        out = []
        if kind is not None:
            src = part.V if kind == "V" else part.Z
            out = [(t, src[local]) for t, local in spec.send[route]]
        return result, out

    def checkpoint_rows(self, start=0, stop=None):
        """Own rows ``[start, stop)`` of V and the state arrays side by side (a copy)."""
        return self.part.checkpoint_rows(start, stop)

    def own(self):
        return self.part.own().copy()

    def load_state(self, S, LS, R=None):
        return self.part.load_state(S, LS, R)

    def assign(self, V_local):
        return self.part.assign(V_local)

    def write_blocks(self, url, ckpt_id, row_block, storage_options=None):
        store = RunStore.open(url, mode="r", storage_options=storage_options)
        for s in range(0, self.part.n_own, row_block):
            store.write_V_block(
                ckpt_id, self.spec.start + s, self.checkpoint_rows(s, s + row_block)
            )
        return True


class DaskBlockSession(BlockSession):
    """A block-exact fit on a :class:`~npkl_dist.executors.DaskExecutor` (see module doc)."""

    def __init__(
        self, ex, prep, layout, V, precond="amg-additive", extrapolate=True, inner_maxiter=None
    ):
        self.ex = ex
        super().__init__(
            prep,
            layout,
            V,
            1,
            precond=precond,
            extrapolate=extrapolate,
            inner_maxiter=inner_maxiter,
        )

    def _setup(self, prep, layout, V, precond):
        ex = self.ex
        n = V.shape[0]
        self.parts = []  # they live in the actors
        self.starts = partition_rows(n, ex.blocks, ex.align)
        self.specs = build_blocks(prep, _LayoutPlan(layout, n), self.starts)
        self.pair_index = [
            np.flatnonzero((prep.pi >= s.start) & (prep.pi < s.stop)) for s in self.specs
        ]
        self.actors = ex._actors(
            self.specs,
            lambda s: (
                layout.n_free,
                local_rows(V, s),
                prep.loss_code,
                prep.gamma,
                prep.bound,
                precond,
                self.extrapolate,
                self.inner_maxiter,
            ),
            cls=BlockSolveActor,
        )
        self.pending = [[] for _ in self.specs]  # (kind, positions, rows) to apply next
        self.halo_bytes = []  # bytes moved per exchange

    def _threads(self, fn, *args):
        return fn(*args)  # the actors run serial kernels; the driver only adds sums

    def _call(self, name, *args, send=None):
        kind = route = None
        if send is not None:
            kind = "Z" if send == "Z" else "V"
            route = self.layout.n_colours if send == "Z" else send[1]
        pending, self.pending = self.pending, [[] for _ in self.specs]
        out = self.ex._gather(
            lambda: [
                a.call(name, args, pending[b], kind, route) for b, a in enumerate(self.actors)
            ]
        )
        if kind is not None:
            nbytes = 0
            for a, (_, msgs) in enumerate(out):
                for target, rows in msgs:
                    pos = _recv_positions(self.specs[target], a, route)
                    self.pending[target].append((kind, pos, rows))
                    nbytes += rows.nbytes
            self.halo_bytes.append(nbytes)
        return [res for res, _ in out]

    def gather(self):
        return np.concatenate(self.ex._gather(lambda: [a.own() for a in self.actors]))

    def _assign_parts(self, V):
        self.pending = [[] for _ in self.specs]  # every own and halo row is overwritten
        return self.ex._gather(
            lambda: [a.assign(local_rows(V, s)) for a, s in zip(self.actors, self.specs)]
        )

    def checkpoint_array(self):
        return np.concatenate(self.ex._gather(lambda: [a.checkpoint_rows() for a in self.actors]))

    def state_arrays(self):
        if not self.extrapolate:
            return []
        W = self.checkpoint_array()
        r = W.shape[1] // 4  # V, S, LS, R
        return [W[:, r : 2 * r], W[:, 2 * r : 3 * r], W[:, 3 * r :]]

    def load_state_arrays(self, arrays):
        if self.extrapolate:
            S, LS = arrays[0], arrays[1]
            R = arrays[2] if len(arrays) > 2 else None
            self._set_residual(
                self.ex._gather(
                    lambda: [
                        a.load_state(
                            local_rows(S, s),
                            LS[s.start : s.stop],
                            None if R is None else R[s.start : s.stop],
                        )
                        for a, s in zip(self.actors, self.specs)
                    ]
                )
            )

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        write_actor_blocks(self.ex, self.actors, self.specs, store, ckpt_id, row_block)

    def close(self):
        self.actors = []
