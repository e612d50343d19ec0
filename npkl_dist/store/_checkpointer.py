"""Checkpoint a fit into a run store every N sweeps (see npkl_dist.job._recovery)."""

from __future__ import annotations

import hashlib

import numpy as np

from ._errors import StoreError

__all__ = ["StoreCheckpointer", "check_parameters", "data_hashes"]


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
        """The newest complete checkpoint as ``(state, W)``, or None.

        One learned under other parameters than this checkpointer's ``extra["parameters"]``
        (a stored configuration edited after it was written; :data:`MUST_AGREE`) is refused,
        unless the run asked to continue it (``store.request_force_config()``, ``npkl
        resume RUN --force-config``) and only :data:`FORCIBLE` parameters differ: then its
        V starts a new fit under the configuration's parameters (``state["warm_start"]``,
        sweeps counted from 1 again), recorded in the run's ``forced_config`` log, which
        also lets a later resume or a lost worker's restart start from it again."""
        latest = self.store.latest_checkpoint()
        if latest is None:
            return None
        manifest, W = latest
        params = self.extra.get("parameters")
        diff = parameter_diff(manifest, params)
        if not diff:
            if self.store.force_config_requested:
                self.store.request_force_config(False)  # nothing to force
            return manifest["state"], W
        old = manifest["parameters"]
        change = {"checkpoint": manifest.get("id"), "sweep": manifest.get("sweep"),
                  "from": {k: old[k] for k in diff}, "to": {k: params[k] for k in diff}}  # fmt: skip
        done = any(
            {k: e.get(k) for k in ("checkpoint", "from", "to")}
            == {k: change[k] for k in ("checkpoint", "from", "to")}
            for e in self.store.forced_config
        )
        if not done and not self.store.force_config_requested:
            check_parameters(self.store.url, manifest, params)  # raises, naming the fix
        fixed = [k for k in diff if k not in FORCIBLE]
        if fixed:
            raise StoreError(
                f"run {self.store.url}: --force-config cannot continue checkpoint "
                f"{manifest.get('id')} under another {', '.join(fixed)} ("
                + ", ".join(
                    f"{k}: checkpoint {old[k]!r}, configuration {params[k]!r}" for k in fixed
                )
                + f"): its V has other rows, columns or internal order than that fit needs; "
                f"only {', '.join(FORCIBLE)} can change: start a new run (npkl fit ... --run "
                f"NEW_RUN)"
            )
        if not done:
            self.store.record_forced_config(change)
        state = {"warm_start": True, "sweep": 0, "method": manifest["state"].get("method")}
        return state, W


#: What a checkpoint and the run's configuration must agree on before learning continues
#: from it (the others, e.g. max_sweeps, tol or the executor, may change on a resume).
MUST_AGREE = (
    "solver",
    "loss",
    "gamma",
    "rank",
    "dtype",
    "seed",
    "delta",
    "bound",
    "anderson",
    "graph_sha256",
    "constraints_sha256",
)


#: What ``--force-config`` may change: under these, the checkpoint's V keeps its rows, columns
#: and internal order and is a valid start (the graph's and constraints' hashes, the rank,
#: the dtype, the solver and its method or accelerator are not).
FORCIBLE = ("loss", "gamma", "seed", "delta", "bound")


def data_hashes(store) -> dict:
    """sha256 of the graph stage's and the constraints' recorded item hashes, for a
    checkpoint's parameters: learning continues only on the data it started on."""
    stages = store.stages()
    out = {}
    for key, stage, names in (
        ("graph_sha256", "graph", None),
        ("constraints_sha256", "inputs", ("constraints",)),
    ):
        items = stages.get(stage, {}).get("items", {})
        shas = [f"{k}:{v['sha256']}" for k, v in sorted(items.items()) if not names or k in names]
        if shas:
            out[key] = hashlib.sha256("\n".join(shas).encode()).hexdigest()[:16]
    return out


def parameter_diff(manifest: dict, params: dict | None) -> list:
    """The keys of :data:`MUST_AGREE` that ``manifest["parameters"]`` and ``params`` both
    record with different values."""
    old = manifest.get("parameters") or {}
    if params is None:
        return []
    return [k for k in MUST_AGREE if k in old and k in params and old[k] != params[k]]


def check_parameters(url, manifest: dict, params: dict | None) -> None:
    """Raise StoreError when ``manifest["parameters"]`` and ``params`` differ on a key of
    :data:`MUST_AGREE` that both record."""
    diff = parameter_diff(manifest, params)
    if diff:
        old = manifest["parameters"]
        pairs = ", ".join(f"{k}: checkpoint {old[k]!r}, configuration {params[k]!r}" for k in diff)
        also = (
            "; or continue from this checkpoint's V as the start of a new fit under the new "
            "values, recorded in the run (npkl resume RUN --force-config)"
            if all(k in FORCIBLE for k in diff)
            else ""
        )
        raise StoreError(
            f"run {url}: checkpoint {manifest.get('id')} (sweep {manifest.get('sweep')}) was "
            f"learned under other parameters than the run's configuration now holds ({pairs}); "
            f"a run's configuration does not change after learning started: start a new run "
            f"with the new values (npkl fit ... --run NEW_RUN){also}"
        )
