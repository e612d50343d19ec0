"""Issue 74: a run whose stage data was damaged after it was written is detected and repaired:
never a silent wrong answer, never a traceback."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from npkl_dist import store as st
from npkl_flows import cli

ROOT = Path(__file__).resolve().parents[2]


def _npkl(*args):
    return subprocess.run(
        [sys.executable, "-m", "npkl_flows.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _args(tmp_path):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.7, size=(100, 5)) for c in (0, 2, 4)])
    y = np.repeat(np.arange(3), 100)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return [
        "--features", tmp_path / "X.npy", "--labels", tmp_path / "y.npy",
        "--eval-labels", tmp_path / "y.npy", "--max-sweeps", "12", "--tol", "0",
        "--rank", "6", "--quiet", "--threads", "1",
    ]  # fmt: skip


class _Killed(Exception):
    pass


def _half_run(tmp_path, name, args, sweep=5):
    """`npkl fit --run` killed right after the checkpoint of ``sweep``."""
    orig = st.StoreCheckpointer.on_sweep

    def dying(self, state, session):
        orig(self, state, session)
        if state["sweep"] == sweep:
            raise _Killed

    run = tmp_path / name
    st.StoreCheckpointer.on_sweep = dying
    try:
        with pytest.raises(_Killed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cli.main(["fit", *map(str, args), "--run", str(run)])
    finally:
        st.StoreCheckpointer.on_sweep = orig
    return run


def _chunk(run, array):
    """The first chunk file of a stored array (e.g. ``graph/data``)."""
    files = sorted(p for p in (run / array / "c").rglob("*") if p.is_file())
    assert files, f"no chunk under {array}"
    return files[0]


def _embedding(run, out):
    p = _npkl("export", run, "--out", out)
    assert p.returncode == 0, p.stderr
    return np.load(out / "embedding.npy")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    args = _args(tmp)
    p = _npkl("fit", *args, "--run", tmp / "full")
    assert p.returncode == 0, p.stderr
    return tmp, args, _embedding(tmp / "full", tmp / "out")


def test_deleted_graph_chunk_is_named_and_redo_repairs_it_bitwise(reference):
    tmp, args, V_full = reference
    run = _half_run(tmp, "deleted", args)
    _chunk(run, "graph/data").unlink()  # zarr would read it back as zeros
    status = _npkl("status", run, "--json")
    assert status.returncode == 0, status.stderr
    assert "graph" in json.loads(status.stdout)["damaged"]
    text = _npkl("status", run)
    assert "DAMAGED   graph" in text.stdout and "--redo graph" in text.stdout
    p = _npkl("resume", run)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    *where, line = p.stderr.strip().splitlines()  # the error: one line, after where it writes
    assert all(w.startswith("npkl resume: run store ") for w in where), where
    assert "graph stage's CSR arrays (indptr, indices, data) does not match" in line
    assert f"npkl resume {run} --redo graph" in line
    p = _npkl("resume", run, "--redo", "graph")
    assert p.returncode == 0, p.stderr
    assert np.array_equal(_embedding(run, tmp / "out_deleted"), V_full)
    assert "damaged" not in json.loads(_npkl("status", run, "--json").stdout)


@pytest.mark.parametrize(
    "array, stage, redo",
    [("graph/indices", "graph", "graph"), ("plan/order", "plan", "plan"),
     ("inputs/features", "inputs", "ingest")],
)  # fmt: skip
def test_truncated_chunk_is_named_not_a_traceback(reference, array, stage, redo):
    tmp, args, V_full = reference
    run = _half_run(tmp, f"trunc-{stage}", args)
    chunk = _chunk(run, array)
    chunk.write_bytes(chunk.read_bytes()[:7])
    p = _npkl("resume", run)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    *where, line = p.stderr.strip().splitlines()  # the error: one line, after where it writes
    assert all(w.startswith("npkl resume: run store ") for w in where), where
    assert f"the {stage} stage's" in line and f"--redo {redo}" in line
    p = _npkl("resume", run, "--redo", redo)
    assert p.returncode == 0, p.stderr
    assert np.array_equal(_embedding(run, tmp / f"out-{stage}"), V_full)


def test_redo_names_its_choices():
    p = _npkl("resume", "nowhere", "--redo", "evaluate")
    assert p.returncode == 2 and "--redo: invalid choice: 'evaluate'" in p.stderr


# ---- item 6: the fault-injection matrix (make test-heavy) ---------------------------------
def _arrays(run):
    """Every stored array of a run: (path relative to the run, its chunk files)."""
    out = []
    for meta in sorted(run.rglob("zarr.json")):
        try:
            node = json.loads(meta.read_text())
        except ValueError:
            continue
        if node.get("node_type") == "array":
            chunks = sorted(p for p in (meta.parent / "c").rglob("*") if p.is_file())
            if chunks:
                out.append((meta.parent.relative_to(run), chunks))
    return out


def _wrong_but_valid(run, rel):
    """Overwrite an array through Zarr with other data of its shape and dtype: it decodes
    fine and is not what was written."""
    import zarr

    a = zarr.open_array(str(run / rel), mode="r+")
    data = np.asarray(a[...])
    if data.size == 0:
        return False
    flat = data.reshape(-1).copy()
    flat[0] = flat[0] + 1 if flat.dtype.kind in "iuf" else flat[0]
    a[...] = flat.reshape(data.shape)
    return True


def _outcome(run, tmp, tag, V_full):
    """'equal' (exit 0, the uninterrupted run's V bitwise) or 'named' (exit 2, one line, no
    traceback; its --redo repair, if it names one, then gives 'equal'). Anything else fails."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(["resume", str(run), "--quiet"])
    if code == 0:
        out = tmp / f"out-{tag}"
        assert cli.main(["export", str(run), "--out", str(out)]) == 0
        assert np.array_equal(np.load(out / "embedding.npy"), V_full), f"{tag}: WRONG ANSWER"
        return "equal"
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1, (tag, code, lines)
    m = re.search(r"--redo (\w+)", lines[0])
    if m:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert cli.main(["resume", str(run), "--quiet", "--redo", m.group(1)]) == 0, tag
        out = tmp / f"out-{tag}-redo"
        assert cli.main(["export", str(run), "--out", str(out)]) == 0
        assert np.array_equal(np.load(out / "embedding.npy"), V_full), f"{tag}: repair wrong"
    return "named"


