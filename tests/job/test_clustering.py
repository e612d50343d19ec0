"""The job's clustering of a fit on a social graph (planted partition, few labels)."""

import warnings

import numpy as np

import npkl_dist as nk
from npkl_dist.job._job import FitConfig, run_fit


def test_short_free_rows_warn_for_bcd_and_the_normalised_kernel_clusters(tmp_path):
    """3,000 nodes in 20 groups, 3% labelled: BCD's kernel gives the free nodes rows about
    a twentieth as long as the labelled ones', so k-means on V lumps them (ARI near 0). The
    job says so, naming the fix, and the normalised kernel (seeded by the must-link
    groups) recovers the groups; without a choice (normalize_kernel=None, `npkl fit`'s
    default) the job clusters the unit rows by itself (issue 72's default fit)."""
    edges, y = nk.planted_partition(3000, 20, 20.0, 0.3, seed=0)
    part = np.full(y.size, -1)
    lab = np.random.default_rng(0).random(y.size) < 0.03
    part[lab] = y[lab]
    np.save(tmp_path / "edges.npy", edges)
    cfg = dict(edges=str(tmp_path / "edges.npy"), n_points=y.size, y_constraints=part, y_eval=y)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", nk.ConstraintWarning)
        plain, V, _ = run_fit(FitConfig(**cfg, clusters=20, normalize_kernel=False))
    short = [str(w.message) for w in seen if "in no constraint" in str(w.message)]
    assert len(short) == 1 and short[0].startswith("bcd: 97% of the points")
    # the fix in the syntax of the interface in use: Python here (the CLI's is a flag)
    assert "kernel_kmeans(V, k, normalize=True)" in short[0] and "--normalize" not in short[0]
    assert "fit with fit_bcd" not in short[0]
    assert plain["metrics"]["ari"] < 0.1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", nk.ConstraintWarning)
        unit, V2, _ = run_fit(FitConfig(**cfg, clusters=20, normalize_kernel=True))
    assert not [w for w in seen if "in no constraint" in str(w.message)]
    assert np.array_equal(V, V2)
    assert unit["metrics"]["ari"] > 0.8
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", nk.ConstraintWarning)
        auto, _, _ = run_fit(FitConfig(**cfg, clusters=20))
    assert not [w for w in seen if "in no constraint" in str(w.message)]
    assert auto["normalize_kernel"] is True and auto["metrics"] == unit["metrics"]
