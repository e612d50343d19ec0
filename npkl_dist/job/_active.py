"""Active constraint selection on a finished run (issue 78 items 2 and 3): every round's
questions and answers recorded in the run store before the refit, so that a crash loses no
answer and a rerun continues bitwise where the loop stopped; the simulated oracle
(``npkl active``) and a person's (``npkl ask`` / ``npkl answer``).

Store layout (objects under ``active/``): ``latest.json`` = ``{"state": {...}, "sha256":
...}``, the state holding every round (its strategy, queries, answers and, once refitted, the
key and sha256 of its V, objective, sweeps, metrics) and the pending questions of ``npkl
ask``; ``V-<round>.npy`` the refitted factors (the newest kept). Writing ``latest.json``
(atomically) commits; a reader checks every hash."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time

import numpy as np

from .._errors import ConstraintError, ValidationError, fix
from ..active import add_answers, candidate_pool, drop_pairs, labels_oracle, select_pairs
from ..graph._io import read_items
from ..problem._constraints import Constraints
from ..problem._problem import NPKLProblem

ACTIVE = "active"
LATEST = f"{ACTIVE}/latest.json"
#: seeded uniform pairs added to the graph's edges in each round's pool
POOL_RANDOM = 20_000
WORDS = {"must": 1, "cannot": -1, "skip": 0}


def _digest(state) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def read_state(store) -> dict:
    """The loop's committed state (an empty one before the first round), checked."""
    with store._io("reading the active-learning record"):
        try:
            raw = store._objects.read(LATEST)
        except FileNotFoundError:
            return {"rounds": [], "pending": None}
    try:
        pointer = json.loads(raw)
        ok = _digest(pointer["state"]) == pointer["sha256"]
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise _damaged(store, LATEST, "does not match the sha256 recorded when it was written")
    return pointer["state"]


def _damaged(store, key, why):
    return store._damaged("active", key, why, **_where(store))


def _where(store) -> dict:
    """How damage of the loop's record is named and repaired (RunStore._damaged)."""
    return {
        "what": "the active-learning record",
        "repair": f"start the loop again with `npkl active {store.url} ... --restart` (its "
        "rounds are asked again)",
    }


def restart(store) -> None:
    """Forget every round (``npkl active --restart``): the loop starts from the run's fit."""
    store._require_writer("the active-learning record")
    with store._io("deleting the active-learning record"):
        store._objects.delete_prefix(ACTIVE)


def _commit(store, state: dict) -> None:
    store._require_writer("the active-learning record")
    with store._io("writing the active-learning record"):
        data = json.dumps({"state": state, "sha256": _digest(state)}).encode()
        store._objects.write_atomic(LATEST, data)


def _save_V(store, r: int, V) -> tuple[str, str]:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(V))
    data = buf.getvalue()
    key = f"{ACTIVE}/V-{r:04d}.npy"
    store._require_writer("an active-learning factor")
    with store._io("writing an active-learning factor"):
        store._objects.write_atomic(key, data)
    return key, hashlib.sha256(data).hexdigest()


