"""``npkl active``, ``npkl ask`` and ``npkl answer``: active constraint selection on a finished
run (argument handling around npkl_dist.job._active; no numerics here)."""

from __future__ import annotations

import json
import sys

STRATEGY_HELP = (
    "how pairs are chosen: min_abs_k (least |K_ij|; the default), margin (pairs at the "
    "least certain points, simplenpkl 5.3), minmax (AKL's min-max, re-solving the two rows "
    "of each of the 200 least-|K| candidates) or random"
)


def add_active_parsers(sub, positive_int) -> None:
    from npkl_dist.active import STRATEGIES

    act = sub.add_parser(
        "active",
        help="active learning on a finished run, answers from a labels file (simulation)",
        description="Ask --pairs pairs per round for --rounds rounds in all, answered from "
        "--oracle (same label: must-link, different: cannot-link, unlabelled: skip), refitting "
        "warm after each round. Every round's questions and answers are recorded in the run "
        "before its refit: the same command again continues where a crash stopped, bitwise. "
        "Prints a JSON of each round's accuracy with --json.",
    )
    act.add_argument("run", metavar="RUN", help="a finished run (npkl fit --run, npkl run)")
    act.add_argument("--oracle", required=True, metavar="LABELS", help="labels .npy/.csv/.txt")
    act.add_argument("--rounds", type=positive_int, default=5, help="rounds in all (5)")
    act.add_argument("--pairs", type=positive_int, default=20, help="pairs per round (20)")
    act.add_argument("--strategy", choices=STRATEGIES, default="min_abs_k", help=STRATEGY_HELP)
    act.add_argument(
        "--restart", action="store_true", help="forget the recorded rounds and start again"
    )
    act.add_argument("--json", action="store_true", help="print every round as JSON")
    act.add_argument("--quiet", action="store_true", help="nothing on stderr")

    ask = sub.add_parser(
        "ask",
        help="choose pairs for a person to answer (a CSV of questions)",
        description="Choose --pairs pairs of a finished run and write them to --out as a CSV "
        "(pair, i, j, answer; with --items, what a person knows each point by); fill the "
        "answer column with must, cannot or skip and give the file to npkl answer.",
    )
    ask.add_argument("run", metavar="RUN")
    ask.add_argument("--pairs", type=positive_int, default=20, help="questions (20)")
    ask.add_argument("--strategy", choices=STRATEGIES, default="min_abs_k", help=STRATEGY_HELP)
    ask.add_argument("--out", required=True, metavar="CSV", help="the questions file")
    ask.add_argument(
        "--items",
        metavar="FILE",
        help="a CSV / Parquet table, one row per point in the input's order (ids, names, "
        "links): its columns are copied into the questions as i_<column> and j_<column>",
    )
    ask.add_argument(
        "--columns",
        type=lambda v: [c.strip() for c in v.split(",") if c.strip()],
        metavar="A,B",
        help="the --items columns to copy (default: all)",
    )
    ask.add_argument("--quiet", action="store_true", help="nothing on stderr")

    ans = sub.add_parser(
        "answer",
        help="take a person's answers (npkl ask's CSV, filled), refit, say what changed",
        description="Check the answers (unknown pairs or words, contradictions with earlier "
        "answers, directly or through must-link transitivity: one line naming the rows, "
        "nothing recorded), record them, refit warm and report the objective and the points "
        "whose cluster changed.",
    )
    ans.add_argument("run", metavar="RUN")
    ans.add_argument("answers", metavar="ANSWERS", help="the filled CSV")
    ans.add_argument("--json", action="store_true", help="print the round as JSON")
    ans.add_argument("--quiet", action="store_true", help="nothing on stderr")


def _round_line(rec) -> str:
    m = rec.get("metrics")
    acc = "" if m is None else f", pairwise accuracy {m['rand_accuracy']:.4f}, ARI {m['ari']:.4f}"
    return (
        f"round {rec['round']}: {len(rec['queries'])} pairs ({rec['strategy']}), "
        f"{sum(a != 0 for a in rec['answers'])} answered; objective {rec['objective']:.6g} "
        f"after {rec['n_sweeps']} sweeps ({rec['fit_seconds']:.2f}s){acc}"
    )


def cmd_active(args, store_open) -> int:
    from npkl_dist.graph._io import read_labels
    from npkl_dist.job._active import run_active

    y = read_labels(args.oracle)

    def progress(rec):
        if not args.quiet:
            sys.stderr.write(_round_line(rec) + "\n")

    with store_open(args.run) as store:
        state = run_active(store, y, rounds=args.rounds, batch=args.pairs,
                           strategy=args.strategy, progress=progress,
                           restart_loop=args.restart)  # fmt: skip
    rows = [
        {k: rec.get(k) for k in ("round", "strategy", "n_constraints", "objective", "n_sweeps",
                                 "select_seconds", "fit_seconds", "metrics")}
        for rec in state["rounds"]
    ]  # fmt: skip
    if args.json:
        sys.stdout.write(json.dumps({"rounds": rows}) + "\n")
    else:
        last = state["rounds"][-1] if state["rounds"] else None
        print("no round" if last is None else _round_line(last))
    return 0


def cmd_ask(args, store_open) -> int:
    from npkl_dist import ValidationError
    from npkl_dist.job._active import ask

    if args.columns is not None and args.items is None:
        raise ValidationError(
            f"--columns: {','.join(args.columns)} names columns of the --items table; give "
            "--items FILE too"
        )

    with store_open(args.run) as store:
        pending = ask(
            store,
            batch=args.pairs,
            strategy=args.strategy,
            out=args.out,
            items=args.items,
            columns=args.columns,
        )
    print(
        f"wrote {len(pending['queries'])} questions ({pending['strategy']}) to {args.out}: "
        f"fill the answer column with must, cannot or skip, then npkl answer {args.run} "
        f"{args.out}"
    )
    return 0


def cmd_answer(args, store_open) -> int:
    from npkl_dist.job._active import answer

    with store_open(args.run) as store:
        rec = answer(store, args.answers)
    if args.json:
        sys.stdout.write(json.dumps(rec) + "\n")
    else:
        moved = rec.get("points_moved")
        print(_round_line(rec) + ("" if moved is None else f"; {moved} points changed cluster"))
    return 0
