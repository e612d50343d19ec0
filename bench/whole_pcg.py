"""Issue 6 experiment: nonlinear preconditioned CG on the whole V (no C/U split), with
smoothed-aggregation AMG on 2L + diag(d) (d: each constrained row's pair curvature
2 gamma ||v_partner||^2 / r, times SCALE) as the preconditioner, Polak-Ribiere+ directions and
an exact line search (the square loss makes f(V + sD) a quartic in s). Counts the iterations
to the 1e-4 objective gap on bench_block's mixture problem (square loss, r = 16, gamma = 1,
the block method's random start), f* from 300 outer iterations of the block method.

    python bench/whole_pcg.py N FRACTION {pr,rebuild} SCALE
    python bench/whole_pcg.py 100000 0.01 pr 1.0

``rebuild``: the AMG hierarchy rebuilt from the current V every 5 iterations. A prototype
(one AMG V-cycle per column, numpy pair sums): its iteration counts, not its times, are
the result (bench/RESULTS.md).

Preconditioners that see the pairs (2026-11-26 night session; each rebuilt every EVERY
iterations, environment variable, default 5):

``rebuild-dual``
    AMG on 2 S(V) + diag(d), S(V) = L + the pairs' residual-weighted entries (the gradient
    is 2 S(V) V; S(V*) is the dual certificate), from iteration START (default 10; S is
    indefinite far from the optimum) on.
``rebuild-colgn``
    one AMG per column of V's principal basis (V = U s W'), each on 2L + diag(d_k) with
    d_k the pair curvature in that direction, 2 gamma (v_partner . w_k)^2: the per-direction
    version of d; Z = [M_k (G W)_k] W'.
``rebuild-colgn-full``
    as colgn, plus (from START on) the off-diagonal entries of the Hessian's diagonal block
    for that direction: S(V)'s pair entries and 2 gamma (v_i . w_k)(v_j . w_k).
"""
import sys, os, time, warnings, numpy as np, scipy.sparse as sp, pyamg
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
warnings.simplefilter('ignore')
import npkl_dist
from bench_block import constraints_for, graph_for
from npkl_dist import NPKLProblem, fit_bcd
from npkl_dist._bcd import initial_V
n = int(sys.argv[1]); frac = sys.argv[2]; variant = sys.argv[3] if len(sys.argv) > 3 else 'pr'
dscale = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
EVERY = int(os.environ.get('EVERY', '5')); START = int(os.environ.get('START', '10'))
CUR_IT = [0]
S, y, _ = graph_for(n)
L = npkl_dist.laplacian(S, 1e-3).tocsr().astype(np.float64)
c = constraints_for(y, frac)
P = NPKLProblem.build(L, c, loss='square', gamma=1.0, rank=16, seed=0)
ci, cj, t = c.i, c.j, c.t.astype(float); g = 1.0
fstar_file = f'/tmp/whole_pcg_fstar_{n}_{frac}.txt'
if os.path.exists(fstar_file):
    fstar = float(open(fstar_file).read())
else:
    r = fit_bcd(P, method='block', max_sweeps=300, tol=0)
    fstar = min(r.objective_trace); open(fstar_file, 'w').write(repr(fstar))
    print('block outer to 1e-4:', next(k for k, f in enumerate(r.objective_trace, 1) if (f - fstar) / fstar <= 1e-4))
print('f*', fstar)
def f_grad(V):
    LV = L @ V
    z = np.einsum('kr,kr->k', V[ci], V[cj])
    res = 1.0 - t * z
    f = float(np.sum(V * LV)) + g * float(res @ res)
    G = 2 * LV
    w = -2 * g * res * t
    np.add.at(G, ci, w[:, None] * V[cj]); np.add.at(G, cj, w[:, None] * V[ci])
    return f, G, LV
