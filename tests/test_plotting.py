"""npkl_dist.plotting: the 2-D layout, the embedding and objective pictures."""

import numpy as np
import pytest

from npkl_dist import ValidationError, clustering_metrics, plotting


def _blobs(n_per=40, k=3, r=6, seed=0):
    """k well-separated classes in r dimensions (rows of a V), labels 0..k-1."""
    rng = np.random.default_rng(seed)
    centres = 6.0 * np.eye(k, r)
    y = np.repeat(np.arange(k), n_per)
    return centres[y] + rng.normal(size=(y.size, r)), y


def test_pca_layout_matches_dense_kernel_pca():
    """The kernel-PCA layout from V alone equals scikit-learn's KernelPCA of the dense
    centred kernel K = V V' (the slow reference), up to each component's sign."""
    from sklearn.decomposition import KernelPCA

    V, _ = _blobs()
    Z, keep, name = plotting.layout_2d(V, method="pca")
    assert name == "kernel PCA" and np.array_equal(keep, np.arange(V.shape[0]))
    ref = KernelPCA(2, kernel="precomputed").fit_transform(V @ V.T)
    for c in range(2):
        sign = np.sign(Z[:, c] @ ref[:, c])
        np.testing.assert_allclose(Z[:, c], sign * ref[:, c], rtol=1e-8, atol=1e-8)


def test_pca_layout_of_a_rank_one_kernel_is_a_line():
    V = np.linspace(-1.0, 1.0, 50)[:, None]
    Z, _, _ = plotting.layout_2d(V, method="pca")
    assert Z.shape == (50, 2) and np.all(Z[:, 1] == 0)
    Z, _, name = plotting.layout_2d(V)  # t-SNE pads the one column as well
    assert Z.shape == (50, 2) and name == "t-SNE" and np.all(np.isfinite(Z))


def test_tsne_layout_is_seeded_and_separates_the_classes():
    """Same seed, same coordinates; the layout keeps the classes apart (each point's
    nearest neighbours in 2-D are of its class), which is what the picture is for."""
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    V, y = _blobs()
    Z1, keep, name = plotting.layout_2d(V, seed=3)
    Z2, _, _ = plotting.layout_2d(V, seed=3)
    assert name == "t-SNE" and Z1.shape == (V.shape[0], 2)
    np.testing.assert_array_equal(Z1, Z2)
    acc = cross_val_score(KNeighborsClassifier(5), Z1, y[keep], cv=3).mean()
    assert acc > 0.95


def test_layout_subsamples_large_n_with_its_seed():
    V, _ = _blobs(n_per=100)
    Z, keep, _ = plotting.layout_2d(V, method="pca", max_points=50, seed=1)
    assert Z.shape == (50, 2) and keep.size == 50
    assert np.all(np.diff(keep) > 0) and keep[-1] < V.shape[0]
    _, keep2, _ = plotting.layout_2d(V, method="pca", max_points=50, seed=1)
    _, keep3, _ = plotting.layout_2d(V, method="pca", max_points=50, seed=2)
    np.testing.assert_array_equal(keep, keep2)
    assert not np.array_equal(keep, keep3)


def test_layout_of_the_unit_rows():
    """normalize=True lays out the unit rows (what kernel k-means clusters then): scaling a
    row does not move it."""
    V, _ = _blobs()
    W = V * np.random.default_rng(0).uniform(0.1, 10.0, size=(V.shape[0], 1))
    Za, _, _ = plotting.layout_2d(V, method="pca", normalize=True)
    Zb, _, _ = plotting.layout_2d(W, method="pca", normalize=True)
    np.testing.assert_allclose(Za, Zb, atol=1e-10)


def test_few_points_or_equal_rows_are_laid_out_by_pca_and_named_so():
    V, _ = _blobs(n_per=5)
    _, _, name = plotting.layout_2d(V)
    assert name == "kernel PCA"
    for V in (np.zeros((100, 3)), np.ones((100, 3))):  # t-SNE would divide by zero
        Z, _, name = plotting.layout_2d(V)
        assert name == "kernel PCA" and np.array_equal(Z, np.zeros((100, 2)))


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"method": "umap"}, "method: 'umap' is not a layout"),
        ({"max_points": 1}, "max_points: expected an int >= 2, got 1"),
        ({"max_points": 2.5}, "max_points"),
    ],
)
def test_layout_bad_arguments(kwargs, needle):
    V, _ = _blobs()
    with pytest.raises(ValidationError, match=needle):
        plotting.layout_2d(V, **kwargs)


def test_bad_embedding_and_labels():
    V, y = _blobs()
    bad = V.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValidationError, match="V: contains NaN"):
        plotting.layout_2d(bad)
    with pytest.raises(ValidationError, match=r"labels: expected one label per row of V \(120\)"):
        plotting.embedding_figure(V, labels=y[:-1], method="pca")


def _texts(fig):
    ax = fig.axes[0]
    legend = ax.get_legend()
    return (
        ax.get_title(),
        legend.get_title().get_text(),
        [t.get_text() for t in legend.get_texts()],
    )


