"""``npkl``: the command line of npkl-dist.

npkl run CONFIG.toml          # the whole pipeline as one Prefect flow
npkl status RUN               # stage, sweep, objective, time left (while it runs, too)
npkl resume RUN               # after a crash: finished stages are skipped
npkl extend RUN --features NEW.npy --out DIR [--eval-labels Y_NEW.npy]
npkl export RUN --out DIR
npkl fit  --features X.npy --labels y.npy --clusters 10 --json --out out/
npkl demo --out demo_out/
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import time
import warnings

from npkl_dist import (
    LOSSES,
    NpklError,
    NpklWarning,
    ValidationError,
    clustering_metrics,
)
from npkl_dist import store as st
from npkl_dist._errors import interface
from npkl_dist.graph._io import read_features, read_labels
from npkl_dist.job._extend import FAR_LENGTHS
from npkl_dist.job._job import (
    SOLVERS,
    ensure_out_dir,
    export_run,
    iterations_label,
    run_fit_in_store,
)
from npkl_dist.solvers.inductive import BASES, KERNELS, REGULARIZERS
from npkl_dist.store import RunNotFoundError
from npkl_flows._active import add_active_parsers
from npkl_flows._config import expand_run, load_config, validate_config
from npkl_flows._demo import run_demo
from npkl_flows._embed import add_embed_parser
from npkl_flows._fit import fit, fit_pipeline_config, run_fit_stages
from npkl_flows._runstart import check_new_run, open_run, start_local_api, use_local_api
from npkl_flows._stages import extend_points, redo, report_dir
from npkl_flows._status import format_status, run_status

__all__ = ["main", "build_parser"]


def _positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _nonneg_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def _gamma(text):
    """A number (validated by the library) or 'cv' (chosen by cross-validation)."""
    if text.strip().lower() == "cv":
        return "cv"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'cv', got {text!r}") from None
    if not math.isfinite(value):  # the library names a value <= 0 (exit 2 as well)
        raise argparse.ArgumentTypeError(
            f"expected a finite number > 0 or 'cv', got {text!r} (e.g. --gamma 1)"
        )
    return value


def _bandwidth(text):
    if text in ("median", "knn"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive number, median or knn, got {text!r}"
        ) from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _add_fit_options(p: argparse.ArgumentParser):
    src = p.add_argument_group("input (exactly one)")
    src.add_argument(
        "--features",
        metavar="PATH",
        help="feature rows: .npy (n x d), .csv (header optional) or .parquet; a kNN "
        "graph is built from them",
    )
    src.add_argument(
        "--edges",
        metavar="PATH",
        help="a given graph: .npy of shape (m, 2) or (m, 3) with weights, or "
        ".csv/.parquet with columns i, j[, w] (0-based, undirected)",
    )
    src.add_argument(
        "--n-points",
        type=_positive_int,
        metavar="N",
        help="number of nodes for --edges (default: largest index + 1)",
    )
    src.add_argument(
        "--duplicates",
        choices=("max", "sum", "mean", "error"),
        default="max",
        help="--edges listing a pair more than once (either direction): keep the largest "
        "weight, their sum or their mean, or refuse a pair with two weights (default: max)",
    )
    con = p.add_argument_group("constraints (exactly one)")
    con.add_argument(
        "--constraints",
        metavar="PATH",
        help="pairs file: .csv/.parquet with columns i, j, type (type must/cannot "
        "or +1/-1), or .npy (m, 3)",
    )
    con.add_argument(
        "--labels",
        metavar="PATH",
        help="partial labels (.npy/.csv/.txt, one integer per point, -1 = unknown); "
        "pairs are sampled with the papers' protocol (0.6n must-link + 0.6n "
        "cannot-link, seeded)",
    )
    con.add_argument(
        "--groups",
        metavar="PATH",
        help="group memberships (.csv/.parquet with columns node, group, or .npy (m, 2); a "
        "node in several groups or none); must-links are sampled within groups, cannot-links "
        "between nodes sharing none (seeded; docs/algorithms.md, 'Group side information')",
    )
    con.add_argument(
        "--n-must",
        type=_nonneg_int,
        metavar="M",
        help="must-link pairs to sample from --labels (default round(0.6 n), or "
        "all the labels allow if fewer)",
    )
    con.add_argument(
        "--n-cannot",
        type=_nonneg_int,
        metavar="M",
        help="cannot-link pairs to sample from --labels (default round(0.6 n), or "
        "all the labels allow if fewer)",
    )
    con.add_argument(
        "--diagonal",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also fit K_ii = 1 for every point (KL-ADMM's protocol; default: on "
        "for --solver admm, off otherwise; bcd does not support it)",
    )
    m = p.add_argument_group("model and solver")
    m.add_argument(
        "--solver",
        choices=SOLVERS + ("inductive",),
        default="bcd",
        help="bcd: block coordinate descent, any loss (default); admm: KL-ADMM, "
        "square loss on targets 1 (must) / 0 (cannot); simplenpkl: SimpleNPKL, "
        "linear loss in closed form (sparse Lanczos), other losses through "
        "its saddle-point dual, maximised by L-BFGS-B (the paper's Alg. 1: "
        "fit_simplenpkl(dual='alg1')); inductive: a kernel function "
        "kappa_W = alpha kappa + psi'L psi on r landmarks (no graph), which `npkl transform` "
        "applies to new points (options below)",
    )
    m.add_argument("--loss", choices=LOSSES, default="square", help="loss (default: square)")
    m.add_argument(
        "--rank",
        type=_positive_int,
        metavar="R",
        help="rank r of K = V'V (default: largest r with r(r+1)/2 <= m, capped at 128)",
    )
    m.add_argument(
        "--gamma",
        type=_gamma,
        default=1.0,
        help="weight of the constraint loss (default: 1.0), or 'cv': chosen from "
        "0.1, 1, 10, 100 by 3-fold cross-validation on held-out constraints "
        "(never labels; scored by k-means with --clusters K, else by AUC)",
    )
    m.add_argument(
        "--bound",
        type=float,
        default=1.0,
        help="b of the linear loss, ||v_i|| <= b (default: 1.0; not used by "
        "simplenpkl, which bounds tr(K^2) instead)",
    )
    m.add_argument(
        "--capacity",
        type=float,
        default=None,
        metavar="B",
        help="simplenpkl: capacity tr(K^2) <= B (default: 100; the papers use 100n on adult)",
    )
    m.add_argument(
        "--knn",
        type=_positive_int,
        default=5,
        help="neighbours per point in the kNN graph (default: 5)",
    )
    m.add_argument(
        "--weighting",
        choices=("gaussian", "mutual"),
        default="gaussian",
        help="kNN edge weights: gaussian (sigma = half the mean distance to the 10 "
        "nearest neighbours) or binary mutual kNN (default: gaussian)",
    )
    m.add_argument(
        "--knn-method",
        choices=("auto", "exact", "pynndescent"),
        default="auto",
        help="kNN search; auto = exact up to 50,000 points, pynndescent above",
    )
    m.add_argument(
        "--scale",
        choices=("none", "standard"),
        default="none",
        help="feature columns before the kNN graph: standard = centred and divided "
        "by their standard deviation (for columns on different scales; "
        "`npkl extend` scales new points alike); default: none, as given",
    )
    m.add_argument(
        "--delta",
        type=float,
        default=1e-3,
        help="delta of L = (1+delta) I - D^-1/2 S D^-1/2 (default: 1e-3)",
    )
    m.add_argument(
        "--max-sweeps",
        type=_positive_int,
        default=None,
        help="sweep limit (bcd block solves: outer iterations); for admm and "
        "simplenpkl the iteration limit (default: the solver's own, bcd 1000, "
        "admm 500, simplenpkl 200)",
    )
    m.add_argument(
        "--tol",
        type=float,
        default=1e-5,
        help="bcd: stop when ||V(t)-V(t-1)|| / ||V(t)|| < tol; admm: when that and "
        "the primal residual ||V-U|| / ||V|| are both < tol; simplenpkl: change < tol or "
        "duality gap <= tol (default: 1e-5)",
    )
    m.add_argument(
        "--method",
        choices=("auto", "sweeps", "block"),
        default="auto",
        help="bcd: plain colour sweeps, or block solves (the unconstrained rows by "
        "AMG-preconditioned CG, alternated with exact updates of the constrained "
        "rows); auto = block from 200 points for the square loss and the "
        "squared hinge, at any size for the hinge, never for linear "
        "(default: auto)",
    )
    m.add_argument(
        "--start",
        choices=("auto", "random", "propagate", "spectral", "coarse", "coarse-free"),
        default="auto",
        help="bcd start: the paper's random rows; propagate = random rows at "
        "constrained points, zero elsewhere; spectral = scaled bottom "
        "eigenvectors of L (LOBPCG); coarse = bottom eigenvectors of L on a "
        "coarse aggregation level, scaled; coarse-free (block solves) = the "
        "same for the unconstrained block on the block solver's own AMG "
        "hierarchy, constrained rows filled from their neighbours; auto = "
        "coarse-free for block solves with at least half the points in no "
        "pair, else coarse; random for plain sweeps (default)",
    )
    m.add_argument(
        "--tol-objective",
        type=float,
        default=None,
        help="bcd: also require |f(t-1) - f(t)| / |f(t)| < this to stop",
    )
    m.add_argument(
        "--tol-kkt",
        type=float,
        default=None,
        help="bcd: also require the scaled KKT residual < this to stop (the "
        "hinge's default already requires its joint residual < 100 x --tol, "
        "at least 1e-6; a value here replaces that bound)",
    )
    m.add_argument(
        "--anderson",
        type=_nonneg_int,
        default=0,
        metavar="M",
        help="admm: Anderson acceleration with memory M (e.g. 5), safeguarded by "
        "the objective; several times fewer iterations on the papers' data "
        "sets; both executors (default: 0, the paper's Alg. 1)",
    )
    m.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float64",
        help="floating-point type of V and L (default: float64)",
    )
    m.add_argument(
        "--seed",
        type=_nonneg_int,
        default=0,
        help="seed of the start, sweep orders, sampling and k-means (default: 0)",
    )
    m.add_argument(
        "--threads",
        type=_positive_int,
        metavar="T",
        help="threads per sweep step (default: all cores)",
    )
    ind = p.add_argument_group("inductive kernel (--solver inductive)")
    ind.add_argument(
        "--regularizer",
        choices=REGULARIZERS,
        default="logdet",
        help="logdet: ITML's LogDet (keeps the base kernel, alpha = 1); frobenius; trace: "
        "low rank (default: logdet)",
    )
    ind.add_argument(
        "--landmarks",
        type=_positive_int,
        default=None,
        metavar="R",
        help="r, the basis functions psi(x) = J'k_B(x) (default: 256, or n when there are "
        "fewer points)",
    )
    ind.add_argument(
        "--kernel",
        choices=KERNELS,
        default="rbf",
        help="base kernel: rbf exp(-|x-y|^2 / 2 bandwidth^2) or linear (default: rbf)",
    )
    ind.add_argument(
        "--bandwidth",
        type=_bandwidth,
        default="median",
        help="rbf bandwidth sigma, or a rule: median (2 sigma^2 = the median squared distance "
        "of sampled pairs; default) or knn (the kNN graph's sigma: very local)",
    )
    ind.add_argument(
        "--basis",
        choices=BASES,
        default="kmeans++",
        help="landmarks by k-means++ seeding or k-means centres on a sample, a random subset; "
        "or cluster indicators J over a sample (default: kmeans++)",
    )
    ind.add_argument(
        "--bounds",
        type=float,
        nargs=2,
        metavar=("U", "L"),
        help="must-link pairs d <= U, cannot-link d >= L (squared kernel distances; default: "
        "the 5th and 95th percentiles over sampled pairs)",
    )
    x = p.add_argument_group("runs and execution")
    x.add_argument(
        "--run",
        metavar="RUN",
        help="write the fit into a run store and checkpoint it: a run id (under "
        "$NPKL_HOME/runs/), a local path, or a store URL such as s3://bucket/runs/x; "
        "`npkl resume RUN` continues it after a crash",
    )
    x.add_argument(
        "--executor",
        choices=("inprocess", "dask"),
        default="inprocess",
        help="inprocess: numba threads in this process (default); dask: row blocks "
        "on Dask workers (a LocalCluster, or --dask ADDRESS)",
    )
    x.add_argument(
        "--workers",
        type=_positive_int,
        default=2,
        metavar="N",
        help="workers of the local Dask cluster (default: 2)",
    )
    x.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="address of an existing Dask scheduler (e.g. tcp://host:8786)",
    )
    x.add_argument(
        "--blocks",
        type=_positive_int,
        metavar="B",
        help="row blocks for the Dask executor (default: one per worker)",
    )
    x.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=1,
        metavar="N",
        help="with --run: checkpoint every N sweeps (default: 1)",
    )
    o = p.add_argument_group("downstream and output")
    o.add_argument(
        "--clusters",
        type=_positive_int,
        metavar="K",
        help="clusters for kernel k-means (default: number of classes in "
        "--eval-labels; without either, no clustering)",
    )
    o.add_argument(
        "--normalize-kernel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cluster with the cosine-normalised kernel K_ij / sqrt(K_ii K_jj) "
        "(k-means on unit-length rows of V), or (--no-normalize-kernel) on V itself; "
        "default: normalised when the points in no constraint have short rows of V "
        "(which plain kernel k-means lumps together), else V itself",
    )
    o.add_argument(
        "--cluster-method",
        choices=("kmeans", "pck"),
        default=None,
        help="pck: k-means on the rows of V that also pays for every violated constraint "
        "(PCK-means); kmeans: kernel k-means, which ignores the constraints; default: pck "
        "when there are constraints",
    )
    o.add_argument(
        "--eval-labels",
        metavar="PATH",
        help="true labels for metrics (pairwise Rand accuracy, ARI, NMI)",
    )
    o.add_argument(
        "--out",
        metavar="DIR",
        help="write embedding.npy (n x r, original point order), clusters.npy, "
        "summary.json and the pictures embedding.png and objective.png into DIR",
    )
    o.add_argument(
        "--plot",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --out, draw embedding.png (a seeded t-SNE of the rows of V, coloured by "
        "--eval-labels else by cluster, metrics in the title) and objective.png (the gap "
        "to the final objective, log axis); --no-plot skips them (t-SNE takes seconds)",
    )
    o.add_argument(
        "--json", action="store_true", help="print one JSON object with the results on stdout"
    )
    o.add_argument("--quiet", action="store_true", help="no progress on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npkl",
        description="Learn a nonparametric low-rank kernel K = V'V from pairwise must-link / "
        "cannot-link constraints and a data manifold, then cluster with it.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fit = sub.add_parser(
        "fit",
        help="learn a kernel and cluster with it",
        description="Learn a kernel from features or a graph plus constraints.",
    )
    _add_fit_options(fit)
    demo = sub.add_parser(
        "demo",
        help="the main job on scikit-learn's digits, with a picture",
        description="Plain k-means vs npkl on the 1797 handwritten digits.",
    )
    demo.add_argument(
        "--out",
        default="demo_out",
        metavar="DIR",
        help="where the PNG and JSON go (default: demo_out)",
    )
    demo.add_argument("--loss", default="square", help="loss (default: square)")
    demo.add_argument("--seed", type=_nonneg_int, default=0)
    demo.add_argument(
        "--max-sweeps",
        type=_positive_int,
        default=500,
        help="sweeps / outer iterations at most (default: 500)",
    )
    demo.add_argument(
        "--method",
        choices=("auto", "sweeps", "block"),
        default="auto",
        help="bcd method (default: auto, which picks block solves here: on "
        "digits they converge in 242 outer iterations where plain sweeps "
        "need about 2,000)",
    )
    so_help = (
        'fsspec options of a store URL as JSON, e.g. \'{"endpoint_url": '
        '"http://127.0.0.1:9000"}\' (credentials come from the usual AWS variables)'
    )
    run = sub.add_parser(
        "run",
        help="the whole pipeline (Prefect flow) from a TOML configuration",
        description="Run ingest, graph, colouring, learning, evaluation, extension and report "
        "as one Prefect flow into a run store. Without PREFECT_API_URL Prefect "
        "starts a temporary local server for this run; with it, the flow run is "
        "recorded on that server. See README 'Pipelines'.",
    )
    run.add_argument("config", metavar="CONFIG.toml", help="pipeline configuration (TOML)")
    run.add_argument("--run", metavar="RUN", help="override the config's run id / URL")
    run.add_argument(
        "--dask", metavar="ADDRESS", help="an existing Dask scheduler (overrides [execution] dask)"
    )
    run.add_argument("--json", action="store_true", help="print the stage results as JSON")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    resume = sub.add_parser(
        "resume",
        help="continue a run from its last complete checkpoint",
        description="Continue a run written by `npkl run` or `npkl fit "
        "--run RUN`: finished stages are skipped, learning "
        "restarts from the newest complete checkpoint.",
    )
    resume.add_argument("run", metavar="RUN", help="run id, path or store URL")
    resume.add_argument("--json", action="store_true", help="print the summary as JSON")
    resume.add_argument("--quiet", action="store_true", help="no progress on stderr")
    resume.add_argument("--storage-options", metavar="JSON", help=so_help)
    resume.add_argument(
        "--break-lock",
        action="store_true",
        help="remove the run's writer lock first: only when the process that held it is gone "
        "(killed on another host; a dead process on this host is taken over by itself)",
    )
    resume.add_argument(
        "--force-config",
        action="store_true",
        help="the run's configuration was edited on purpose after learning started (loss, "
        "gamma, seed, delta or bound): continue from the newest checkpoint's V as the start "
        "of a fit under the new values, recorded in the run (npkl status shows it)",
    )
    resume.add_argument(
        "--redo",
        metavar="STAGE",
        choices=["ingest", "graph", "plan", "learn"],
        help="recompute STAGE and every stage after it first (ingest, graph, plan or learn): "
        "the repair `npkl status` and damaged-data errors name",
    )
    status = sub.add_parser(
        "status",
        help="stage, sweep, objective and time left of a run",
        description="Read a run's progress from its store (no lock; works while it runs).",
    )
    status.add_argument("run", metavar="RUN", help="run id, path or store URL")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--storage-options", metavar="JSON", help=so_help)
    extend = sub.add_parser(
        "extend",
        help="embed new points into a finished run",
        description="Place points not seen in training from their kNN in "
        "the training set (bcdkl-tnnls2015 III-E), without "
        "retraining; writes extended_embedding.npy, "
        "extended_clusters.npy (when the run has clusters), "
        "extended_far.npy (True for points farther than 4 "
        "neighbourhood lengths from the training data) and "
        "extended.json into --out.",
    )
    extend.add_argument("run", metavar="RUN", help="run id, path or store URL")
    extend.add_argument(
        "--features",
        required=True,
        metavar="PATH",
        help="new feature rows (.npy, .csv, .parquet), same columns as training",
    )
    extend.add_argument("--out", required=True, metavar="DIR", help="output directory")
    extend.add_argument(
        "--eval-labels",
        metavar="PATH",
        help="true classes of the new points (.npy/.csv/.txt, one per row, "
        "-1 = unknown): score their clusters (pairwise accuracy, ARI, "
        "NMI; printed and written to extended_metrics.json)",
    )
    extend.add_argument("--storage-options", metavar="JSON", help=so_help)
    extend.add_argument("--json", action="store_true", help="print extended.json instead")
    transform = sub.add_parser(
        "transform",
        help="embed points with an inductive kernel (npkl fit --solver inductive)",
        description="z(x) for every row of --features, in chunks: the inductive kernel's "
        "feature map, z(x)'z(y) = kappa_W(x, y). RUN: the run (`--run`), the --out directory "
        "or the model.npz `npkl fit --solver inductive` wrote.",
    )
    transform.add_argument(
        "run", metavar="RUN", help="run id / path / URL, directory or model.npz"
    )
    transform.add_argument(
        "--features",
        required=True,
        metavar="PATH",
        help="rows to embed: .npy (memory-mapped), .csv, .parquet or a Zarr array",
    )
    transform.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="a directory (embedding.npy in the order given, transform.json), or a Zarr path "
        "or URL ending in .zarr (resumable: a rerun computes only the missing chunks)",
    )
    transform.add_argument(
        "--chunk-rows", type=_positive_int, metavar="N", help="rows per chunk (default: 16384)"
    )
    transform.add_argument(
        "--threads", type=_positive_int, default=1, metavar="T", help="threads (default: 1)"
    )
    transform.add_argument(
        "--executor",
        choices=("inprocess", "dask"),
        default="inprocess",
        help="dask: one task per chunk on a LocalCluster (--workers) or --dask ADDRESS; needs "
        "a .zarr --out and a .npy or Zarr --features",
    )
    transform.add_argument("--workers", type=_positive_int, default=2, metavar="N")
    transform.add_argument("--dask", metavar="ADDRESS", help="an existing Dask scheduler")
    transform.add_argument("--storage-options", metavar="JSON", help=so_help)
    transform.add_argument("--json", action="store_true", help="print the summary as JSON")
    transform.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_embed_parser(sub, _positive_int, _nonneg_int)
    add_active_parsers(sub, _positive_int)
    export = sub.add_parser(
        "export",
        help="write a finished run's embedding and clusters",
        description="Write embedding.npy (n x r, original point order), "
        "clusters.npy and summary.json of a finished run.",
    )
    export.add_argument("run", metavar="RUN", help="run id, path or store URL")
    export.add_argument("--out", required=True, metavar="DIR", help="output directory")
    export.add_argument("--storage-options", metavar="JSON", help=so_help)
    return parser


class _Progress:
    """One updating line on stderr per sweep (only when stderr is a terminal or asked for)."""

    def __init__(self, max_sweeps, enabled=True):
        self.max = max_sweeps
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def __call__(self, sweep, obj, change, seconds):
        if not self.enabled:
            return
        end = "\r" if self.tty else "\n"
        of = f"/{self.max}" if self.max else ""
        sys.stderr.write(
            f"sweep {sweep:>4}{of}  objective {obj:.6g}  change {change:.2e}  "
            f"{seconds * 1e3:.1f} ms/sweep  elapsed {time.perf_counter() - self.t0:.1f}s{end}"
        )
        sys.stderr.flush()

    def close(self):
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def _announce(command: str, quiet: bool, *, run=None, out=None) -> None:
    """Where a command writes, on stderr before it starts (not with --quiet): the run
    store and the report or output directory, and the npkl home they default to."""
    if quiet:
        return
    parts = []
    if run is not None:
        parts.append(f"run store {run}")
    if out is not None:
        parts.append(f"{'report' if run is not None else 'output'} {os.path.abspath(out)}")
    if parts:
        sys.stderr.write(
            f"npkl {command}: {', '.join(parts)} (npkl home {st.npkl_home()}: NPKL_HOME)\n"
        )


def _cmd_fit(args) -> int:
    """The pipeline's stages in this process (npkl_flows._fit), not Prefect."""
    if args.solver == "inductive":
        from npkl_flows._inductive import cmd_fit_inductive

        return cmd_fit_inductive(args, _announce)

    if args.out:
        ensure_out_dir(args.out, "--out")  # before the fit, not after it
    _announce(
        "fit", args.quiet, run=None if args.run is None else st.resolve_run(args.run), out=args.out
    )
    summary, V, clusters = fit(
        lambda run: fit_pipeline_config(args, run), run=args.run, quiet=args.quiet
    )
    if args.out:
        # the report stage wrote embedding.npy, clusters.npy, summary.json and (unless
        # --no-plot) embedding.png and objective.png there
        if clusters is None and not args.quiet:
            sys.stderr.write(
                "note: no --clusters or --eval-labels, so clusters.npy was not written\n"
            )
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:  # --quiet too: the one result line stays
        line = (
            f"objective {summary['objective']:.6g} after {iterations_label(summary)} "
            f"({summary['fit_seconds']:.2f}s), rank {summary['rank']}"
        )
        if "metrics" in summary:
            mtr = summary["metrics"]
            line += (
                f"; pairwise accuracy {mtr['rand_accuracy']:.4f}, ARI {mtr['ari']:.4f}, "
                f"NMI {mtr['nmi']:.4f}"
            )
        print(line)
    return 0


