"""Benchmark: SPE at scale on the paper's Flickr-size graph (issue 77 item 2, graph (a)).

Problem: a planted partition with two groups (issue 77's graph (a): 3,660 nodes, mean degree
≈ 19, "two groups of interest"), seeded; ``--generator igraph`` (``npkl_dist.planted_partition``,
igraph's SBM) or ``networkit`` (its ClusteredRandomGraphGenerator, the same p_in / p_out).
In one run, each method in its own child process (wall seconds and the child's peak RSS):

* ``spe_lowrank``: ``embed_spe_lowrank`` (rank ``--rank``, ``--triplets`` draws per node and
  sweep, C = 1 and B = n as the paper's §7.5, and ``--C-per-node`` C = c n), the exact
  objective of its factor (``spe_objective``, every triplet; timed apart), the certified gap;
* ``spectral``: the reference, the top ``--rank`` eigenvectors of the normalised adjacency
  D^-1/2 W D^-1/2 (scipy's eigsh).

Downstream, on every embedding: one-vs-rest logistic regression trained on ``--labelled`` of
the nodes (stratified, seeded, ``--splits`` splits), Micro- and Macro-F1 on the rest.

Writes bench/results/spe_scale_<n>.json (bench/_results.py)::

    python bench/spe_scale.py
    python bench/spe_scale.py --n 3660 --degree 19.1 --mix 0.2 --rank 16 --generator networkit
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

DESCRIPTION = dict(
    title="SPE at scale (rank-r, sampled triplets) on a two-group planted partition",
    measures="wall seconds and peak RSS (GB) of the embedding in a child process; Micro/"
    "Macro-F1 of logistic regression on the embedding, 50% of the nodes labelled; SPE's "
    "objective with the searched slack, its exact value (every triplet) and the certified gap",
    reference="a spectral embedding (scipy eigsh, top-r eigenvectors of the normalised "
    "adjacency) of the same graph in the same run",
    columns=[
        ("method", "method"),
        ("seconds", "seconds"),
        ("peak_gb", "peak RSS GB"),
        ("micro_f1", "Micro-F1"),
        ("macro_f1", "Macro-F1"),
        ("objective", "objective (searched)"),
        ("objective_exact", "objective (exact)"),
        ("rel_gap", "rel. gap"),
        ("sweeps", "sweeps"),
        ("triplets", "working set"),
    ],
)

CHILD = r"""
import json, resource, sys, time
import numpy as np, scipy.sparse as sp
sys.path.insert(0, sys.argv[1])
a = json.loads(sys.argv[2])
E = np.load(a["edges"]); n = a["n"]
W = sp.coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(n, n))
W = (W + W.T).tocsr()
out = {}
if a["method"] == "spectral":
    from scipy.sparse.linalg import eigsh
    t = time.perf_counter()
    d = np.asarray(W.sum(axis=1)).ravel()
    s = sp.diags(1.0 / np.sqrt(np.maximum(d, 1e-300)))
    w, U = eigsh(s @ W @ s, k=a["rank"], which="LA", v0=np.ones(n))
    out["seconds"] = time.perf_counter() - t
    Y = U
else:
    from npkl_dist.embedding import embed_spe_lowrank, spe_objective
    import warnings
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = embed_spe_lowrank(W, dim=a["rank"], rank=a["rank"], C=a["C"],
                              triplets_per_node=a["triplets"], max_sweeps=a["max_sweeps"],
                              max_iter=a["max_iter"], tol=a["tol"], seed=a["seed"])
    out["seconds"] = time.perf_counter() - t
    out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t = time.perf_counter()
    exact = spe_objective(W, r.factor, a["C"])
    out.update(objective=r.objective, objective_exact=exact,
               exact_seconds=time.perf_counter() - t, dual=r.dual_objective,
               rel_gap=(exact - r.dual_objective) / (abs(exact) + 1.0), sweeps=r.sweeps,
               iterations=r.iterations, triplets=int(r.triplets.shape[0]),
               rank_binding=r.rank_binding, converged=r.converged, xi=r.xi)
    Y = r.embedding
