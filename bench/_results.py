"""Where a maintained benchmark's results go: one stamped JSON file under bench/results/.

Every maintained benchmark (bench/README.md) ends by calling :func:`write`. The file holds
what ``python -m bench.performance`` needs to render the benchmark's table on
docs/performance.md: a title, what is measured and against which reference in the same
run, the columns to show, the rows, and the stamps (machine, commit, date, command). No
benchmark writes markdown itself.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def command(script: str, argv=None) -> str:
    """The command line that reproduces a run: ``python <script> <args>`` (``argv``: the
    arguments the benchmark's ``main`` received, or None for ``sys.argv[1:]``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python", script, *map(shlex.quote, args)])


def stamps() -> dict:
    """The machine, the code and the time a result was measured on: ``machine`` (CPU model,
    family/model, AVX-512, cores; bench.paper.report.machine), ``commit`` (HEAD, '+dirty'
    with uncommitted changes to the package; None outside a checkout), ``date`` (UTC),
    ``python``."""
    from bench.paper.report import code_version, machine

    return {
        "machine": machine(),
        "commit": code_version(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
    }


def write(
    name: str,
    *,
    title: str,
    measures: str,
    reference: str,
    command: str,
    columns,
    rows,
    notes=(),
    args=None,
    path=None,
    extra=None,
) -> Path:
    """Write ``bench/results/<name>.json`` (or ``path``) atomically and return its path.

    ``columns``: [(key, header), ...], the keys of ``rows`` shown on the performance page, in
    order; ``rows``: list of dicts (JSON values); ``notes``: short lines printed under the
    table; ``args``: the parsed options (a dict); ``extra``: more fields kept in the file but
    not rendered."""
    out = {
        "benchmark": name,
        "title": title,
        "measures": measures,
        "reference": reference,
        "command": command,
        **stamps(),
        "args": args or {},
        "columns": [list(c) for c in columns],
        "rows": list(rows),
        "notes": list(notes),
    }
    if extra:
        out.update(extra)
    path = Path(path) if path is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(out, indent=1, default=_plain) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path}", file=sys.stderr)
    return path


def _plain(x):
    """numpy scalars and arrays as JSON values."""
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
