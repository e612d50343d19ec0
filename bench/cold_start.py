"""Cold start of ``npkl demo``: numba compile time and fit time, this tree against a baseline.

    python -m bench.cold_start --baseline ae2c9f7 --reps 3

Each run is ``run_demo`` (``npkl demo``) in a fresh process with an empty numba cache (a new
``NUMBA_CACHE_DIR``), then once more with the cache it filled (warm). The demo may start a
background compile helper (npkl_dist._precompile): the compile time is the demo process's own
wall time in compiles (what it waits for), and the CPU of all its processes is reported beside. Compile time is the wall
time inside numba's outermost ``"numba:compile"`` events (a kernel compiled, not loaded from
the cache), and the compiling thread's CPU time in them, counted by a listener of the measuring process itself, so that the baseline,
which prints no compile time, is measured the same way. The fit time is the demo's
``fit_seconds`` less the compiles inside the fit. The baseline is a temporary ``git worktree``
of ``--baseline``; the runs alternate between the two trees (ABBA order) so that other work on
the machine hits both alike. The embeddings of the two trees are compared byte for byte.
Writes bench/results/cold_start.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # python bench/cold_start.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _results

ROOT = _results.ROOT

#: The measuring process: a compile listener, then the demo (argv: out dir, JSON path).
CHILD = r"""
import json, sys, time
from numba.core import event

class Watch(event.Listener):
    def __init__(self):
        self.seconds, self.cpu, self.count, self.depth = 0.0, 0.0, 0, 0
    def on_start(self, ev):
        if self.depth == 0:
            self.t0, self.c0 = time.perf_counter(), time.thread_time()
        self.depth += 1
    def on_end(self, ev):
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.perf_counter() - self.t0
            self.cpu += time.thread_time() - self.c0
            self.count += 1

w = Watch()
event.register("numba:compile", w)
t0 = time.perf_counter()
from npkl_dist.job import _job
learn, in_fit = _job._learn, []

def timed_learn(*a, **k):  # the compiles inside the fit
    before = w.seconds
    try:
        return learn(*a, **k)
    finally:
        in_fit.append(w.seconds - before)

_job._learn = timed_learn
from npkl_flows._demo import run_demo
report = run_demo(sys.argv[1])
wall = time.perf_counter() - t0
json.dump({"wall": wall, "compile": w.seconds, "compile_cpu": w.cpu, "kernels": w.count,
           "fit": report["fit_seconds"], "fit_compile": sum(in_fit),
           "n_sweeps": report["n_sweeps"]}, open(sys.argv[2], "w"))
