"""Benchmark: constrained clustering of the learned kernel (issue 75, item 9).

On the paper harness's data sets at its protocol (``bench/paper/run.py``: features scaled to
[-1, 1], kNN graph, 0.6n must-link + 0.6n cannot-link random pairs per repetition, BCD with
the linear loss (``--kernel``: another of the harness's BCD losses), gamma = 1; repetition ``rep`` seeds the graph, the pairs and the
clustering), in one run and on the same inputs:

* ``kmeans``: npkl's kernel k-means on the learned V (``kernel_kmeans(V, k, seed=rep)``,
  as the harness's rows);
* ``pck``: ``pck_kmeans(V, k, constraints, seed=rep, closure=False)`` on the same V, each
  given pair penalised once;
* ``pck+closure``: the same with ``closure=True``, the constraints' transitive closure
  penalised (PCKMeans's objective); ``--variants`` picks either or both (default both);
  ``npkl fit`` clusters with ``pck_kmeans``'s default (``PCK_CLOSURE``);
* ``PCKMeans``: the peer (active-semi-supervised-clustering, w = 1) on the scaled features,
  the harness's ``peers.pckmeans``.

Both npkl clusterings use the kernel ``npkl fit`` would cluster (``choose_normalize`` with
the automatic setting). Pairwise (Rand) accuracy, mean +- std over the repetitions that
every method finished; a peer crash (EmptyClustersException) is counted and shown.

Usage::

    python bench/pck_clustering.py --reps 10 --workers 2

writes ``bench/results/pck_clustering.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DATASETS = (
    "chessboard",
    "dbl-spiral",
    "glass",
    "heart",
    "iris",
    "sonar",
    "soybean",
    "wine",
    "adult-a1a",
    "adult-a2a",
)
METHODS = ("kmeans", "pck", "pck+closure", "PCKMeans")
#: --variants -> the pck method it runs, and pck_kmeans's ``closure``
VARIANTS = {"pairs": ("pck", False), "closure": ("pck+closure", True)}


def one_rep(name, rep, variants=tuple(VARIANTS), kernel="BCD-linear"):
    """The clusterings of repetition ``rep`` of ``name`` (kernel k-means, the pck
    ``variants``, PCKMeans) of the harness's ``kernel``: {method: (accuracy or an error
    string, seconds)}."""
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper import peers
    from bench.paper.run import learn_kernel, task_inputs
    from npkl_dist.evaluate import choose_normalize
    from npkl_dist.executors import InProcessExecutor

    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    warnings.simplefilter("ignore")
    X, y, meta, L, cons, cons_diag = task_inputs(name, rep)
    k = int(np.unique(y).size)
    adult = meta.get("knn", 5) == 50
    V = learn_kernel(
        kernel,
        L,
        cons,
        cons_diag,
        n=X.shape[0],
        k=k,
        adult=adult,
        seed=rep,
        executor=InProcessExecutor(1),
        rec={},
    )
    unit = choose_normalize(None, cons, V)
    out = {"normalize": bool(unit)}
    runs = {"kmeans": lambda: nk.kernel_kmeans(V, k, seed=rep, normalize=unit)}
    for variant in variants:
        method, closure = VARIANTS[variant]
        runs[method] = lambda c=closure: nk.pck_kmeans(
            V, k, cons, seed=rep, normalize=unit, closure=c
        )
    runs["PCKMeans"] = lambda: peers.pckmeans(X, k, cons, rep)
    for method, fn in runs.items():
        t0 = time.perf_counter()
        try:
            labels = fn()
            acc = nk.clustering_metrics(y, labels)["rand_accuracy"]
        except Exception as exc:  # noqa: BLE001 -- a peer crash is a result
            acc = f"{type(exc).__name__}"
        out[method] = (acc, time.perf_counter() - t0)
    return name, rep, out


def _warm():
    """Compile (or load) the kernels once per worker, untimed."""
    import npkl_dist as nk

    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    X = rng.standard_normal((60, 3)) + 3.0 * y[:, None]
    cons = nk.sample_constraints(y, 10, 10, seed=0)
    nk.pck_kmeans(X, 2, cons, seed=0, closure=False)
    nk.pck_kmeans(X, 2, cons, seed=0, closure=True)


def _ms(values):
    v = np.asarray(values, dtype=float) * 100
    return f"{v.mean():.2f} ± {v.std():.2f}" if v.size else "–"


#: row keys of each pck method's difference to the peer and seconds
_KEYS = {
    "pck": ("pck_vs_peer", "pck_seconds"),
    "pck+closure": ("closure_vs_peer", "closure_seconds"),
}


def summarise(results, datasets, reps, variant="pck"):
    """Rows of the table (every method the results hold), the per-repetition results, and
    for the pck method ``variant`` the number of data sets where its mean is at or above
    PCKMeans's and at least kernel k-means' mean minus one std."""
    rows, raw = [], {}
    at_or_above = within_std = 0
    held = [m for m in METHODS if any(m in p for p in results.values())]
    for name in datasets:
        per = [results[(name, r)] for r in range(reps) if (name, r) in results]
        raw[name] = per
        ok = [p for p in per if all(isinstance(p[m][0], float) for m in held)]
        crashes = sum(not isinstance(p["PCKMeans"][0], float) for p in per)
        acc = {m: [p[m][0] for p in ok] for m in held}
        mean = {m: float(np.mean(acc[m])) if acc[m] else float("nan") for m in held}
        std_km = float(np.std(acc["kmeans"])) if ok else float("nan")
        at_or_above += bool(mean[variant] >= mean["PCKMeans"])
        within_std += bool(mean[variant] >= mean["kmeans"] - std_km)
        row = {"dataset": name, "reps": len(ok)}
        row.update({m: _ms(acc[m]) for m in held})
        row["peer_crashes"] = crashes
        for m in held:
            if m in _KEYS:
                vs, sec = _KEYS[m]
                row[vs] = f"{100 * (mean[m] - mean['PCKMeans']):+.2f}"
                row[sec] = float(np.mean([p[m][1] for p in ok])) if ok else None
        row["peer_seconds"] = float(np.mean([p["PCKMeans"][1] for p in ok])) if ok else None
        row["normalize"] = sorted({p["normalize"] for p in per})
        rows.append(row)
    return rows, raw, at_or_above, within_std


def main(argv=None):
    from bench import _results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument(
        "--variants",
        nargs="+",
        choices=tuple(VARIANTS),
        default=list(VARIANTS),
        help="pck on the pairs as given (closure=False), on their transitive closure "
        "(closure=True), or both (default)",
    )
    ap.add_argument(
        "--kernel",
        choices=("BCD-linear", "BCD-square", "BCD-sqhinge"),
        default="BCD-linear",
        help="the harness's kernel to cluster (default BCD-linear, the replication table's "
        "row; BCD-square is what `npkl fit` learns by default)",
    )
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", default=None, help="output path (default bench/results/)")
    args = ap.parse_args(argv)
    results = {}
    tasks = [(d, r) for d in args.datasets for r in range(args.reps)]
    with ProcessPoolExecutor(args.workers, initializer=_warm) as pool:
        futs = [pool.submit(one_rep, d, r, tuple(args.variants), args.kernel) for d, r in tasks]
        for f in futs:
            name, rep, out = f.result()
            results[(name, rep)] = out
            print(name, rep, {m: out[m][0] for m in METHODS if m in out}, file=sys.stderr)
    n = len(args.datasets)
    counts = []
    for variant in args.variants:
        method = VARIANTS[variant][0]
        rows, raw, above, within = summarise(results, args.datasets, args.reps, method)
        counts.append(
            f"{method} at or above PCKMeans on {above} of {n} data sets and at least kernel "
            f"k-means minus one std on {within} of {n}"
        )
    for row in rows:
        print(row)
    print("; ".join(counts))
    held = [m for m in METHODS if m in rows[0]]
    linear = args.kernel == "BCD-linear"
    name = "pck_clustering" if linear else f"pck_clustering_{args.kernel.lower()}"
    _results.write(
        name,
        title="Constrained clustering of the learned kernel (pck) against PCKMeans"
        + ("" if linear else f" ({args.kernel} kernel)"),
        measures=(
            "pairwise (Rand) accuracy in %, mean ± std over repetitions, of pck_kmeans on "
            f"the {args.kernel} kernel (bench/paper protocol, gamma = 1), on the pairs as given "
            "(pck) and on their transitive closure (pck+closure); seconds of one "
            "pck_kmeans call (10 runs)"
        ),
        reference=(
            "npkl's kernel k-means on the same V, and PCKMeans "
            "(active-semi-supervised-clustering, w = 1) on the scaled features, same pairs"
        ),
        command=_results.command("bench/pck_clustering.py", argv),
        columns=[
            ("dataset", "data set"),
            ("reps", "reps"),
            *[(m, f"{'kernel k-means' if m == 'kmeans' else m} (%)") for m in held],
            *[(_KEYS[m][0], f"{m} − PCKMeans") for m in held if m in _KEYS],
            ("peer_crashes", "peer crashes"),
            *[(_KEYS[m][1], f"{m} (s)") for m in held if m in _KEYS],
            ("peer_seconds", "PCKMeans (s)"),
        ],
        rows=rows,
        notes=[
            "; ".join(counts) + ". Means over the repetitions every method finished (a "
            "crashed peer repetition is left out of every mean and counted)"
        ],
        args=vars(args),
        path=args.json
        or (
            None
            if linear
            else os.path.join(
                os.path.dirname(__file__), "results", "pck_clustering", name + ".json"
            )
        ),
        extra={"per_rep": {k: v for k, v in raw.items()}},
    )


if __name__ == "__main__":
    main()
