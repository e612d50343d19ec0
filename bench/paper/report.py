"""Table and figure of the replication, next to the papers' published numbers."""

from __future__ import annotations

import functools
import platform
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

#: protocol -> the committed accuracy-vs-time figure (``write_report``'s default; the CLI's
#: ``run.PROTOCOL_FILES`` pairs it with the protocol's results file)
FIGURES = {
    "kl-admm": HERE / "accuracy_vs_time.png",
    "simplenpkl": HERE / "accuracy_vs_time_simplenpkl.png",
}

BEGIN = "<!-- paper-replication:begin -->"
END = "<!-- paper-replication:end -->"
#: the section of ``--protocol simplenpkl``
BEGIN_SNPKL = "<!-- paper-replication-simplenpkl:begin -->"
END_SNPKL = "<!-- paper-replication-simplenpkl:end -->"
NPKL_PREFIXES = ("BCD", "KL-ADMM", "SimpleNPKL")
SMALL = "chessboard dbl-spiral glass heart iris sonar soybean wine breast-cancer"
#: Display names of methods whose key is terse for the command line.
LABELS = {
    "BCD-linear-cv": "BCD-linear (γ by CV)",
    "KL-ADMM-cv": "KL-ADMM (γ by CV)",
    "BCD-linear-pck": "BCD-linear + PCK-means",
    "SimpleNPKL-sqhinge-alg1": "SimpleNPKL-sqhinge (Alg. 1)",
}


def label(method):
    return LABELS.get(method, method)


def gamma_counts(records):
    """(dataset, method) -> {gamma: repetitions} for the methods that chose gamma by CV."""
    out = defaultdict(lambda: defaultdict(int))
    for r in records:
        if "error" not in r and "gamma" in r:
            out[(r["dataset"], r["method"])][r["gamma"]] += 1
    return out


#: Every row recorded before rows carried a ``machine`` field (2026-11-23, 15:00 UTC) was
#: measured on this machine (the CPU and core count every benchmark section of
#: the benchmark notes of that time name; docs/decisions/paper-replication-notes.md).
LEGACY_MACHINE = "AMD EPYC, 2 cores"


def machine(cpuinfo="/proc/cpuinfo"):
    """This machine as a result row records it: CPU model, its family and model numbers and
    whether it has AVX-512, and the core count: 'AMD EPYC (family 26, model 2, AVX-512), 2
    cores'.

    Virtual machines often report a generic model name ("AMD EPYC"), behind which sessions
    of this project have had a Zen 3 (family 25, model 1, AVX2) and a Zen 5 (family 26,
    model 2, AVX-512) with fit times 1.4-2.8x apart; the name alone pooled them (the Zen 3
    rows of the fit-time files were relabelled from their sessions' notes, 2026-11-29)."""
    import os

    cpu, family, model, avx512 = "unknown CPU", None, None, False
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and cpu == "unknown CPU":
                cpu = value
            elif key == "cpu family" and family is None:
                family = value
            elif key == "model" and model is None:
                model = value
            elif key == "flags":
                avx512 = "avx512f" in value.split()
                break  # the first processor's block is enough
    except OSError:
        pass
    ident = []
    if family is not None and model is not None:
        ident.append(f"family {family}, model {model}")
    if avx512:
        ident.append("AVX-512")
    cpu = f"{cpu} ({', '.join(ident)})" if ident else cpu
    return f"{cpu}, {os.cpu_count()} cores"


#: what a row's code is: the package and the harness (the results and figures the harness
#: writes there are output, not code)
CODE_PATHS = (
    "npkl_dist",
    "bench/paper",
    ":(exclude)bench/paper/*.jsonl",
    ":(exclude)bench/paper/*.png",
)


@functools.cache
def code_version(root=HERE.parent.parent):
    """The code that computes a row, as the row records it: HEAD's short commit hash, with
    "+dirty" where the package or the harness (``CODE_PATHS``) has uncommitted changes; None
    outside a git checkout (or without git). A row computed before a solver change then says
    so: the table's BCD rows had been computed by code several commits older than the
    sweeps that a fresh run executes (docs/decisions/paper-replication-notes.md)."""

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def commit_counts(records):
    """code version (``code_version``; "unrecorded (...)" for rows from before the field)
    -> number of finished result rows it computed."""
    return _row_counts(records, lambda r: r.get("commit", "unrecorded (rows before 2026-11-30)"))


