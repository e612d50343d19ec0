"""select_gamma: gamma by cross-validation on held-out constraints, never on labels."""

from __future__ import annotations

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist import model_selection as _select
from npkl_dist._errors import ValidationError

GRID = (0.1, 1.0, 10.0)
BCD_OPTS = {"max_sweeps": 2000, "tol": 1e-4}


def _blobs(seed=0, n_per=30):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    X = np.concatenate([c + 0.6 * rng.standard_normal((n_per, 2)) for c in centers])
    y = np.repeat(np.arange(3), n_per)
    return X, y


@pytest.fixture(scope="module")
def inputs():
    """Laplacian and constraints only: the labels go out of scope here."""
    X, y = _blobs()
    L = nk.knn_graph(X, 5, warn=False).laplacian(1e-3)
    cons = nk.sample_constraints(y, 24, 24, seed=1)
    cons_diag = nk.sample_constraints(y, 24, 24, seed=1, diagonal=True)
    return L, cons, cons_diag


@pytest.fixture
def no_labels(monkeypatch):
    """Make every label-reading entry point fail while the selection runs."""

    def refuse(*a, **k):
        raise AssertionError("select_gamma read labels")

    from npkl_dist import evaluate
    from npkl_dist.problem import _constraints

    for mod, name in (
        (nk, "sample_constraints"),
        (nk, "clustering_metrics"),
        (evaluate, "clustering_metrics"),
        (_constraints, "sample_constraints"),
    ):
        monkeypatch.setattr(mod, name, refuse)


def test_bcd_selection_is_deterministic_label_free_and_reported(inputs, no_labels):
    L, cons, _ = inputs
    p = nk.NPKLProblem.build(L, cons, loss="linear", seed=3)
    a = nk.select_gamma(p, GRID, folds=3, seed=5, n_clusters=3, fit_options=BCD_OPTS)
    b = nk.select_gamma(p, GRID, folds=3, seed=5, n_clusters=3, fit_options=BCD_OPTS)
    assert a.gamma in GRID
    assert a.gamma == b.gamma
    np.testing.assert_array_equal(a.scores, b.scores)
    assert a.score == "clusters"
    assert a.scores.shape == (3, len(GRID))
    assert np.all((a.scores >= 0) & (a.scores <= 1))
    best = a.mean_scores.max()
    assert a.mean_scores[GRID.index(a.gamma)] == best
    # the chosen problem is the full one with the chosen gamma
    assert a.problem.gamma == a.gamma and a.problem.constraints is cons
    assert (a.problem.loss, a.problem.rank, a.problem.seed) == ("linear", p.rank, 3)
    table = a.table()
    assert len(table.splitlines()) == 2 + len(GRID)
    assert "←" in table.splitlines()[2 + GRID.index(a.gamma)]
    d = a.to_dict()
    assert d["gamma"] == a.gamma and d["gammas"] == list(GRID) and len(d["scores"]) == 3


def test_admm_selection_and_auc_score(inputs, no_labels):
    L, _, cons_diag = inputs
    p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=0)
    sel = nk.select_gamma(
        p, GRID, folds=2, seed=0, solver="admm", fit_options={"max_iter": 2000, "tol": 1e-4}
    )
    assert sel.score == "auc"  # no n_clusters: the K-free score
    assert sel.gamma in GRID and sel.scores.shape == (2, 3)
    assert sel.problem.constraints.diagonal
    assert np.all((sel.scores >= 0) & (sel.scores <= 1))


def test_heldout_pairs_never_reach_the_fitted_problem(inputs, monkeypatch):
    L, cons, _ = inputs
    seen = []

    def spy(problem, **options):
        c = problem.constraints
        seen.append({(int(i), int(j)) for i, j in zip(c.i, c.j)})
        return nk.FitResult(
            V=np.random.default_rng(0).standard_normal((problem.n_points, 2)),
            objective=0.0,
            objective_initial=0.0,
            n_colours=0,
        )

    monkeypatch.setattr(_select, "_solver_function", lambda solver: spy)
    p = nk.NPKLProblem.build(L, cons, loss="square")
    sel = nk.select_gamma(p, GRID, folds=3, seed=2, n_clusters=3)
    allpairs = {(int(i), int(j)) for i, j in zip(cons.i, cons.j)}
    assert len(seen) == 3 * len(GRID)
    held = [{(int(cons.i[k]), int(cons.j[k])) for k in out} for out in sel.heldout]
    for f, out in enumerate(held):
        assert out, "every fold holds out some pairs"
        for q in range(len(GRID)):
            fitted = seen[f * len(GRID) + q]
            assert not fitted & out
            assert fitted | out == allpairs
    # every pair held out exactly once; both types in every fold, sizes balanced
    assert sum(len(h) for h in held) == cons.m and set().union(*held) == allpairs
    for out in sel.heldout:
        assert cons.n_must // 3 <= np.count_nonzero(cons.t[out] > 0) <= -(-cons.n_must // 3)
        assert cons.n_cannot // 3 <= np.count_nonzero(cons.t[out] < 0) <= -(-cons.n_cannot // 3)