class _Run:
    """What the loop needs from a finished BCD run: L, its pairs, V, the fit's parameters."""

    def __init__(self, store):
        from ..graph._graph import laplacian

        stages = store.stages()
        if "learn" not in stages or "results" not in stages:
            raise ValidationError(
                f"run: {store.url} has not finished learning; finish it first "
                f"(npkl resume {store.url})"
            )
        info = stages["learn"]["info"]
        cfg = store.config.get("pipeline") or {}
        model = cfg.get("model", {})
        if info.get("solver", model.get("solver")) != "bcd":
            raise ValidationError(
                f"run: {store.url} learned with solver {info.get('solver')!r}; active "
                "learning refits with BCD: start a run with solver bcd (the default)"
            )
        self.store = store
        self.S = store.read_graph()
        self.n = self.S.shape[0]
        self.L = laplacian(self.S, float(cfg.get("graph", {}).get("delta", 1e-3)))
        inputs = store.read_inputs()
        self.base = inputs["constraints"]
        self.eval_labels = inputs.get("eval_labels")
        self.V0 = store.read_results()["embedding"]
        self.loss, self.gamma = info["loss"], float(info["gamma"])
        self.rank, self.seed = int(info["rank"]), int(info["seed"])
        self.max_sweeps = int(model.get("max_sweeps") or 1000)
        self.tol = float(model.get("tol") or 1e-5)

    def constraints(self, rounds) -> Constraints:
        c = self.base
        for rec in rounds:
            c = add_answers(c, rec["queries"], rec["answers"])
        return c

    def V(self, rounds):
        for rec in reversed(rounds):
            if rec.get("V") is not None:
                data = self.store.read_stage_object(
                    "active", rec["V"], rec["V_sha256"], **_where(self.store)
                )
                return np.load(io.BytesIO(data))
        return self.V0

    def problem(self, cons):
        return NPKLProblem.build(self.L, cons, loss=self.loss, gamma=self.gamma,
                                 rank=self.rank, seed=self.seed)  # fmt: skip

    def select(self, rounds, batch, strategy, r):
        cons = self.constraints(rounds)
        pool = candidate_pool(self.n, graph=self.S, constraints=cons,
                              n_random=min(POOL_RANDOM, self.n * (self.n - 1) // 2),
                              seed=[self.seed, 78, r])  # fmt: skip
        # questions asked before and skipped are not constraints: not asked again either
        asked = [np.asarray(rec["queries"], np.int64).reshape(-1, 2) for rec in rounds]
        if asked:
            pool = drop_pairs(pool, np.vstack(asked), self.n)
        V = self.V(rounds)
        idx = select_pairs(V, pool, batch, strategy, constraints=cons, seed=[self.seed, r],
                           problem=self.problem(cons) if strategy == "minmax" else None)  # fmt: skip
        return pool[idx]

    def refit(self, rounds, rec) -> None:
        """Round ``rec`` (its answers committed): refit warm from the previous V, save V,
        commit the round's figures."""
        from ..evaluate import clustering_metrics, kernel_kmeans
        from ..solvers.bcd._fit import fit_bcd

        done = [x for x in rounds if x is not rec]
        cons = self.constraints(rounds)
        t = time.perf_counter()
        res = fit_bcd(self.problem(cons), max_sweeps=self.max_sweeps, tol=self.tol,
                      V0=self.V(done))  # fmt: skip
        rec["fit_seconds"] = time.perf_counter() - t
        rec["V"], rec["V_sha256"] = _save_V(self.store, rec["round"], res.V)
        rec.update(objective=float(res.objective), n_sweeps=int(res.n_sweeps),
                   n_constraints=int(cons.m))  # fmt: skip
        y = self.eval_labels
        if y is not None:
            known = y >= 0
            k = int(np.unique(y[known]).size)
            lab = kernel_kmeans(res.V, k, seed=self.seed)
            rec["metrics"] = clustering_metrics(y[known], lab[known])


def _check_strategy(strategy, run):
    from ..active import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValidationError(
            f"strategy: {strategy!r} is not one of {', '.join(map(repr, STRATEGIES))}"
        )
    if strategy == "minmax" and run.loss != "square":
        raise ValidationError(
            f"strategy: 'minmax' is derived for the square loss, the run learned with "
            f"{run.loss!r}; use {fix('strategy=', '--strategy')} min_abs_k"
        )


def run_active(store, labels, *, rounds: int, batch: int, strategy: str = "min_abs_k",
               progress=None, restart_loop: bool = False) -> dict:  # fmt: skip
    """``npkl active``: ``rounds`` rounds in all (those recorded count; a rerun continues,
    bitwise as an uninterrupted loop), each asking ``batch`` pairs of the labels oracle;
    ``restart_loop`` forgets the recorded rounds first."""
    if restart_loop:
        restart(store)
    run = _Run(store)
    _check_strategy(strategy, run)
    y = np.asarray(labels)
    if y.shape != (run.n,):
        raise ValidationError(
            f"oracle: {y.shape[0] if y.ndim == 1 else y.shape} labels for a run of {run.n} "
            "points; give one label per point (-1 unknown)"
        )
    oracle = labels_oracle(y)
    state = read_state(store)
    if state["pending"] is not None:
        raise ValidationError(
            f"run: {store.url} has {len(state['pending']['queries'])} questions waiting for a "
            f"person (npkl ask); answer them first: npkl answer {store.url} ANSWERS.csv"
        )
    recs = state["rounds"]
    if recs and recs[-1].get("V") is None:  # crashed after committing answers: refit
        run.refit(recs, recs[-1])
        _commit(store, state)
    while len(recs) < rounds:
        r = len(recs) + 1
        t = time.perf_counter()
        q = run.select(recs, batch, strategy, r)
        rec = {"round": r, "strategy": strategy, "queries": q.tolist(),
               "select_seconds": time.perf_counter() - t, "V": None}  # fmt: skip
        rec["answers"] = oracle(q).astype(int).tolist()
        recs.append(rec)
        _commit(store, state)  # the answers first: a crash in the refit loses none
        run.refit(recs, rec)
        _commit(store, state)
        if progress is not None:
            progress(rec)
    return state


def ask(store, *, batch: int, strategy: str = "min_abs_k", out, items=None, columns=None) -> dict:
    """``npkl ask``: choose ``batch`` pairs, record them as pending, write the questions CSV
    (pair, i, j, then ``i_<c>`` and ``j_<c>`` for each column c of the ``items`` table, what
    a person knows the points by (``columns``: which; all by default), answer left empty)."""
    run = _Run(store)
    _check_strategy(strategy, run)
    shown = {} if items is None else read_items(items, run.n, columns)
    state = read_state(store)
    recs = state["rounds"]
    if state["pending"] is not None:
        raise ValidationError(
            f"run: {store.url} already has {len(state['pending']['queries'])} questions "
            f"waiting; answer them first: npkl answer {store.url} ANSWERS.csv"
        )
    if recs and recs[-1].get("V") is None:
        run.refit(recs, recs[-1])
    r = len(recs) + 1
    q = run.select(recs, batch, strategy, r)
    state["pending"] = {"round": r, "strategy": strategy, "queries": q.tolist()}
    _commit(store, state)
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["pair", "i", "j", *(f"i_{c}" for c in shown), *(f"j_{c}" for c in shown), "answer"]
        )
        for k, (a, b) in enumerate(q):
            names = [v[a] for v in shown.values()] + [v[b] for v in shown.values()]
            w.writerow([k, int(a), int(b), *names, ""])
    return state["pending"]