def _row_counts(records, key):
    """key(row) -> number of finished result rows (those without an error)."""
    out = defaultdict(int)
    for r in records:
        if "error" not in r:
            out[key(r)] += 1
    return dict(out)


def _code_line(commits):
    """The report's sentence on the code versions behind its rows."""
    if not commits:
        return ""
    ranked = sorted(commits.items(), key=lambda x: -x[1])
    shown = "; ".join(f"{c} ({k} rows)" for c, k in ranked[:6])
    more = f"; {len(ranked) - 6} more" if len(ranked) > 6 else ""
    return (
        f"Rows computed by code at: {shown}{more} (`git log` names each commit; a row "
        "from older code than a solver change is recomputed with `--fresh-methods`). "
    )


def provenance_table(records, methods):
    """Markdown table: per method (in ``methods``' order, then any others), its finished
    rows, the machines that measured them and the code versions that computed them, each
    with its row count, most rows first."""
    by = defaultdict(list)
    for r in records:
        if "error" not in r:
            by[r["method"]].append(r)
    if not by:
        return []
    order = [m for m in methods if m in by] + sorted(set(by) - set(methods))

    def counts(rows, key):
        c = _row_counts(rows, key)
        return "; ".join(f"{k} ({v})" for k, v in sorted(c.items(), key=lambda x: (-x[1], x[0])))

    lines = ["| method | rows | measured on (rows) | code (rows) |", "|---|---:|---|---|"]
    for m in order:
        rows = by[m]
        lines.append(
            f"| {label(m)} | {len(rows)} | "
            f"{counts(rows, lambda r: short_machine(row_machine(r)))} | "
            f"{counts(rows, lambda r: r.get('commit', 'unrecorded'))} |"
        )
    return lines


def _machine():
    return f"{machine()}, Python {platform.python_version()}"


def row_machine(r):
    """The machine that measured a row, with its threads per fit where more than one
    (``python -m bench.paper --threads``): a fit's time depends on both."""
    m = r.get("machine", LEGACY_MACHINE)
    threads = int(r.get("threads", 1))
    return m if threads == 1 else f"{m}, {threads} threads per fit"


def short_machine(m):
    """'Intel(R) Xeon(R) Processor, 2 cores' -> 'Intel Xeon'; '..., 2 threads per fit' ->
    'Intel Xeon (2 threads)'; 'AMD EPYC (family 26, model 2, AVX-512), 2 cores' -> 'AMD EPYC
    26/2'."""
    cpu = m.split(",")[0].replace("(R)", "").replace("(TM)", "")
    short = " ".join(cpu.split("(")[0].split()[:2])
    ident = re.search(r"\(family (\d+), model (\d+)", m)
    if ident:
        short += f" {ident.group(1)}/{ident.group(2)}"
    tail = m.rsplit(",", 1)[-1].strip()
    if tail.endswith("threads per fit"):
        short += f" ({tail.split()[0]} threads)"
    return short


def machine_counts(records):
    """machine -> number of finished result rows it measured."""
    return _row_counts(records, row_machine)


def aggregate(records):
    """(dataset, method) -> dict(acc mean/std in %, time mean/std, reps, errors, gammas)."""
    groups = defaultdict(list)
    for r in records:
        groups[(r["dataset"], r["method"])].append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if "error" not in r]
        acc = np.array([100 * r["rand_accuracy"] for r in ok])
        t = np.array([r["fit_seconds"] for r in ok])
        out[key] = {
            "acc": float(acc.mean()) if acc.size else np.nan,
            "acc_std": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
            "time": float(t.mean()) if t.size else np.nan,
            "time_std": float(t.std(ddof=1)) if t.size > 1 else 0.0,
            "time_median": float(np.median(t)) if t.size else np.nan,
            "reps": len(ok),
            "errors": len(rs) - len(ok),
            "error_example": next((r["error"] for r in rs if "error" in r), None),
            "machines": sorted({row_machine(r) for r in ok}),
            "pairs": [r["pairs"] for r in ok if "pairs" in r],
        }
        unit = np.array(
            [100 * r["rand_accuracy_normalized"] for r in ok if "rand_accuracy_normalized" in r]
        )
        if unit.size:
            out[key]["acc_unit"] = float(unit.mean())
            out[key]["acc_unit_std"] = float(unit.std(ddof=1)) if unit.size > 1 else 0.0
    for key, counts in gamma_counts(records).items():
        out[key]["gammas"] = dict(sorted(counts.items()))
    return out