@pytest.mark.heavy
def test_fault_injection_matrix(reference):
    """Every array of every stage and of the checkpoints deleted (a chunk), truncated and
    overwritten with valid-but-wrong data; the pointer deleted and corrupted; the
    configuration edited: each resume ends bitwise equal or with a named error."""
    tmp, args, V_full = reference
    base = _half_run(tmp, "matrix-base", args)
    cases = []
    for rel, _chunks in _arrays(base):
        cases += [(f"{rel}:delete", rel, "delete"), (f"{rel}:truncate", rel, "truncate"),
                  (f"{rel}:wrong", rel, "wrong")]  # fmt: skip
    cases += [("pointer:delete", None, "pointer-delete"), ("pointer:corrupt", None, "pointer-bad"),
              ("config:gamma", None, "config")]  # fmt: skip
    results = {}
    for k, (tag, rel, how) in enumerate(cases):
        run = tmp / f"m{k}"
        shutil.copytree(base, run)
        if rel is not None:
            chunk = sorted(p for p in (run / rel / "c").rglob("*") if p.is_file())[0]
            if how == "delete":
                chunk.unlink()
            elif how == "truncate":
                chunk.write_bytes(chunk.read_bytes()[:5])
            elif not _wrong_but_valid(run, rel):
                continue
        elif how == "pointer-delete":
            (run / "_npkl" / "pointer.json").unlink()
        elif how == "pointer-bad":
            (run / "_npkl" / "pointer.json").write_text('{"committed": [')
        else:
            meta = json.loads((run / "zarr.json").read_text())
            fit = meta["attributes"]["config"]["pipeline"]["model"]
            fit["gamma"] = 5.0
            (run / "zarr.json").write_text(json.dumps(meta))
        results[tag] = _outcome(run, tmp, f"m{k}", V_full)
        shutil.rmtree(run)
    print(f"\nfault injection: {len(results)} cases, {sum(v == 'equal' for v in results.values())} "
          f"bitwise equal, {sum(v == 'named' for v in results.values())} named errors")  # fmt: skip
    assert len(results) >= 40
    assert results["config:gamma"] == "named"
    assert results["pointer:delete"] == "equal"