def answer(store, path) -> dict:
    """``npkl answer``: read the filled CSV, check it (unknown pairs or words, contradictions
    with the answers so far, directly or through must-link transitivity: one line naming the
    rows), commit the answers, refit. Returns the round's record with what changed."""
    state = read_state(store)
    pending = state["pending"]
    if pending is None:
        raise ValidationError(
            f"answers: {store.url} has no questions waiting; ask some first: npkl ask "
            f"{store.url} --pairs 20 --out questions.csv"
        )
    q = np.asarray(pending["queries"], dtype=np.int64).reshape(-1, 2)
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise ValidationError(f"answers: cannot read {str(path)!r} ({exc.strerror})") from None
    if not rows or not {"pair", "answer"} <= set(rows[0]):
        raise ValidationError(
            f"answers: {str(path)!r} needs the columns pair and answer (the file npkl ask "
            "wrote, with answer filled in: must, cannot or skip)"
        )
    answers = np.zeros(len(q), dtype=np.int64)
    seen: dict[int, tuple] = {}  # pair -> (answer, its first row)
    unknown, words = [], []
    for line, row in enumerate(rows, start=2):
        try:
            k = int(row["pair"])
        except (TypeError, ValueError):
            k = -1
        if not 0 <= k < len(q):
            unknown.append(line)
            continue
        word = (row["answer"] or "").strip().lower()
        if word not in WORDS:
            words.append(f"{line} ({row['answer']!r})")
            continue
        if k in seen and seen[k][0] != WORDS[word]:
            raise ValidationError(
                f"answers: pair {k} is answered twice, differently (rows {seen[k][1]} and "
                f"{line}); keep one answer per pair"
            )
        seen.setdefault(k, (WORDS[word], line))
        answers[k] = WORDS[word]
    if unknown:
        raise ValidationError(
            f"answers: rows {', '.join(map(str, unknown[:10]))} name no question of this run "
            f"(pairs 0 to {len(q) - 1}); keep the pair column npkl ask wrote"
        )
    if words:
        raise ValidationError(
            f"answers: rows {', '.join(words[:10])} are not must, cannot or skip; write one "
            "of those words (an empty answer is not a skip)"
        )
    run = _Run(store)
    recs = state["rounds"]
    before = run.constraints(recs)
    kept, bad = before, []
    for k in np.flatnonzero(answers):  # row by row: the rows that break what came before
        try:
            kept = add_answers(kept, q[k : k + 1], answers[k : k + 1])
        except ConstraintError:
            bad.append(f"{seen[int(k)][1]} (pair {k}: {q[k][0]}, {q[k][1]})")
    if bad:
        raise ValidationError(
            f"answers: rows {', '.join(bad[:10])} contradict the answers so far or the rows "
            "above them, directly or through must-link transitivity (a~b, b~c but a!~c); "
            "nothing was recorded: correct those rows and answer again"
        )
    V_before = run.V(recs)
    rec = {"round": pending["round"], "strategy": pending["strategy"],
           "queries": pending["queries"], "answers": answers.tolist(), "V": None}  # fmt: skip
    recs.append(rec)
    state["pending"] = None
    _commit(store, state)
    run.refit(recs, rec)
    _commit(store, state)
    V_after = run.V(recs)
    k = _clusters(run)
    if k is not None:
        from ..evaluate import kernel_kmeans

        a = kernel_kmeans(V_before, k, seed=run.seed)
        b = kernel_kmeans(V_after, k, seed=run.seed)
        rec["points_moved"] = _moved(a, b, k)
    return rec


def _clusters(run) -> int | None:
    y = run.eval_labels
    if y is not None:
        return int(np.unique(y[y >= 0]).size)
    cfg = run.store.config.get("pipeline") or {}
    return (cfg.get("output") or {}).get("clusters")


def _moved(a, b, k) -> int:
    """Points whose cluster changed, clusters matched by their largest overlap."""
    M = np.zeros((k, k), dtype=np.int64)
    np.add.at(M, (a, b), 1)
    match = M.argmax(axis=1)
    return int(np.sum(match[a] != b))