def linesearch(V, D, LV):
    LD = L @ D
    a2 = float(np.sum(D * LD)); a1 = 2 * float(np.sum(D * LV)); a0 = float(np.sum(V * LV))
    z0 = np.einsum('kr,kr->k', V[ci], V[cj])
    z1 = np.einsum('kr,kr->k', V[ci], D[cj]) + np.einsum('kr,kr->k', D[ci], V[cj])
    z2 = np.einsum('kr,kr->k', D[ci], D[cj])
    # res(s) = (1 - t z0) - t z1 s - t z2 s^2
    r0, r1, r2 = 1 - t * z0, -t * z1, -t * z2
    q = np.array([g * r2 @ r2, 2 * g * r1 @ r2, g * (r1 @ r1 + 2 * r0 @ r2) + a2, 2 * g * r0 @ r1 + a1, g * r0 @ r0 + a0])
    roots = np.roots(np.polyder(q)); roots = roots[np.abs(roots.imag) < 1e-12 * (1 + np.abs(roots))].real
    vals = np.polyval(q, roots); s = roots[np.argmin(vals)]
    return s, LD
V = initial_V(P, np.random.default_rng(0)).astype(np.float64)
deg = np.asarray(L.diagonal())
def pair_entries(V, extra=None):
    """The pairs' off-diagonal entries of 2 S(V) (+ extra per pair), symmetric, n x n."""
    z = np.einsum('kr,kr->k', V[ci], V[cj])
    w = -2 * g * (1.0 - t * z) * t
    if extra is not None:
        w = w + extra
    return sp.coo_matrix((np.r_[w, w], (np.r_[ci, cj], np.r_[cj, ci])), shape=(n, n)).tocsr()
def build_prec(V):
    late = CUR_IT[0] >= START
    if 'colgn' in variant:
        W = np.linalg.svd(V, full_matrices=False)[2].T
        VW = V @ W
        Ms = []
        for k in range(V.shape[1]):
            d = np.zeros(n)
            np.add.at(d, ci, 2 * g * VW[cj, k]**2 * dscale)
            np.add.at(d, cj, 2 * g * VW[ci, k]**2 * dscale)
            A = 2 * L + sp.diags(d)
            if 'full' in variant and late:
                A = A + pair_entries(V, 2 * g * VW[ci, k] * VW[cj, k] * dscale)
            Ms.append(pyamg.smoothed_aggregation_solver(A.tocsr(), max_coarse=500).aspreconditioner(cycle='V'))
        def apply(G):
            GW = G @ W
            return np.column_stack([M(GW[:, k]) for k, M in enumerate(Ms)]) @ W.T
        return apply
    d = np.zeros(n)
    # scalar loss curvature per constrained row: 2 g ||v_j||^2 / r (average over directions)
    np.add.at(d, ci, 2 * g * np.sum(V[cj]**2, 1) / V.shape[1] * dscale)
    np.add.at(d, cj, 2 * g * np.sum(V[ci]**2, 1) / V.shape[1] * dscale)
    A = (2 * L + sp.diags(d)).tocsr()
    if 'dual' in variant and late:
        A = (A + pair_entries(V)).tocsr()
    ml = pyamg.smoothed_aggregation_solver(A, max_coarse=500)
    M = ml.aspreconditioner(cycle='V')
    return lambda G: np.column_stack([M(G[:, k]) for k in range(G.shape[1])])
t0 = time.time()
prec = build_prec(V)
f, G, LV = f_grad(V)
Z = prec(G); D = -Z; gz_old = float(np.sum(G * Z)); G_old = G; Z_old = Z
for it in range(1, 201):
    CUR_IT[0] = it
    s, LD = linesearch(V, D, LV)
    V = V + s * D
    f, G, LV = f_grad(V)
    gap = (f - fstar) / fstar
    if it in (1,2,3,5,10,15,20,30,40,60,80,100,150,200) or gap <= 1e-4:
        print(it, f'{f:.6f} gap {gap:.2e}', flush=True)
    if gap <= 1e-4:
        print('reached 1e-4 at', it, 'secs', round(time.time() - t0, 1)); break
    if variant.startswith('rebuild') and it % EVERY == 0:
        prec = build_prec(V)
    Z = prec(G)
    gz = float(np.sum(G * Z))
    beta = max(0.0, (gz - float(np.sum(G_old * Z))) / gz_old)  # Polak-Ribiere+
    D = -Z + beta * D
    if float(np.sum(D * G)) >= 0: D = -Z
    gz_old = gz; G_old = G