def test_normalize_reaches_every_score_and_the_job_passes_it(inputs, monkeypatch):
    """select_gamma(normalize=True) scores every fit on the normalised kernel, and the job
    (npkl fit --gamma cv --normalize-kernel) asks for it."""
    from npkl_dist.job import _job

    L, cons, _ = inputs
    seen = []
    monkeypatch.setattr(
        _select, "heldout_score", lambda *a, **k: seen.append(k["normalize"]) or 0.75
    )
    p = nk.NPKLProblem.build(L, cons, loss="linear")
    nk.select_gamma(p, (1, 10), folds=2, n_clusters=3, fit_options=BCD_OPTS, normalize=True)
    assert seen == [True] * 4
    asked = []
    monkeypatch.setattr(_job, "select_gamma", lambda *a, **k: asked.append(k["normalize"]))
    for flag in (False, True):
        _job._select_gamma(
            _job.FitConfig(solver="bcd", loss="linear", normalize_kernel=flag), p, None
        )
    assert asked == [False, True]


def test_ties_go_to_the_smaller_gamma(inputs, monkeypatch):
    L, cons, _ = inputs
    monkeypatch.setattr(_select, "heldout_score", lambda *a, **k: 0.75)
    p = nk.NPKLProblem.build(L, cons, loss="linear")
    sel = nk.select_gamma(p, (100, 10, 1), folds=2, n_clusters=3, fit_options=BCD_OPTS)
    assert sel.gammas == (1.0, 10.0, 100.0)
    assert sel.gamma == 1.0


def test_heldout_score_values():
    V = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    i, j, t = np.array([0, 2, 0, 1]), np.array([1, 3, 2, 3]), np.array([1, 1, -1, -1])
    assert _select.heldout_score(V, i, j, t, n_clusters=2) == 1.0
    assert _select.heldout_score(V, i, j, t, score="auc") == 1.0
    assert _select.heldout_score(V, i, j, -t, score="auc") == 0.0
    # one cluster per point: every must-link broken, every cannot-link kept -> 0.5
    assert _select.heldout_score(V, i, j, t, n_clusters=4) == 0.5
    # rows of very different lengths: by distance the short ones pair up wrongly; the
    # normalised kernel (npkl fit --normalize-kernel) scores their directions
    W = V * np.array([[1.0], [0.01], [1.0], [0.01]])
    i2, j2, t2 = np.array([0, 2, 1, 0]), np.array([1, 3, 3, 2]), np.array([1, 1, -1, -1])
    assert _select.heldout_score(W, i2, j2, t2, score="auc") < 1.0
    assert _select.heldout_score(W, i2, j2, t2, score="auc", normalize=True) == 1.0
    assert _select.heldout_score(W, i2, j2, t2, n_clusters=2) < 1.0
    assert _select.heldout_score(W, i2, j2, t2, n_clusters=2, normalize=True) == 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"gammas": ()}, r"gammas: the grid is empty"),
        ({"gammas": (1.0, 0.0)}, r"gammas: every value must be a finite number > 0, got 0\.0"),
        ({"gammas": (1.0, -2)}, r"gammas: .*got -2"),
        ({"gammas": (1.0, float("nan"))}, r"gammas: .*nan"),
        ({"gammas": (1, 1.0)}, r"gammas: \[1\.0\] appear more than once"),
        ({"gammas": 3.0}, r"gammas: expected a sequence"),
        ({"folds": 1}, r"folds: expected an integer >= 2, got 1"),
        (
            {"folds": 30},
            r"folds: 30 folds need at least 30 must-link pairs .* have 24; lower folds",
        ),
        ({"seed": -1}, r"seed: expected an integer >= 0"),
        ({"solver": "sgd"}, r"solver: 'sgd' is not one of"),
        ({"score": "clusters"}, r"n_clusters: the 'clusters' score needs"),
        ({"n_clusters": 1}, r"n_clusters: expected an integer in \[2, 90\], got 1"),
        ({"score": "f1"}, r"score: 'f1' is not one of clusters, auc"),
        (
            {"fit_options": {"max_iter": 3}},
            r"fit_options: 'max_iter' is not an option of solver "
            r"'bcd'",
        ),
        ({"fit_options": {"plan": None}}, r"fit_options: 'plan' belongs to one problem"),
        ({"normalize": "yes"}, r"normalize: expected True or False, got 'yes'"),
    ],
)
def test_errors_name_argument_value_and_fix(inputs, kwargs, match):
    L, cons, _ = inputs
    p = nk.NPKLProblem.build(L, cons)
    with pytest.raises(ValidationError, match=match):
        nk.select_gamma(p, **kwargs)


