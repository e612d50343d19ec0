"""Issue 6 experiment: a truncated Newton-CG tail instead of the block method's outer loop.

``python bench/newton_cg_tail.py [N] [FRACTION] [ETAS]`` (defaults 100000, 0.01, 0.1)

bench_block's mixture problem (square loss, r = 16, gamma = 1). From the block method's
iterate after k = 5, 10, 15 outer iterations, Newton steps: the Newton system H d = -grad f
solved by linear PCG (stopped at relative residual eta, or at negative curvature), with a
fixed SPD preconditioner: a smoothed-aggregation V-cycle on 2 L_UU for the unconstrained
rows, the exact r x r diagonal Hessian block 2 L_ii I + 2 gamma sum_p v_j v_j' for each
constrained row; then the exact minimiser of the quartic f(V + s d) over s. Prints the inner
CG iterations (each about one product with L plus one V-cycle, less than an outer iteration
of the block method) to the 1e-4 gap against the block method's remaining outer iterations.
A prototype in numpy/scipy/pyamg: iteration counts only, not times. Results in
bench/RESULTS.md ("a Newton-CG tail").
"""
import sys, os, time, warnings
import numpy as np, scipy.sparse as sp, scipy.linalg as sla
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE)); sys.path.insert(0, HERE)
import pyamg
import npkl_dist
from bench_block import constraints_for, graph_for
from npkl_dist import NPKLProblem, fit_bcd
warnings.simplefilter('ignore')

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
frac = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
S, y, _ = graph_for(n)
L = npkl_dist.laplacian(S, 1e-3).tocsr().astype(np.float64)
cons = constraints_for(y, frac)
P = NPKLProblem.build(L, cons, loss='square', gamma=1.0, rank=16, seed=0)
c = P.constraints; I, J, T = c.i, c.j, c.t.astype(float); g_ = P.gamma
r = 16

def f(V):
    z = np.einsum('kr,kr->k', V[I], V[J])
    return float(np.sum(V * (L @ V))) + g_ * float(np.sum((1 - T * z) ** 2))

def grad(V):
    z = np.einsum('kr,kr->k', V[I], V[J])
    w = -2 * T * (1 - T * z) * g_
    G = 2 * (L @ V)
    np.add.at(G, I, w[:, None] * V[J]); np.add.at(G, J, w[:, None] * V[I])
    return G

def hess(V, D):
    z = np.einsum('kr,kr->k', V[I], V[J])
    w = -2 * T * (1 - T * z) * g_
    dz = np.einsum('kr,kr->k', D[I], V[J]) + np.einsum('kr,kr->k', V[I], D[J])
    dw = 2 * g_ * dz
    H = 2 * (L @ D)
    np.add.at(H, I, dw[:, None] * V[J] + w[:, None] * D[J])
    np.add.at(H, J, dw[:, None] * V[I] + w[:, None] * D[I])
    return H

Cmask = np.zeros(n, bool); Cmask[I] = True; Cmask[J] = True
Uidx = np.flatnonzero(~Cmask); Cidx = np.flatnonzero(Cmask)
LUU = L[Uidx][:, Uidx].tocsr()
t0 = time.perf_counter()
ml = pyamg.smoothed_aggregation_solver(LUU, max_coarse=500)
Mop = ml.aspreconditioner(cycle='V')
print('amg setup', time.perf_counter() - t0, 'levels', len(ml.levels), flush=True)
Ldiag = L.diagonal()

def make_prec(V):
    # C rows: exact r x r diagonal Hessian block 2 L_ii I + 2 gamma sum_p v_j v_j'
    blocks = {i: 2 * Ldiag[i] * np.eye(r) for i in Cidx}
    for i, j in zip(I, J):
        blocks[i] = blocks[i] + 2 * g_ * np.outer(V[j], V[j])
        blocks[j] = blocks[j] + 2 * g_ * np.outer(V[i], V[i])
    inv = {i: np.linalg.inv(b) for i, b in blocks.items()}
    Cinv = np.stack([inv[i] for i in Cidx])
    def apply(R):
        Z = np.empty_like(R)
        RU = R[Uidx]
        Z[Uidx] = np.column_stack([Mop @ RU[:, k] for k in range(r)]) * 0.5
        Z[Cidx] = np.einsum('kab,kb->ka', Cinv, R[Cidx])
        return Z
    return apply

def quartic_min(V, D):
    ss = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    fs = np.array([f(V + s * D) for s in ss])
    co = np.polyfit(ss, fs, 4)
    roots = np.roots(np.polyder(co))
    roots = np.real(roots[np.abs(np.imag(roots)) < 1e-9])
    cand = np.r_[roots, 0.0, 1.0]
    vals = np.polyval(co, cand)
    return cand[np.argmin(vals)]

def newton_cg(V, f_star, max_inner=200, eta=0.1, label=''):
    inner = 0
    hist = []
    for newton in range(30):
        G = grad(V)
        prec = make_prec(V)
        X = np.zeros_like(V); R = -G.copy(); Z = prec(R); Pd = Z.copy(); rz = np.sum(R * Z)
        r0 = np.sqrt(np.sum(R * R))
        k_in = 0
        while True:
            HP = hess(V, Pd); k_in += 1; inner += 1
            curv = np.sum(Pd * HP)
            if curv <= 0:
                if k_in == 1: X = Pd
                break
            a = rz / curv
            X += a * Pd; R -= a * HP
            if np.sqrt(np.sum(R * R)) <= eta * r0 or inner >= max_inner:
                break
            Z = prec(R); rz_new = np.sum(R * Z); Pd = Z + (rz_new / rz) * Pd; rz = rz_new
        s = quartic_min(V, X)
        V = V + s * X
        fv = f(V)
        hist.append((newton, k_in, inner, s, (fv - f_star) / f_star))
        print(f'  {label} newton {newton} inner {k_in} total {inner} step {s:.3f} gap {(fv - f_star) / f_star:.3e}', flush=True)
        if (fv - f_star) / f_star <= 1e-4 or inner >= max_inner:
            break
    return V, inner

ref = fit_bcd(P, method='block', max_sweeps=300, tol=0.0)
f_star = min(ref.objective_trace)
print('f*', f_star, 'block outer its to 1e-4:', next(k for k, v in enumerate(ref.objective_trace, 1) if (v - f_star) / f_star <= 1e-4), flush=True)
gaps = [(v - f_star) / f_star for v in ref.objective_trace]
for k in [5, 10, 15]:
    print(f'block gap after {k}: {gaps[k-1]:.3e}')
etas = [float(e) for e in (sys.argv[3].split(',') if len(sys.argv) > 3 else ['0.1'])]
for k in [5, 10, 15]:
    Vk = fit_bcd(P, method='block', max_sweeps=k, tol=0.0).V.astype(np.float64)
    print('start from block iterate', k, 'gap', (f(Vk) - f_star) / f_star, flush=True)
    for eta in etas:
        _, inner = newton_cg(Vk, f_star, eta=eta, label=f'k={k} eta={eta}')
        print(f'RESULT k={k} eta={eta}: inner CG its to 1e-4: {inner} (block: {next(j for j, v in enumerate(ref.objective_trace, 1) if (v - f_star) / f_star <= 1e-4) - k} more outer its)', flush=True)
