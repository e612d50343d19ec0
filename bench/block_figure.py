"""Convergence figure of issue 6's benchmark: relative gap against wall time, plain sweeps
vs block solves, one panel per case (n, constrained fraction, loss).

``bench/bench_block.py --figure PATH.png`` writes the figure and its data (``PATH.json``);
this module redraws a figure from one or more such JSON files::

    python bench/block_figure.py bench/results/block_convergence_1e5.json \
        bench/results/block_convergence_1e6.json --out /tmp/block_convergence.png

Each curve starts at the fit's set-up (relabelling, colouring, AMG hierarchy, start): the
first point is the objective after the first sweep or outer iteration, at the time the fit
had spent by then. Solid curves leave out the objective evaluations that only the trace
needs (the iterates' own cost: plain sweeps would otherwise carry about twice their time in
evaluations); faint curves include them, as ``bench_block``'s "s" columns do. The top axis
counts sweep-equivalents (time / median plain sweep of the same case), the unit of issue 6's
"at most 30 sweep-equivalents".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def curve(res) -> dict:
    """Cumulative wall time from the call of ``fit_bcd`` and the objective after each
    sweep / outer iteration, from a ``FitResult``'s traces.

    ``t`` counts the per-sweep objective evaluations (a traced fit, the default, and
    ``bench_block.time_to_gap``'s accounting); ``t_steps`` leaves them out, i.e. the time
    the same iterates take in a fit that does not evaluate the objective after every sweep
    (``trace=False`` with the step-size rule; block fits skip it too since 2026-11-26
    evening, before which they always evaluated it). For plain sweeps the evaluation costs
    about twice a sweep; for block solves it comes partly from the CG residual: about 10% of
    an outer iteration at n = 1e6 with 1% constrained, but nearly half with most points
    constrained (the papers' protocol), where the pass over the constrained rows is most of
    the graph."""
    k = len(res.objective_trace)
    if not (len(res.sweep_seconds) == len(res.objective_seconds) == k):
        raise ValueError(
            f"res: expected one objective and one timing per sweep, got "
            f"{k} objectives, {len(res.sweep_seconds)} sweep times and "
            f"{len(res.objective_seconds)} objective times; fit with trace=True"
        )
    sweeps = np.asarray(res.sweep_seconds, float)
    t = res.setup_seconds + np.cumsum(sweeps + np.asarray(res.objective_seconds, float))
    t_steps = res.setup_seconds + np.cumsum(sweeps)
    return {
        "t": t.tolist(),
        "t_steps": t_steps.tolist(),
        "f": [float(x) for x in res.objective_trace],
        "setup": float(res.setup_seconds),
    }


def gap_series(f, f_star):
    """(f - f*)/|f*|, floored at 1e-12 so that the log scale shows f = f*."""
    g = (np.asarray(f, float) - f_star) / abs(f_star)
    return np.maximum(g, 1e-12)


def time_at_gap(c, f_star, gap, key="t"):
    """The first time (``key``: "t" or "t_steps") at which the curve ``c`` is within
    ``gap`` of f*, or None."""
    for t, f in zip(c[key], c["f"]):
        if (f - f_star) / abs(f_star) <= gap:
            return t
    return None


def frac_label(frac) -> str:
    """A constrained fraction as the benchmark names it: "protocol" or a percentage."""
    return frac if frac == "protocol" else f"{float(frac):.1%}"


def case_label(case) -> str:
    return f"n = {case['n']:,}, {frac_label(case['frac'])} constrained, {case['loss']}"


def figure(cases, path, gap=1e-4, target_sweep_eq=30):
    """One panel per case; log-log relative gap against seconds, sweeps and block. Writes
    the PNG ``path`` and returns it."""
    import matplotlib.pyplot as plt

    fig = draw(cases, gap, target_sweep_eq)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def draw(cases, gap=1e-4, target_sweep_eq=30):
    """:func:`figure`'s matplotlib Figure (not saved; the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    if not cases:
        raise ValueError(
            "cases: expected at least one benchmark case, got none; run "
            "bench/bench_block.py with --figure first"
        )
    cols = min(2, len(cases))
    rows = int(np.ceil(len(cases) / cols))
    # one case: a wider panel, so the two-line title and the legend fit across it
    width, height = max(6.0 * cols, 9.0), 4.2 * rows + 1.2
    fig, axes = plt.subplots(
        rows, cols, figsize=(width, height), squeeze=False, layout="constrained"
    )
    styles = {
        "sweeps": ("tab:orange", "plain sweeps", "sweep"),
        "block": ("tab:blue", "block solves", "outer iteration"),
    }
    for ax, case in zip(axes.ravel(), cases):
        f_star, t_sweep = case["f_star"], case["t_sweep"]
        for name, (colour, label, step) in styles.items():
            c = case[name]
            if not c["t"]:
                continue
            g = gap_series(c["f"], f_star)
            ax.plot(c["t_steps"], g, color=colour, lw=1.4, label=label)
            ax.plot(
                c["t"],
                g,
                color=colour,
                lw=0.8,
                alpha=0.45,
                label=f"{label}, objective after every {step}",
            )
            ax.axvline(c["setup"], color=colour, ls=":", lw=0.9)
        ax.axhline(gap, color="k", ls="--", lw=0.9, label=f"gap {gap:g}")
        ax.axvline(
            target_sweep_eq * t_sweep,
            color="tab:red",
            ls="-.",
            lw=0.9,
            label=f"{target_sweep_eq} sweep-equivalents",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("seconds from the call of fit_bcd")
        ax.set_ylabel("(f - f*) / f*")
        ax.set_title(case_label(case), fontsize=10)
        top = ax.secondary_xaxis(
            "top", functions=(lambda t, s=t_sweep: t / s, lambda e, s=t_sweep: e * s)
        )
        top.xaxis.set_minor_formatter(NullFormatter())
        top.set_xlabel("sweep-equivalents", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes.ravel()[len(cases) :]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    # "outside": the constrained layout keeps the panels clear of the legend and the title
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=min(len(labels), 3 if cols > 1 else 2),
        fontsize=9,
    )
    fig.suptitle(
        "Time to solution: relative objective gap against seconds, plain sweeps "
        "and block solves\n(solid: the iterations' own time; faint: with the objective "
        "evaluated after each one; dotted: end of each fit's set-up)",
        fontsize=10,
    )
    return fig


def load(paths):
    cases = []
    for p in paths:
        with open(p) as fh:
            cases.extend(json.load(fh)["cases"])
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", type=Path, help="JSON files from bench_block --figure")
    ap.add_argument("--out", type=Path, required=True, help="PNG to write")
    ap.add_argument("--gap", type=float, default=1e-4)
    args = ap.parse_args(argv)
    print(figure(load(args.traces), args.out, gap=args.gap))


if __name__ == "__main__":
    main()