def test_too_few_pairs_of_a_type(inputs):
    L, _, _ = inputs
    n = L.shape[0]
    c = nk.Constraints.from_arrays([0, 1, 2], [5, 6, 40], [1, 1, -1], n)
    with pytest.raises(
        ValidationError,
        match=r"constraints: 1 cannot-link pair\(s\); "
        r"cross-validation needs at least 2",
    ):
        nk.select_gamma(nk.NPKLProblem.build(L, c), n_clusters=3)
    with pytest.raises(ValidationError, match=r"problem: expected an NPKLProblem"):
        nk.select_gamma("problem.npz")


def test_accepts_L_constraints_pair(inputs):
    L, cons, _ = inputs
    sel = nk.select_gamma((L, cons), (1.0,), folds=2, n_clusters=3, fit_options=BCD_OPTS)
    assert sel.gamma == 1.0 and sel.problem.loss == "square"


def test_unconverged_fits_are_summarised_in_one_warning(inputs):
    L, cons, _ = inputs
    p = nk.NPKLProblem.build(L, cons, loss="square")
    with pytest.warns(nk.ConvergenceWarning) as rec:
        sel = nk.select_gamma(p, (1.0, 10.0), folds=2, n_clusters=3, fit_options={"max_sweeps": 1})
    assert len(rec) == 1
    assert "select_gamma: 4 of 4 cross-validation fits stopped" in str(rec[0].message)
    assert sel.n_unconverged.sum() == 4 and sel.to_dict()["n_unconverged"] == 4


@pytest.fixture
def pair_files(tmp_path):
    """Features and a pairs file: the fit below gets no labels at all."""
    X, y = _blobs()
    c = nk.sample_constraints(y, 24, 24, seed=1)
    np.save(tmp_path / "X.npy", X)
    rows = ["i,j,type"] + [
        f"{i},{j},{'must' if t > 0 else 'cannot'}" for i, j, t in zip(c.i, c.j, c.t)
    ]
    (tmp_path / "pairs.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


@pytest.mark.parametrize("extra, score", [(["--clusters", "3"], "clusters"), ([], "auc")])
def test_cli_gamma_cv(pair_files, capsys, extra, score):
    import json

    from npkl_flows.cli import main

    d = pair_files
    code = main(
        [
            "fit",
            "--features",
            str(d / "X.npy"),
            "--constraints",
            str(d / "pairs.csv"),
            "--loss",
            "linear",
            "--gamma",
            "cv",
            "--max-sweeps",
            "2000",
            "--tol",
            "1e-4",
            "--json",
            "--quiet",
            *extra,
        ]
    )
    assert code == 0
    s = json.loads(capsys.readouterr().out)
    sel = s["gamma_selection"]
    assert s["gamma"] == sel["gamma"] and s["gamma"] in (0.1, 1.0, 10.0, 100.0)
    assert sel["score"] == score and sel["folds"] == 3 and len(sel["scores"]) == 3
    assert "metrics" not in s


def test_cli_gamma_rejects_words_and_run(pair_files, capsys, tmp_path):
    from npkl_flows.cli import main

    d = pair_files
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "fit",
                "--features",
                str(d / "X.npy"),
                "--constraints",
                str(d / "pairs.csv"),
                "--gamma",
                "auto",
            ]
        )
    assert exc.value.code == 2
    assert "expected a number or 'cv', got 'auto'" in capsys.readouterr().err


def test_cli_gamma_cv_with_a_run_is_recorded_for_resume(pair_files, capsys, tmp_path):
    """With --run the chosen gamma is a record of the run store (stage 'gamma'): a resumed
    run learns with it instead of choosing again."""
    import json

    from npkl_dist import store as st
    from npkl_flows.cli import main

    d = pair_files
    code = main(
        [
            "fit",
            "--features",
            str(d / "X.npy"),
            "--constraints",
            str(d / "pairs.csv"),
            "--loss",
            "linear",
            "--gamma",
            "cv",
            "--clusters",
            "3",
            "--max-sweeps",
            "2000",
            "--tol",
            "1e-4",
            "--run",
            str(tmp_path / "run"),
            "--json",
            "--quiet",
        ]
    )
    assert code == 0
    s = json.loads(capsys.readouterr().out)
    store = st.RunStore.open(str(tmp_path / "run"), mode="r")
    rec = store.stages()["gamma"]["info"]
    assert rec["gamma"] == s["gamma"] == s["gamma_selection"]["gamma"]
    assert store.stages()["learn"]["info"]["gamma"] == rec["gamma"]
