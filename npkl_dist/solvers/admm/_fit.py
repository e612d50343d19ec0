"""KL-ADMM (kl-admm-ijcai2013, Alg. 1): kernel learning by ADMM with K = V'U, V = U.

Problem (eq. 1, PCP), over ordered pairs of T = M u C (u {(i, i)} with the diagonal protocol):

    min_{K psd}  tr(K L) + gamma/2 * sum_{(i,j) in T} (K_ij - T_ij)^2,
    T_ij = 1 (must-link), 0 (cannot-link), T_ii = 1.

Each unordered constraint pair appears twice in the ordered sum, the diagonal once, so in
terms of our unordered pairs the loss is gamma * sum_pairs (K_ij - T_ij)^2
+ gamma/2 * sum_i (K_ii - 1)^2. Every ADMM half-step updates all rows independently
(see ``_kernels.admm_rows`` for the derivation and the paper's d_i typo).

Residuals (eq. 14): primal ||V - U||, dual rho ||V(k+1) - V(k)||; rho adapts by eq. (15).
We stop when both, relative to ||V|| (the dual one also divided by rho), fall below ``tol``.

Two loops run the same iterations. The reference loop calls ``session.iterate`` and
``session.objective`` once per iteration; every executor implements them (Dask too). The
in-process session also offers ``run``: many iterations inside one compiled call
(``_kernels.admm_run``), where the U-step's sparse product hands the objective its smooth
term, so no separate pass over L is needed and no Python runs per iteration. It gives the
same iterates and traces bit for bit (``tests/solvers/admm/test_admm.py::test_fused_*``): every
residual and objective is a sum of per-row terms, added left to right in SUM_BLOCK partials
(``_kernels.block_sums``) on every path.

``anderson=m`` accelerates the iteration (``npkl_dist.linalg._anderson``: Anderson extrapolation of
(U, Lam / rho), safeguarded by the objective); every loop and executor composes the same
kernels for it, so the iterates stay bitwise equal across them.

Arithmetic: the half-step's sparse product, dot products and back-substitution, and the
objective's smooth and pair terms, add each product by a fused multiply-add (rounded once;
``_kernels._fmadd``), and the small Woodbury systems multiply by reciprocal pivots. Every
path (fused loop, session, Dask) uses these same kernels. The BCD solvers keep their
two-rounding arithmetic.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

from ..._errors import ConvergenceWarning, ValidationError, fix, fmt_value
from ...linalg._anderson import Anderson
from ...linalg._rowops import SUM_BLOCK, take_rows
from ...problem._problem import NPKLProblem
from ...problem._result import FitResult
from .._plan import make_plan, prepare
from ..bcd._local import _write_blocks
from ..bcd._start import initial_V
from ._local import LocalADMM

__all__ = ["fit_admm", "admm_objective", "ADMMResult"]


@dataclass(repr=False)  # FitResult's one-line repr
class ADMMResult(FitResult):
    """FitResult plus the ADMM residual and penalty traces."""

    primal_trace: list = field(default_factory=list)
    dual_trace: list = field(default_factory=list)
    rho_trace: list = field(default_factory=list)
    U: np.ndarray | None = None
    #: with ``anderson``: extrapolated steps taken, and those rejected by the safeguard
    anderson_steps: int = 0
    anderson_rejected: int = 0


def admm_objective(problem: NPKLProblem, V) -> float:
    """The KL-ADMM objective of K = V V' for V of shape (n, r) in original order."""
    V = np.asarray(V, dtype=np.float64)
    L = problem.L.astype(np.float64)
    c = problem.constraints
    smooth = float(np.sum(V * (L @ V)))
    z = np.einsum("kr,kr->k", V[c.i], V[c.j])
    target = (c.t > 0).astype(np.float64)
    loss = problem.gamma * float(np.sum((z - target) ** 2))
    if c.diagonal:
        loss += 0.5 * problem.gamma * float(np.sum((np.einsum("kr,kr->k", V, V) - 1.0) ** 2))
    return smooth + loss


