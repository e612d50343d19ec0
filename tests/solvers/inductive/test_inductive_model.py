"""The inductive model: transform is bitwise independent of chunks and threads, equals the
training embedding on the training points; save/load round trip; one-line errors."""

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist import ValidationError
from npkl_dist.solvers.inductive import TILE, InductiveKernel, fit_inductive


@pytest.fixture(scope="module")
def model_and_data():
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((6, 5)) * 3
    y = rng.integers(0, 6, 1500)
    X = centres[y] + rng.standard_normal((1500, 5))
    cons = nk.sample_constraints(y, 300, 300, seed=11)
    return fit_inductive(X, cons, landmarks=64, seed=11), X, y


def test_transform_is_bitwise_independent_of_chunks_and_threads(model_and_data):
    m, X, _ = model_and_data
    whole = m.transform(X)
    assert whole.shape == (X.shape[0], m.dim)
    for chunk in (TILE, 2 * TILE, 5 * TILE):
        parts = [m.transform(X[s : s + chunk], start=s) for s in range(0, X.shape[0], chunk)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    np.testing.assert_array_equal(m.transform(X, threads=2), whole)
    # a row's result does not depend on its tile's other rows
    one = m.transform(X[TILE : TILE + 1], start=TILE)
    np.testing.assert_array_equal(one[0], whole[TILE])
    with pytest.raises(ValueError, match="multiple of TILE"):
        m.transform(X[:10], start=3)


def test_training_embedding_and_kernel_agree(model_and_data):
    m, X, _ = model_and_data
    Z = m.transform(X[:200])
    base = m.kernel(X[:200]) - (Z @ Z.T)
    # the difference is alpha (kappa - q'q): the base kernel outside the basis, PSD
    assert np.linalg.eigvalsh(base).min() > -1e-9


def test_save_load_round_trip_and_version(tmp_path, model_and_data):
    m, X, _ = model_and_data
    path = tmp_path / "model.npz"
    m.save(path)
    back = InductiveKernel.load(path)
    np.testing.assert_array_equal(back.transform(X[:300]), m.transform(X[:300]))
    assert back.info["n_constraints"] == m.info["n_constraints"]
    assert repr(back) == repr(m)
    # a model file of another version
    import json

    with np.load(path) as d:
        arrays = {k: d[k] for k in d.files}
    meta = json.loads(str(arrays["meta"]))
    meta["version"] = 99
    arrays["meta"] = np.array(json.dumps(meta))
    other = tmp_path / "other.npz"
    np.savez(other, **arrays)
    with pytest.raises(ValidationError, match="version 99; this npkl-dist reads version 1"):
        InductiveKernel.load(other)
    (tmp_path / "junk.npz").write_bytes(b"not a model")
    with pytest.raises(ValidationError, match="is not an inductive-kernel model file"):
        InductiveKernel.load(tmp_path / "junk.npz")


def test_wrong_width_names_both_widths(model_and_data):
    m, X, _ = model_and_data
    with pytest.raises(ValidationError, match="fitted on 5 features, got 4"):
        m.transform(X[:, :4])


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(landmarks=5000), "landmarks: 5000 is larger than the number of points"),
        (dict(bandwidth=0.0), "bandwidth: expected a positive finite number, got 0.0"),
        (dict(bandwidth=float("nan")), "bandwidth: expected a positive finite number, got nan"),
        (dict(regularizer="ridge"), "regularizer: 'ridge' is not one of"),
        (dict(kernel="poly"), "kernel: 'poly' is not one of"),
        (dict(basis="grid"), "basis: 'grid' is not one of"),
        (dict(bounds=(0.0, 1.0)), "bounds: expected two positive numbers"),
    ],
)
def test_bad_input_one_line(model_and_data, kw, msg):
    _, X, y = model_and_data
    cons = nk.sample_constraints(y, 20, 20, seed=0)
    with pytest.raises(ValidationError, match=msg) as e:
        fit_inductive(X, cons, **kw)
    assert "\n" not in str(e.value)


def test_constraints_of_other_points(model_and_data):
    _, X, y = model_and_data
    cons = nk.sample_constraints(y[:100], 20, 20, seed=0)
    with pytest.raises(ValidationError, match="refer to 100 points but X has 1500 rows"):
        fit_inductive(X, cons)


@pytest.mark.parametrize("regularizer", ["logdet", "frobenius", "trace"])
def test_learned_distances_move_toward_the_bounds(regularizer, model_and_data):
    """Must-link pairs end closer than under the base kernel, cannot-link pairs farther
    (relative to the base kernel's median pair distance), for each regulariser."""
    _, X, y = model_and_data
    cons = nk.sample_constraints(y, 200, 200, seed=2)
    m = fit_inductive(X, cons, regularizer=regularizer, landmarks=48, seed=2, gamma=10.0)
    d = m.pair_distance(X[cons.i], X[cons.j])
    must, cannot = d[cons.t > 0], d[cons.t < 0]
    u, l = m.info["bounds"]
    assert np.median(must) <= u * 1.5 and np.median(cannot) >= l * 0.8, (
        np.median(must),
        np.median(cannot),
        u,
        l,
    )


@pytest.mark.parametrize("basis", ["kmeans++", "random", "clusters"])
def test_default_landmarks_fit_fewer_points_than_256(basis, model_and_data):
    """Without --landmarks, a data set of fewer than 256 points (wine: 178) takes every point's
    worth of landmarks (r = n) instead of refusing the default; an explicit r > n still fails."""
    _, X, y = model_and_data
    cons = nk.sample_constraints(y[:178], 40, 40, seed=3)
    m = fit_inductive(X[:178], cons, basis=basis, seed=3)
    if basis == "clusters":  # r = n clusters of n points: the empty ones are dropped from J
        assert 0 < m.info["landmarks"] <= 178
    else:
        assert m.info["landmarks"] == 178
    assert m.transform(X[178:200]).shape[0] == 22
    with pytest.raises(ValidationError, match="landmarks: 179 is larger than the number"):
        fit_inductive(X[:178], cons, landmarks=179, basis=basis)
