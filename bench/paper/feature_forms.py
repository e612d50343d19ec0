"""Which feature scaling simplenpkl-jmlr2011's Table 2 ran on: its k-means column, rerun.

The harness scales every UCI data set's features to [-1, 1] (bcdkl/kl-admm's protocol) and
runs simplenpkl's protocol on those features too. simplenpkl's k-means baselines do not look
like k-means on scaled features (wine 71.2, heart 51.5, soybean 82.1). This reruns its
protocol (``bench.paper.protocols``: pairs to 70% n must-link components, B = 1, C = 1, 20
repetitions) on each data set in three forms of its features and prints one markdown table
with the paper's numbers beside ours:

* ``scaled``: [-1, 1] per column, what the harness uses;
* ``raw``: the units of the UCI files. heart's are recovered exactly from LIBSVM's
  ``heart_scale`` (svm-scale is x' = 2 (x - min) / (max - min) - 1 per column; the Statlog
  data's column ranges, ``HEART_RANGES``, map every value back onto its integer or 0.1
  grid, which ``heart_raw`` checks);
* ``zscore``: zero mean and unit variance per column.

Methods: k-means (Euclidean, the paper's baseline), SimpleNPKL with the linear and the squared
hinge loss (kernel k-means on K, and on the cosine-normalised K), and BCD-linear.

``--ratios`` also draws the pairs to other ratios of must-link components to points than the
paper's 70% (fewer components: more pairs), to see what pair count the paper's numbers need.

Usage::

    python -m bench.paper.feature_forms [--datasets heart wine ...] [--forms raw ...]
                                        [--ratios 0.7 0.5 ...] [--reps 20]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

#: Statlog (Heart)'s 13 columns as (min, max, grid step) over its 270 rows: age, sex, chest
#: pain type, resting blood pressure, serum cholesterol, fasting blood sugar, resting ECG,
#: maximum heart rate, exercise-induced angina, ST depression ("oldpeak", tenths), slope of
#: the peak ST segment, major vessels coloured, thal. heart_scale maps each to [-1, 1].
HEART_RANGES = (
    (29, 77, 1),
    (0, 1, 1),
    (1, 4, 1),
    (94, 200, 1),
    (126, 564, 1),
    (0, 1, 1),
    (0, 2, 1),
    (71, 202, 1),
    (0, 1, 1),
    (0, 6.2, 0.1),
    (1, 3, 1),
    (0, 3, 1),
    (3, 7, 1),
)

#: heart_scale prints 6 significant digits; a value recovered with the right range is this
#: close to its grid (in grid steps). A wrong range leaves most values far off the grid.
GRID_TOL = 1e-3

FORMS = ("scaled", "raw", "zscore")
METHODS = ("k-means", "SimpleNPKL-linear", "SimpleNPKL-sqhinge", "BCD-linear")
#: the paper's column for each method (simplenpkl-jmlr2011.md Table 2)
PAPER = {
    "k-means": "k-means",
    "SimpleNPKL-linear": "SimpleNPKL-linear",
    "SimpleNPKL-sqhinge": "SimpleNPKL-sqhinge",
}
DEFAULT_DATASETS = ("heart", "wine", "soybean", "sonar", "iris", "glass")


def heart_raw(X_scaled):
    """heart_scale's features (n, 13) in the Statlog file's units, rounded onto each column's
    grid. Raises ValueError if a column does not land on its grid (the file is not
    heart_scale, or a range is wrong)."""
    X_scaled = np.asarray(X_scaled, dtype=np.float64)
    if X_scaled.ndim != 2 or X_scaled.shape[1] != len(HEART_RANGES):
        raise ValueError(
            f"X_scaled: expected shape (n, {len(HEART_RANGES)}) of heart_scale, "
            f"got {X_scaled.shape}"
        )
    out = np.empty_like(X_scaled)
    for c, (lo, hi, step) in enumerate(HEART_RANGES):
        units = (lo + (X_scaled[:, c] + 1.0) / 2.0 * (hi - lo)) / step
        off = float(np.abs(units - np.round(units)).max())
        if off > GRID_TOL:
            raise ValueError(
                f"X_scaled: column {c} is {off:.3g} grid steps off the grid of "
                f"the range [{lo}, {hi}] (step {step}); this is not heart_scale, "
                f"or HEART_RANGES[{c}] is wrong"
            )
        out[:, c] = np.round(units) * step
    return out


def uci_key(name):
    """The registry name of ``name`` if it is a UCI data set with file units (not generated,
    not adult's one-hot encoding); ValueError naming the valid ones otherwise."""
    from bench.paper import datasets

    try:
        key = datasets.canonical(name)
    except KeyError:
        key = None
    if key is None or datasets.DATASETS[key].get("synthetic", False) or key.startswith("adult"):
        raise ValueError(
            f"name: {name!r} has no UCI file units to compare; use some of "
            f"{' '.join(DEFAULT_DATASETS)} (or breast-cancer)"
        )
    return key


def features(name, form):
    """(X, y) of data set ``name`` in feature form ``form`` (one of ``FORMS``); ``scaled``
    is the harness's own ``prepare_data``."""
    from bench.paper import datasets
    from bench.paper.run import prepare_data

    if form not in FORMS:
        raise ValueError(f"form: {form!r}; use one of {FORMS}")
    key = uci_key(name)
    if form == "scaled":
        X, y, _ = prepare_data(key)
        return X, y
    X, y = datasets.load(key)
    X = np.asarray(X, dtype=np.float64)
    if key == "heart":  # the file is already scaled: go back to the units first
        X = heart_raw(X)
    if form == "zscore":
        from sklearn.preprocessing import StandardScaler

        X = StandardScaler().fit_transform(X)
    return X, y


def constraints(name, y, ratio, seed):
    """The protocol's pairs for one repetition; at a ratio other than the paper's, pairs
    drawn to ``round(ratio n)`` must-link components instead."""
    import npkl_dist as nk
    from bench.paper import protocols

    if ratio == protocols.COMPONENT_RATIO:
        return protocols.simplenpkl_constraints(name, y, seed=seed)
    i, j, t = protocols.component_rule_pairs(y, ratio, seed=seed)
    return nk.Constraints.from_arrays(i, j, t, len(y), warn=False)


def run(name, form, reps, ratios=(0.7,)):
    """{ratio: {method: [rand accuracy per repetition]}} (and "<method> normalised" for
    SimpleNPKL), with "pairs": the pair count of each repetition. The kNN graph of a
    repetition is built once for all ratios."""
    import npkl_dist as nk
    from bench.paper import peers, protocols
    from bench.paper.run import bcd_options
    from npkl_dist.solvers.simplenpkl._fit import fit_simplenpkl

    X, y = features(name, form)
    k = int(np.unique(y).size)
    B = protocols.capacity(protocols.SIMPLENPKL, len(y), False)
    out = {ratio: {"pairs": []} for ratio in ratios}

    def put(acc, key, labels):
        acc.setdefault(key, []).append(nk.clustering_metrics(y, labels)["rand_accuracy"])

    for rep in range(reps):
        L = nk.knn_graph(X, 5, seed=rep, warn=False).laplacian(1e-3)
        for ratio, acc in out.items():
            cons = constraints(name, y, ratio, rep)
            acc["pairs"].append(cons.m)
            put(acc, "k-means", peers.kmeans(X, k, cons, rep))
            for method, loss in (
                ("SimpleNPKL-linear", "linear"),
                ("SimpleNPKL-sqhinge", "squared_hinge"),
            ):
                V = fit_simplenpkl(nk.NPKLProblem.build(L, cons, loss=loss, seed=rep), B=B).V
                put(acc, method, nk.kernel_kmeans(V, k, seed=rep))
                put(acc, method + " normalised", nk.kernel_kmeans(V, k, seed=rep, normalize=True))
            V = nk.fit_bcd(
                nk.NPKLProblem.build(L, cons, loss="linear", seed=rep), **bcd_options(False)
            ).V
            put(acc, "BCD-linear", nk.kernel_kmeans(V, k, seed=rep))
    return out


def _cell(values):
    v = 100.0 * np.asarray(values)
    return f"{v.mean():.2f} ± {v.std(ddof=1) if v.size > 1 else 0.0:.2f}"


def table(results, datasets_):
    """Markdown: one row per (data set, form), the paper's Table 2 row under each data set."""
    from bench.paper import published as pub

    cols = [
        "k-means",
        "SimpleNPKL-linear",
        "SimpleNPKL-linear normalised",
        "SimpleNPKL-sqhinge",
        "SimpleNPKL-sqhinge normalised",
        "BCD-linear",
    ]
    ratios = sorted({key[2] for key in results}, reverse=True)
    many = len(ratios) > 1
    lines = [
        "| data set | features | "
        + ("components / n | pairs | " if many else "")
        + " | ".join(cols)
        + " |",
        "|---|---|" + ("---|---|" if many else "") + "---|" * len(cols),
    ]
    for name in datasets_:
        for form in FORMS:
            for ratio in ratios:
                acc = results.get((name, form, ratio))
                if acc is None:
                    continue
                extra = f"{ratio:g} | {int(np.median(acc['pairs']))} | " if many else ""
                lines.append(
                    f"| {name} | {form} | {extra}" + " | ".join(_cell(acc[c]) for c in cols) + " |"
                )
        paper = []
        for c in cols:
            cell = pub.published_value(name, PAPER[c]) if c in PAPER else None
            is_t2 = cell is not None and "Table 2" in cell[2]
            paper.append(f"{cell[0]:.2f} ± {cell[1]:.2f}" if is_t2 else "")
        lines.append(
            f"| {name} | simplenpkl Table 2 | "
            + ("0.7 | | " if many else "")
            + " | ".join(paper)
            + " |"
        )
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.paper.feature_forms", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS), metavar="NAME")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    ap.add_argument(
        "--ratios",
        nargs="+",
        type=float,
        default=[0.7],
        metavar="R",
        help="must-link components / points to draw the pairs to (default: the paper's 0.7)",
    )
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps: expected a positive count, got {args.reps}")
    bad = [r for r in args.ratios if not 0.0 < r < 1.0]
    if bad:
        ap.error(f"--ratios: expected ratios in (0, 1), got {bad}")
    for name in args.datasets:
        try:
            uci_key(name)
        except ValueError as exc:
            ap.error(f"--datasets: {exc}")
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    warnings.simplefilter("ignore")
    results = {}
    t0 = time.perf_counter()
    for name in args.datasets:
        for form in args.forms:
            for ratio, acc in run(name, form, args.reps, args.ratios).items():
                results[(name, form, ratio)] = acc
            print(f"{name} {form}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(table(results, args.datasets))
    print(f"\n{args.reps} repetitions, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
