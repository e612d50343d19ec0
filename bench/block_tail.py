"""Why the block method's outer loop converges linearly (issue 6): experiments on its tail.

The block method (``fit_bcd(method='block')``) reaches a 1e-4 objective gap in 25-40 outer
iterations on bench_block's mixture problems, whatever the inner CG accuracy. This script
holds the experiments behind the analysis in bench/RESULTS.md, on bench_block's problem
(square loss, r = 16 unless --rank, gamma = 1, delta = 1e-3):

``errors``  a long reference run gives V*; fits stopped after 10, 20, 30 outer iterations
            are aligned to it (orthogonal Procrustes, K = V V' is rotation invariant) and
            their error is split over V*'s principal directions, with its Rayleigh quotient
            e'Le/e'e per direction and its share on the constrained rows.
``rank``    outer iterations to the gap at other ranks (is the excess rank r > rank K* the
            slow mode?).
``coarse``  after every outer iteration, the objective is minimised (L-BFGS) over
            piecewise-constant corrections on the aggregates of a plain-aggregation AMG
            level of L with at most --m aggregates (a two-level subspace correction).
``ritz``    every --every outer iterations, the objective is minimised exactly over the
            kernels V M V' (M a PSD r x r matrix, an SDP solved by cvxpy/Clarabel), and V is
            replaced by V M^(1/2) (a column-space Rayleigh-Ritz step).

``regions`` every --every outer iterations from --start on, the objective is minimised
            (L-BFGS, the exact restriction) over one r x r transform per region,
            V_a -> V_a (I + B_a), the regions the aggregates of a plain-aggregation AMG level
            of L (at most --m); --momentum: restart it, transform it region by region, or
            ``sum`` (S + the region step: the whole step since the outer iteration began);
            --regions-from labels: the regions are the mixture's true components instead
            (an oracle partition whose boundary is almost empty).

``schur``   the local coupling of the two blocks: for --samples constrained rows i, the
            diagonal of the Schur complement S = L_CC - L_CU L_UU^-1 L_UC against L's,
            S_ii / L_ii (L_UU^-1 by smoothed-aggregation AMG-CG to 1e-12). The exact row update
            of v_i with U fixed sees L_ii; with U following it (the reduced problem) S_ii. A
            ratio near 1 says the C/U split is weakly coupled row by row, so the block
            Gauss-Seidel alternation itself is not what makes the tail slow.

The ``coarse``, ``ritz`` and ``regions`` steps run from ``on_sweep`` and reach into the in-process
session's state (prototypes, not library features). Usage::

    python bench/block_tail.py errors --n 100000
    python bench/block_tail.py rank --n 100000 --ranks 8 9 12 16
    python bench/block_tail.py coarse --n 100000 --m 20000 3000
    python bench/block_tail.py ritz --n 100000 --every 1 3 5
    python bench/block_tail.py regions --n 100000 --m 100 --every 1 2 --start 2 --momentum sum
    python bench/block_tail.py regions --n 100000 --every 1 --momentum transform --regions-from labels
    python bench/block_tail.py schur --n 1000000 --frac 0.01
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import npkl_dist  # noqa: E402
from bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import ConvergenceWarning, NPKLProblem, fit_bcd  # noqa: E402


def problem(n, frac, rank):
    S, y, _ = graph_for(n)
    L = npkl_dist.laplacian(S, 1e-3)
    return NPKLProblem.build(L, constraints_for(y, frac), loss="square", gamma=1.0,
                             rank=rank, seed=0)


def gaps(trace, f_star):
    return np.array([(f - f_star) / f_star for f in trace])


def first_below(g, gap=1e-4):
    hit = np.flatnonzero(g <= gap)
    return int(hit[0]) + 1 if hit.size else None


def show(label, res, f_star):
    g = gaps(res.objective_trace, f_star)
    print(f"{label}: 1e-4 gap at outer iteration {first_below(g)}; gaps "
          + " ".join(f"{x:.1e}" for x in g), flush=True)


def reference(P, iters):
    ref = fit_bcd(P, method="block", max_sweeps=iters, tol=0)
    print(f"reference: {iters} outer iterations, f* = {ref.objective:.10g}, "
          f"kkt {ref.kkt:.1e}", flush=True)
    return ref


def internal_L(prep):
    n = prep.diag.shape[0]
    off = sp.csr_matrix((prep.data, prep.indices, prep.indptr), shape=(n, n))
    return (off + sp.diags(prep.diag)).tocsr()


def aggregates(Li, m_max):
    """The first level of a plain-aggregation AMG hierarchy of ``Li`` with at most
    ``m_max`` aggregates, as the (n, m) piecewise-constant map T (float64; row i has its
    aggregate's column), and the hierarchy's level sizes."""
    import pyamg

    ml = pyamg.smoothed_aggregation_solver(Li, smooth=None, max_coarse=10, keep=True)
    T = sp.identity(Li.shape[0], format="csr")
    for lev in ml.levels[:-1]:
        T = (T @ lev.AggOp).tocsr()
        if T.shape[1] <= m_max:
            break
    return T.astype(np.float64), [lev.A.shape[0] for lev in ml.levels]


def replace_V(session, V_new, momentum=None):
    """Overwrite the in-process session's V through its ``assign`` (the joint moves' path:
    U copy and exact residual kept in step, momentum restarted); with ``momentum`` (r x r)
    the momentum (S, LS) is kept, multiplied by it."""
    part = session.parts[0]
    keep = (part.S @ momentum, part.LS @ momentum) \
        if part.extrapolate and momentum is not None else None
    session.assign(V_new)
    if keep is not None:
        part.S[...], part.LS[...] = keep


def cmd_errors(args):
    from scipy.linalg import orthogonal_procrustes

    P = problem(args.n, args.frac, args.rank)
    ref = reference(P, args.ref_iters)
    Vs, fs = ref.V, ref.objective
    print("singular values of V*:", np.round(np.linalg.svd(Vs, compute_uv=False), 3))
    _, _, Wt = np.linalg.svd(Vs, full_matrices=False)
    con = np.zeros(P.n_points, bool)
    con[P.constraints.i] = con[P.constraints.j] = True
    for k in (10, 20, 30):
        res = fit_bcd(P, method="block", max_sweeps=k, tol=0)
        V = res.V
        Q, _ = orthogonal_procrustes(V, Vs)
        E = (V @ Q - Vs) @ Wt.T
        print(f"outer {k}: gap {(res.objective - fs) / fs:.2e}; singular values "
              f"{np.round(np.linalg.svd(V, compute_uv=False), 3)}")
        print(f"   |error| / |V*| = {np.linalg.norm(E) / np.linalg.norm(Vs):.3f}; share on "
              f"constrained rows {np.sum(E[con] ** 2) / np.sum(E ** 2):.3f}")
        print("   error per principal direction of V*:", np.round(np.linalg.norm(E, axis=0), 3))
        rq = np.einsum("ij,ij->j", E, P.L @ E) / np.einsum("ij,ij->j", E, E)
        print("   Rayleigh quotient e'Le/e'e per direction:", np.round(rq, 4), flush=True)


def cmd_rank(args):
    f_star = reference(problem(args.n, args.frac, 16), args.ref_iters).objective
    for r in args.ranks:
        P = problem(args.n, args.frac, r)
        show(f"rank {r}", fit_bcd(P, method="block", max_sweeps=args.outer, tol=0), f_star)


def cmd_coarse(args):
    from scipy.optimize import minimize

    P = problem(args.n, args.frac, args.rank)
    f_star = reference(P, args.ref_iters).objective
    show("no coarse step", fit_bcd(P, method="block", max_sweeps=args.outer, tol=0), f_star)
    for m_max in args.m:
        st = {"log": []}

        def coarse(state, session):
            prep, V = session.prep, session.parts[0].V
            if "agg" not in st:
                Li = internal_L(prep)
                T, sizes = aggregates(Li, m_max)
                st.update(Li=Li, agg=T.indices.copy(), Ac=(T.T @ Li @ T).tocsr(), T=T)
                print(f"  levels {sizes}, coarse space {T.shape[1]} aggregates", flush=True)
            Li, agg, Ac, T = st["Li"], st["agg"], st["Ac"], st["T"]
            m, r = Ac.shape[0], V.shape[1]
            b = T.T @ (Li @ V)
            pi, pj, pt = prep.pi, prep.pj, prep.pt.astype(np.float64)
            ai, aj, Vi, Vj, g = agg[pi], agg[pj], V[pi], V[pj], prep.gamma

            def fg(zf):  # f(V + T Z) - f(V) + loss(V) and its gradient in Z
                Z = zf.reshape(m, r)
                AZ = Ac @ Z
                wi, wj = Vi + Z[ai], Vj + Z[aj]
                z = pt * np.einsum("kr,kr->k", wi, wj)
                d = -2.0 * g * (1.0 - z) * pt
                G = 2.0 * b + 2.0 * AZ
                np.add.at(G, ai, d[:, None] * wj)
                np.add.at(G, aj, d[:, None] * wi)
                return 2 * np.sum(b * Z) + np.sum(Z * AZ) + g * np.sum((1 - z) ** 2), G.ravel()

            base = fg(np.zeros(m * r))[0]
            res = minimize(fg, np.zeros(m * r), jac=True, method="L-BFGS-B",
                           options={"maxiter": 200})
            if res.fun < base:
                replace_V(session, V + res.x.reshape(m, r)[agg].astype(V.dtype),
                          momentum=np.eye(r))
            st["log"].append(res.fun - base)

        res = fit_bcd(P, method="block", max_sweeps=args.outer, tol=0, on_sweep=coarse)
        show(f"coarse step on <= {m_max} aggregates", res, f_star)
        print("  coarse-step decreases:", " ".join(f"{x:.2e}" for x in st["log"][:15]))


def cmd_ritz(args):
    import cvxpy as cp

    P = problem(args.n, args.frac, args.rank)
    f_star = reference(P, args.ref_iters).objective
    show("no Ritz step", fit_bcd(P, method="block", max_sweeps=args.outer, tol=0), f_star)
    for every in args.every:
        for mode in ("rotate", "restart"):
            st = {}

            def ritz(state, session):
                if state["sweep"] % every:
                    return
                prep, V = session.prep, session.parts[0].V
                if "Li" not in st:
                    st["Li"] = internal_L(prep)
                G = V.T @ (st["Li"] @ V)
                r = V.shape[1]
                Vi, Vj, pt = V[prep.pi], V[prep.pj], prep.pt.astype(np.float64)
                M = cp.Variable((r, r), PSD=True)
                z = cp.multiply(cp.sum(cp.multiply(Vi @ M, Vj), axis=1), pt)
                cp.Problem(cp.Minimize(cp.trace(G @ M)
                                       + prep.gamma * cp.sum_squares(1 - z))).solve(
                    solver="CLARABEL")
                w, E = np.linalg.eigh((M.value + M.value.T) / 2)
                B = (E * np.sqrt(np.maximum(w, 0.0))) @ E.T

                def f(B):
                    zz = pt * np.einsum("kr,kr->k", Vi @ B, Vj @ B)
                    return np.sum(B * (G @ B)) + prep.gamma * np.sum((1 - zz) ** 2)

                if f(B) < f(np.eye(r)):
                    replace_V(session, V @ B, momentum=B if mode == "rotate" else None)

            res = fit_bcd(P, method="block", max_sweeps=args.outer, tol=0, on_sweep=ritz)
            show(f"Ritz step every {every} ({mode} the momentum)", res, f_star)


def cmd_anderson(args):
    """Anderson acceleration (type II, memory m) of the outer iteration, as a fixed-point
    map V -> step(V), applied from ``on_sweep``; a combination is taken only where it
    lowers f (so the fit stays monotone)."""
    P = problem(args.n, args.frac, args.rank)
    f_star = reference(P, args.ref_iters).objective
    for extrap in (True, False):
        show(f"no Anderson (extrapolate={extrap})",
             fit_bcd(P, method="block", max_sweeps=args.outer, tol=0, extrapolate=extrap),
             f_star)
    for m in args.m:
        for extrap in (True, False):
            st = {"X": [], "F": [], "acc": 0}

            def aa(state, session):
                prep, part = session.prep, session.parts[0]
                V = part.V
                if "Li" not in st:
                    st["Li"] = internal_L(prep)
                    st["prev"] = None
                Li, pt = st["Li"], prep.pt.astype(np.float64)

                def f(W):
                    z = pt * np.einsum("kr,kr->k", W[prep.pi], W[prep.pj])
                    return np.sum(W * (Li @ W)) + prep.gamma * np.sum((1 - z) ** 2)

                x_prev = st["prev"]
                st["prev"] = V.copy()
                if x_prev is None:
                    return
                Fk = V - x_prev  # g(x_{k-1}) - x_{k-1}
                st["X"].append(x_prev)
                st["F"].append(Fk)
                if len(st["X"]) > m + 1:
                    st["X"].pop(0)
                    st["F"].pop(0)
                if len(st["F"]) < 2:
                    return
                dF = [st["F"][i + 1] - st["F"][i] for i in range(len(st["F"]) - 1)]
                dG = [(st["X"][i + 1] + st["F"][i + 1]) - (st["X"][i] + st["F"][i])
                      for i in range(len(st["F"]) - 1)]
                A = np.stack([d.ravel() for d in dF], axis=1)
                gam, *_ = np.linalg.lstsq(A, Fk.ravel(), rcond=None)
                Vn = V - sum(g * d for g, d in zip(gam, dG))
                if f(Vn) < f(V):
                    st["acc"] += 1
                    replace_V(session, Vn.astype(V.dtype))
                    st["prev"] = part.V.copy()

            res = fit_bcd(P, method="block", max_sweeps=args.outer, tol=0, on_sweep=aa,
                          extrapolate=extrap)
            show(f"Anderson m={m} (extrapolate={extrap}, {st['acc']} accepted)", res, f_star)


def cmd_regions(args):
    """Per-region r x r transforms V_a -> V_a (I + B_a), the objective minimised over all
    B_a by L-BFGS from the exact restriction of f (smooth part from V_a' L_ab V_b and
    V_a' (LV)_a, pairs exactly) every --every outer iterations from --start on."""
    from scipy.optimize import minimize

    P = problem(args.n, args.frac, args.rank)
    y = graph_for(args.n)[1]
    f_star = reference(P, args.ref_iters).objective
    show("no region step", fit_bcd(P, method="block", max_sweeps=args.outer, tol=0), f_star)
    for m_max in args.m:
        for every in args.every:
            st = {"log": [], "t": 0.0}

            def regions(state, session):
                k = state["sweep"]
                if k < args.start or (k - args.start) % every:
                    return
                t0 = time.perf_counter()
                prep, V = session.prep, session.parts[0].V.astype(np.float64)
                if "agg" not in st:
                    st["Li"] = internal_L(prep)
                    if args.regions_from == "labels":  # oracle: the mixture's components
                        st["agg"] = np.asarray(y)[session.layout.order].astype(np.int64)
                        st["m"] = int(st["agg"].max()) + 1
                    else:
                        T, _ = aggregates(st["Li"], m_max)
                        st["agg"], st["m"] = T.indices.copy(), T.shape[1]
                    a_ = st["agg"]
                    Lc = st["Li"].tocoo()
                    cross = np.count_nonzero(a_[Lc.row] != a_[Lc.col])
                    print(f"  {st['m']} regions; {cross} of {Lc.nnz} entries cross", flush=True)
                    print(f"  region sizes {np.bincount(st['agg']).min()}-"
                          f"{np.bincount(st['agg']).max()}", flush=True)
                Li, agg, m = st["Li"], st["agg"], st["m"]
                n, r = V.shape
                cols = (agg[:, None] * r + np.arange(r)[None, :]).ravel()
                TV = sp.csr_matrix((V.ravel(), cols, np.arange(0, n * r + 1, r)),
                                   shape=(n, m * r))
                LV = Li @ V
                M = (TV.T @ (Li @ TV)).tocsr()
                Pm = TV.T @ LV  # (m r, r): block a = V_a' (LV)_a
                pi, pj, pt, g = prep.pi, prep.pj, prep.pt.astype(np.float64), prep.gamma
                ai, aj, Vi, Vj = agg[pi], agg[pj], V[pi], V[pj]
                z0 = pt * np.einsum("kr,kr->k", Vi, Vj)
                base = g * np.sum((1 - z0) ** 2)

                def fg(x):
                    B = x.reshape(m * r, r)
                    Bb = B.reshape(m, r, r)
                    MB = M @ B
                    wi = Vi + np.einsum("kr,krs->ks", Vi, Bb[ai])
                    wj = Vj + np.einsum("kr,krs->ks", Vj, Bb[aj])
                    z = pt * np.einsum("kr,kr->k", wi, wj)
                    d = -2.0 * g * (1.0 - z) * pt
                    G = (2.0 * Pm + 2.0 * MB).reshape(m, r, r)
                    np.add.at(G, ai, Vi[:, :, None] * (d[:, None] * wj)[:, None, :])
                    np.add.at(G, aj, Vj[:, :, None] * (d[:, None] * wi)[:, None, :])
                    val = 2 * np.sum(B * Pm) + np.sum(B * MB) + g * np.sum((1 - z) ** 2)
                    return val - base, G.ravel()

                res = minimize(fg, np.zeros(m * r * r), jac=True, method="L-BFGS-B",
                               options={"maxiter": args.maxiter})
                if res.fun < 0:
                    B = res.x.reshape(m, r, r)
                    dV = np.einsum("nr,nrs->ns", V, B[agg])
                    part = session.parts[0]
                    S = part.S.astype(np.float64) if part.extrapolate else None
                    replace_V(session, (V + dV).astype(part.V.dtype))
                    if S is not None and args.momentum != "restart":
                        # 'sum': the whole step S + dV; 'transform': S_a (I + B_a)
                        Sn = S + (dV if args.momentum == "sum"
                                  else np.einsum("nr,nrs->ns", S, B[agg]))
                        part.S[...] = Sn
                        part.LS[...] = (Li @ Sn)[:part.LS.shape[0]]
                st["log"].append(res.fun)
                st["t"] += time.perf_counter() - t0

            res = fit_bcd(P, method="block", max_sweeps=args.outer, tol=0, on_sweep=regions)
            show(f"region step on <= {m_max} aggregates ({st.get('m')}) every {every} "
                 f"from {args.start}", res, f_star)
            print(f"  region-step decreases ({st['t']:.1f} s):",
                  " ".join(f"{x:.2e}" for x in st["log"][:12]), flush=True)


def cmd_schur(args):
    import pyamg

    P = problem(args.n, args.frac, args.rank)
    L = P.L.tocsr().astype(np.float64)
    c = P.constraints
    C = np.unique(np.concatenate([c.i, c.j]))
    free = np.ones(args.n, bool)
    free[C] = False
    U = np.flatnonzero(free)
    L_UU = L[U][:, U].tocsr()
    L_UC = L[U][:, C].tocsc()
    ml = pyamg.smoothed_aggregation_solver(L_UU, symmetry="hermitian")
    ratios = []
    for k in np.random.default_rng(0).choice(C.size, min(args.samples, C.size), replace=False):
        b = L_UC[:, k].toarray().ravel()
        x = ml.solve(b, tol=1e-12, maxiter=200, accel="cg")
        l_ii = L[C[k], C[k]]
        ratios.append((l_ii - b @ x) / l_ii)
    ratios = np.array(ratios)
    print(f"n {args.n}, {C.size} constrained rows, {c.i.size} pairs: S_ii / L_ii over "
          f"{ratios.size} rows: median {np.median(ratios):.3f}, min {ratios.min():.3f}, "
          f"max {ratios.max():.3f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("errors", "rank", "coarse", "ritz", "anderson", "regions", "schur"):
        p = sub.add_parser(name)
        p.add_argument("--n", type=int, default=100_000)
        p.add_argument("--frac", type=float, default=0.01)
        p.add_argument("--rank", type=int, default=16)
        p.add_argument("--outer", type=int, default=40)
        p.add_argument("--ref-iters", type=int, default=300)
        if name == "rank":
            p.add_argument("--ranks", type=int, nargs="+", default=[8, 9, 12, 16])
        if name == "coarse":
            p.add_argument("--m", type=int, nargs="+", default=[20000, 3000])
        if name == "anderson":
            p.add_argument("--m", type=int, nargs="+", default=[3, 6])
        if name == "regions":
            p.add_argument("--m", type=int, nargs="+", default=[100])
            p.add_argument("--every", type=int, nargs="+", default=[1, 4])
            p.add_argument("--start", type=int, default=2)
            p.add_argument("--maxiter", type=int, default=200)
            p.add_argument("--momentum", choices=("restart", "transform", "sum"), default="restart")
            p.add_argument("--regions-from", choices=("amg", "labels"), default="amg")
        if name == "schur":
            p.add_argument("--samples", type=int, default=30)
        if name == "ritz":
            p.add_argument("--every", type=int, nargs="+", default=[1, 3, 5])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", ConvergenceWarning)
    t0 = time.perf_counter()
    {"errors": cmd_errors, "rank": cmd_rank, "coarse": cmd_coarse, "ritz": cmd_ritz,
     "anderson": cmd_anderson, "regions": cmd_regions, "schur": cmd_schur}[
        args.cmd](args)
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