def test_embedding_figure_coloured_by_the_labels_with_the_metrics(tmp_path):
    V, y = _blobs()
    clusters = (y + 1) % 3
    metrics = clustering_metrics(y, clusters)
    fig = plotting.embedding_figure(V, labels=y, clusters=clusters, metrics=metrics, title="run")
    title, legend_title, entries = _texts(fig)
    assert title.splitlines() == [
        "run",
        "t-SNE of the rows of V (all 120 points), coloured by true label",
        "clusters vs true labels: pairwise accuracy 1.000, ARI 1.000, NMI 1.000",
    ]
    assert legend_title == "true label" and entries == ["0", "1", "2"]
    png = plotting.save_figure(fig, tmp_path / "e.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_embedding_figure_without_labels_is_coloured_by_cluster():
    V, y = _blobs(n_per=100)
    fig = plotting.embedding_figure(V, clusters=y, method="pca", max_points=100, normalize=True)
    title, legend_title, entries = _texts(fig)
    assert title == "kernel PCA of the unit rows of V (100 of 300 points), coloured by cluster"
    assert legend_title == "cluster" and entries == ["0", "1", "2"]


def test_embedding_figure_marks_unlabelled_points_and_many_classes():
    """Negative labels are drawn grey as 'unlabelled'; more classes than a legend holds get
    a colour bar; no labels and no clusters: one colour, no legend."""
    V, y = _blobs(n_per=30)
    y = y.copy()
    y[::7] = -1
    _, legend_title, entries = _texts(plotting.embedding_figure(V, labels=y, method="pca"))
    assert entries == ["unlabelled", "0", "1", "2"]
    many = np.arange(V.shape[0]) % 30
    fig = plotting.embedding_figure(V, labels=many, method="pca")
    assert len(fig.axes) == 2  # the plot and its colour bar
    assert fig.axes[1].get_ylabel() == "true label (30 classes, by rank)"
    fig = plotting.embedding_figure(V, method="pca")
    assert fig.axes[0].get_legend() is None
    assert fig.axes[0].get_title() == "kernel PCA of the rows of V (all 90 points)"


def _misclustered_brute_force(labels, clusters):
    """The reference: try every one-to-one map of clusters to classes (padding with 'no
    class'), keep the first that agrees on the most labelled points."""
    from itertools import permutations

    lab = labels >= 0
    classes, cl = np.unique(labels[lab]), np.unique(clusters[lab])
    slots = list(classes) + [None] * max(0, cl.size - classes.size)
    best, best_agree = None, -1
    for perm in permutations(slots, cl.size):
        match = dict(zip(cl, perm))
        agree = sum(match[c] == t for c, t in zip(clusters[lab], labels[lab]))
        if agree > best_agree:
            best, best_agree = match, agree
    return lab & np.array([best.get(c) != t for c, t in zip(clusters, labels)])


@pytest.mark.parametrize("n_classes, n_clusters", [(3, 3), (3, 4), (4, 3)])
def test_misclustered_matches_the_best_one_to_one_map(n_classes, n_clusters):
    rng = np.random.default_rng(n_classes * 10 + n_clusters)
    for _ in range(20):
        labels = rng.integers(-1, n_classes, size=25)
        clusters = rng.integers(0, n_clusters, size=25)
        got = plotting.misclustered(labels, clusters)
        ref = _misclustered_brute_force(labels, clusters)
        # ties may be broken differently: the count of agreeing points is what must match
        assert got.sum() == ref.sum()
        assert not got[labels < 0].any()


def test_embedding_figure_crosses_the_misclustered_points():
    V, y = _blobs()
    clusters = y.copy()
    clusters[:5] = 1  # five points of class 0 put in class 1's cluster
    fig = plotting.embedding_figure(V, labels=y, clusters=clusters, method="pca")
    _, _, entries = _texts(fig)
    assert entries == ["in another class's cluster (5)", "0", "1", "2"]
    crosses = fig.axes[0].collections[0]
    assert crosses.get_offsets().shape == (5, 2)


def test_objective_figure_draws_the_gap_on_a_log_axis(tmp_path):
    trace = 10.0 + np.array([5.0, 1.0, 0.1, 0.01, 0.001, 0.0])
    fig = plotting.objective_figure(trace, xlabel="sweep", title="objective trace (6 sweeps)")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "sweep"
    assert ax.get_ylabel() == "|objective − final| / |final|"
    assert ax.get_title() == "objective trace (6 sweeps)\ngap to the final value 10"
    (line,) = ax.get_lines()
    x, gap = line.get_data()
    np.testing.assert_array_equal(x, [1, 2, 3, 4, 5])  # the last gap is 0: no place on a log axis
    np.testing.assert_allclose(gap, [0.5, 0.1, 0.01, 0.001, 0.0001])
    png = plotting.save_figure(fig, tmp_path / "o.png")
    assert png.stat().st_size > 5_000


def test_objective_figure_of_a_zero_final_value_and_bad_traces():
    ax = plotting.objective_figure([2.0, 1.0, 0.0]).axes[0]
    assert ax.get_ylabel() == "|objective − final|"
    np.testing.assert_allclose(ax.get_lines()[0].get_data()[1], [2.0, 1.0])
    with pytest.raises(ValidationError, match="trace: expected a non-empty finite"):
        plotting.objective_figure([])
    with pytest.raises(ValidationError, match="with NaN or inf"):
        plotting.objective_figure([1.0, np.inf])


def test_the_library_imports_matplotlib_only_for_a_picture():
    import subprocess
    import sys

    code = "import sys, npkl_dist, npkl_dist.plotting; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