def admm_objective_dense(problem: NPKLProblem, K) -> float:
    """Reference: eq. (1) over the ordered pairs of T, from the n x n kernel matrix."""
    K = np.asarray(K, dtype=np.float64)
    L = problem.L.toarray().astype(np.float64)
    c = problem.constraints
    total = float(np.trace(K @ L))
    for i, j, t in zip(c.i, c.j, c.t):
        target = 1.0 if t > 0 else 0.0
        total += 0.5 * problem.gamma * ((K[i, j] - target) ** 2 + (K[j, i] - target) ** 2)
    if c.diagonal:
        total += 0.5 * problem.gamma * float(np.sum((np.diag(K) - 1.0) ** 2))
    return total


def fit_admm(
    problem: NPKLProblem,
    *,
    max_iter: int = 500,
    tol: float = 1e-4,
    rho: float = 100.0,
    rho_min: float = 10.0,
    adaptive_rho: bool = True,
    executor=None,
    relabel: str = "rcm",
    V0=None,
    callback=None,
    plan=None,
    resume=None,
    on_sweep=None,
    fused: bool = True,
    anderson: int = 0,
) -> ADMMResult:
    """Fit the KL-ADMM problem (square loss on targets 1/0, optional diagonal targets).

    Parameters
    ----------
    problem : NPKLProblem
        ``problem.loss`` must be ``'square'`` (the formulation of the paper).
    max_iter : int
        IterMax (the paper: 500, 100 on adult).
    tol : float
        Stop when ||V-U|| / ||V|| and ||V(k+1)-V(k)|| / ||V|| are both below ``tol``.
    rho, rho_min : float
        Initial penalty (the paper: 100) and the floor of eq. (15) (10).
    adaptive_rho : bool
        Apply eq. (15) after each iteration.
    executor, relabel, V0, callback, plan
        As for :func:`~npkl_dist.fit_bcd`; ``callback(it, objective, primal, dual)``.
    resume : (dict, ndarray), optional
        ``(state, W)`` with W = [V | U | Lam] (internal order, n x 3r) from a checkpoint.
    on_sweep : callable, optional
        ``on_sweep(state, session)`` after each iteration (checkpointing).
    fused : bool
        Where the session offers it (in-process), run the iterations in one compiled loop
        (``_kernels.admm_run``; the same iterates; without ``callback`` and ``on_sweep``
        ``sweep_seconds`` holds the mean per iteration). ``False``: the reference loop.
    anderson : int
        0 (default): the paper's Alg. 1. m > 0: Anderson acceleration with memory m,
        safeguarded by the objective (``npkl_dist.linalg._anderson``); the stop also needs
        the map's residual below ``tol``; 2 (m + 2) extra n x 2r float64 arrays.

    Returns
    -------
    ADMMResult
        ``V`` (original order), traces of the objective, residuals and rho.

    References: kl-admm-ijcai2013 Alg. 1; docs/algorithms.md, "KL-ADMM";
    docs/decisions/kl-admm.md.
    """
    if problem.loss != "square":
        raise ValidationError(
            f"loss: KL-ADMM solves the square loss on targets 1/0 (kl-admm eq. 1), got "
            f"{problem.loss!r}; use loss='square' or solver 'bcd' for other losses"
        )
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValidationError(f"max_iter: expected a positive integer, got {fmt_value(max_iter)}")
    for name, val in (("tol", tol), ("rho", rho), ("rho_min", rho_min)):
        if isinstance(val, bool) or not (isinstance(val, Real) and np.isfinite(val) and val >= 0):
            raise ValidationError(f"{name}: expected a finite number >= 0, got {fmt_value(val)}")
    if rho <= 0 or rho_min <= 0:
        raise ValidationError(f"rho: expected rho > 0 and rho_min > 0, got {rho}, {rho_min}")
    if isinstance(anderson, bool) or not isinstance(anderson, (int, np.integer)) or anderson < 0:
        raise ValidationError(
            f"anderson: expected an integer memory >= 0 (0: plain ADMM, e.g. 5), got "
            f"{fmt_value(anderson)}"
        )
    t_start = time.perf_counter()
    if executor is None:
        executor = LocalADMM()
    rng = np.random.default_rng(problem.seed)
    Lp = None
    if plan is None:  # L permuted once for the plan and prepare
        plan, Lp = make_plan(problem, relabel=relabel, return_matrix=True)
    prep = prepare(problem, plan, Lp)
    del Lp
    gamma = problem.gamma
    diagonal = problem.constraints.diagonal
    n, r = problem.n_points, problem.rank
    res = ADMMResult(
        V=None, objective=np.nan, objective_initial=np.nan, n_colours=0, solver="admm"
    )
    warm = None
    if resume is not None and resume[0].get("warm_start"):
        # a checkpoint's V (internal order) starts a new fit (npkl resume --force-config)
        warm, resume = np.asarray(resume[1])[:, :r], None
        if warm.shape != (n, r):
            raise ValidationError(
                f"resume: checkpoint V has shape {warm.shape}, the problem needs {(n, r)}; "
                f"start a new run"
            )
    if resume is not None:
        state, W = resume
        width = admm_checkpoint_width(r, anderson)
        if np.shape(W) != (n, width) or bool(anderson) != ("anderson" in state):
            raise ValidationError(
                f"resume: checkpoint has shape {np.shape(W)}"
                f"{' with' if 'anderson' in state else ' without'} Anderson state; KL-ADMM "
                f"with anderson={anderson} needs {(n, width)} ([V | U | Lam"
                f"{' | Anderson memory' if anderson else ''}]); resume with the run's own "
                f"configuration"
            )
        W_aa = np.asarray(W)[:, 3 * r :]
        W = np.asarray(W[:, : 3 * r], dtype=problem.dtype)
        V, U, Lam = (np.ascontiguousarray(W[:, k * r : (k + 1) * r]) for k in range(3))
        rho = float(state["rho"])
        res.objective_initial = state["objective_initial"]
        for key in (
            "objective_trace",
            "change_trace",
            "sweep_seconds",
            "objective_seconds",
            "primal_trace",
            "dual_trace",
            "rho_trace",
        ):
            getattr(res, key).extend(state[key])
        res.converged = bool(state.get("converged", False))
        it = int(state["sweep"])
    else:
        if warm is not None:
            V = np.array(warm, dtype=problem.dtype, order="C")  # the caller's W stays as given
        else:
            if V0 is None:
                V0 = initial_V(problem, rng)
            V = take_rows(V0, plan.order, problem.dtype)
        U = V.copy()
        Lam = np.zeros_like(V)
        it = 0
    session = executor.admm_session(prep, V, U, Lam)
    aa = None
    if anderson:
        in_rows = all(hasattr(session, a) for a in ("V", "U", "Lam"))
        if not in_rows and not hasattr(session, "anderson_after"):
            session.close()
            raise ValidationError(
                f"anderson: {type(executor).__name__} does not run Anderson acceleration; "
                f"use anderson=0 with this executor"
            )
        aa = Anderson(n, r, int(anderson), problem.dtype, SUM_BLOCK, rows=in_rows)
        if resume is not None:
            aa.start(session, rho, resume[0]["anderson"], W_aa)
        else:
            aa.start(session, rho)
    hook = on_sweep if aa is None or on_sweep is None else _with_anderson(on_sweep, aa)
    run = getattr(session, "run", None) if fused else None
    final_obj = None
    try:
        if resume is None:
            res.objective_initial = session.objective(gamma, diagonal)
        res.setup_seconds = time.perf_counter() - t_start
        vnorm = max(np.sqrt(session.norm2()), 1e-300)
        while not res.converged and it < max_iter:
            if run is not None:
                chunk = 1 if (callback is not None or on_sweep is not None) else max_iter - it
                t0 = time.perf_counter()
                trace, rho_next, res.converged = run(
                    chunk, rho, rho_min, gamma, diagonal, tol, adaptive_rho, aa
                )
                if aa is not None:
                    final_obj = aa.objective_kept
                per_it = (time.perf_counter() - t0) / max(len(trace), 1)
                for primal, step, obj, rho_used, vnorm in trace:
                    it += 1
                    _record(res, obj, primal, step, rho_used, vnorm, per_it, 0.0)
                    if callback is not None:
                        callback(it, float(obj), float(primal), float(rho_used * step))
                vnorm = float(trace[-1, 4])
                rho = rho_next
                if hook is not None:
                    hook(_admm_state(res, it, rho), session)
                continue
            it += 1
            t0 = time.perf_counter()
            primal2, step2 = session.iterate(rho, gamma, diagonal)
            primal, step = float(np.sqrt(primal2)), float(np.sqrt(step2))
            dual = rho * step
            t1 = time.perf_counter()
            obj = session.objective(gamma, diagonal)
            t2 = time.perf_counter()
            vnorm = max(np.sqrt(session.norm2()), 1e-300)
            _record(res, obj, primal, step, rho, vnorm, t1 - t0, t2 - t1)
            if callback is not None:
                callback(it, obj, primal, dual)
            res.converged = bool(primal / vnorm < tol and step / vnorm < tol)
            rho_used = rho
            if not res.converged and adaptive_rho:  # eq. (15); Lam is kept as is
                if primal > 10.0 * dual:
                    rho = 2.0 * rho
                elif dual > 10.0 * primal:
                    rho = max(rho / 2.0, rho_min)
            if aa is not None:
                rho, res.converged = aa.after(
                    session, obj, rho_used, rho, res.converged, tol, vnorm
                )
                final_obj = aa.objective_kept
            if hook is not None:
                hook(_admm_state(res, it, rho), session)
        V, U, _ = session.gather()
    finally:
        session.close()
    if not res.converged:
        warnings.warn(
            f"admm: stopped after max_iter={max_iter} with relative primal residual "
            f"{res.primal_trace[-1] / vnorm:.3g} and change {res.change_trace[-1]:.3g} "
            f"(tol={tol:g}); raise {fix('max_iter', '--max-sweeps', '[model] max_sweeps')} "
            f"to converge further"
            + (
                ""
                if anderson
                else ", or accelerate the iteration with "
                + fix("anderson=5", "--anderson 5", "[model] anderson = 5")
            ),
            ConvergenceWarning,
            stacklevel=2,
        )
    res.V = take_rows(V, plan.rank_of)  # undo the relabelling
    res.U = take_rows(U, plan.rank_of)
    res.objective = res.objective_trace[-1] if final_obj is None else final_obj
    if aa is not None:
        res.anderson_steps, res.anderson_rejected = aa.n_steps, aa.n_rejected
    res.fit_seconds = time.perf_counter() - t_start
    return res


