"""The learn stage of ``[model] solver = "spe"``: structure preserving embedding at scale
(:func:`npkl_dist.embedding.embed_spe_lowrank`) of the run's graph, checkpointed in the run
store after every ``checkpoint_every`` sweeps and resumed from the newest checkpoint, bitwise
as an uninterrupted fit. The other stages and their helpers: ``_stages``.

A checkpoint is two objects under ``spe/``: the state's arrays (``state-<sweep>.npz``) and
``latest.json`` naming it with its sha256 and the state's other values with theirs. Writing
``latest.json`` (atomically) commits the checkpoint; the previous arrays are deleted after.
Every read checks both hashes: damage is named with its repair (``npkl resume RUN --redo
learn``), never read back wrong."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np

from npkl_dist import ValidationError
from npkl_dist._compile_watch import CompileWatch
from npkl_dist.embedding import embed_spe_lowrank, spe_state_arrays

from . import _stage_kit as S  # the helpers every stage module shares

#: the run store's prefix of the SPE checkpoints (dropped by ``--redo learn``)
SPE_GROUP = "spe"
LATEST_KEY = f"{SPE_GROUP}/latest.json"


def spe(cfg: dict) -> bool:
    """The run embeds its graph with SPE (no pairs, no plan)."""
    return cfg["model"]["solver"] == "spe"


def _digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def save_state(store, state: dict) -> None:
    """One checkpoint: the arrays, then the commit (``latest.json``), then the old arrays
    deleted."""
    arrays, record = spe_state_arrays(state)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    key = f"{SPE_GROUP}/state-{int(state['sweeps']):06d}.npz"
    previous = _latest_pointer(store)
    store._require_writer("an SPE checkpoint")
    with store._io("writing an SPE checkpoint"):
        store._objects.write_atomic(key, data)
        pointer = {
            "state": key,
            "sha256": hashlib.sha256(data).hexdigest(),
            "record": record,
            "record_sha256": _digest(record),
        }
        store._objects.write_atomic(LATEST_KEY, json.dumps(pointer).encode())
        if previous is not None and previous.get("state") not in (None, key):
            store._objects.delete(previous["state"])


def _latest_pointer(store) -> dict | None:
    with store._io("reading the SPE checkpoint pointer"):
        try:
            raw = store._objects.read(LATEST_KEY)
        except FileNotFoundError:
            return None
    try:
        pointer = json.loads(raw)
    except ValueError:
        raise store._damaged("learn", LATEST_KEY, "is not valid JSON") from None
    if not isinstance(pointer, dict) or _digest(pointer.get("record")) != pointer.get(
        "record_sha256"
    ):
        raise store._damaged(
            "learn", LATEST_KEY, "does not match the sha256 recorded when it was written"
        )
    return pointer


def load_state(store) -> dict | None:
    """The newest committed checkpoint's state, checked, or None."""
    pointer = _latest_pointer(store)
    if pointer is None:
        return None
    data = store.read_stage_object("learn", pointer["state"], pointer["sha256"])
    with np.load(io.BytesIO(data)) as z:
        arrays = {k: z[k] for k in z.files}
    return {**arrays, **pointer["record"]}


def learn_spe(ctx: S.Context) -> dict:
    """SPE of the stored graph's connectivity (weights set to 1), rank ``[spe] rank``;
    the factor V (n x rank, columns by decreasing eigenvalue) is the run's embedding."""
    m, cfg = ctx.cfg["model"], ctx.cfg["spe"]
    every = int(ctx.cfg["execution"]["checkpoint_every"])
    out: dict = {}
    with S.measure(out):
        W = ctx.store.read_graph().tocsr()
        W.data = np.ones_like(W.data)
        n = W.shape[0]
        if not 1 <= cfg["rank"] <= n - 2:
            raise ValidationError(
                f"[spe] rank: {cfg['rank']} for a graph of {n} nodes; give 1 <= rank <= {n - 2}"
            )
        latest = None if ctx.throwaway else load_state(ctx.store)
        if latest is not None:
            ctx.log(f"learn: resuming after sweep {latest['sweeps']} (checkpoint)")
        bar = ctx.bar("learn", m["max_sweeps"])
        if latest is not None:
            bar.update(int(latest["sweeps"]), "resumed", force=True)
        saved = []

        def callback(sweep, objective, dual, n_triplets):
            bar.update(int(sweep))
            gap = (objective - dual) / (abs(objective) + 1.0)
            for hook in ctx.sweep_hooks:
                hook(int(sweep), float(objective), float(gap), 0.0)

        def checkpoint(state):
            if not ctx.throwaway and state["sweeps"] % every == 0:
                save_state(ctx.store, state)
                saved.append(int(state["sweeps"]))

        compiling = CompileWatch(None if ctx.quiet else (lambda: S._compile_notice(bar)))
        try:
            with compiling:
                res = embed_spe_lowrank(
                    W,
                    dim=cfg["rank"],
                    rank=cfg["rank"],
                    C=cfg["C"],
                    B=cfg["capacity"],
                    triplets_per_node=cfg["triplets"],
                    max_sweeps=m["max_sweeps"],
                    max_iter=cfg["max_iter"],
                    tol=cfg["tol"],
                    seed=m["seed"],
                    callback=callback,
                    checkpoint=checkpoint,
                    resume=latest,
                )
        finally:
            bar.close()
        V = np.ascontiguousarray(res.factor)
        ctx.store.write_results(embedding=V)
        ctx.cache["V"] = V
    return S._finish(
        ctx,
        "learn",
        {
            **out,
            "solver": "spe",
            "rank": int(V.shape[1]),
            "seed": m["seed"],
            "C": float(res.C),
            "capacity": float(res.B),
            "objective": float(res.objective),
            "dual_objective": float(res.dual_objective),
            "duality_gap": float(res.duality_gap),
            "n_sweeps": int(res.sweeps),
            "n_iterations": int(res.iterations),
            "n_triplets": int(res.triplets.shape[0]),
            "rank_binding": bool(res.rank_binding),
            "converged": bool(res.converged),
            "fit_seconds": float(res.fit_seconds),
            "compile_seconds": compiling.seconds,
            "checkpoints_written": len(saved),
            "resumed_from": None if latest is None else int(latest["sweeps"]),
        },
    )