out.setdefault("peak_gb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
np.save(a["out"], Y)
print(json.dumps(out))
"""


def child(**kw):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), json.dumps(kw)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kw['method']} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_graph(generator, n, groups, degree, mix, seed):
    """(edges (m, 2) i < j, labels (n,)): equal consecutive groups, p_in / p_out as
    ``npkl_dist.planted_partition``."""
    if generator == "igraph":
        from npkl_dist import planted_partition

        return planted_partition(n, groups, degree=degree, mix=mix, seed=seed)
    import networkit

    size = n // groups
    n = size * groups
    p_in = degree * (1.0 - mix) / (size - 1)
    p_out = degree * mix / (n - size)
    networkit.engineering.setSeed(seed, False)
    networkit.engineering.setNumberOfThreads(1)
    g = networkit.generators.ClusteredRandomGraphGenerator(n, groups, p_in, p_out)
    G = g.generate()
    part = g.getCommunities()
    E = np.array([sorted(e) for e in G.iterEdges()], dtype=np.int64).reshape(-1, 2)
    return E, np.array([part.subsetOf(v) for v in range(n)], dtype=np.int64)


def f1_scores(Y, labels, labelled, splits, seed):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedShuffleSplit
    from sklearn.preprocessing import StandardScaler

    Y = StandardScaler().fit_transform(Y)
    micro, macro = [], []
    cv = StratifiedShuffleSplit(splits, train_size=labelled, random_state=seed)
    for tr, te in cv.split(Y, labels):
        clf = LogisticRegression(max_iter=2000).fit(Y[tr], labels[tr])
        p = clf.predict(Y[te])
        micro.append(f1_score(labels[te], p, average="micro"))
        macro.append(f1_score(labels[te], p, average="macro"))
    return float(np.mean(micro)), float(np.mean(macro))


def main(argv=None):
    from bench._results import command, write

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3660)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--degree", type=float, default=19.1)
    p.add_argument("--mix", type=float, default=0.2)
    p.add_argument("--generator", choices=["igraph", "networkit"], default="igraph")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--triplets", type=int, default=8)
    p.add_argument(
        "--C-per-node",
        type=float,
        default=0.0,
        dest="c_per_node",
        help="also run C = c n (C = 1 makes the slack negligible at this size); 0: C = 1 only "
        "(C = n took > 12 CPU minutes on graph (a) and was stopped)",
    )
    p.add_argument("--max-sweeps", type=int, default=10)
    p.add_argument("--max-iter", type=int, default=50)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--labelled", type=float, default=0.5)
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="output path (default bench/results/...)")
    args = p.parse_args(argv)
    t = time.perf_counter()
    E, labels = make_graph(args.generator, args.n, args.groups, args.degree, args.mix, args.seed)
    n = labels.size
    gen_s = time.perf_counter() - t
    print(
        f"graph: {n} nodes, {len(E)} edges, mean degree {2 * len(E) / n:.2f} ({gen_s:.1f} s)",
        file=sys.stderr,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="npkl-spe-scale-") as tmp:
        np.save(Path(tmp) / "E.npy", E)
        runs = [("spectral", dict(method="spectral"))]
        for C in dict.fromkeys([1.0] + ([args.c_per_node * n] if args.c_per_node > 0 else [])):
            runs.append((f"spe_lowrank C={C:g}", dict(method="spe", C=C)))
        for name, kw in runs:
            out = str(Path(tmp) / f"{len(rows)}.npy")
            r = child(
                edges=str(Path(tmp) / "E.npy"),
                n=n,
                rank=args.rank,
                out=out,
                triplets=args.triplets,
                max_sweeps=args.max_sweeps,
                max_iter=args.max_iter,
                tol=args.tol,
                seed=args.seed,
                **kw,
            )
            r["micro_f1"], r["macro_f1"] = f1_scores(
                np.load(out), labels, args.labelled, args.splits, args.seed
            )
            r["method"] = name
            rows.append(r)
            print(r, file=sys.stderr)
    notes = [
        f"{args.generator} planted partition: n = {n:,}, {len(E):,} edges (mean degree "
        f"{2 * len(E) / n:.1f}), {args.groups} groups, mix {args.mix}; rank {args.rank}, "
        f"{args.triplets} draws per node and sweep, B = n; {args.labelled:.0%} labelled, "
        f"{args.splits} splits",
        "objective (exact): spe_objective on the returned factor, every triplet checked "
        "(O(n^2 r), timed apart: exact_seconds); rel. gap = (exact - J_r) / (|exact| + 1), "
        "J_r a lower bound on the rank-r optimum",
    ]
    write(
        f"spe_scale_{n}",
        command=command("bench/spe_scale.py", argv),
        rows=rows,
        notes=notes,
        args=vars(args),
        path=args.json,
        extra={"graph_seconds": gen_s, "n_edges": int(len(E))},
        **DESCRIPTION,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
