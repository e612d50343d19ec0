"""``npkl embed``: argument handling around npkl_dist.job._embed (no numerics here)."""

from __future__ import annotations

import json
import os
import sys

from npkl_dist.job._embed import embed_job


def add_embed_parser(sub, positive_int, nonneg_int) -> None:
    """``npkl embed``'s options (``positive_int``, ``nonneg_int``: the CLI's argument types)."""
    embed = sub.add_parser(
        "embed",
        help="embed a graph: SPE, MVE, colored MVU (SimpleNPKL section 6) or NPKL",
        description="Embed the nodes of a graph (an edge list i, j[, w]) in --dim dimensions: "
        "spe (structure preserving; the connectivity only), mve (minimum volume; unit edge "
        "lengths), cmvu (colored MVU; unit edge lengths, --labels as colours) or npkl (the "
        "kernel learned on the graph from pairs sampled from --labels, its top principal "
        "coordinates). Writes embedding.npy (node order), summary.json and embedding.png.",
    )
    embed.add_argument(
        "--edges",
        required=True,
        metavar="PATH",
        help="edge list: .csv/.parquet (i, j[, w]) or .npy",
    )
    embed.add_argument(
        "--method",
        choices=("spe", "mve", "cmvu", "npkl"),
        default="spe",
        help="the embedding (default: spe)",
    )
    embed.add_argument(
        "--dim", type=positive_int, default=2, metavar="D", help="dimensions (default: 2)"
    )
    embed.add_argument(
        "--labels",
        metavar="PATH",
        help="one label per node (-1 unknown): cmvu's colours, npkl's pairs, the picture's colours",
    )
    embed.add_argument(
        "--groups",
        metavar="PATH",
        help="group memberships instead of --labels: node, group per row (.csv/.parquet with "
        "that header, or .npy); npkl's pairs by the documented protocol, node classification "
        "over the groups",
    )
    for kind in ("must", "cannot"):
        embed.add_argument(
            f"--n-{kind}",
            type=nonneg_int,
            metavar="M",
            help=f"npkl: {kind}-link pairs to sample from --labels or --groups (default "
            "round(0.6 n), or all the side information allows if fewer)",
        )
    embed.add_argument(
        "--holdout",
        type=float,
        metavar="F",
        help="hold out this share of the edges before embedding and score friend suggestion "
        "on them (AUC, precision@10)",
    )
    embed.add_argument(
        "--n-points",
        type=positive_int,
        metavar="N",
        help="the number of nodes (default: the largest index in the edges + 1)",
    )
    embed.add_argument(
        "--manifold",
        choices=("graph", "spectral"),
        default="graph",
        help="npkl: smooth over the graph itself (default) or over the kNN graph of its "
        "spectral embedding (for graphs whose edges mostly join different communities)",
    )
    embed.add_argument(
        "--C",
        type=float,
        default=1.0,
        metavar="C",
        help="spe / mve / cmvu: the slack weight (default: 1, the paper's)",
    )
    embed.add_argument(
        "--capacity",
        type=float,
        metavar="B",
        help="spe / mve / cmvu: tr(K^2) <= B (default: the number of nodes)",
    )
    embed.add_argument(
        "--max-iter",
        type=positive_int,
        metavar="N",
        help="iterations at most (mve: outer iterations; npkl: sweeps; default: the method's)",
    )
    embed.add_argument("--seed", type=int, default=0, help="npkl's pairs and start (default: 0)")
    embed.add_argument(
        "--run",
        metavar="RUN",
        help="npkl: learn in a run store (a path, or a name under $NPKL_HOME/runs), "
        "checkpointed; the same command again continues a crashed run from its newest "
        "checkpoint, bitwise as if uninterrupted (npkl status RUN shows it)",
    )
    embed.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=1,
        metavar="N",
        help="with --run: checkpoint every N sweeps (default: 1)",
    )
    embed.add_argument("--out", required=True, metavar="DIR", help="output directory")
    embed.add_argument("--no-plot", dest="plot", action="store_false", help="no embedding.png")
    embed.add_argument("--json", action="store_true", help="print summary.json instead")
    embed.add_argument("--quiet", action="store_true", help="nothing on stderr")


