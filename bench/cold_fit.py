"""Issue 3: why the paper harness's small SimpleNPKL fits are slower than in a loop.

``python bench/cold_fit.py DATASET LOSS`` (e.g. ``glass linear``). The fit of repetition 0
(NPKLProblem.build + fit_simplenpkl, one BLAS and one numba thread, as the harness) is timed
30 times after each of: nothing (a warm loop), a pass writing 64 MB, the harness's own
``task_inputs`` (data, kNN graph, constraints), the kNN graph alone, the constraints alone.
Medians in ms. Needs the paper data sets (``python -m bench.paper.datasets --install``).
"""
import sys, time, numpy as np
sys.path.insert(0, '.')
from threadpoolctl import threadpool_limits
import numba; numba.set_num_threads(1)
threadpool_limits(1, user_api='blas')
from bench.paper.run import task_inputs
import npkl_dist as nk
from npkl_dist._simplenpkl import fit_simplenpkl
name, loss = sys.argv[1], sys.argv[2]
X, y, meta, L, cons, cons_diag = task_inputs(name, 0)
fit_simplenpkl(nk.NPKLProblem.build(L, cons, loss=loss, seed=0), B=100.0)
junk = np.empty(8_000_000)
res = {}
for mode in ['none', 'memtouch', 'task_inputs', 'knn_only', 'constraints_only']:
    ts = []
    for k in range(30):
        if mode == 'memtouch': junk[:] = k
        elif mode == 'task_inputs': task_inputs(name, 0)
        elif mode == 'knn_only': nk.knn_graph(X, 5, seed=0, warn=False)
        elif mode == 'constraints_only': nk.sample_constraints(y, seed=0)
        t = time.perf_counter(); q = nk.NPKLProblem.build(L, cons, loss=loss, seed=0); fit_simplenpkl(q, B=100.0); ts.append(time.perf_counter() - t)
    res[mode] = 1e3*np.median(ts)
print(name, loss, ' '.join(f'{k} {v:.3f} ms' for k, v in res.items()))
