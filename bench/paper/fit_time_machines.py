"""The fit-time comparison of the replication, machine by machine.

Issue 3 asks for fit times at least 100x below the papers' CPU times, "measured on this kind
of machine". The sessions' machines differ: the AMD EPYC Zen 5 (AVX-512) measured the solver
rows of ``bench/paper/results.jsonl`` (since 2026-11-30; an Intel Xeon with AVX-512 most of
them before); the AMD EPYC Zen 3 (AVX2) is 1.7-3.1x slower on the same code (one thread per
fit, 2026-11-30). ``python -m bench.paper``'s own table pools whatever machines measured a pair;
this one splits the rows of one or more results files by the machine that measured them and
prints, for every (data set, method) pair with a published CPU time, the median fit time and
the ratio on each machine, the count of pairs at or above 100x per machine, and the ratio of
the machines' medians.

Usage::

    python -m bench.paper.fit_time_machines [--protocol P] [--results FILE ...] [--methods ...]

Default: ``bench/paper/results.jsonl`` (the Zen 5 for every row since 2026-12-01 but
SimpleNPKL-sqhinge (Alg. 1)'s, the Zen 3's) and the AMD EPYC files. The
virtual machines of these sessions all call their CPU "AMD EPYC", but two kinds stood behind
the name, and rows now record the CPU's family and model (``report.machine``):

- ``results_fit_time_amd.jsonl`` and ``results_fit_time_amd_2threads.jsonl``: the Zen 3
  (family 25, model 1, AVX2), the code of f0a4087 (2026-11-30, thirty-first session, on an
  instance about 1.2x slower than the earlier sessions' Zen 3 on the same code);
- ``results_fit_time_zen5.jsonl`` and ``results_fit_time_zen5_2threads.jsonl``: the Zen 5
  (family 26, model 2, AVX-512), 2026-11-29, twenty-second session.

The ``_2threads`` files hold both cores per fit, one fit at a time (``python -m bench.paper
--workers 1 --threads 2``, as ``npkl fit`` runs by default); the others one thread per fit.
Rows measured with more than one thread per fit are a column of their own ("AMD EPYC 26/2
(2 threads)").

``--protocol`` picks the protocol whose rows are compared: ``kl-admm`` (default; the main
table, the one the target is judged on) or ``simplenpkl``, the protocol simplenpkl-jmlr2011's
Tables 3 and 7 timed SimpleNPKL at (its own pairs, B = 1, B = n on adult). Its default files
are ``results_simplenpkl.jsonl`` (the Zen 5 for its small sets and adult SimpleNPKL rows,
two worker processes) and
``results_fit_time_zen5_simplenpkl.jsonl`` (the Zen 5, twenty-fourth session: 20
repetitions of every data set), and its default methods the two SimpleNPKL ones: the papers
timed nothing else at that protocol.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from bench.paper import published as pub
from bench.paper.datasets import DATASETS
from bench.paper.report import (
    SPEEDUP_TARGET,
    aggregate,
    label,
    row_machine,
    short_machine,
    speed_pairs,
)
from bench.paper.run import load_results, protocol_of

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = [
    HERE / "results.jsonl",
    HERE / "results_fit_time_amd.jsonl",
    HERE / "results_fit_time_amd_2threads.jsonl",
    HERE / "results_fit_time_zen5.jsonl",
    HERE / "results_fit_time_zen5_2threads.jsonl",
]
METHODS = ("KL-ADMM", "SimpleNPKL-linear", "SimpleNPKL-sqhinge")
#: per protocol: (default results files, default methods)
PROTOCOLS = {
    "kl-admm": (DEFAULT_RESULTS, METHODS),
    "simplenpkl": (
        [HERE / "results_simplenpkl.jsonl", HERE / "results_fit_time_zen5_simplenpkl.jsonl"],
        ("SimpleNPKL-linear", "SimpleNPKL-sqhinge"),
    ),
}


def load(paths, protocol="kl-admm"):
    """Finished rows of ``protocol`` in the given results files (missing files skipped)."""
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"fit_time_machines: protocol={protocol!r} is not one of {', '.join(PROTOCOLS)}"
        )
    return [
        r
        for path in paths
        if Path(path).exists()
        for r in load_results(path)
        if "error" not in r and protocol_of(r) == protocol
    ]


def by_machine(records, methods):
    """machine -> aggregate() of its rows of ``methods``, machines in sorted order."""
    groups = defaultdict(list)
    for r in records:
        if r["method"] in methods:
            groups[row_machine(r)].append(r)
    return {m: aggregate(groups[m]) for m in sorted(groups)}


def compare(per_machine, methods, published=None):
    """Rows [(dataset, method, published s, {machine: (median s, ratio, reps)})] for every pair
    with a published CPU time that some machine measured, and {machine: (met, pairs)}.
    ``published``: default :func:`bench.paper.published.published_value`."""
    if published is None:
        published = pub.published_value
    names = list(DATASETS)
    names += sorted({k[0] for agg in per_machine.values() for k in agg} - set(names))
    cells, counts = defaultdict(dict), {m: [0, 0] for m in per_machine}
    for m, agg in per_machine.items():
        for name, method, a, p, ratio in speed_pairs(agg, names, methods, published):
            cells[(name, method, p[0])][m] = (a["time_median"], ratio, a["reps"])
            counts[m][0] += ratio >= SPEEDUP_TARGET
            counts[m][1] += 1
    order = {
        (name, method): q
        for q, (name, method) in enumerate((n, mt) for n in names for mt in methods)
    }
    rows = sorted(
        ((name, method, p, c) for (name, method, p), c in cells.items()),
        key=lambda row: order[row[:2]],
    )
    return rows, {m: tuple(c) for m, c in counts.items()}


def markdown(rows, counts, machines):
    """The side-by-side table; with two machines the last column is the first machine's
    median over the second's where both measured the pair."""
    head = "| data set | method | published (s) |"
    rule = "|---|---|---:|"
    for m in machines:
        s = short_machine(m)
        head += f" {s}: median (s) | {s}: ratio | reps |"
        rule += "---:|---:|---:|"
    two = len(machines) == 2
    if two:
        head += f" {short_machine(machines[0])} / {short_machine(machines[1])} time |"
        rule += "---:|"
    out = [head, rule]
    for name, method, p, cells in rows:
        line = f"| {name} | {label(method)} | {p:.4g} |"
        for m in machines:
            if m in cells:
                med, ratio, reps = cells[m]
                verdict = f"{ratio:.0f}x" if ratio >= SPEEDUP_TARGET else f"**{ratio:.0f}x**"
                line += f" {med:.3g} | {verdict} | {reps} |"
            else:
                line += " — | — | — |"
        if two:
            a, b = (cells.get(m) for m in machines)
            line += f" {a[0] / b[0]:.2f} |" if a and b else " — |"
        out.append(line)
    out.append("")
    for m in machines:
        met, n = counts[m]
        out.append(f"- {m}: at or above {SPEEDUP_TARGET:.0f}x on {met} of {n} pairs.")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        default="kl-admm",
        help="the protocol whose rows are compared (default kl-admm, the main "
        "table); it also sets the default --results and --methods",
    )
    ap.add_argument("--results", nargs="+", help="results files (default: the protocol's)")
    ap.add_argument("--methods", nargs="+", help="methods (default: the protocol's)")
    args = ap.parse_args(argv)
    files, methods = PROTOCOLS[args.protocol]
    args.results = args.results or [str(p) for p in files]
    args.methods = args.methods or list(methods)
    per_machine = by_machine(load(args.results, args.protocol), args.methods)
    if not per_machine:
        raise SystemExit(
            f"--results: no finished rows of {args.methods} at the "
            f"{args.protocol} protocol in {args.results}"
        )
    rows, counts = compare(per_machine, args.methods)
    # a machine whose rows have no published CPU time to compare with (the legacy rows of
    # breast-cancer, say) is no column
    machines = [m for m in per_machine if counts[m][1] > 0]
    print(markdown(rows, {m: counts[m] for m in machines}, machines))


if __name__ == "__main__":
    main()
