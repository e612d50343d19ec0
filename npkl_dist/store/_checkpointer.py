"""Checkpoint a fit into a run store every N sweeps (see npkl_dist.job._recovery)."""

from __future__ import annotations

import numpy as np

__all__ = ["StoreCheckpointer"]


class StoreCheckpointer:
    """``on_sweep`` writes V (each executor block writes its own shards), then the driver
    commits the manifest and switches the pointer; ``load`` returns the newest complete one.

    Parameters
    ----------
    store : RunStore (writer)
    every : int
        Checkpoint every ``every`` sweeps, and always at convergence.
    row_block : int
        Rows per shard (must divide the executor's block boundaries).
    width : int
        Columns of the checkpointed factor (r for BCD sweeps, 4r for block solves: V, S, L S,
        R; 3r for KL-ADMM's [V | U | Lam]).
    """

    def __init__(
        self,
        store,
        *,
        every: int,
        row_block: int,
        n: int,
        width: int,
        dtype,
        extra: dict | None = None,
        max_sweeps: int | None = None,
    ):
        self.store, self.every, self.row_block = store, int(every), int(row_block)
        self.n, self.width, self.dtype = int(n), int(width), np.dtype(dtype)
        self.extra = dict(extra or {})
        self.max_sweeps = max_sweeps
        self.n_saved = 0

    def on_sweep(self, state, session):
        last = self.max_sweeps is not None and state["sweep"] >= self.max_sweeps
        if state["sweep"] % self.every and not state.get("converged") and not last:
            return
        ckpt = self.store.begin_checkpoint(
            state["sweep"], self.n, self.width, self.dtype, row_block=self.row_block
        )
        session.write_checkpoint_blocks(self.store, ckpt, self.row_block)
        self.store.commit_checkpoint(
            ckpt,
            {
                "state": state,
                "sweep": state["sweep"],
                "objective": state["objective"],
                **self.extra,
            },
        )
        self.n_saved += 1

    def load(self):
        latest = self.store.latest_checkpoint()
        if latest is None:
            return None
        manifest, W = latest
        return manifest["state"], W