def _learn_in_run(args):
    """``npkl embed --method npkl --run RUN``: the pipeline's stages (graph, constraints, a
    checkpointed BCD fit) in the run store; a run that exists is continued, if it was started
    with the same input and model options."""
    from npkl_dist import store as st
    from npkl_dist._errors import ValidationError

    from ._config import validate_config
    from ._fit import run_fit_stages

    if args.method != "npkl":
        raise ValidationError(
            f"--run: checkpoints the npkl method's learning; --method {args.method} runs in one "
            "go: drop --run, or use --method npkl"
        )

    def learn(edges=None):  # called by embed_job once it has checked the input and side info
        # edges: the spectral manifold's edge file (--manifold spectral), else the input graph
        raw = {
            "run": args.run,
            "input": {
                "edges": edges or args.edges,
                "n_points": args.n_points,
                "labels": args.labels,
                "groups": args.groups,
                "n_must": args.n_must,
                "n_cannot": args.n_cannot,
            },
            "model": {"solver": "bcd", "loss": "square", "seed": args.seed},
            "execution": {"checkpoint_every": args.checkpoint_every},
        }
        if args.max_iter is not None:
            raw["model"]["max_sweeps"] = args.max_iter
        cfg = validate_config(raw, source="npkl embed", base_dir=os.getcwd())
        url = st.resolve_run(cfg["run"], root=cfg["storage"]["root"])
        try:
            with st.RunStore.open(url, mode="r") as rs:
                stored = rs.config.get("pipeline") or {}
        except st.StoreError:
            stored = None
        if stored is not None:
            differ = [
                f"{sec}.{k}: run {stored.get(sec, {}).get(k)!r}, now {v!r}"
                for sec in ("input", "model")
                for k, v in cfg[sec].items()
                if stored.get(sec, {}).get(k) != v
            ]
            if differ:
                raise ValidationError(
                    f"--run: {args.run!r} was started with other options ({'; '.join(differ)}); "
                    "repeat its command to continue it, or pass another --run"
                )
        summary, V, _ = run_fit_stages(cfg, resume=stored is not None, quiet=args.quiet)
        with st.RunStore.open(url, mode="r") as rs:
            pairs = rs.read_inputs()["constraints"]  # what the fit learned from
        keys = ("objective", "converged", "rank", "n_constraints", "run")
        info = {k: summary[k] for k in keys if k in summary}
        info["iterations"] = int(summary.get("n_sweeps", summary.get("n_iterations", 0)))
        info["resumed"] = stored is not None
        return V, info, pairs

    return learn


def cmd_embed(args, announce) -> int:
    announce("embed", args.quiet, out=args.out)
    learn = None if args.run is None else _learn_in_run(args)
    summary, Z, y = embed_job(
        edges=args.edges,
        method=args.method,
        dim=args.dim,
        labels=args.labels,
        groups=args.groups,
        holdout=args.holdout,
        n_points=args.n_points,
        C=args.C,
        capacity=args.capacity,
        max_iter=args.max_iter,
        seed=args.seed,
        out=args.out,
        learn_npkl=learn,
        manifold=args.manifold,
        n_must=args.n_must,
        n_cannot=args.n_cannot,
    )
    if args.plot:
        from npkl_dist import plotting  # lazy: matplotlib only when a figure is drawn

        fig = plotting.embedding_figure(
            Z,
            labels=y,
            method="pca" if Z.shape[1] <= 2 else "tsne",
            seed=args.seed,
            title=f"{args.method} embedding of the graph (dimension {args.dim})",
            rows_name="nodes",
        )
        path = plotting.save_figure(fig, os.path.join(args.out, "embedding.png"))
        summary.setdefault("files", {})["picture"] = str(path)
        with open(os.path.join(args.out, "summary.json"), "w") as fh:
            fh.write(json.dumps(summary, indent=2) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        line = (
            f"{args.method} embedding of {summary['n_points']} nodes, {summary['n_edges']} edges "
            f"in dimension {args.dim}: objective {summary['objective']:.6g} after "
            f"{summary['iterations']} iterations"
            f"{'' if summary['converged'] else ' (not converged)'} "
            f"({summary['fit_seconds']:.2f}s); wrote {args.out}"
        )
        nc = summary.get("node_classification")
        if nc is not None:
            i = nc["train_fractions"].index(0.5) if 0.5 in nc["train_fractions"] else -1
            line += (
                f"; node classification at {nc['train_fractions'][i]:.0%} labelled: "
                f"Micro-F1 {nc['micro_f1_mean'][i]:.4f}, Macro-F1 {nc['macro_f1_mean'][i]:.4f}"
            )
        fs = summary.get("friend_suggestion")
        if fs is not None:
            line += (
                f"; friend suggestion AUC {fs['auc']:.4f}, precision@10 "
                f"{fs['precision_at_10']:.4f}"
            )
        print(line)
    return 0
