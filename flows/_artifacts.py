"""What a pipeline run publishes to Prefect: its name, a markdown summary, learning progress.

Pure text and small numbers built from the stages' JSON dicts (no Prefect import), so the
content is tested without a server; :mod:`npkl_flows.pipeline` sends it with
``prefect.artifacts``. Artifact keys may hold only lowercase letters, digits and dashes.
"""

from __future__ import annotations

import re
import time

from npkl_dist.job._job import iterations_label

__all__ = ["run_label", "artifact_key", "result_markdown", "LearnProgress"]


def run_label(url_or_id: str) -> str:
    """The run id a person typed: the last path component of a run URL or path."""
    return str(url_or_id).rstrip("/").rsplit("/", 1)[-1] or str(url_or_id)


def artifact_key(run: str, suffix: str = "") -> str:
    """``npkl-<run>[-suffix]`` in the characters Prefect allows in a key."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_label(run).lower()).strip("-") or "run"
    return f"npkl-{slug}" + (f"-{suffix}" if suffix else "")


def _fmt(x, spec=".6g"):
    return "—" if x is None else format(x, spec)


def result_markdown(results: dict, *, error: str | None = None) -> str:
    """The markdown artifact of a pipeline run: what it found and where it is.

    Parameters
    ----------
    results : dict
        The flow's result so far: ``run`` (the store URL), ``flow_run`` and ``stages``
        (stage name -> the stage's info dict, as the stages return them).
    error : str, optional
        Why the run stopped, for a run that failed (then only the finished stages appear).
    """

    stages = results.get("stages", {})
    learn = stages.get("learn", {})
    metrics = stages.get("evaluate", {}).get("metrics")
    report = stages.get("report", {}).get("dir")
    title = run_label(results["run"])
    lines = [f"# npkl run `{title}`", ""]
    if error:
        lines += [f"**Failed** during stage `{results.get('failed_stage', '?')}`: {error}", ""]
        lines += ["Continue it with `npkl resume " + title + "` once the cause is fixed.", ""]
    lines += [
        "| | |",
        "|---|---|",
        f"| run store | `{results['run']}` |",
        f"| report | {f'`{report}`' if report else '— (no report written)'} |",
    ]
    if learn:
        lines += [
            f"| objective | {_fmt(learn.get('objective'))} |",
            f"| iterations | {iterations_label(learn)}"
            + (" (converged)" if learn.get("converged") else " (not converged)")
            + " |",
            f"| solver | {learn.get('solver', '—')}"
            + (f", {learn['method']}" if learn.get("method") else "")
            + f", loss {learn.get('loss', '—')}, rank {learn.get('rank', '—')} |",
        ]
    if metrics:
        lines += [
            f"| pairwise accuracy | {_fmt(metrics.get('rand_accuracy'), '.4f')} |",
            f"| ARI | {_fmt(metrics.get('ari'), '.4f')} |",
            f"| NMI | {_fmt(metrics.get('nmi'), '.4f')} |",
        ]
    lines += ["", "## Time per stage", "", "| stage | seconds | peak MB | |", "|---|---|---|---|"]
    for name, info in stages.items():
        how = (
            ("cached by Prefect" if info.get("cached") else "done before (skipped)")
            if info.get("skipped")
            else ""
        )
        lines.append(
            f"| {name} | {_fmt(info.get('seconds'), '.1f')} | "
            f"{_fmt(info.get('peak_rss_mb'), '.0f')} | {how} |"
        )
    lines += [
        "",
        f"Watch or continue it from any machine that reaches the store: "
        f"`npkl status {results['run']}`, `npkl resume {results['run']}`.",
    ]
    return "\n".join(lines) + "\n"


class LearnProgress:
    """A per-iteration callback that reports learning progress at most every ``interval``
    seconds (and at the last iteration): ``send(percent, description)``.

    The percentage is ``iteration / max_iterations``: an upper bound on the work left, since a
    fit stops earlier when it converges (then the flow sends 100).
    """

    def __init__(self, send, max_iterations: int, label: str = "sweep", interval: float = 2.0):
        self.send, self.total, self.label, self.interval = send, max_iterations, label, interval
        self._last = -float("inf")

    def __call__(self, sweep, obj, change, seconds):
        now = time.monotonic()
        if now - self._last < self.interval and sweep < self.total:
            return
        self._last = now
        self.send(
            min(100.0, 100.0 * sweep / max(1, self.total)),
            f"{self.label} {sweep} of at most {self.total}: objective {obj:.6g}, "
            f"change {change:.1e}",
        )
