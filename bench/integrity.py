"""Benchmark: what verifying a run's stages costs (issue 74): resume, export, extend and a
crash-resume's reads of an intact run, with the stage checks on and off, in one process.

    python bench/integrity.py --n 1000000

Data: ``--n`` points in 8 dimensions (10 Gaussian blobs), 1% labelled, a run made by
``npkl fit --run`` (kNN graph, rank 16, ``--max-sweeps 3``: the run's size is the point, not
its fit), and 10,000 new points for ``npkl extend``. Then, alternating the two arms
``--repeats`` times (checks on: the default; off: ``npkl_dist.store._stage_data.VERIFY =
False``, which no user can set), the wall time of

* ``resume``: ``npkl resume RUN`` of the finished run (its results, read and verified);
* ``export``: ``npkl export RUN --out DIR``;
* ``extend``: ``npkl extend RUN --features NEW --out DIR`` (the graph's degrees are verified
  against the verified graph);
* ``crash reads``: what a resume after a crash reads before learning continues:
  ``read_inputs``, ``read_graph``, ``read_plan`` and ``latest_checkpoint``.

Reported per operation: the median of each arm and the overhead (on / off - 1). Writes
``bench/results/integrity_<n>.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

DESCRIPTION = dict(
    title="Verified run-store reads: what the stage checks cost",
    measures="median wall seconds of npkl resume (finished run), npkl export, npkl extend "
    "(10,000 new points) and a crash-resume's reads (inputs, graph, plan, latest checkpoint) "
    "of an intact run, with the stage checks on and off; overhead = on / off - 1",
    reference="the same operations on the same run with the checks off, alternated in one process",
    columns=[
        ("operation", "operation"),
        ("on", "checks on (s)"),
        ("off", "checks off (s)"),
        ("overhead", "overhead"),
    ],
)


def make_run(d: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    from npkl_flows import cli

    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(10, 8))
    y = rng.integers(0, 10, n + 10_000)
    X = centres[y] + rng.normal(size=(n + 10_000, 8))
    part = np.where(rng.random(n) < 0.01, y[:n], -1)
    np.save(d / "X.npy", X[:n])
    np.save(d / "new.npy", X[n:])
    np.save(d / "labels.npy", part)
    run = d / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(
            ["fit", "--features", str(d / "X.npy"), "--labels", str(d / "labels.npy"),
             "--rank", "16", "--max-sweeps", "3", "--clusters", "10", "--quiet",
             "--run", str(run)]
        )  # fmt: skip
    if code != 0:
        raise SystemExit(f"making the run failed (exit {code})")
    return run, d / "new.npy"


def operations(run: Path, new: Path, d: Path):
    from npkl_dist import store as st
    from npkl_flows import cli

    def quiet(argv):
        def f():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert cli.main(argv) == 0, argv

        return f

    def crash_reads():
        with st.RunStore.open(str(run), mode="r") as rs:
            rs.read_inputs()
            rs.read_graph()
            rs.read_plan()
            rs.latest_checkpoint()

    return {
        "resume": quiet(["resume", str(run), "--quiet"]),
        "export": quiet(["export", str(run), "--out", str(d / "export")]),
        "extend": quiet(["extend", str(run), "--features", str(new), "--out", str(d / "ext")]),
        "crash reads": crash_reads,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None, help="reuse (or make and keep) the run's folder")
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)

    from npkl_dist.store import _stage_data

    d = Path(args.keep or tempfile.mkdtemp(prefix="npkl-integrity-"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        run, new = (d / "run", d / "new.npy") if (d / "run").exists() else make_run(d, args.n)
        made = time.perf_counter() - t
        print(f"# run ready in {made:.1f} s: {run}", flush=True)
        ops = operations(run, new, d)
        times = {name: {"on": [], "off": []} for name in ops}
        for _ in range(args.repeats):
            for arm in ("on", "off"):
                _stage_data.VERIFY = arm == "on"
                for name, f in ops.items():
                    t = time.perf_counter()
                    f()
                    times[name][arm].append(time.perf_counter() - t)
        _stage_data.VERIFY = True
        rows = []
        for name, tt in times.items():
            on, off = float(np.median(tt["on"])), float(np.median(tt["off"]))
            rows.append(
                {"operation": name, "on": on, "off": off, "overhead": on / off - 1.0,
                 "on_all": tt["on"], "off_all": tt["off"]}
            )  # fmt: skip
            print(f"{name:<12} on {on:8.2f} s  off {off:8.2f} s  overhead {on / off - 1:+.1%}")
        from bench import _results

        _results.write(
            f"integrity_{args.n}",
            path=args.json,
            rows=rows,
            args={"n": args.n, "repeats": args.repeats},
            extra={"make_seconds": made},
            command=_results.command("bench/integrity.py", argv),
            **DESCRIPTION,
        )
        return {"rows": rows}
    finally:
        if args.keep is None:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
