"""Benchmark: seconds per BCD sweep against the sparse-times-dense (SpMM) floor.

A sweep reads every row of V and its graph neighbours once and writes every row once, so a
compiled SpMM ``Y = D V + Loff V`` on the same internal-order CSR (same r, same dtype, same
threads) is the memory-traffic floor it is compared with. Done-criterion of the issue: at
n = 1e6, r = 64, float64 a sweep takes at most 1.3x the SpMM time.

Timed: the library's default sweep (``make_plan(scheme='blocks')``) and, for comparison, the
reference colour scheme (``scheme='colours'``), both through ``InProcessExecutor.sweep``
with a seeded random step order per sweep, as ``fit_bcd`` runs them. The criterion applies
to the default scheme.

Synthetic graph: uniform random points in the unit square, exact kNN (cKDTree), symmetrised
union (k = 9 gives mean degree ~ 10.3), Gaussian weights, ``npkl_dist.laplacian(S, delta=1e-3)``.
Constraints: ``--constrained`` fraction of the points, paired disjointly at random into
must/cannot pairs (disjoint pairs cannot contradict must-link transitivity).

Usage::

    .venv/bin/python bench/bench_sweep.py --n 100000 1000000 --rank 16 64 128 \
        --dtype float32 float64

Prints a table and writes it, stamped with the machine and the commit, to
``bench/results/sweep.json`` (``--json``); ``python -m bench.performance`` renders it on
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange
from scipy.spatial import cKDTree

import npkl_dist
from npkl_dist import Constraints, NPKLProblem, laplacian, make_plan, prepare
from npkl_dist.executors import InProcessExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)


#: The issue's criterion point: (n, r, dtype) and the allowed sweep/SpMM ratio.
CRITERION = (1_000_000, 64, "float64")
CRITERION_RATIO = 1.3


# --------------------------------------------------------------------------------------------
# reference kernel: the memory-traffic floor
# --------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True, parallel=True)
def spmm(indptr, indices, data, diag, V, Y):
    """Y = D V + Loff V (same split CSR as the sweep).  Y : (n, r) OUT, V's dtype."""
    n, r = V.shape
    for i in prange(n):
        d = diag[i]
        for c in range(r):
            Y[i, c] = d * V[i, c]
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            w = data[p]
            for c in range(r):
                Y[i, c] += w * V[k, c]


# --------------------------------------------------------------------------------------------
# synthetic problem
# --------------------------------------------------------------------------------------------


def knn_affinity(n: int, k: int, dim: int, seed: int) -> sp.csr_matrix:
    """Symmetrised exact-kNN Gaussian affinity of n uniform points in [0, 1]^dim."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, dim))
    dist, nbr = cKDTree(X).query(X, k=k + 1, workers=-1)
    dist, nbr = dist[:, 1:], nbr[:, 1:]
    sigma = float(np.median(dist[:, -1]))
    w = np.exp(-(dist.ravel() ** 2) / (2.0 * sigma**2))
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    A = sp.csr_matrix((w, (rows, nbr.ravel().astype(np.int64))), shape=(n, n))
    return A.maximum(A.T).tocsr()


def disjoint_pairs(n: int, frac: float, seed: int) -> Constraints:
    """round(frac * n / 2) disjoint random pairs, each must- or cannot-link at random."""
    rng = np.random.default_rng(seed + 1)
    m = int(round(frac * n / 2))
    pts = rng.choice(n, size=2 * m, replace=False)
    t = rng.choice(np.array([1, -1], np.int8), size=m)
    return Constraints.from_arrays(pts[:m], pts[m:], t, n, warn=False)


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------

_HZ = os.sysconf("SC_CLK_TCK")


def _busy_jiffies():
    """(all CPUs' busy jiffies, this process's jiffies) from /proc."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = sum(v) - v[3] - v[4]  # minus idle, iowait
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    own = int(fields[11]) + int(fields[12])  # utime, stime
    return busy, own


