"""Benchmark: social-graph embeddings at Tang & Liu's Flickr size and at 10^6 nodes (issue 77,
graphs (b) and (c)), against the embeddings a user would pick instead, in one run.

Problem: an LFR benchmark graph (networkit's LFRGenerator: power-law degrees and community
sizes, a share ``--mu`` of each node's edges leaving its community), seeded, cached under
bench/.cache/. Presets: ``--graph b`` is Tang & Liu's Flickr size (80,513 nodes, mean degree
146, so about 5.9 M edges; communities of 150 to 800 nodes, about 200) with mu = 0.9: a node
has about 15 edges inside its community, whose signal (about 15 - 1.5 for these sizes) is
barely above the Kesten-Stigum bound sqrt(146), so unsupervised embeddings find the
communities only in part (why this mu: docs/decisions/social-embeddings.md); ``--graph
c`` 10^6 nodes and about 10^7 edges (mean degree 20; communities of 500 to 5,000).

Side information is what a user has: the groups of the labelled nodes only. For each
``--fractions`` share f of the nodes (one seeded stratified split per share), every method's
embedding trains a multinomial logistic regression on the labelled nodes and is scored on the
others (Micro- and Macro-F1):

* ``npkl``: the kernel learned on the graph from pairs sampled from the labelled nodes'
  memberships (``group_constraints``; BCD, square loss, the default rank), through ``npkl
  embed --method npkl --run``'s own code path (the pipeline's stages, checkpointed), its top
  ``--dim`` principal coordinates (of the cosine-normalised kernel when the unlabelled nodes'
  rows are short, ``npkl_coordinates``); one fit per share; the protocol's round(0.6 n)
  pairs of each kind whatever the share, or ``--pairs-per-labelled K`` times the labelled
  nodes;
* ``npkl-spectral``: the same, learned over the spectral manifold (``npkl embed --manifold
  spectral``: the kNN graph of the graph's spectral embedding); its time includes the
  eigenvectors and the kNN search;
* ``spectral``: the top ``--dim`` eigenvectors of the normalised adjacency (scipy's eigsh);
* ``node2vec``: pecanpy (SparseOTF, p = q = 1, 10 walks of 80 per node, window 10, ``--dim``
  dimensions), in its own environment bench/.venv-n2v (pecanpy's gensim pins numpy < 2);
  created on first use.

Each method runs in a child process: wall seconds and the child's peak RSS. ``--crash`` also
kills the npkl child of the first share with SIGKILL once ``--crash-after`` checkpoints are
committed, runs the same child again (it continues from the newest checkpoint), and records
whether its embedding equals the uninterrupted one bitwise.

Writes bench/results/embed_social_<graph>.json (bench/_results.py)::

    python bench/embed_social.py --graph b --crash
    python bench/embed_social.py --graph c --fractions 0.1 --methods npkl spectral
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

CACHE = ROOT / "bench" / ".cache"
N2V_VENV = ROOT / "bench" / ".venv-n2v"
N2V_REQUIREMENTS = ["pecanpy==2.0.9"]

PRESETS = {
    "b": dict(n=80_513, degree=146.0, max_degree=1200, min_comm=150, max_comm=800, mu=0.9),
    "c": dict(n=1_000_000, degree=20.0, max_degree=1000, min_comm=500, max_comm=5000, mu=0.45),
    "tiny": dict(n=3_000, degree=20.0, max_degree=200, min_comm=50, max_comm=300, mu=0.3),
}

DESCRIPTION = dict(
    title="Social-graph embeddings with group side information (LFR graphs)",
    measures="wall seconds and peak RSS (GB) of each embedding in its own process; Micro- and "
    "Macro-F1 of a multinomial logistic regression trained on the labelled share of the "
    "nodes, scored on the rest",
    reference="a spectral embedding (scipy eigsh, normalised adjacency) and node2vec (pecanpy) "
    "of the same graph in the same run, scored on the same splits",
    columns=[
        ("method", "method"),
        ("labelled", "labelled"),
        ("seconds", "seconds"),
        ("peak_gb", "peak RSS GB"),
        ("micro_f1", "Micro-F1"),
        ("macro_f1", "Macro-F1"),
        ("n_constraints", "pairs"),
        ("iterations", "sweeps"),
    ],
)

#: per labelled share: a row's cells hold one value per share (the page's headline table)
PER_SHARE = ("seconds", "peak_gb", "micro_f1", "macro_f1", "n_constraints", "iterations")


def pivot(rows: list[dict]) -> list[dict]:
    """One row per method, its per-share figures as lists in share order (a peer's seconds
    and peak once: it embeds once for every share)."""
    out: dict = {}
    for r in rows:
        row = out.setdefault(r["method"], {"method": r["method"], "labelled": []})
        row["labelled"].append(r["labelled"])
        for k in PER_SHARE:
            if k in r:
                row.setdefault(k, []).append(r[k])
    for row in out.values():
        for k in ("seconds", "peak_gb"):
            if not row["method"].startswith("npkl") and k in row:
                row[k] = row[k][0]
    return list(out.values())


CHILD = r"""
import json, sys, time
import numpy as np, scipy.sparse as sp
sys.path.insert(0, sys.argv[1])
a = json.loads(sys.argv[2])
out = {}
t = time.perf_counter()
if a["method"] == "spectral":
    from scipy.sparse.linalg import eigsh
    E = np.load(a["edges"]); n = a["n"]
    W = sp.coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(n, n))
    W = (W + W.T).tocsr()
    d = np.asarray(W.sum(axis=1)).ravel()
    s = sp.diags(1.0 / np.sqrt(np.maximum(d, 1e-300)))
    w, Y = eigsh(s @ W @ s, k=a["dim"], which="LA", v0=np.ones(n))