def _storage_options(args):
    raw = getattr(args, "storage_options", None)
    if not raw:
        return None

    try:
        so = json.loads(raw)
    except ValueError as exc:
        raise ValidationError(
            f"--storage-options: {raw!r} is not JSON ({exc}); pass e.g. "
            f'\'{{"endpoint_url": "http://127.0.0.1:9000"}}\''
        ) from None
    if not isinstance(so, dict):
        raise ValidationError(f"--storage-options: expected a JSON object, got {raw!r}")
    return so


#: Seconds Prefect waits for its ephemeral API server (no PREFECT_API_URL) to start; its
#: default is too short for a first start on a busy machine
#: (docs/decisions/pipeline-orchestration.md).
EPHEMERAL_STARTUP_TIMEOUT = 90


def _prefect_env():
    """Quiet Prefect's own INFO logs, and give its ephemeral server time to start, unless
    the user configured them."""

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault(
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(EPHEMERAL_STARTUP_TIMEOUT)
    )


def _quiet_npkl_tracebacks():
    """Our own errors end the command with one line naming the fix (exit status 2); drop
    Prefect's tracebacks of them from the terminal (other exceptions keep theirs, and the
    Prefect API still receives every log)."""

    class DropNpklTracebacks(logging.Filter):
        def filter(self, record):
            exc = record.exc_info[1] if record.exc_info else None
            return not isinstance(exc, NpklError)

    # Prefect's console handler sits on the root logger; its API handlers keep everything
    for h in logging.root.handlers:
        h.addFilter(DropNpklTracebacks())


