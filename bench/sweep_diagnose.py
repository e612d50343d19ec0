"""Where does a sweep's time go?  Per-step timings of the library's two sweep schemes.

Run after ``bench_sweep.py``; same synthetic problem (see there). The prototype that used to
live here (blocks of the RCM order, vertex-cover deferral of the constrained rows that couple
two blocks of one parity, a fast path for unconstrained rows, per-column accumulation of
||dv||^2 and ||v||^2; its measurements are in RESULTS.md) is now the library's default
``make_plan(scheme='blocks')`` with the kernels ``sweep_rows`` / ``sweep_units``; this script
only calls the library.

Measured (one n, r, dtype; T threads), each table from interleaved rounds:

1. SpMM floor, default ('blocks') sweep, reference 'colours' sweep, objective;
2. every step of each scheme timed alone, against its share of rows: a colour step of the
   reference scheme streams (nearly) all of V through the caches, because its rows are
   spread over the whole RCM order; a block step streams only its blocks;
3. the block count (``n_blocks``) against the sweep time and the number of deferred rows;
4. checks: T threads == 1 thread bitwise (V and the change/norm sums), objective monotone
   over ``--check-sweeps`` sweeps for both schemes, and their objectives side by side;
5. relabel 'none' vs 'rcm' (default scheme).

Usage::

    flock /tmp/npkl-bench.lock .venv/bin/python bench/sweep_diagnose.py --n 1000000 \
        --rank 64 --dtype float64
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_sweep import Case, interleaved, machine_info, spmm, with_threads  # noqa: E402
from npkl_dist import make_plan  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def describe(plan) -> str:
    sizes = np.diff(plan.colour_ptr).tolist()
    if plan.scheme == "colours":
        return f"'colours': {plan.n_colours} colours of {sizes} rows"
    return (f"'blocks': {plan.n_blocks} blocks of ~{plan.n_points // plan.n_blocks:,} rows, "
            f"{plan.n_colours} steps of {sizes} rows ({sum(sizes[2:]):,} deferred rows in "
            f"{plan.n_colours - 2} colours)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rank", type=int, nargs="+", default=[64])
    ap.add_argument("--dtype", nargs="+", default=["float64"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--loss", default="square")
    ap.add_argument("--k", type=int, default=9)
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--constrained", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block-scan", type=int, nargs="*", default=[4, 8, 16, 32, 64],
                    help="block counts to time the default scheme with")
    ap.add_argument("--check-sweeps", type=int, default=10)
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--skip-none", action="store_true", help="skip the relabel='none' run")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args(argv)
    T, K = args.threads, args.repeats
    t_start = time.perf_counter()
    info = machine_info()
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    def table(res, base, load):
        say("| variant | median s | min s | median / SpMM median |")
        say("|:---|---:|---:|---:|")
        for k, (med, mn) in res.items():
            say(f"| {k} | {med:.4f} | {mn:.4f} | {med / base:.2f} |")
        say(f"\nother-process load during the block: {load:.2f} cores")

    case = Case(args.n, args)
    n = args.n
    say(f"### sweep_diagnose: n={n:,}, T={T}, loss {args.loss}, mean degree "
        f"{case.mean_degree:.2f}, {case.constraints.m} pairs")
    say("")
    say(f"- command: `python bench/sweep_diagnose.py "
        f"{' '.join(sys.argv[1:] if argv is None else argv)}`")
    say(f"- machine: {info['cpu']}, {info['cores']} cores, {info['ram']}, L3 {info['l3']}")
    say(f"- timing: {K} interleaved rounds (each variant once per round) after a warm-up")
    for dtype in args.dtype:
        plans, prep, problem = case.prepared(dtype)
        for plan in plans.values():
            say(f"- {dtype}: {describe(plan)}")
        blocks, colours = plans["blocks"], plans["colours"]
        for r in args.rank:
            say("")
            say(f"#### n={n:,}, r={r}, {dtype}, T={T}")
            say("")
            V0 = (np.random.default_rng(args.seed).standard_normal((n, r))
                  / np.sqrt(r)).astype(dtype)
            V = V0.copy()
            Y = np.empty_like(V)
            ex = InProcessExecutor(n_threads=T)
            orng = np.random.default_rng(1)
            run_spmm = with_threads(T, lambda: spmm(prep.indptr, prep.indices, prep.data,
                                                    prep.diag, V, Y))
            fns = {
                "SpMM (floor)": run_spmm,
                "sweep, default 'blocks' scheme":
                    lambda: ex.sweep(prep, blocks, V, blocks.colour_order(orng)),
                "sweep, reference 'colours' scheme":
                    lambda: ex.sweep(prep, colours, V, colours.colour_order(orng)),
                "objective": lambda: ex.objective(prep, V),
            }
            res, load = interleaved(fns, K, args.max_wait)
            table(res, res["SpMM (floor)"][0], load)

            for name, plan in (("default 'blocks'", blocks), ("reference 'colours'", colours)):
                steps = {c: (lambda c=c, p=plan: ex.sweep(prep, p, V, [c]))
                         for c in range(plan.n_colours)}
                steps["spmm"] = run_spmm
                sres, sload = interleaved(steps, K, args.max_wait)
                sbase = sres.pop("spmm")[0]
                tot = sum(v[0] for v in sres.values())
                say("")
                say(f"Steps of the {name} scheme, each timed alone:")
                say("")
                say("| step | rows | share of rows | median s | share of sweep | / SpMM "
                    "| ns per row |")
                say("|---:|---:|---:|---:|---:|---:|---:|")
                for c, (t, _) in sres.items():
                    m = plan.rows_of(c).shape[0]
                    say(f"| {c} | {m:,} | {m / n:.1%} | {t:.4f} | {t / tot:.1%} "
                        f"| {t / sbase:.2f} | {t / max(m, 1) * 1e9:.0f} |")
                say(f"| sum | {n:,} | 100% | {tot:.4f} | 100% | {tot / sbase:.2f} "
                    f"| {tot / n * 1e9:.0f} |")
                say(f"\nSpMM {sbase:.4f} s; other-process load {sload:.2f} cores")

            if args.block_scan:
                problem1 = case.problem(1, dtype)
                scan_plans = {nb: make_plan(problem1, n_blocks=nb) for nb in args.block_scan}
                scan = {nb: (lambda p=p: ex.sweep(prep, p, V, p.colour_order(orng)))
                        for nb, p in scan_plans.items()}
                scan["spmm"] = run_spmm
                bres, bload = interleaved(scan, K, args.max_wait)
                bbase = bres.pop("spmm")[0]
                say("")
                say("Default scheme against the number of blocks:")
                say("")
                say("| blocks | rows per block | steps | deferred rows | median s | / SpMM |")
                say("|---:|---:|---:|---:|---:|---:|")
                for nb, (t, _) in bres.items():
                    p = scan_plans[nb]
                    deferred = int(np.diff(p.colour_ptr)[2:].sum())
                    say(f"| {p.n_blocks} | {n // p.n_blocks:,} | {p.n_colours} | {deferred:,} "
                        f"| {t:.4f} | {t / bbase:.2f} |")
                say(f"\nother-process load: {bload:.2f} cores")

            say("")
            say("Checks:")
            Va, Vb = V0.copy(), V0.copy()
            same_sums = True
            ex1 = InProcessExecutor(n_threads=1)
            crng = np.random.default_rng(5)
            for _ in range(3):
                order = blocks.colour_order(crng)
                same_sums &= ex.sweep(prep, blocks, Va, order) == ex1.sweep(prep, blocks, Vb,
                                                                             order)
            say(f"- default scheme, 3 sweeps: T={T} == T=1 bitwise: V {np.array_equal(Va, Vb)}, "
                f"(delta2, norm2) {same_sums}")
            del Va, Vb
            traces = {}
            for name, plan in (("blocks", blocks), ("colours", colours)):
                W = V0.copy()
                trng = np.random.default_rng(11)
                trace = [ex.objective(prep, W)]
                for _ in range(args.check_sweeps):
                    ex.sweep(prep, plan, W, plan.colour_order(trng))
                    trace.append(ex.objective(prep, W))
                traces[name] = trace
                mono = all(b <= a * (1 + 1e-12) + 1e-9 for a, b in zip(trace, trace[1:]))
                say(f"- '{name}' objective monotone over {args.check_sweeps} sweeps: {mono}")
                del W
            picks = [j for j in (1, 2, 5, args.check_sweeps) if j <= args.check_sweeps]
            say(f"- objective (start {traces['blocks'][0]:.6g}) after sweeps {picks}: "
                + ", ".join(f"'{k}' {[float(f'{t[j]:.6g}') for j in picks]}"
                            for k, t in traces.items()))
            del V, Y

        if not args.skip_none:
            r = args.rank[0]
            say("")
            say(f"#### relabel 'none' vs 'rcm' (default scheme, r={r}, {dtype}, T={T})")
            say("")
            say("| relabel | blocks | steps | sweep s | SpMM s | sweep/SpMM |")
            say("|:---|---:|---:|---:|---:|---:|")
            for relabel in ("rcm", "none"):
                plans_, prep_, _ = case.prepared(dtype, relabel=relabel)
                plan_ = plans_["blocks"]
                V = (np.random.default_rng(0).standard_normal((n, r)) / np.sqrt(r)).astype(dtype)
                Y = np.empty_like(V)
                orng = np.random.default_rng(1)
                ex = InProcessExecutor(n_threads=T)
                res, load = interleaved({
                    "sweep": lambda: ex.sweep(prep_, plan_, V, plan_.colour_order(orng)),
                    "spmm": with_threads(T, lambda: spmm(prep_.indptr, prep_.indices,
                                                         prep_.data, prep_.diag, V, Y)),
                }, K, args.max_wait)
                say(f"| {relabel} | {plan_.n_blocks} | {plan_.n_colours} | {res['sweep'][0]:.4f} "
                    f"| {res['spmm'][0]:.4f} | {res['sweep'][0] / res['spmm'][0]:.2f} |")
                del V, Y
            say(f"\nother-process load: {load:.2f} cores (last block)")
            case.prepared(dtype, relabel="rcm")
    say("")
    say(f"diagnosis wall time {time.perf_counter() - t_start:.0f} s")
    say("")
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
        print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