class _AndersonCheckpoint:
    """The session as a checkpointer sees it when the fit is accelerated: its state is
    [V | U | Lam | the accelerator's memory] (``Anderson.arrays``)."""

    def __init__(self, session, aa):
        self._s, self._aa = session, aa

    def checkpoint_array(self):
        V, U, Lam = self._s.gather()
        return np.hstack([V, U, Lam, self._aa.arrays(self._s)])

    def gather(self):
        return self._s.gather()

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        _write_blocks(store, ckpt_id, self.checkpoint_array(), row_block)


def _with_anderson(on_sweep, aa):
    def hook(state, session):
        on_sweep({**state, "anderson": aa.state_dict()}, _AndersonCheckpoint(session, aa))

    return hook


def admm_checkpoint_width(r: int, anderson: int = 0) -> int:
    """Columns of a KL-ADMM checkpoint: [V | U | Lam], and the accelerator's memory."""
    return 3 * r + (Anderson.width(r, anderson) if anderson else 0)


def _record(res, obj, primal, step, rho, vnorm, sweep_s, objective_s):
    """Append one iteration to the traces (dual residual rho ||V(k+1) - V(k)||)."""
    res.objective_trace.append(float(obj))
    res.primal_trace.append(float(primal))
    res.dual_trace.append(float(rho * step))
    res.rho_trace.append(float(rho))
    res.change_trace.append(float(step / vnorm))
    res.sweep_seconds.append(float(sweep_s))
    res.objective_seconds.append(float(objective_s))


def _admm_state(res: ADMMResult, it: int, rho: float) -> dict:
    return {
        "solver": "admm",
        "sweep": it,
        "rho": rho,
        "objective": res.objective_trace[-1],
        "objective_initial": res.objective_initial,
        **{
            key: list(getattr(res, key))
            for key in (
                "objective_trace",
                "change_trace",
                "sweep_seconds",
                "objective_seconds",
                "primal_trace",
                "dual_trace",
                "rho_trace",
            )
        },
        "converged": bool(res.converged),
    }
