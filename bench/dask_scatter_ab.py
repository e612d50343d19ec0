"""A Dask fit's set-up with the blocks scattered to their workers against the code before
(216b4c9 against its parent): one plain sweep at n points (4-D Gaussian data, 10-NN graph, 1%
of the points labelled, square loss, r = 16) on a LocalCluster of 2 one-thread worker
processes, 4 fits; median of the last 3. The code measured is whatever ``npkl_dist`` the
interpreter imports: run it once per tree with PYTHONPATH at a worktree of each commit
(the worker processes inherit it).

    PYTHONPATH=<tree> python bench/dask_scatter_ab.py N
"""
import sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
import npkl_dist as nk
from npkl_dist.executors._dask import DaskExecutor
import distributed
if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit(__doc__)
    print(nk.__file__)
    n = int(sys.argv[1])
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 4))
    y = (X[:, 0] > 0).astype(np.int64) + 2 * (X[:, 1] > 0)
    g = nk.knn_graph(X, 10, warn=False)
    c = nk.sample_constraints(np.where(rng.random(n) < 0.01, y, -1), seed=0)
    p = nk.NPKLProblem.build(g.laplacian(1e-3), c, loss="square", rank=16, seed=0)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cl, distributed.Client(cl) as client:
        ts = []
        for _ in range(4):
            ex = DaskExecutor(client)
            t0 = time.perf_counter()
            r = nk.fit_bcd(p, max_sweeps=1, tol=0.0, executor=ex, method="sweeps")
            ts.append(time.perf_counter() - t0)
        print("fit(1 sweep) s:", [round(t, 2) for t in ts], "median", round(float(np.median(ts[1:])), 2))