"""


def _git(*args, cwd=ROOT):
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _shim(tree: Path, where: Path) -> Path:
    """A directory holding ``npkl_flows`` -> ``tree``/flows (the name the CLI imports)."""
    where.mkdir(parents=True, exist_ok=True)
    link = where / "npkl_flows"
    if not link.exists():
        link.symlink_to(tree / "flows", target_is_directory=True)
    return where


def run_once(tree: Path, shim: Path, cache: Path, work: Path) -> dict:
    out, js = work / "out", work / "run.json"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=f"{shim}{os.pathsep}{tree}")
    env.pop("NPKL_BACKGROUND_COMPILE", None)  # as a user's first run has it
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", CHILD, str(out), str(js)],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = json.loads(js.read_text())
    # CPU of the demo's process and the processes it waited for (a background compile helper)
    rec["cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    rec["embedding_sha256"] = hashlib.sha256((out / "embedding.npy").read_bytes()).hexdigest()
    return rec


def measure(tree: Path, shim: Path, tmp: Path, warm: bool = True) -> dict:
    """One cold run (empty cache) and, if ``warm``, one warm run (the cache it filled)."""
    cache = Path(tempfile.mkdtemp(prefix="numba-cache-", dir=tmp))
    cold = run_once(tree, shim, cache, Path(tempfile.mkdtemp(dir=tmp)))
    if not warm:
        return {
            "compile_s": cold["compile"],
            "compile_cpu_s": cold["compile_cpu"],
            "kernels": cold["kernels"],
            "cold_fit_s": cold["fit"] - cold["fit_compile"],
            "cold_wall_s": cold["wall"],
            "cold_cpu_s": cold["cpu"],
            "warm_fit_s": None,
            "n_sweeps": cold["n_sweeps"],
            "embedding_sha256": cold["embedding_sha256"],
        }
    warm = run_once(tree, shim, cache, Path(tempfile.mkdtemp(dir=tmp)))
    return {
        "compile_s": cold["compile"],
        "compile_cpu_s": cold["compile_cpu"],
        "kernels": cold["kernels"],
        "cold_fit_s": cold["fit"] - cold["fit_compile"],
        "cold_wall_s": cold["wall"],
        "cold_cpu_s": cold["cpu"],
        "warm_fit_s": warm["fit"],
        "warm_compile_s": warm["compile"],
        "n_sweeps": cold["n_sweeps"],
        "embedding_sha256": cold["embedding_sha256"],
        "same_warm": cold["embedding_sha256"] == warm["embedding_sha256"],
    }


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def _report(runs, args, argv, base_commit):
    """Write the results of the runs so far (after every run: a long benchmark on a busy
    machine leaves its partial results if stopped)."""
    if not runs["baseline"] or not runs["this"]:
        return
    rows = []
    for name, label in (("baseline", f"baseline ({base_commit})"), ("this", "this commit")):
        rs = runs[name]
        rows.append(
            {
                "tree": label,
                "compile_s": statistics.median(r["compile_s"] for r in rs),
                "compile_spread": _spread([r["compile_s"] for r in rs]),
                "compile_cpu_s": statistics.median(r["compile_cpu_s"] for r in rs),
                "compile_cpu_spread": _spread([r["compile_cpu_s"] for r in rs]),
                "kernels": int(statistics.median(r["kernels"] for r in rs)),
                "cold_fit_s": statistics.median(r["cold_fit_s"] for r in rs),
                "warm_fit_s": _median_or_none([r["warm_fit_s"] for r in rs]),
                "cold_wall_s": statistics.median(r["cold_wall_s"] for r in rs),
                "cold_cpu_s": statistics.median(r["cold_cpu_s"] for r in rs),
                "n_sweeps": rs[0]["n_sweeps"],
            }
        )
    ratio = rows[1]["compile_s"] / rows[0]["compile_s"]
    ratio_cpu = rows[1]["compile_cpu_s"] / rows[0]["compile_cpu_s"]
    same = {r["embedding_sha256"] for rs in runs.values() for r in rs}
    notes = [
        f"Cold compile time of this commit / baseline (medians of {min(map(len, runs.values()))}): wall "
        f"{ratio:.2f}, CPU {ratio_cpu:.2f} (the compiling thread's CPU time: less sensitive to "
        f"other jobs on the machine than wall time).",
        f"Cold demo wall time this commit / baseline: "
        f"{rows[1]['cold_wall_s'] / rows[0]['cold_wall_s']:.2f}; CPU of all the demo's "
        f"processes (a background compile helper included): "
        f"{rows[1]['cold_cpu_s'] / rows[0]['cold_cpu_s']:.2f}.",
        "Embeddings: "
        + (
            "identical bytes in all runs of both trees."
            if len(same) == 1
            else "; ".join(
                f"{name}: {len({r['embedding_sha256'] for r in rs})} distinct over its runs"
                for name, rs in runs.items()
            )
            + " (the trees differ: later commits than the baseline changed the fit)."
        ),
        "Other jobs shared the machine's cores; the runs alternate between the trees "
        "(ABBA) so that both met the same load. Why compiling is what it is: "
        "docs/decisions/cold-start.md.",
    ]
    _results.write(
        "cold_start",
        title="Cold start of npkl demo (numba compile, empty cache)",
        measures=(
            "median over cold runs (fresh NUMBA_CACHE_DIR) of the wall time in numba compiles "
            "(min-max beside it), the fit's time without its compiles, the same fit with the "
            "cache warm, and the whole cold demo's wall time"
        ),
        reference=f"the baseline commit {base_commit}, run alternately with this one",
        command=_results.command("-m bench.cold_start", argv),
        columns=[
            ("tree", "tree"),
            ("compile_s", "compile s"),
            ("compile_spread", "compile min-max s"),
            ("compile_cpu_s", "compile CPU s"),
            ("compile_cpu_spread", "CPU min-max s"),
            ("kernels", "compiles"),
            ("cold_fit_s", "cold fit s (less compiles)"),
            ("warm_fit_s", "warm fit s"),
            ("cold_wall_s", "cold demo wall s"),
            ("cold_cpu_s", "cold demo CPU s (all processes)"),
            ("n_sweeps", "iterations"),
        ],
        rows=rows,
        notes=notes,
        args=vars(args) | {"out": None if args.out is None else str(args.out)},
        path=args.out,
        extra={"runs": runs, "baseline_commit": base_commit},
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__)
    ap.add_argument("--baseline", default="ae2c9f7", help="git ref measured against")
    ap.add_argument("--reps", type=int, default=3, help="cold runs of each tree")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results)")
    ap.add_argument(
        "--no-warm", dest="warm", action="store_false", help="cold runs only (no warm fit)"
    )
    args = ap.parse_args(argv)
    base_commit = _git("rev-parse", "--short=12", args.baseline)
    runs = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="npkl-cold-") as tmp:
        tmp = Path(tmp)
        base_tree = tmp / "baseline"
        _git("worktree", "add", "--detach", str(base_tree), args.baseline)
        try:
            trees = {
                "baseline": (base_tree, _shim(base_tree, tmp / "shim-baseline")),
                "this": (ROOT, _shim(ROOT, tmp / "shim-this")),
            }
            for rep in range(args.reps):
                order = ("baseline", "this") if rep % 2 == 0 else ("this", "baseline")
                for name in order:
                    rec = measure(*trees[name], tmp, warm=args.warm)
                    rec["rep"] = rep
                    runs[name].append(rec)
                    print(f"{name} rep {rep}: {json.dumps(rec)}", file=sys.stderr)
                    _report(runs, args, argv, base_commit)
        finally:
            _git("worktree", "remove", "--force", str(base_tree))
    return 0


if __name__ == "__main__":
    sys.exit(main())