elif a["method"] == "npkl":
    import argparse, warnings
    sys.path.insert(0, a["flows"])
    from npkl_flows._embed import _learn_in_run
    from npkl_dist.job._embed import npkl_coordinates
    ns = argparse.Namespace(method="npkl", edges=a["edges"], n_points=a["n"], labels=None,
                            groups=a["groups"], seed=a["seed"], max_iter=a["max_iter"],
                            run=a["run"], quiet=True,
                            checkpoint_every=a["checkpoint_every"],
                            n_must=a.get("n_must"), n_cannot=a.get("n_cannot"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if a.get("manifold") == "spectral":  # npkl-spectral: the manifold's graph, then npkl
            from npkl_dist.graph._blocks import graph_from_edge_batches, iter_edge_batches
            from npkl_dist.job._embed import spectral_manifold, write_edges
            S = graph_from_edge_batches(iter_edge_batches(a["edges"]), a["n"]).S  # npkl embed's
            path = write_edges(spectral_manifold(S, seed=a["seed"]).S, a["run"] + "-manifold.npy")
            V, info, cons = _learn_in_run(ns)(edges=str(path))
        else:
            V, info, cons = _learn_in_run(ns)()
    Y, info["normalized_kernel"] = npkl_coordinates(V, cons, a["dim"])
    out.update({k: info[k] for k in ("objective", "iterations", "converged", "rank",
                                     "n_constraints", "resumed", "normalized_kernel")
                if k in info})
out["seconds"] = time.perf_counter() - t
# VmHWM: this process's own peak (ru_maxrss of a child started by vfork and exec can carry
# the parent's resident size)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
out["peak_gb"] = int(hwm.split()[1]) / 2**20
np.save(a["out"], Y)
print(json.dumps(out))
"""


def _child_cmd(**kw):
    return [sys.executable, "-c", CHILD, str(ROOT), json.dumps(kw)]


def child(**kw):
    proc = subprocess.run(_child_cmd(**kw), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{kw['method']} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_n2v_env() -> Path:
    """bench/.venv-n2v with pecanpy, unless a completed install is there (marked after pip)."""
    py = N2V_VENV / "bin" / "python"
    done = N2V_VENV / ".installed"
    if not done.exists():
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(N2V_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", *N2V_REQUIREMENTS], check=True)
        done.write_text(" ".join(N2V_REQUIREMENTS) + "\n")
    return py


def node2vec(edges_txt: Path, n: int, dim: int, out: Path, workers: int = 2) -> dict:
    """pecanpy's node2vec (SparseOTF, p = q = 1) in its own environment: seconds, peak GB,
    and the embedding in node order at ``out`` (.npy)."""
    py = ensure_n2v_env()
    emb = out.with_suffix(".emb")
    args = ["--input", str(edges_txt), "--output", str(emb), "--mode", "SparseOTF"]
    args += ["--dimensions", str(dim), "--num-walks", "10", "--walk-length", "80"]
    args += ["--window-size", "10", "--workers", str(workers)]
    t = time.perf_counter()
    proc = subprocess.run([str(py), "-c", _N2V, *args], capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"pecanpy failed: {proc.stderr[-3000:]}")
    peak = [ln for ln in proc.stderr.splitlines() if ln.startswith("VmHWM:")][-1]
    Y = np.zeros((n, dim))
    with open(emb) as fh:
        next(fh)  # word2vec header: count, dim
        for line in fh:
            node, *vec = line.split()
            Y[int(node)] = np.asarray(vec, dtype=float)
    np.save(out, Y)
    return {"seconds": seconds, "peak_gb": int(peak.split()[1]) / 2**20}


#: pecanpy's command line in its environment, then its process's peak resident size
_N2V = r"""
import sys
from pecanpy.cli import main
sys.argv = ["pecanpy", *sys.argv[1:]]
try:
    main()
finally:
    print([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].strip(),
          file=sys.stderr)
"""


def _commit() -> str:
    from bench._results import stamps

    return str(stamps()["commit"])


def make_graph(name: str, seed: int):
    """(edges (m, 2) int64, labels (n,) int64, seconds): the preset's LFR graph, cached."""
    p = PRESETS[name]
    CACHE.mkdir(parents=True, exist_ok=True)
    tag = f"lfr_{name}_{p['n']}_{p['degree']:g}_{p['mu']:g}_{seed}"
    path = CACHE / f"{tag}.npz"
    if path.exists():
        d = np.load(path)
        return d["edges"], d["labels"], float(d["seconds"])
    import networkit as nk

    nk.engineering.setSeed(seed, False)
    t = time.perf_counter()
    g = nk.generators.LFRGenerator(p["n"])
    g.generatePowerlawDegreeSequence(p["degree"], p["max_degree"], -2)
    g.generatePowerlawCommunitySizeSequence(p["min_comm"], p["max_comm"], -1)
    g.setMu(p["mu"])
    g.run()
    G, part = g.getGraph(), g.getPartition()
    A = nk.algebraic.adjacencyMatrix(G, matrixType="sparse").tocoo()
    keep = A.row < A.col
    edges = np.column_stack([A.row[keep], A.col[keep]]).astype(np.int64)
    labels = np.asarray(part.getVector(), dtype=np.int64)
    _, labels = np.unique(labels, return_inverse=True)
    seconds = time.perf_counter() - t
    np.savez(path, edges=edges, labels=labels, seconds=seconds)
    return edges, labels, seconds


def split(labels, fraction: float, seed: int):
    """A stratified labelled share (sorted node indices), seeded."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(labels.size)
    tr, _ = train_test_split(idx, train_size=fraction, stratify=labels, random_state=seed)
    return np.sort(tr)


def f1(Y, labels, train) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import StandardScaler

    test = np.setdiff1d(np.arange(labels.size), train)
    Y = StandardScaler().fit(Y[train]).transform(Y)
    clf = LogisticRegression(max_iter=500).fit(Y[train], labels[train])
    p = clf.predict(Y[test])
    return (
        float(f1_score(labels[test], p, average="micro")),
        float(f1_score(labels[test], p, average="macro")),
    )


def _checkpoints(run: Path) -> int:
    d = run / "checkpoints"
    return 0 if not d.is_dir() else sum(1 for p in d.iterdir() if p.name.startswith("ckpt-"))


def crash_and_resume(kw: dict, after: int, reference: np.ndarray) -> dict:
    """The npkl child killed (SIGKILL) once ``after`` checkpoints are committed, then run
    again: does the resumed embedding equal ``reference`` bitwise?"""
    run = Path(kw["run"])
    proc = subprocess.Popen(_child_cmd(**kw), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t = time.perf_counter()
    while proc.poll() is None and _checkpoints(run) < after:
        time.sleep(0.5)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = time.perf_counter() - t
    r = child(**kw)
    Y = np.load(kw["out"])
    return {
        "killed": killed,
        "killed_after_seconds": killed_at,
        "checkpoints_before_kill": _checkpoints(run) if not killed else after,
        "resumed": bool(r.get("resumed")),
        "resume_seconds": r["seconds"],
        "bitwise_equal": bool(np.array_equal(Y, reference)),
    }


def main(argv=None):
    from bench._results import command, write

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", choices=sorted(PRESETS), default="b")
    ap.add_argument(
        "--methods",
        nargs="+",
        default=["npkl", "npkl-spectral", "spectral", "node2vec"],
        help="npkl-spectral: npkl over the kNN graph of the spectral embedding "
        "(npkl embed --manifold spectral)",
    )
    ap.add_argument("--fractions", nargs="+", type=float, default=[0.1, 0.5])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--max-iter", type=int, default=None, help="npkl sweeps at most")
    ap.add_argument(
        "--checkpoint-every", type=int, default=1, help="npkl: checkpoint every N sweeps"
    )
    ap.add_argument("--crash", action="store_true", help="also crash and resume npkl")
    ap.add_argument("--crash-after", type=int, default=3, help="checkpoints before the kill")
    ap.add_argument(
        "--reuse-peers",
        action="store_true",
        help="take the peers' embeddings and figures from the last run on this graph "
        "(bench/.cache/peers_<graph>/, written by every run that embeds them; the JSON "
        "says when they were measured) instead of embedding them again",
    )
    ap.add_argument(
        "--pairs-per-labelled",
        type=float,
        default=None,
        metavar="K",
        help="npkl: round(K x labelled nodes) pairs of each kind (default: the protocol's "
        "round(0.6 n) each whatever the share; K = 6 is that count at 10 %% labelled)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="output path (default bench/results/...)")
    args = ap.parse_args(argv)
    E, labels, gen_s = make_graph(args.graph, args.seed)
    n = labels.size
    sizes = np.bincount(labels)
    print(
        f"graph {args.graph}: {n:,} nodes, {len(E):,} edges (mean degree {2 * len(E) / n:.1f}), "
        f"{sizes.size} communities of {sizes.min()} to {sizes.max()} ({gen_s:.1f} s)",
        file=sys.stderr,
    )
    work = CACHE / f"embed_social_{args.graph}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    np.save(work / "E.npy", E)
    rows, extra = [], {"graph_seconds": gen_s, "n_edges": int(len(E)), "n_points": int(n)}
    extra["n_communities"] = int(sizes.size)
    peers = {}
    cache = CACHE / f"peers_{args.graph}"
    cached = json.loads((cache / "peers.json").read_text()) if args.reuse_peers else {}
    if cached:
        extra["peers_reused"] = cached.get("measured")
    for m in ("node2vec", "spectral"):
        if m not in args.methods:
            continue
        out = work / f"{m}.npy"
        if m in cached:
            r = dict(cached[m])
            shutil.copyfile(cache / f"{m}.npy", out)
        elif m == "spectral":
            r = child(method=m, edges=str(work / "E.npy"), n=n, dim=args.dim, out=str(out))
        else:
            txt = work / "E.edg"
            np.savetxt(txt, E, fmt="%d", delimiter="\t")
            r = node2vec(txt, n, args.dim, out)
        peers[m] = (r, np.load(out))
        print(f"{m}: {r['seconds']:.1f} s, {r['peak_gb']:.2f} GB", file=sys.stderr)
    if peers and not cached:  # for --reuse-peers
        cache.mkdir(parents=True, exist_ok=True)
        for m, (_r, Y) in peers.items():
            np.save(cache / f"{m}.npy", Y)
        when = f"bench/embed_social.py at commit {_commit()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        stats = {m: r for m, (r, _) in peers.items()}
        (cache / "peers.json").write_text(json.dumps({**stats, "measured": when}, indent=1))
    for k, frac in enumerate(args.fractions):
        train = split(labels, frac, args.seed)
        for m, (_r, Y) in peers.items():
            mi, ma = f1(Y, labels, train)
            rows.append({"method": m, "labelled": frac, **_r, "micro_f1": mi, "macro_f1": ma})
            print(rows[-1], file=sys.stderr)
        for npkl_method in [m for m in ("npkl", "npkl-spectral") if m in args.methods]:
            spectral_manifold = npkl_method == "npkl-spectral"
            tag = f"{'spectral_' if spectral_manifold else ''}{frac:g}"
            pairs = None
            if args.pairs_per_labelled is not None:
                pairs = round(args.pairs_per_labelled * train.size)
                tag += f"_pairs{pairs}"
            groups = work / f"groups_{frac:g}.csv"
            with open(groups, "w") as fh:
                fh.write("node,group\n")
                fh.writelines(f"{i},{labels[i]}\n" for i in train)
            kw = dict(
                method="npkl", edges=str(work / "E.npy"), n=n, dim=args.dim, groups=str(groups),
                seed=args.seed, max_iter=args.max_iter, run=str(work / f"run_{tag}"),
                out=str(work / f"npkl_{tag}.npy"), flows=str(ROOT / ".pp"),
                manifold="spectral" if spectral_manifold else "graph",
                checkpoint_every=args.checkpoint_every, n_must=pairs, n_cannot=pairs,
            )  # fmt: skip
            r = child(**kw)
            Y = np.load(kw["out"])
            mi, ma = f1(Y, labels, train)
            rows.append(
                {"method": npkl_method, "labelled": frac, **r, "micro_f1": mi, "macro_f1": ma}
                | ({} if pairs is None else {"pairs_each": pairs})
            )
            print(rows[-1], file=sys.stderr)
            if npkl_method == "npkl":
                npkl_kw = kw
                npkl_Y = Y
        if args.crash and k == 0 and "npkl" in args.methods:
            kw = {**npkl_kw, "run": str(work / "run_crash"), "out": str(work / "npkl_crash.npy")}
            extra["crash"] = crash_and_resume(kw, args.crash_after, npkl_Y)
            print(extra["crash"], file=sys.stderr)
    p = PRESETS[args.graph]
    notes = [
        f"networkit LFR: n = {n:,}, {len(E):,} edges (mean degree {2 * len(E) / n:.1f}), "
        f"{sizes.size} communities of {sizes.min()} to {sizes.max()} nodes, mu = {p['mu']}; "
        f"dimension {args.dim}; one stratified split per labelled share (seed {args.seed})",
        "npkl learns from pairs of the labelled nodes' groups only (group_constraints); the "
        "peers are unsupervised; every embedding is scored by the same classifier on the "
        "same split",
    ]
    if "npkl" not in args.methods:
        notes.append(
            "npkl over the graph itself not run here (its last run: "
            "docs/decisions/social-embeddings.md)"
        )
    if "peers_reused" in extra:
        notes.append(f"node2vec and spectral (same graph, same splits): {extra['peers_reused']}")
    if "crash" in extra:
        c = extra["crash"]
        notes.append(
            f"crash: npkl killed (SIGKILL) after {args.crash_after} checkpoints "
            f"({c['killed_after_seconds']:.0f} s), run again: resumed {c['resumed']}, "
            f"embedding bitwise equal to the uninterrupted run: {c['bitwise_equal']}"
        )
    extra["per_share"] = rows
    write(
        f"embed_social_{args.graph}",
        command=command("bench/embed_social.py", argv),
        rows=pivot(rows),
        notes=notes,
        args=vars(args),
        path=args.json,
        extra=extra,
        **DESCRIPTION,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
