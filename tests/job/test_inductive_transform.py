"""The streamed transform: in memory, .npy, Zarr, resumed Zarr and Dask tasks all give the
model's z bitwise; a rerun computes only the missing chunks."""

import numpy as np
import pytest
import zarr

import npkl_dist as nk
from npkl_dist import ValidationError
from npkl_dist.job._inductive import transform_chunks
from npkl_dist.solvers.inductive import TILE, fit_inductive


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    rng = np.random.default_rng(4)
    y = rng.integers(0, 4, 3000)
    X = rng.standard_normal((4, 6))[y] * 2 + rng.standard_normal((3000, 6))
    m = fit_inductive(X, nk.sample_constraints(y, 200, 200, seed=4), landmarks=40, seed=4)
    d = tmp_path_factory.mktemp("tr")
    np.save(d / "X.npy", X)
    za = zarr.create_array(str(d / "X.zarr"), shape=X.shape, chunks=(700, 6), dtype="f8")
    za[:] = X
    return m, X, d


def test_every_route_gives_the_model_bitwise(setup, tmp_path):
    m, X, d = setup
    ref = m.transform(X)
    mem = transform_chunks(m, X, chunk_rows=3 * TILE)
    np.testing.assert_array_equal(mem["z"], ref)
    assert mem["chunks"] == -(-3000 // (3 * TILE))
    transform_chunks(m, d / "X.npy", tmp_path / "z.npy", chunk_rows=1000, threads=2)
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), ref)
    r = transform_chunks(m, str(d / "X.zarr"), str(tmp_path / "z.zarr"), chunk_rows=TILE)
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "z.zarr"))["z"][:], ref)
    assert r["chunks_computed"] == r["chunks"] == -(-3000 // TILE)


def test_zarr_rerun_computes_only_missing_chunks(setup, tmp_path):
    m, X, d = setup
    out = str(tmp_path / "z.zarr")
    transform_chunks(m, X, out, chunk_rows=512)
    g = zarr.open_group(out, mode="r+")
    # a crash after chunks 0-2 (3 and 4 never marked done; their rows garbage)
    g["done"][3:] = 0
    g["z"][3 * 512 :] = -1.0
    again = transform_chunks(m, X, out, chunk_rows=512)
    assert again["chunks_computed"] == again["chunks"] - 3
    np.testing.assert_array_equal(zarr.open_group(out)["z"][:], m.transform(X))
    # an output of another model is refused, not mixed
    other = fit_inductive(X, nk.sample_constraints(np.arange(3000) % 2, 50, 50), landmarks=10)
    with pytest.raises(ValidationError, match="holds a transform of another model"):
        transform_chunks(other, X, out, chunk_rows=512)


def test_dask_tasks_equal_in_process(setup, tmp_path):
    distributed = pytest.importorskip("distributed")
    m, X, d = setup
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        out = str(tmp_path / "zd.zarr")
        r = transform_chunks(m, str(d / "X.zarr"), out, chunk_rows=TILE * 2, client=client)
    assert r["chunks_computed"] == r["chunks"]
    np.testing.assert_array_equal(zarr.open_group(out)["z"][:], m.transform(X))


def test_wrong_width_names_both(setup):
    m, X, d = setup
    with pytest.raises(ValidationError, match="fitted on 6 features, .* has 5"):
        transform_chunks(m, X[:, :5])