class ForeignLoad:
    """CPU time used by *other* processes while the block runs, in cores (0 = quiet)."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.b0, self.o0 = _busy_jiffies()
        return self

    def __exit__(self, *exc):
        b1, o1 = _busy_jiffies()
        dt = time.perf_counter() - self.t0
        self.cores = max(0.0, ((b1 - self.b0) - (o1 - self.o0)) / _HZ / max(dt, 1e-9))
        return False


def wait_for_idle(max_wait: float, threshold: float = 0.15, probe: float = 1.0) -> float:
    """Wait (up to max_wait s) until other processes use < threshold cores; returns the last
    measured foreign load. The machine is shared: 2-thread timings are meaningless while
    another process competes for a core."""
    t_end = time.perf_counter() + max_wait
    while True:
        with ForeignLoad() as fl:
            time.sleep(probe)
        if fl.cores < threshold or time.perf_counter() > t_end:
            return fl.cores


def interleaved(fns, repeats, max_wait, attempts=3, warm=True):
    """Median and min of ``repeats`` rounds, each round running every fn once (interleaved,
    so that a burst of load from other processes hits all variants alike); retried while
    other processes use > 0.1 core. Returns ({name: (median, min)}, foreign load)."""
    if warm:
        for f in fns.values():
            f()  # warm-up / compile
    best = None
    for _ in range(attempts):
        wait_for_idle(max_wait)
        ts = {k: [] for k in fns}
        with ForeignLoad() as fl:
            for _r in range(repeats):
                for k, f in fns.items():
                    t0 = time.perf_counter()
                    f()
                    ts[k].append(time.perf_counter() - t0)
        res = {k: (float(np.median(v)), float(np.min(v))) for k, v in ts.items()}
        if best is None or fl.cores < best[1]:
            best = (res, fl.cores)
        if fl.cores < 0.1:
            break
    return best


def median_time(fn, repeats: int) -> tuple[float, list[float]]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), ts


def with_threads(n_threads, fn):
    def run():
        prev = numba.get_num_threads()
        numba.set_num_threads(n_threads)
        try:
            fn()
        finally:
            numba.set_num_threads(prev)

    return run


def machine_info() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = "unknown"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
                    break
    except OSError:
        pass
    l3 = ""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            l3 = f.read().strip()
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram": ram,
        "l3": l3,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "scipy": sp.__name__ and __import__("scipy").__version__,
        "npkl_dist": npkl_dist.__version__,
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
    }


SCHEMES = ("blocks", "colours")  # the default first


class Case:
    """Graph, constraints, plans and prepared arrays of one n (prepared per dtype).

    ``prepared`` returns ({scheme: plan}, prep, problem): both schemes share the relabelling,
    hence one PreparedProblem."""

    def __init__(self, n, args):
        t0 = time.perf_counter()
        S = knn_affinity(n, args.k, args.dim, args.seed)
        self.L = laplacian(S, delta=1e-3)
        self.mean_degree = S.nnz / n
        self.constraints = disjoint_pairs(n, args.constrained, args.seed)
        self.n = n
        self.loss = args.loss
        self._prep = {}
        self.plan = None
        self.build_seconds = time.perf_counter() - t0
        self.plan_seconds = 0.0

    def problem(self, r, dtype):
        return NPKLProblem.build(self.L, self.constraints, loss=self.loss, rank=r, dtype=dtype)

    def prepared(self, dtype, relabel="rcm"):
        key = (dtype, relabel)
        if key not in self._prep:
            problem = self.problem(1, dtype)
            if self.plan is None or self.plan_relabel != relabel:
                self.plan, self.plan_seconds = {}, {}
                for scheme in SCHEMES:
                    t0 = time.perf_counter()
                    self.plan[scheme] = make_plan(problem, relabel=relabel, scheme=scheme)
                    self.plan_seconds[scheme] = time.perf_counter() - t0
                self.plan_relabel = relabel
            self._prep = {k: v for k, v in self._prep.items() if k[1] == relabel}
            self._prep[key] = (self.plan, prepare(problem, self.plan[SCHEMES[0]]), problem)
        return self._prep[key]


def bench_one(case, r, dtype, n_threads, repeats, seed, max_wait=300.0, attempts=3):
    plans, prep, problem = case.prepared(dtype)
    plan = plans[SCHEMES[0]]
    rng = np.random.default_rng(seed)
    V = (rng.standard_normal((case.n, r)) / np.sqrt(r)).astype(dtype)
    ex = InProcessExecutor(n_threads=n_threads)
    order_rng = np.random.default_rng(seed + 7)

    def sweeper(p):
        return lambda: ex.sweep(prep, p, V, p.colour_order(order_rng))

    def obj():
        ex.objective(prep, V)

    fns = {f"sweep:{k}": sweeper(p) for k, p in plans.items()}
    for f in fns.values():
        f()  # warm-up (and numba compile for this dtype)
    obj()
    out = np.empty_like(V)

    def product():
        spmm(prep.indptr, prep.indices, prep.data, prep.diag, V, out)

    run_spmm = with_threads(n_threads, product)
    run_spmm()
    fns.update(spmm=run_spmm, objective=obj)
    res, foreign = interleaved(fns, repeats, max_wait, attempts, warm=False)
    t_sweep, t_sweep_min = res[f"sweep:{SCHEMES[0]}"]
    t_colours, _ = res["sweep:colours"]
    t_spmm, _ = res["spmm"]
    t_obj, _ = res["objective"]
    if not np.all(np.isfinite(V)):
        raise RuntimeError("sweep produced non-finite V")

    # correctness of the reference against scipy (internal order)
    Lp = problem.L[plan.order][:, plan.order].tocsr()
    ref = Lp @ V
    err = float(np.max(np.abs(ref - out)) / max(1.0, float(np.max(np.abs(ref)))))
    tol = 1e-4 if dtype == "float32" else 1e-10
    if err > tol:
        raise RuntimeError(f"spmm reference disagrees with scipy: rel err {err:.2e}")
    del ref
    t_scipy, _ = median_time(lambda: Lp @ V, max(1, min(repeats, 3)))
    return {
        "n": case.n,
        "r": r,
        "dtype": dtype,
        "threads": n_threads,
        "deg": case.mean_degree,
        "blocks": plan.n_blocks,
        "steps": plan.n_colours,
        "colours": plans["colours"].n_colours,
        "sweep": t_sweep,
        "sweep_min": t_sweep_min,
        "spmm": t_spmm,
        "ratio": t_sweep / t_spmm,
        "sweep_colours": t_colours,
        "ratio_colours": t_colours / t_spmm,
        "objective": t_obj,
        "scipy": t_scipy,
        "foreign": foreign,
    }


HEADER = (
    "| n | r | dtype | T | mean deg | blocks / steps | sweep s (median) | SpMM s (median) "
    "| sweep/SpMM | colours | colour-scheme sweep s | colour-scheme/SpMM | objective s "
    "| scipy L@V s (1 thread) | other load |"
)
RULE = "|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"


def fmt_row(x):
    return (
        f"| {x['n']:,} | {x['r']} | {x['dtype']} | {x['threads']} | {x['deg']:.2f} "
        f"| {x['blocks']} / {x['steps']} | {x['sweep']:.4f} | {x['spmm']:.4f} "
        f"| **{x['ratio']:.2f}** | {x['colours']} | {x['sweep_colours']:.4f} "
        f"| {x['ratio_colours']:.2f} | {x['objective']:.4f} | {x['scipy']:.4f} "
        f"| {x['foreign']:.2f} |"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--rank", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument(
        "--dtype", nargs="+", default=["float32", "float64"], choices=["float32", "float64"]
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="timed sweeps after one warm-up")
    ap.add_argument("--loss", default="square", choices=list(npkl_dist.LOSSES))
    ap.add_argument(
        "--max-wait",
        type=float,
        default=300.0,
        help="seconds to wait for other processes to go quiet before each case",
    )
    ap.add_argument("--k", type=int, default=9, help="kNN neighbours before symmetrising")
    ap.add_argument("--dim", type=int, default=2, help="dimension of the synthetic points")
    ap.add_argument(
        "--constrained", type=float, default=0.02, help="fraction of points in a constraint pair"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-single-thread",
        action="store_true",
        help="skip the extra T=1 run at the criterion point",
    )
    ap.add_argument(
        "--json",
        default=None,
        help="results file (default: bench/results/sweep.json; '' for none)",
    )
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    info = machine_info()
    cmd = "python " + " ".join(
        shlex.quote(a)
        for a in ([os.path.relpath(__file__)] + list(sys.argv[1:] if argv is None else argv))
    )
    print(
        f"# {info['cpu']}, {info['cores']} cores, {info['ram']} RAM, L3 {info['l3']}", flush=True
    )
    rows = []
    notes = []
    for n in args.n:
        case = Case(n, args)
        print(
            f"n={n:,}: graph+L+constraints {case.build_seconds:.1f} s, mean degree "
            f"{case.mean_degree:.2f}, {case.constraints.m} pairs",
            flush=True,
        )
        for dtype in args.dtype:
            plans, prep, _ = case.prepared(dtype)
            for scheme, plan in plans.items():
                sizes = np.diff(plan.colour_ptr)
                notes.append(
                    f"n={n:,} {dtype}, scheme {scheme}: plan (RCM + blocks/colouring) "
                    f"{case.plan_seconds[scheme]:.1f} s, {plan.n_blocks} blocks, "
                    f"{plan.n_colours} steps, rows per step {sizes.tolist()}, pmax {prep.pmax}"
                )
            for r in args.rank:
                threads = [args.threads]
                if not args.no_single_thread and (n, r, dtype) == CRITERION and args.threads != 1:
                    threads.append(1)
                for T in threads:
                    res = bench_one(case, r, dtype, T, args.repeats, args.seed, args.max_wait)
                    rows.append(res)
                    print(fmt_row(res), flush=True)
        del case
    elapsed = time.perf_counter() - t_start

    lines = [HEADER, RULE] + [fmt_row(x) for x in rows]
    crit = [
        x
        for x in rows
        if (x["n"], x["r"], x["dtype"]) == CRITERION and x["threads"] == args.threads
    ]
    verdict = ""
    if crit:
        x = crit[0]
        ok = x["ratio"] <= CRITERION_RATIO
        verdict = (
            f"Criterion (n={CRITERION[0]:,}, r={CRITERION[1]}, {CRITERION[2]}, "
            f"T={args.threads}, default 'blocks' scheme): sweep/SpMM = {x['ratio']:.2f} "
            f"{'<=' if ok else '>'} {CRITERION_RATIO} -> {'PASS' if ok else 'FAIL'}"
        )
    print()
    print("\n".join(lines))
    if verdict:
        print(verdict)
    print(f"benchmark wall time {elapsed:.0f} s")

    if args.json != "":
        from bench import _results

        _results.write(
            "sweep",
            title="Seconds per BCD sweep against the SpMM floor",
            measures="seconds per plain BCD sweep (the default 'blocks' scheme, and the "
            "reference colour scheme), median of the rounds",
            reference="a compiled SpMM Y = D V + Loff V on the same CSR, r, dtype and threads, "
            "timed in the same rounds (the memory-traffic floor); criterion: "
            f"sweep/SpMM <= {CRITERION_RATIO} at n = {CRITERION[0]:,}, "
            f"r = {CRITERION[1]}, {CRITERION[2]}",
            command=cmd,
            args=vars(args),
            path=args.json or None,
            columns=[
                ("n", "n"),
                ("r", "r"),
                ("dtype", "dtype"),
                ("threads", "threads"),
                ("sweep", "sweep s"),
                ("spmm", "SpMM s"),
                ("ratio", "sweep/SpMM"),
                ("sweep_colours", "colour-scheme sweep s"),
                ("ratio_colours", "colour-scheme/SpMM"),
                ("foreign", "other load"),
            ],
            rows=rows,
            notes=[
                f"graph: uniform points in [0,1]^{args.dim}, exact {args.k}-NN symmetrised, "
                f"Gaussian weights, delta = 1e-3; {args.constrained:.0%} of the points in "
                f"disjoint random pairs; loss {args.loss}; median of {args.repeats} "
                f"interleaved rounds after one warm-up",
                *([verdict] if verdict else []),
            ],
            extra={"software": info, "plans": notes, "wall_seconds": elapsed},
        )
    return rows


if __name__ == "__main__":
    main()