def _published():
    try:
        from bench.paper import published
    except ImportError:
        return None
    return published


def figure(agg, names, methods, path, paper=None, title=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    cols = min(4, len(names))
    rows = int(np.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    cmap = plt.get_cmap("tab20")
    pub = _published()
    for ax, name in zip(axes.ravel(), names):
        for q, m in enumerate(methods):
            a = agg.get((name, m))
            if not a or not a["reps"]:
                continue
            marker = "o" if m.startswith(NPKL_PREFIXES) else "s"
            ax.errorbar(
                max(a["time"], 1e-3),
                a["acc"],
                yerr=a["acc_std"],
                fmt=marker,
                color=cmap(q),
                label=label(m),
                capsize=2,
                ms=5,
            )
            if "acc_unit" in a:  # the same kernel clustered after cosine normalisation
                ax.errorbar(
                    max(a["time"], 1e-3),
                    a["acc_unit"],
                    yerr=a["acc_unit_std"],
                    fmt=marker,
                    mfc="none",
                    color=cmap(q),
                    capsize=2,
                    ms=7,
                    label=f"{label(m)}, normalised kernel",
                )
        if pub is not None:
            best = pub.best_published(name, paper=paper)
            if best and best[0] is not None:
                ax.axhline(best[0], color="k", ls="--", lw=1)
                ax.axhspan(
                    best[0] - (best[1] or 0), best[0] + (best[1] or 0), color="k", alpha=0.08
                )
        ax.set_xscale("log")
        # no minor-tick labels: on a narrow range they overprint each other
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(name)
        ax.set_xlabel("fit time (s)")
        ax.set_ylabel("pairwise accuracy (%)")
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    fig.suptitle(title or "Pairwise accuracy vs fit time (dashed: best published, band: its std)")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(
    agg, names, methods, wall_seconds, reps, command, machines=None, commits=None, records=None
):
    """The replication section; ``records`` (the rows behind ``agg``) give its table of
    where each method's rows come from."""
    pub = _published()
    machines = machines or {}
    if machines:
        measured = (
            "Rows measured on: "
            + "; ".join(
                f"{m} ({c} rows)" for m, c in sorted(machines.items(), key=lambda x: -x[1])
            )
            + ". "
        )
    else:
        measured = ""
    measured += _code_line(commits)
    lines = [
        BEGIN,
        "## Replication of the papers' clustering tables",
        "",
        f"Report written on: {_machine()}. Date: {time.strftime('%Y-%m-%d')}. "
        + measured
        + f"Latest invocation: `{command}` "
        + (
            "(tables only, nothing run). "
            if wall_seconds is None
            else f"({reps} repetitions, {wall_seconds:.0f} s). "
        )
        + "The tables cover every result in `bench/paper/results.jsonl` (finished tasks are "
        "cached there and skipped on re-runs; `--fresh` recomputes everything).",
        "",
        f"**Run time.** The nine small data sets at 20 repetitions, every default method (the "
        f'"γ by CV" ones included), 2 processes, from a fresh clone after `make install`: '
        f"417 s, of which 397 s of tasks and the rest `--install`'s packages and ITML "
        f"environment (`python -m bench.paper --install --datasets {SMALL} --reps 20`, the "
        f"otherwise idle Zen 5, 2026-11-30, commit b589e79). That run reproduced the committed "
        f"rows to the last digit of the accuracy and the iteration count, except soybean rows "
        f"measured on the Intel Xeon: soybean's kNN graph follows the BLAS kernel's rounding "
        f"of tied distances (bench/paper/README.md), and those rows have since been re-run "
        f"here. The whole table's estimate is the last table of this section.",
        "",
        "**Where the rows come from.** Per method, the machines that measured its rows and "
        "the code that computed them (`commit`; rows from before 2026-11-30 have none). Fit "
        "times from different machines are not comparable one to one: where the repetitions "
        "of a method on a data set ran on more than one machine its fit time is marked ‡ and "
        "the fit-time comparison names the machines. How each run was made, and which fit "
        "times are upper bounds because the machine was shared: bench/paper/README.md, "
        '"History of the committed rows".',
        "",
        *provenance_table(records or [], methods),
        "",
        "Pairwise (Rand) accuracy in %, mean ± std over repetitions; fit time in seconds "
        '(kernel learning, or the peer\'s whole fit; for the "γ by CV" methods the '
        "cross-validation that chose γ plus the final fit), one thread per task. Protocol: see "
        "`bench/paper/run.py`; data: `bench/paper/README.md`. Figure: "
        "`bench/paper/accuracy_vs_time.png`.",
        "",
    ]
    lines += dataset_sections(agg, names, methods, pub)
    lines += speed_table(agg, names, methods, pub)
    lines += runtime_table(agg, names, methods)
    lines.append(END)
    return "\n".join(lines)


def dataset_sections(agg, names, methods, pub, paper=None, normalized=False):
    """Per data set: our methods' accuracy and fit time beside the published numbers, and
    our best against the best published (of ``paper``'s tables only, if given).
    ``normalized``: a column with kernel k-means on the cosine-normalised kernel too (the
    verdict keeps the papers' rule, kernel k-means on K)."""
    lines = []
    for name in names:
        best = pub.best_published(name, paper=paper) if pub else None
        header = f"### {name}"
        if best and best[0] is not None:
            header += f" — best published {best[0]:.2f} ± {best[1] or 0:.2f} ({best[2]})"
        unit_col = " normalised kernel (%) |" if normalized else ""
        lines += [
            header,
            "",
            f"| method | accuracy (%) |{unit_col} fit time (s) | reps | published (%) |",
            "|---|---|---|---|---|" + ("---|" if normalized else ""),
        ]
        ours_best = None
        for m in methods:
            a = agg.get((name, m))
            if not a:
                continue
            p = pub.published_value(name, m) if pub and hasattr(pub, "published_value") else None
            if p and paper and not p[2].startswith(paper):
                p = None  # another paper's number, measured at its own protocol
            ptxt = f"{p[0]:.2f} ± {p[1]:.2f} ({p[2]})" if p and p[0] is not None else ""
            if a["reps"]:
                acc = f"{a['acc']:.2f} ± {a['acc_std']:.2f}"
                tt = f"{a['time']:.3g} ± {a['time_std']:.2g}"
                if len(a.get("machines", ())) > 1:
                    tt += " ‡"
                if a["errors"]:
                    acc += f" ({a['errors']} failed)"
                if m.startswith(NPKL_PREFIXES) and (ours_best is None or a["acc"] > ours_best[1]):
                    ours_best = (m, a["acc"], a["acc_std"])
            else:
                acc, tt = f"failed: {a['error_example'][:80]}", "—"
            unit = ""
            if normalized:
                unit = (
                    f" {a['acc_unit']:.2f} ± {a['acc_unit_std']:.2f} |"
                    if "acc_unit" in a
                    else "  |"
                )
            lines.append(f"| {label(m)} | {acc} |{unit} {tt} | {a['reps']} | {ptxt} |")
        chosen = [
            f"{label(m)}: " + ", ".join(f"{g:g} ×{c}" for g, c in a["gammas"].items())
            for m in methods
            if "gammas" in (a := agg.get((name, m), {}))
        ]
        if chosen:
            lines += [
                "",
                "γ chosen by cross-validation on each repetition's constraints "
                "(γ ×repetitions): " + "; ".join(chosen) + ".",
            ]
        if ours_best and best and best[0] is not None:
            m, acc, std = ours_best
            ok = acc >= best[0] - (best[1] or 0) or acc + std >= best[0]
            verdict = "above" if acc >= best[0] else ("within one std" if ok else "BELOW")
            lines += [
                "",
                f"Our best: **{label(m)} {acc:.2f}** vs best published {best[0]:.2f}: "
                f"**{verdict}**.",
            ]
        lines.append("")
    return lines


def markdown_simplenpkl(
    agg, names, methods, wall_seconds, reps, command, machines=None, commits=None
):
    """The section of ``python -m bench.paper --protocol simplenpkl``: simplenpkl-jmlr2011's own
    protocol, against its Tables 2, 3 and 7 only."""
    from bench.paper import protocols

    pub = _published()
    machines = machines or {}
    measured = "; ".join(
        f"{m} ({c} rows)" for m, c in sorted(machines.items(), key=lambda x: -x[1])
    )
    lines = [
        BEGIN_SNPKL,
        "## Replication at simplenpkl-jmlr2011's own protocol",
        "",
        f"Report written on: {_machine()}. Date: {time.strftime('%Y-%m-%d')}. "
        + (f"Rows measured on: {measured}. " if measured else "")
        + _code_line(commits)
        + f"Latest invocation: `{command}` "
        + (
            "(tables only, nothing run)."
            if wall_seconds is None
            else f"({reps} repetitions, {wall_seconds:.0f} s)."
        ),
        "",
        "The protocol simplenpkl-jmlr2011's Tables 2, 3 and 7 were measured at (§7.1), as "
        "`bench/paper/protocols.py` reads it: random pairs of points, each a must-link if "
        "the two share a class and a cannot-link otherwise, as many as bring the must-link "
        f"graph to {protocols.COMPONENT_RATIO:.0%} n connected components (adult: the "
        "paper's printed counts, Table 7); B = 1 (n on adult); C = γ = 1; p = 2; kNN graph, "
        "σ rule, rank (Pataki bound), kernel k-means and pairwise accuracy as in the main "
        "table. Results: `bench/paper/results_simplenpkl.jsonl`; figure: "
        "`bench/paper/accuracy_vs_time_simplenpkl.png`. Published numbers: simplenpkl "
        "Tables 2, 3 and 7 only (ck-means = COP-KMeans).",
        "",
    ]
    pairs = defaultdict(list)
    for (name, _m), a in agg.items():
        pairs[name] += a.get("pairs", [])
    counts = [f"{name} {int(np.median(pairs[name]))}" for name in names if pairs.get(name)]
    if counts:
        lines += ["Constraint pairs per repetition (median): " + ", ".join(counts) + ".", ""]
    lines += [
        "Accuracy: kernel k-means on K, the papers' rule and the one every verdict "
        "uses; beside it, kernel k-means on the cosine-normalised kernel (`kernel_kmeans"
        "(V, k, normalize=True)`, docs/decisions/normalised-kernel-clustering.md): at "
        "this protocol many points are in no constraint, and SimpleNPKL "
        "gives them short rows of V.",
        "",
    ]
    lines += dataset_sections(agg, names, methods, pub, paper="simplenpkl", normalized=True)
    lines += speed_table(agg, names, methods, pub, paper="simplenpkl")
    lines.append(END_SNPKL)
    return "\n".join(lines)


#: Required ratio of a paper's CPU time to ours (issue 3).
SPEEDUP_TARGET = 100.0


def speed_pairs(agg, names, methods, published, paper=None):
    """(data set, method, aggregate, published (mean, std, source), ratio) for every pair
    with a measured fit and a published CPU time (``published(name, method,
    quantity="cpu")``; ``paper``: only that paper's tables); ratio = published / our median."""
    for name in names:
        for m in methods:
            a = agg.get((name, m))
            p = published(name, m, quantity="cpu")
            if not a or not a["reps"] or not p or p[0] is None:
                continue
            if paper and not p[2].startswith(paper):
                continue
            med = a["time_median"]
            yield name, m, a, p, (p[0] / med if med > 0 else float("inf"))


def speed_table(agg, names, methods, pub, paper=None):
    """Our median fit time against the CPU time the paper reports for the same method and
    data set (``published_value(..., quantity='cpu')``), one row per pair that has both.

    The verdict uses the median over repetitions, the statistic every timing of the
    benchmarks uses: a repetition's fit time also holds whatever else the machine did
    meanwhile, and, in rows measured without the harness's warm-up (``run.warm_up``; rows
    without ``"warm": true``), the first fit in each worker process pays numba's loading of
    its compiled kernels (0.3-0.4 s, chessboard's KL-ADMM repetitions 0 and 1 against
    0.03 s for the others). The mean is shown beside it, and the count the mean would
    give."""
    if pub is None or not hasattr(pub, "published_value"):
        return []
    rows, met, met_mean = [], 0, 0
    for name, m, a, p, ratio in speed_pairs(agg, names, methods, pub.published_value, paper):
        met += ratio >= SPEEDUP_TARGET
        met_mean += a["time"] > 0 and p[0] / a["time"] >= SPEEDUP_TARGET
        where = " + ".join(short_machine(x) for x in a.get("machines", ())) or "—"
        rows.append(
            f"| {name} | {label(m)} | {a['time_median']:.3g} | {a['time']:.3g} | "
            f"{p[0]:.4g} | {ratio:.0f}x | "
            f"{'yes' if ratio >= SPEEDUP_TARGET else '**no**'} | "
            f"{a['reps']} | {where} | {p[2]} |"
        )
    if not rows:
        return []
    return [
        "### Fit time against the papers' CPU times",
        "",
        f"Median fit time per repetition (on the machine named; one thread per fit "
        f"unless it says more) against the CPU "
        f"time the paper reports for the same method and data set (their machines: see "
        f"the sources); target ≥ {SPEEDUP_TARGET:.0f}x, judged on the median (the "
        f"statistic of every timing in this file; the mean also holds whatever else the "
        f"machine ran and, in rows measured without the harness's warm-up, the first fit "
        f"of each worker process, which loads numba's compiled kernels). Met on {met} of "
        f"{len(rows)} (on {met_mean} by the mean)."
        + (
            ""
            if met == len(rows)
            else " Where the misses' time goes, and what it cannot go below: "
            "docs/decisions/small-fit-times.md."
        ),
        "",
        "This table pools the machines that measured a pair. Machine by machine, with the "
        "rows kept in files of their own (such as each machine's runs on the current "
        "code): `python -m bench.paper.fit_time_machines` (`--protocol simplenpkl` for "
        "simplenpkl-jmlr2011's protocol).",
        "",
        "| data set | method | ours, median (s) | ours, mean (s) | published (s) | ratio "
        "| ≥ 100x | reps | machine | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def runtime_table(agg, names, methods, reps=20, workers=2):
    """What ``python -m bench.paper --reps 20`` costs from a clean checkout, estimated from the
    recorded fit times: per data set, the sum over methods of the mean fit time (one
    repetition, every method), times ``reps`` / ``workers``. Graph building, constraint
    sampling and kernel k-means are not included (seconds per data set); failed methods
    count as 0 (COP-KMeans fails within a second on adult). Methods run only on request
    (``run.EXTRA_METHODS``) are not part of that command and not counted."""
    from bench.paper.run import EXTRA_METHODS

    methods = [m for m in methods if m not in EXTRA_METHODS]
    rows, total = [], 0.0
    for name in names:
        per = {
            m: agg[(name, m)]["time"]
            for m in methods
            if (name, m) in agg and agg[(name, m)]["reps"]
        }
        if not per:
            continue
        missing = [label(m) for m in methods if (name, m) not in agg]
        one = float(sum(per.values()))
        est = one * reps / workers
        total += est
        top = max(per, key=per.get)
        rows.append(
            f"| {name} | {one:.1f} | {est / 60:.1f} | {label(top)} ({per[top]:.0f} s) | "
            f"{', '.join(missing) if missing else '—'} |"
        )
    if not rows:
        return []
    return [
        "### Run time of the whole table",
        "",
        f"Estimated from the fit times above: one repetition of every method, and "
        f"{reps} repetitions on {workers} processes (`python -m bench.paper --reps {reps}`; "
        f"graph building and k-means not included). Methods never run on a data set are "
        f"listed and not counted, so those rows are lower bounds. **Whole table: about "
        f"{total / 3600:.1f} h.**",
        "",
        "| data set | one repetition (s) | 20 repetitions, 2 processes (min) | "
        "costliest method | not run |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def write_report(
    records,
    names,
    methods,
    report_path,
    *,
    wall_seconds,
    reps,
    command,
    figure_path=None,
    protocol="kl-admm",
):
    """Rewrite the replication section of ``report_path`` from *all* recorded results (every
    data set and method in the results file, not only this invocation's), and the figure
    (default: the protocol's ``FIGURES``). ``protocol="simplenpkl"``: its own section
    (``BEGIN_SNPKL``) instead."""
    from bench.paper.datasets import DATASETS

    present = {r["dataset"] for r in records}
    names = [d for d in DATASETS if d in present] + sorted(present - set(DATASETS))
    seen = {r["method"] for r in records}
    methods = [m for m in methods if m in seen] + sorted(seen - set(methods))
    agg = aggregate(records)
    figure_path = Path(figure_path or FIGURES[protocol])
    if protocol == "simplenpkl":
        figure(
            agg,
            names,
            methods,
            figure_path,
            paper="simplenpkl",
            title="Pairwise accuracy vs fit time at simplenpkl-jmlr2011's protocol "
            "(dashed: its best published, band: its std)",
        )
        write, begin, end = markdown_simplenpkl, BEGIN_SNPKL, END_SNPKL
    else:
        figure(agg, names, methods, figure_path)
        write, begin, end = markdown, BEGIN, END
    extra = {} if protocol == "simplenpkl" else {"records": records}
    section = write(
        agg,
        names,
        methods,
        wall_seconds,
        reps,
        command,
        machines=machine_counts(records),
        commits=commit_counts(records),
        **extra,
    )
    report_path = Path(report_path)
    text = report_path.read_text() if report_path.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    report_path.write_text(text)
    print(section)
