"""``npkl status RUN``: where a run is, read from its store without taking the lock.

Works while the run is going: the stage record, the checkpoint pointer and the newest
manifest are small JSON objects replaced atomically by the writer; V itself is not read. The
stages' data (inputs, graph, plan, results) is read whole and checked against its recorded
hashes, so a damaged run says what is damaged and how to repair it.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime

from npkl_dist import store as st
from npkl_dist.store._objects import WriterLock, _pid_alive

from ._stages import STAGES

__all__ = ["run_status", "format_status"]


def _parse(ts):
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None


def _manifest(store, ckpt_id):
    import zarr  # optional engine (the zarr extra)

    try:
        g = zarr.open_group(store._store(), path=f"checkpoints/{ckpt_id}", mode="r", zarr_format=3)
        return dict(g.attrs).get("manifest")
    except Exception:  # pruned meanwhile: the caller tries the next one
        return None


def run_status(url: str, storage_options=None) -> dict:
    """A JSON-able description of a run: stage, sweep, objective, time left, lock holder."""

    store = st.RunStore.open(url, mode="r", storage_options=storage_options)
    try:
        stages = store.stages()
        cfg = store.config
        pipe = cfg.get("pipeline")
        order = STAGES if pipe else ("inputs", "graph", "plan", "results")
        done = [
            s
            for s in order
            if stages.get(s, {}).get("done")
            and (not pipe or s not in ("graph", "plan") or "seconds" in stages[s].get("info", {}))
            # runs stored before the transform stage existed: done when a later stage is
            or s == "transform"
            and any(stages.get(t, {}).get("done") for t in order[order.index(s) + 1 :])
        ]
        current = next((s for s in order if s not in done), None)
        if pipe and not done and stages.get("flow", {}).get("info", {}).get("state") == "starting":
            current = "starting"  # `npkl run` made the store; Prefect is starting the flow
        max_sweeps = pipe["model"]["max_sweeps"] if pipe else cfg.get("fit", {}).get("max_sweeps")
        out = {
            "run": store.url,
            "stages_done": done,
            "stage": current or "finished",
            "max_sweeps": max_sweeps,
        }
        holder = WriterLock(store._objects, store.url).holder()
        if holder:
            alive = (
                holder.get("host") == socket.gethostname()
                and isinstance(holder.get("pid"), int)
                and _pid_alive(holder["pid"])
            )
            out["writer"] = {
                "host": holder.get("host"),
                "pid": holder.get("pid"),
                "since": holder.get("since"),
                "alive": alive if holder.get("host") == socket.gethostname() else None,
            }
        # a fast writer may prune the checkpoints the pointer named while we read: re-read
        for _ in range(20):
            pointer = store._pointer()  # rebuilt from the manifests if missing (warns)
            manifests = [
                m for m in (_manifest(store, c) for c in pointer.get("committed", [])) if m
            ]
            if manifests or not pointer.get("committed"):
                break
        if manifests:
            m = manifests[0]
            state = m.get("state", {})
            out["sweep"] = m.get("sweep")
            out["objective"] = m.get("objective")
            out["change"] = (state.get("change_trace") or [None])[-1]
            out["converged"] = state.get("converged")
            out["checkpoint"] = {"id": m.get("id"), "committed": m.get("committed")}
            per_sweep = None
            if len(manifests) > 1:
                t1, t0 = _parse(m.get("committed")), _parse(manifests[1].get("committed"))
                ds = (m.get("sweep") or 0) - (manifests[1].get("sweep") or 0)
                if t1 and t0 and ds > 0:
                    per_sweep = (t1 - t0).total_seconds() / ds
            if per_sweep is None and state.get("sweep_seconds"):
                secs = [
                    a + b
                    for a, b in zip(state["sweep_seconds"], state.get("objective_seconds", []))
                ]
                if len(secs) > 2:  # the first sweep carries a cold cache's compiles
                    secs = secs[1:]
                per_sweep = sum(secs) / max(1, len(secs))
            if per_sweep is not None:
                out["seconds_per_sweep"] = per_sweep
            learning_done = bool(stages.get("learn" if pipe else "results", {}).get("done"))
            if (
                not learning_done
                and max_sweeps
                and not state.get("converged")
                and per_sweep is not None
            ):
                out["sweeps_left_at_most"] = max(0, max_sweeps - (m.get("sweep") or 0))
                out["eta_seconds"] = out["sweeps_left_at_most"] * per_sweep
        damaged = store.verify_stages()
        if damaged:
            out["damaged"] = damaged
        if store.forced_config:
            out["forced_config"] = store.forced_config
        if pipe:
            out["stage_seconds"] = {
                s: stages[s].get("info", {}).get("seconds") for s in done if s in stages
            }
            ev = stages.get("evaluate", {}).get("info", {})
            if ev.get("metrics"):
                out["metrics"] = ev["metrics"]
        return json.loads(json.dumps(out))
    finally:
        store.close()


def format_status(s: dict) -> str:
    lines = [
        f"run       {s['run']}",
        f"stage     {s['stage']}"
        + (f"  (done: {', '.join(s['stages_done'])})" if s["stages_done"] else "")
        + ("  (Prefect is starting the flow; ingest is next)" if s["stage"] == "starting" else ""),
    ]
    for stage, msg in (s.get("damaged") or {}).items():
        lines.append(f"DAMAGED   {stage}: {msg.split(': ', 1)[-1]}")
    for e in s.get("forced_config") or ():
        changes = ", ".join(f"{k} {e['from'][k]!r} -> {e['to'][k]!r}" for k in e["to"])
        lines.append(
            f"forced    {changes}: learning restarted from checkpoint {e['checkpoint']} "
            f"(sweep {e['sweep']}) at {e['at']} (npkl resume --force-config)"
        )
    w = s.get("writer")
    if w:
        state = {
            True: "running",
            False: "not running (crashed? `npkl resume` continues it)",
            None: "on another host",
        }[w["alive"]]
        lines.append(f"writer    pid {w['pid']} on {w['host']} since {w['since']}: {state}")
    elif s.get("damaged"):
        lines.append("writer    none (stopped; repair it with the `npkl resume --redo` above)")
    elif s["stage"] != "finished":
        lines.append("writer    none (stopped; `npkl resume` continues it)")
    if "sweep" in s:
        of = f"/{s['max_sweeps']}" if s.get("max_sweeps") else ""
        lines.append(
            f"sweep     {s['sweep']}{of}  objective {s['objective']:.6g}"
            + (f"  change {s['change']:.2e}" if s.get("change") is not None else "")
        )
    if "eta_seconds" in s:
        lines.append(
            f"time left at most {s['eta_seconds']:.0f} s "
            f"({s['sweeps_left_at_most']} sweeps at {s['seconds_per_sweep']:.3g} s; "
            f"earlier if it converges)"
        )
    if s.get("metrics"):
        m = s["metrics"]
        lines.append(
            f"metrics   pairwise accuracy {m['rand_accuracy']:.4f}  ARI "
            f"{m['ari']:.4f}  NMI {m['nmi']:.4f}"
        )
    return "\n".join(lines)
