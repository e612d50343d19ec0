"""``npkl embed``: a graph (an edge list) embedded by one of SimpleNPKL's §6 methods or by
NPKL itself, with side information from labels; the files and the JSON of ``npkl fit``.

Methods (npkl_dist.embedding; docs/algorithms.md, "Embeddings (SimpleNPKL §6)"):

* ``spe``: structure preserving embedding of the connectivity (no side information);
* ``mve``: minimum volume embedding, unit edge lengths (a graph has no other lengths);
* ``cmvu``: colored MVU, unit edge lengths, the labels as the colouring;
* ``npkl``: the kernel NPKL learns on the graph's Laplacian from pairs sampled from the labels
  or from group memberships (BCD), embedded by its top ``dim`` principal coordinates.

Side information: ``labels`` (one per node) or ``groups`` (a memberships file, node and group
per row, :func:`npkl_dist.embedding.group_constraints`' protocol). Downstream scores in the
summary: node classification (Micro- and Macro-F1, one-vs-rest logistic regression at 10%, 50%
and 90% of the labelled nodes) when labels or groups are given; friend suggestion (AUC and
precision@10 of held-out edges) with ``holdout``: that share of the edges is held out before
embedding.

The exact §6 methods hold n x n matrices: they are for graphs of at most
``EXACT_MAX_POINTS`` nodes; above it ``spe`` runs its low-rank, sampled version
(:func:`npkl_dist.embedding.embed_spe_lowrank`) and ``mve`` / ``cmvu`` refuse in one line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from .._errors import ValidationError, fix

EMBED_METHODS = ("spe", "mve", "cmvu", "npkl")
#: The graph npkl smooths over: the input graph, or the kNN graph of its spectral embedding.
MANIFOLDS = ("graph", "spectral")
#: The spectral manifold's eigenvectors and neighbours per node (chosen on a development graph,
#: not the benchmark's: docs/decisions/social-embeddings.md).
SPECTRAL_DIM = 128
SPECTRAL_KNN = 40
#: the dense §6 methods (n x n kernel, its full spectrum each iteration) up to this many nodes
EXACT_MAX_POINTS = 3000


def principal_coordinates(V, dim: int) -> np.ndarray:
    """The top ``dim`` principal coordinates of K = V V': U_d S_d from V's thin SVD (rows are
    points; their inner products are K's best rank-``dim`` part)."""
    U, s, _ = np.linalg.svd(np.asarray(V, dtype=np.float64), full_matrices=False)
    d = min(dim, s.size)
    Z = np.zeros((V.shape[0], dim))
    Z[:, :d] = U[:, :d] * s[:d]
    return Z


def embed_job(
    *,
    edges,
    method: str = "spe",
    dim: int = 2,
    labels=None,
    groups=None,
    holdout: float | None = None,
    n_points: int | None = None,
    C: float = 1.0,
    capacity: float | None = None,
    max_iter: int | None = None,
    seed: int = 0,
    out=None,
    learn_npkl=None,
    manifold: str = "graph",
    n_must: int | None = None,
    n_cannot: int | None = None,
):
    """Read the graph and the side information, embed, score, write ``embedding.npy`` (node
    order) and ``summary.json`` into ``out``. Returns (summary, Z, labels or None).

    ``learn_npkl``: for method 'npkl', a callable returning ``(V, info, constraints)`` (the
    learned factor in node order, the summary's fit figures and the pairs it learned from)
    instead of this process's own BCD fit: ``npkl embed --run`` passes the pipeline's
    checkpointed, resumable fit; it is called with ``edges=`` the manifold's edge file when
    ``manifold='spectral'`` (written to ``out``), else with no argument.

    ``manifold``: 'graph' (npkl smooths over the input graph) or 'spectral' (over
    :func:`spectral_manifold` of it, for graphs whose edges mostly join different
    communities).

    ``n_must``, ``n_cannot``: npkl's pairs of each kind drawn from the labels or the groups
    (default: the protocol's round(0.6 n) each, as :func:`~npkl_dist.sample_constraints`
    and :func:`~npkl_dist.embedding.group_constraints`)."""
    from ..embedding._saddle import check_count
    from ..graph._blocks import graph_from_edge_batches, iter_edge_batches
    from ..graph._io import read_labels
    from ._job import ensure_out_dir

    if method not in EMBED_METHODS:
        raise ValidationError(
            f"method: {method!r} is not one of {', '.join(map(repr, EMBED_METHODS))}"
        )
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValidationError(f"dim: expected a positive integer, got {dim!r}")
    if manifold not in MANIFOLDS:
        raise ValidationError(
            f"manifold: {manifold!r} is not one of {', '.join(map(repr, MANIFOLDS))}"
        )
    if manifold != "graph" and method != "npkl":
        raise ValidationError(
            "manifold: only method 'npkl' learns over a manifold; drop "
            + fix("manifold=...", "--manifold")
            + f" for method {method!r}, or use method 'npkl'"
        )
    for name, count in (("n_must", n_must), ("n_cannot", n_cannot)):
        if count is None:
            continue
        flag = name.replace("_", "-")
        if method != "npkl":
            raise ValidationError(
                f"{name}: only method 'npkl' learns from pairs; drop "
                + fix(f"{name}=...", f"--{flag}")
                + f" for method {method!r}, or use method 'npkl'"
            )
        # checked before the graph is read (sampling checks it too, after the manifold)
        check_count(name, count, 0, hint="give " + fix(f"{name}=1000", f"--{flag} 1000"))
    if manifold != "graph" and learn_npkl is not None and out is None:
        raise ValidationError(
            "out: a checkpointed run over the spectral manifold keeps its graph in the output "
            "directory; give " + fix("out=...", "--out DIR")
        )
    if out is not None:
        out = ensure_out_dir(out, "out")
    graph = graph_from_edge_batches(iter_edge_batches(edges), n_points)
    S = graph.S.tocsr()
    n = S.shape[0]
    y = None
    if labels is not None:
        y = read_labels(labels)
        if y.shape[0] != n:
            raise ValidationError(
                f"labels: {y.shape[0]} labels for a graph of {n} nodes; give one label per node "
                "(-1 for unknown)"
            )
    member = None
    if groups is not None:
        from ..embedding import read_memberships

        if labels is not None:
            raise ValidationError("groups: give side information as labels or as groups, not both")
        member = read_memberships(groups, n_nodes=n)
        if member.n_nodes != n:
            raise ValidationError(
                f"groups: memberships name node {member.n_nodes - 1}, the graph has {n} nodes "
                f"(0 to {n - 1}); give memberships of this graph's nodes"
            )
    if method in ("cmvu", "npkl") and y is None and (member is None or method == "cmvu"):
        raise ValidationError(
            f"labels: method {method!r} learns from side information; give "
            + fix("labels=...", "--labels FILE")
            + " (one label per node, -1 for unknown)"
            + (", or " + fix("groups=...", "--groups FILE") if method == "npkl" else "")
            + ", or use method 'spe' or 'mve'"
        )
    split = None
    if holdout is not None:
        from ..embedding import split_edges

        split = split_edges(S, holdout, seed=seed)
        S = split.train
    if method in ("mve", "cmvu") and n > EXACT_MAX_POINTS:
        raise ValidationError(
            f"edges: {n} nodes; the exact {method} holds n x n matrices and takes at most "
            f"{EXACT_MAX_POINTS} nodes; use method 'spe' (low rank above {EXACT_MAX_POINTS} "
            "nodes) or 'npkl' for a larger graph"
        )
    t0 = time.perf_counter()
    info: dict = {}
    S_learn = S
    if manifold == "spectral":
        S_learn = spectral_manifold(S, seed=seed).S
        info["manifold"] = {
            "kind": "spectral",
            "dim": SPECTRAL_DIM,
            "k": SPECTRAL_KNN,
            "n_edges": int(S_learn.nnz // 2),
        }
    if method == "npkl" and learn_npkl is not None:
        if split is not None:
            raise ValidationError(
                "holdout: a checkpointed run (--run) learns on the whole edge list; drop "
                "--holdout, or drop --run to score friend suggestion"
            )
        if manifold == "spectral":
            path = write_edges(S_learn, out / "manifold_edges.npy")
            V, fit_info, pairs = learn_npkl(edges=str(path))
        else:
            V, fit_info, pairs = learn_npkl()
        info.update(fit_info)
        Z, info["normalized_kernel"] = npkl_coordinates(V, pairs, dim)
    elif method == "npkl":
        cons = _npkl_pairs(y, member, seed, n_must, n_cannot)
        Z, fit_info = _npkl(S_learn, cons, dim, seed, max_iter)
        info.update(fit_info)
    elif method == "spe" and n > EXACT_MAX_POINTS:
        Z, info = _spe_lowrank(S, dim, C, capacity, max_iter, seed)
    else:
        Z, info = _exact(S, y, method, dim, C, capacity, max_iter)
    fit_seconds = time.perf_counter() - t0
    summary = {
        "method": method,
        "dim": int(dim),
        "n_points": int(n),
        "n_edges": int(graph.S.nnz // 2),
        "n_components": int(graph.n_components),
        **info,
        "fit_seconds": fit_seconds,
        "seed": seed,
    }
    if member is not None:
        summary["n_groups"] = int(member.n_groups)
    summary.update(_scores(Z, y, member, split, seed, learned=method in ("npkl", "cmvu")))
    if out is not None:
        np.save(out / "embedding.npy", Z)
        summary["files"] = {
            "embedding": str(out / "embedding.npy"),
            "summary": str(out / "summary.json"),
        }
        Path(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary, Z, y


def spectral_manifold(S, *, dim: int = SPECTRAL_DIM, k: int = SPECTRAL_KNN, seed=0):
    """The Graph npkl smooths over with ``manifold='spectral'``: the k-nearest-neighbour graph
    (:func:`npkl_dist.knn_graph`, gaussian weights) of the rows of the graph's spectral
    embedding -- the top ``dim + 1`` eigenvectors of the normalised adjacency
    D^-1/2 S D^-1/2 (ARPACK from a fixed start vector), the first (sqrt(degree) on a connected
    graph) left out, each row scaled to unit length.

    On a graph whose edges mostly join different communities, smoothing over its own edges
    mixes the communities, while its leading eigenvectors still separate them in part; their
    kNN graph joins nodes the whole graph puts together (docs/decisions/social-embeddings.md).
    O(|E| dim) per Lanczos step and O(n dim) memory; the kNN search as knn_graph's."""
    from scipy.sparse.linalg import eigsh

    from ..graph._graph import knn_graph, normalized_adjacency

    n = S.shape[0]
    if n < k + 3:
        raise ValidationError(
            f"edges: {n} nodes; the spectral manifold needs more than {k + 2}; use "
            + fix("manifold='graph'", "--manifold graph", '[graph] manifold = "graph"')
        )
    m = min(dim + 1, n - 2)
    w, Phi = eigsh(normalized_adjacency(S), k=m, which="LA", v0=np.ones(n))
    Phi = Phi[:, np.argsort(-w, kind="stable")][:, 1:]
    norms = np.linalg.norm(Phi, axis=1, keepdims=True)
    X = np.divide(Phi, norms, out=np.zeros_like(Phi), where=norms > 0)
    return knn_graph(X, k=k, seed=seed, warn=False)


def write_edges(S, path) -> Path:
    """The upper triangle of a weighted graph as an (m, 3) edge file (i, j, weight) that
    ``npkl embed`` / the pipeline read back as the same graph."""
    import scipy.sparse as sp

    U = sp.triu(S, 1).tocoo()
    path = Path(path)
    np.save(path, np.column_stack([U.row, U.col, U.data]).astype(np.float64))
    return path


def _scores(Z, y, member, split, seed, learned: bool) -> dict:
    """The downstream tasks' figures (npkl_dist.embedding's node_classification and
    friend_suggestion) for the summary."""
    from ..embedding import friend_suggestion, group_labels, node_classification

    out: dict = {}
    target = y if y is not None else (None if member is None else group_labels(member)[0])
    if target is not None:
        sc = node_classification(Z, target, train_fractions=(0.1, 0.5, 0.9), seed=seed)
        # npkl learned from pairs of these very labels: not a held-out score, said so
        out["node_classification"] = {**sc.to_dict(), "labels_were_side_information": learned}
    if split is not None:
        fs = friend_suggestion(Z, split, seed=seed)
        out["friend_suggestion"] = fs.to_dict()
        out["n_edges_held_out"] = int(split.pos.shape[0])
    return out


def _spe_lowrank(S, dim, C, capacity, max_iter, seed):
    """SPE above EXACT_MAX_POINTS nodes: rank-16 kernel, sampled triplets (docs/algorithms.md,
    "SPE at scale")."""
    from ..embedding import embed_spe_lowrank

    W = S.copy()
    W.data = np.ones_like(W.data)
    kw = {} if max_iter is None else {"max_sweeps": max_iter}
    res = embed_spe_lowrank(W, dim=dim, rank=max(16, dim), C=C, B=capacity, seed=seed, **kw)
    return res.embedding, {
        "solver": "spe-lowrank",
        "objective": float(res.objective),
        "dual_objective": float(res.dual_objective),
        "duality_gap": float(res.objective - res.dual_objective),
        "iterations": int(res.iterations),
        "sweeps": int(res.sweeps),
        "converged": bool(res.converged),
        "rank": int(res.factor.shape[1]),
        "rank_binding": bool(res.rank_binding),
    }


def _exact(S, y, method, dim, C, capacity, max_iter):
    from ..embedding import embed_cmvu, embed_mve, embed_spe

    W = S.copy()
    W.data = np.ones_like(W.data)  # connectivity / unit edge lengths
    kw = {"dim": dim, "C": C, "B": capacity}
    if method == "spe":
        res = embed_spe(W, **kw, **({} if max_iter is None else {"max_iter": max_iter}))
    elif method == "mve":
        res = embed_mve(W, **kw, **({} if max_iter is None else {"max_outer": max_iter}))
    else:
        known = y >= 0
        if not known.all():
            raise ValidationError(
                f"labels: cmvu colours every node, {int((~known).sum())} are unlabelled (-1); "
                "give a label for every node or use method 'npkl'"
            )
        res = embed_cmvu(W, y, **kw, **({} if max_iter is None else {"max_iter": max_iter}))
    return res.embedding, {
        "objective": float(res.objective),
        "dual_objective": float(res.dual_objective),
        "duality_gap": float(res.objective - res.dual_objective),
        "iterations": int(res.iterations),
        "converged": bool(res.converged),
    }


def npkl_coordinates(V, constraints, dim: int):
    """(Z, normalized): the top ``dim`` principal coordinates of the learned kernel, of its
    cosine-normalised form (unit rows of V) when the points in no pair got short rows
    (:func:`npkl_dist.evaluate.choose_normalize`, the rule kernel k-means follows: with few
    nodes labelled the free rows decay away from the labelled ones, and their length, not
    their direction, would then dominate the coordinates)."""
    from ..evaluate import choose_normalize

    normalized = choose_normalize(None, constraints, V)
    if normalized:
        V = np.asarray(V, dtype=np.float64)
        norms = np.linalg.norm(V, axis=1, keepdims=True)
        V = np.divide(V, norms, out=np.zeros_like(V), where=norms > 0)
    return principal_coordinates(V, dim), bool(normalized)


def _npkl_pairs(y, member, seed, n_must=None, n_cannot=None):
    """The pairs npkl learns from: the papers' protocol on labels, or group_constraints'
    on memberships (as the pipeline's ingest stage samples them)."""
    from ..embedding import group_constraints
    from ..problem._constraints import sample_constraints

    if y is not None:
        return sample_constraints(y, n_must, n_cannot, seed=seed)
    return group_constraints(member, n_must, n_cannot, seed=seed)


def _npkl(S, cons, dim, seed, max_iter):
    from ..graph._graph import laplacian
    from ..problem._problem import NPKLProblem
    from ..solvers.bcd._fit import fit_bcd

    problem = NPKLProblem.build(laplacian(S, 1e-3), cons, loss="square", seed=seed)
    res = fit_bcd(problem, **({} if max_iter is None else {"max_sweeps": max_iter}))
    Z, normalized = npkl_coordinates(res.V, cons, dim)
    return Z, {
        "objective": float(res.objective),
        "iterations": int(res.n_sweeps),
        "converged": bool(res.converged),
        "rank": int(problem.rank),
        "n_constraints": int(cons.m),
        "normalized_kernel": normalized,
    }
