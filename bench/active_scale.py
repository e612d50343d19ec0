"""Benchmark: active constraint selection at 10^5 points (issue 78's scale targets).

A Gaussian mixture of n points, 20 classes in 20 dimensions with overlapping classes, its
5-NN graph; the initial pairs are sampled from 1% of the labels (``n_start`` must-link and
cannot-link); the pool is the graph's edges plus ``--random`` seeded uniform pairs (at least
10^6 candidates, never n^2). Each strategy runs ``active_learning``: 5 rounds of 20 queries
answered by the classes, BCD refits warm-started from the last V. Measured per round: the
selection's seconds (the whole pool scored, the batch chosen), the warm refit's seconds and
sweeps, kernel k-means' pairwise accuracy; and, in the same run, a cold fit (no V0) of each
round's constraints, the reference that round's warm refit is compared with. Targets: selecting
20 pairs <= 1 s, a warm refit <= 25% of a cold fit, on 2 cores.

Usage::

    python bench/active_scale.py --n 100000 --strategies minmax random

writes ``bench/results/active_scale.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    import npkl_dist as nk
    from bench import _results
    from bench.estimators_overhead import mixture
    from npkl_dist.active import active_learning, candidate_pool, labels_oracle
    from npkl_dist.active._loop import add_answers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--random", type=int, default=1_000_000, help="random pairs in the pool")
    ap.add_argument("--strategies", nargs="+", default=["minmax", "random", "min_abs_k"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--json", default=None, help="output path (default bench/results/)")
    args = ap.parse_args(argv)
    X, y = mixture(args.n)
    rng = np.random.default_rng(1)
    part = np.where(rng.random(args.n) < 0.01, y, -1)
    t0 = time.perf_counter()
    graph = nk.knn_graph(X, 5, seed=0, warn=False)
    L = graph.laplacian(1e-3)
    n_start = int((part >= 0).sum())
    cons = nk.sample_constraints(part, n_start, n_start, seed=0)
    pool = candidate_pool(args.n, graph=graph.S, constraints=cons, n_random=args.random, seed=0)
    setup_s = time.perf_counter() - t0
    print(f"graph, pairs and a pool of {pool.shape[0]:,} in {setup_s:.1f} s", flush=True)
    rank = nk.default_rank(cons.m + args.rounds * args.batch, args.n)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a ConvergenceWarning is reported by the sweeps)
        for strategy in args.strategies:
            res = active_learning(
                L, cons, labels_oracle(y), pool, rounds=args.rounds, batch=args.batch,
                strategy=strategy, rank=rank, eval_labels=y, n_clusters=20,
                callback=lambda r: print(strategy, r.round, r.select_seconds, r.fit_seconds,
                                         r.metrics["rand_accuracy"], flush=True),
            )  # fmt: skip
            later = res.rounds[1:]
            warm = [r.fit_seconds for r in later]
            # each round's constraints fitted cold (no V0), paired with that round's warm
            # refit: a cold fit's sweep count varies from one constraint set to the next
            cold, cold_sweeps, c = [], [], cons
            for r in later:
                c = add_answers(c, r.queries, r.answers)
                problem = nk.NPKLProblem.build(L, c, rank=rank, seed=0)
                t = time.perf_counter()
                cold_sweeps.append(int(nk.fit_bcd(problem).n_sweeps))
                cold.append(time.perf_counter() - t)
            assert c.m == res.constraints.m
            ratios = [w / c_ for w, c_ in zip(warm, cold)]
            rows.append(
                {
                    "strategy": strategy,
                    "pool": int(pool.shape[0]),
                    "select_s_median": round(
                        float(np.median([r.select_seconds for r in later])), 3
                    ),
                    "select_s_max": round(float(max(r.select_seconds for r in later)), 3),
                    "warm_refit_s": round(float(np.median(warm)), 2),
                    "warm_sweeps": int(np.median([r.n_sweeps for r in later])),
                    "cold_fit_s": round(float(np.median(cold)), 2),
                    "cold_sweeps": int(np.median(cold_sweeps)),
                    "warm_over_cold": round(float(np.median(ratios)), 3),
                    "warm_over_cold_max": round(float(max(ratios)), 3),
                    "warm_over_cold_rounds": [round(x, 3) for x in ratios],
                    "cold_fit_s_rounds": [round(x, 2) for x in cold],
                    "cold_sweeps_rounds": cold_sweeps,
                    "accuracy_r0": round(res.rounds[0].metrics["rand_accuracy"], 4),
                    "accuracy_final": round(later[-1].metrics["rand_accuracy"], 4),
                    "per_round": [r.to_dict() | {"queries": None} for r in res.rounds],
                }
            )
            print({k: v for k, v in rows[-1].items() if k != "per_round"}, flush=True)
    _results.write(
        f"active_scale_{args.n}",
        title=f"Active constraint selection at n = {args.n:,} (issue 78's scale targets)",
        measures=(
            f"per round ({args.batch} queries, {args.rounds} rounds): seconds to score the "
            "pool and choose the batch, seconds and sweeps of the warm refit (BCD from the last "
            "V); kernel k-means' pairwise accuracy before the first and after the last round"
        ),
        reference=(
            "a cold fit (no V0) of each round's constraints in the same run, paired with that "
            "round's warm refit (warm / cold: the median of the rounds' ratios); targets: "
            "selection <= 1 s, warm refit <= 25% of the cold fit"
        ),
        command=_results.command("bench/active_scale.py", argv),
        columns=[
            ("strategy", "strategy"),
            ("pool", "pool pairs"),
            ("select_s_median", "select s (median)"),
            ("select_s_max", "select s (max)"),
            ("warm_refit_s", "warm refit s (median)"),
            ("warm_sweeps", "warm sweeps"),
            ("cold_fit_s", "cold fit s (median)"),
            ("cold_sweeps", "cold sweeps"),
            ("warm_over_cold", "warm / cold (median)"),
            ("warm_over_cold_max", "warm / cold (max)"),
            ("accuracy_r0", "accuracy, start"),
            ("accuracy_final", f"accuracy, round {args.rounds}"),
        ],
        rows=rows,
        notes=[
            f"n = {args.n:,}, 20 classes in 20-D, 5-NN graph, {cons.m:,} starting pairs from 1% "
            f"of the labels, rank {rank}, square loss, gamma = 1, {os.cpu_count()} cores; the "
            f"graph, pairs and pool took {setup_s:.1f} s"
        ],
        args=vars(args),
        path=args.json,
    )


if __name__ == "__main__":
    main()