def _print_pipeline(res, args):
    if args.json:
        sys.stdout.write(json.dumps(res) + "\n")
        return
    st = res["stages"]
    for name, info in st.items() if not args.quiet else ():  # --quiet: the result line only
        how = (
            ("cached (Prefect)" if info.get("cached") else "skipped (done before)")
            if info.get("skipped")
            else f"{info.get('seconds', 0):.1f}s, peak {info.get('peak_rss_mb', 0):.0f} MB"
        )
        print(f"  {name:<9} {how}")
    learn = st.get("learn", {})

    line = (
        f"run {res['run']}: objective {learn.get('objective', float('nan')):.6g} after "
        f"{iterations_label(learn)}"
    )
    m = st.get("evaluate", {}).get("metrics")
    if m:
        line += (
            f"; pairwise accuracy {m['rand_accuracy']:.4f}, ARI {m['ari']:.4f}, NMI {m['nmi']:.4f}"
        )
    print(line)
    if not args.quiet:
        print(f"report in {st.get('report', {}).get('dir')}")


def _cmd_run(args) -> int:
    cfg = load_config(args.config)
    if args.run or args.dask:
        raw = {k: v for k, v in cfg.items()}
        if args.run:
            raw["run"] = args.run
        if args.dask:
            raw["execution"] = {**cfg["execution"], "dask": args.dask}
        cfg = validate_config(raw, source=args.config)
    _prefect_env()
    if "{" in cfg["run"]:
        cfg = {**cfg, "run": expand_run(cfg["run"])}
    check_new_run(cfg)  # before Prefect starts: a clear error, no flow run
    if cfg["output"]["files"] and cfg["output"]["out"]:
        ensure_out_dir(cfg["output"]["out"], "[output] out")
    # Prefect's temporary server boots while this process imports Prefect and creates the
    # run store, which `npkl status` then finds at once (npkl_flows._runstart)
    api = start_local_api()
    try:
        store, cfg = open_run(cfg, resume=False)
    except BaseException:
        if api is not None:
            api.stop()
        raise
    _announce("run", args.quiet, run=store.url, out=report_dir(cfg, store.url))
    try:
        store.mark_stage("flow", {"state": "starting", "pid": os.getpid()})
        # lazy: importing the pipeline imports Prefect, which must see _prefect_env()'s settings
        from npkl_flows.pipeline import run_pipeline
    except BaseException:
        store.close()
        if api is not None:
            api.stop()
        raise
    _quiet_npkl_tracebacks()
    timeout = float(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"])
    with use_local_api(api, timeout):
        res = run_pipeline({**cfg, "run": store.url}, quiet=args.quiet, store=store)
    _print_pipeline(res, args)
    return 0


def _stored_config(run, so):
    with st.RunStore.open(st.resolve_run(run), mode="r", storage_options=so) as rs:
        return rs.config


def _cmd_status(args) -> int:
    s = run_status(st.resolve_run(args.run), storage_options=_storage_options(args))
    print(json.dumps(s) if args.json else format_status(s))
    return 0


def _cmd_extend(args) -> int:
    import numpy as np  # lazy: reading a config stays light

    so = _storage_options(args)
    with st.RunStore.open(st.resolve_run(args.run), mode="r", storage_options=so) as rs:
        cfg = rs.config.get("pipeline")
        if cfg is None:
            raise ValidationError(
                f"RUN: {rs.url} was written by an `npkl fit` older than its pipeline stages, "
                f"which kept no kNN metadata; extend runs made with `npkl run CONFIG.toml` or "
                f"a current `npkl fit --run`"
            )
        X_new = read_features(args.features)
        # the labels are checked before the work, so a bad file costs nothing
        y_new = None if args.eval_labels is None else read_labels(args.eval_labels)
        if y_new is not None and y_new.shape[0] != X_new.shape[0]:
            raise ValidationError(
                f"--eval-labels: {y_new.shape[0]} labels for {X_new.shape[0]} new points; give "
                f"one label per row of --features (-1 for unknown)"
            )
        if y_new is not None and np.count_nonzero(y_new >= 0) < 2:
            raise ValidationError(
                f"--eval-labels: {np.count_nonzero(y_new >= 0)} of the {y_new.size} new points "
                f"have a label; pairwise scores need at least two"
            )
        if (
            y_new is not None
            and rs.stages().get("evaluate", {}).get("info", {}).get("n_clusters") is None
        ):
            raise ValidationError(
                f"--eval-labels: run {rs.url} has no clusters to score (it ran without "
                f"[output] clusters or eval labels); leave --eval-labels out to embed the new "
                f"points, or rerun with [output] clusters = K (npkl fit --clusters K)"
            )
        out = ensure_out_dir(args.out, "--out")
        ext = extend_points(rs, cfg, X_new)
    files = {"embedding": out / "extended_embedding.npy", "far": out / "extended_far.npy"}
    np.save(files["embedding"], ext.V)
    np.save(files["far"], ext.far)
    if ext.clusters is not None:
        files["clusters"] = out / "extended_clusters.npy"
        np.save(files["clusters"], ext.clusters)
    summary = {
        "run": rs.url,
        "n_points": int(ext.V.shape[0]),
        "rank": int(ext.V.shape[1]),
        "n_far": int(ext.far.sum()),
        "far_rows": np.flatnonzero(ext.far).tolist(),
        "far_threshold_lengths": FAR_LENGTHS,
        "n_copies": int(ext.copy.sum()),
        "nearest_distance_lengths": (
            None
            if not ext.length or not ext.V.shape[0]
            else {
                "median": float(np.median(ext.distance) / ext.length),
                "max": float(ext.distance.max() / ext.length),
            }
        ),
    }
    lines = [
        f"embedded {ext.V.shape[0]} new points (rank {ext.V.shape[1]}); "
        f"{summary['n_far']} far from the training data, {summary['n_copies']} copies of "
        f"training rows"
    ]
    if y_new is not None:
        known = y_new >= 0
        metrics = clustering_metrics(y_new[known], ext.clusters[known])
        summary.update(n_labelled=int(known.sum()), **metrics)
        files["metrics"] = out / "extended_metrics.json"
        files["metrics"].write_text(
            json.dumps(
                {"n_points": int(y_new.size), "n_labelled": int(known.sum()), **metrics}, indent=2
            )
            + "\n"
        )
        lines.append(
            f"new points ({int(known.sum())} labelled): pairwise accuracy "
            f"{metrics['rand_accuracy']:.4f}, ARI {metrics['ari']:.4f}, NMI {metrics['nmi']:.4f}"
        )
    files["summary"] = out / "extended.json"
    summary["files"] = {k: str(v) for k, v in files.items()}
    files["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    if args.json:
        print(json.dumps(summary))
    else:
        lines.append("wrote " + ", ".join(str(p) for p in files.values()))
        print("\n".join(lines))
    return 0


def _cmd_embed(args) -> int:
    from npkl_flows._embed import cmd_embed

    return cmd_embed(args, _announce)


def _active_command(name):
    def run(args) -> int:
        from npkl_flows import _active

        def store_open(run):
            return st.RunStore.open(st.resolve_run(run), mode="a")

        return getattr(_active, f"cmd_{name}")(args, store_open)

    return run


def _cmd_transform(args) -> int:
    from npkl_flows._inductive import cmd_transform

    return cmd_transform(args, _storage_options(args))


def _cmd_resume(args) -> int:
    so = _storage_options(args)
    _announce("resume", args.quiet, run=st.resolve_run(args.run))
    cfg = _stored_config(args.run, so)
    if args.break_lock:
        held = st.RunStore.break_lock(st.resolve_run(args.run), storage_options=so)
        if held and not args.quiet:
            print(
                f"npkl resume: removed the lock of pid {held.get('pid')} on {held.get('host')}",
                file=sys.stderr,
            )
    if args.redo:
        with st.RunStore.open(st.resolve_run(args.run), mode="a", storage_options=so) as store:
            redo(store, args.redo)
        if not args.quiet:
            print(f"npkl resume: recomputing {args.redo} and the stages after it", file=sys.stderr)
    if not args.force_config:
        return _resume(args, cfg, so)
    with st.RunStore.open(st.resolve_run(args.run), mode="a", storage_options=so) as store:
        store.request_force_config()
    try:
        return _resume(args, cfg, so)
    finally:  # a request learning did not take up (nothing differed, or it failed) lapses
        try:
            with st.RunStore.open(st.resolve_run(args.run), mode="a", storage_options=so) as rs:
                if rs.force_config_requested:
                    rs.request_force_config(False)
        except NpklError:  # e.g. another writer holds the run now: its error is the one to see
            pass


def _resume(args, cfg, so) -> int:
    if "pipeline" in cfg and cfg.get("command") == "fit":
        # a run of `npkl fit --run`: its stages continue here, as they ran (no Prefect)

        pcfg = {**cfg["pipeline"], "run": st.resolve_run(args.run)}
        summary, _, _ = run_fit_stages(pcfg, resume=True, quiet=args.quiet, storage_options=so)
        _print_fit_resume(summary, args)
        return 0
    if "pipeline" in cfg:
        _prefect_env()
        from npkl_flows.pipeline import run_pipeline  # lazy: Prefect (see _cmd_run)

        _quiet_npkl_tracebacks()
        pcfg = dict(cfg["pipeline"])

        pcfg["run"] = st.RunStore.open(
            st.resolve_run(args.run), mode="r", storage_options=so
        ).url  # wherever the run is now
        if so:
            pcfg["storage"] = {**pcfg["storage"], "options": so}
        res = run_pipeline(pcfg, resume=True, quiet=args.quiet)
        _print_pipeline(res, args)
        return 0

    # a run written by `npkl fit --run` before fit ran on the pipeline's stages
    progress = _Progress(0, enabled=not args.quiet)
    summary, V, clusters = run_fit_in_store(
        None, args.run, resume=True, callback=progress, storage_options=so
    )
    progress.close()
    _print_fit_resume(summary, args)
    return 0


def _print_fit_resume(summary, args):
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:  # --quiet too: the one result line stays
        print(
            f"run {summary['run']}: objective {summary['objective']:.6g} after "
            f"{iterations_label(summary)}"
        )


def _cmd_export(args) -> int:
    ensure_out_dir(args.out, "--out")
    written = export_run(args.run, args.out, storage_options=_storage_options(args))
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


def _cmd_demo(args) -> int:
    run_demo(
        args.out, loss=args.loss, seed=args.seed, max_sweeps=args.max_sweeps, method=args.method
    )
    return 0


def _cli_warnings(command):
    """Format npkl's own warnings (``NpklWarning``: convergence, graph, constraints) as
    ``npkl COMMAND: warning (ConvergenceWarning): message``, without the Python file, line
    and source line of the library call that raised them, which mean nothing to a
    command-line user; every other warning keeps Python's format. Only the format changes
    (``warnings.formatwarning``): filters apply and ``catch_warnings(record=True)`` records
    as before. Returns the previous formatter, for ``main`` to restore."""

    default = warnings.formatwarning

    def fmt(message, category, filename, lineno, line=None):
        if not issubclass(category, NpklWarning):
            return default(message, category, filename, lineno, line)
        return f"npkl {command}: warning ({category.__name__}): {message}\n"

    warnings.formatwarning = fmt
    return default


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    previous = _cli_warnings(args.command)
    restore = _quiet_logs() if getattr(args, "quiet", False) else None
    try:
        return _run(args)
    finally:
        warnings.formatwarning = previous
        if restore is not None:
            restore()


#: Environment that sets Dask's and Prefect's log levels in processes started from here
#: (Dask workers, a Prefect process worker) before they import their libraries.
_QUIET_ENV = {"DASK_LOGGING__DISTRIBUTED": "warning", "PREFECT_LOGGING_LEVEL": "WARNING"}


def _quiet_logs():
    """--quiet: Dask's and Prefect's INFO logs off (warnings and errors stay), in this
    process and the ones it starts. Returns what puts the previous levels back."""
    env = {k: os.environ.get(k) for k in _QUIET_ENV}
    os.environ.update(_QUIET_ENV)
    loggers = {name: logging.getLogger(name) for name in ("distributed", "prefect")}
    levels = {name: lg.level for name, lg in loggers.items()}
    for lg in loggers.values():
        lg.setLevel(logging.WARNING)
    try:  # distributed imported already: its configuration was read at import
        import dask

        saved = dask.config.get("logging.distributed", None)
        dask.config.set({"logging.distributed": "warning"})
    except ImportError:  # pragma: no cover - dask is a dependency
        saved = None

    def restore():
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for name, lg in loggers.items():
            lg.setLevel(levels[name])
        if saved is not None:
            dask.config.set({"logging.distributed": saved})

    return restore


def _run(args) -> int:
    commands = {
        "fit": _cmd_fit,
        "demo": _cmd_demo,
        "resume": _cmd_resume,
        "export": _cmd_export,
        "run": _cmd_run,
        "status": _cmd_status,
        "extend": _cmd_extend,
        "transform": _cmd_transform,
        "embed": _cmd_embed,
        "active": _active_command("active"),
        "ask": _active_command("ask"),
        "answer": _active_command("answer"),
    }
    # the library's advice in this command's syntax: flags, or a configuration's keys
    syntax = "toml" if args.command in ("run", "resume") else "cli"
    try:
        with interface(syntax):
            return commands[args.command](args)
    except RunNotFoundError as exc:  # the library's advice (RunStore.create) is for Python
        sys.stderr.write(
            f"npkl {args.command}: error: RUN: no run at {exc.url}; pass the run id or path "
            f"that `npkl run` or `npkl fit --run` printed (an id is looked up under "
            f"{st.runs_root()}, set by NPKL_HOME), or start a run with `npkl run "
            f"CONFIG`\n"
        )
        return 2
    except NpklError as exc:
        sys.stderr.write(f"npkl {args.command}: error: {in_cli_terms(str(exc))}\n")
        return 2


#: The library's advice in Python calls, and the same in commands (the CLI's errors).
_CLI_TERMS = (
    (
        r"\(RunStore\.create\(url, config=\.\.\., overwrite=True\) or another run id\)",
        "(`npkl fit ... --run NEW_RUN`, or `npkl run` with another run id)",
    ),
    (
        r"\(RunStore\.create\(url, config=\.\.\., overwrite=True\)\)",
        "(a new run: `npkl fit ... --run NEW_RUN`, or `npkl resume RUN --redo ingest`)",
    ),
    (r"RunStore\.open\(url, mode='r'\)", "`npkl status RUN` (which only reads)"),
    (r"\(RunStore\.open\(url, mode='a'\)\)", "(`npkl resume RUN`)"),
    (r"RunStore\.open\(url, mode='a'\)", "`npkl resume RUN`"),
    (r"RunStore\.break_lock\(url\)", "`npkl resume RUN --break-lock`"),
    (r"duplicates='max', 'sum' or 'mean'", "--duplicates max, sum or mean"),
)


def in_cli_terms(message: str) -> str:
    """An error message with the library's Python advice put as ``npkl`` commands."""
    for pattern, text in _CLI_TERMS:
        message = re.sub(pattern, text, message)
    return message


if __name__ == "__main__":
    raise SystemExit(main())
