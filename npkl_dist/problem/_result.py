"""The result every NPKL solver returns (``FitResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class FitResult:
    """Outcome of a fit.

    Attributes
    ----------
    V : ndarray, shape (n_points, rank)
        Learned factor in original point order; the kernel is K = V V'.
    objective : float
        Final objective.
    objective_initial : float
    objective_trace : list of float
        Objective after each sweep (method 'block': after each outer iteration). Hinge loss:
        before that sweep's joint move, if it took one (the stopping rules and the moves'
        schedule read it so); the last entry is always that of the returned V.
    change_trace : list of float
        ||V(t) - V(t-1)|| / ||V(t)|| after each sweep.
    kkt_trace : list of float
        Scaled KKT residual after each sweep (see ``npkl_dist.solvers._kkt``); empty where the
        executor does not compute it per sweep (the final value is in ``kkt``).
    kkt : float
        KKT residual of the returned V.
    sweep_seconds : list of float
        Wall time of each sweep (the colour steps only; the objective is timed apart).
    objective_seconds : list of float
    cg_iterations : list of int
        Method 'block': conjugate-gradient iterations of each outer iteration.
    joint_moves : list of int
        Hinge loss: the sweeps after which a joint move (``npkl_dist.solvers.bcd._joint``) was taken.
    fit_seconds : float
        Whole fit, including relabelling, colouring and set-up.
    converged : bool
    n_colours : int
        Colours (steps) of a sweep.
    method : {'sweeps', 'block'}
    start : str
    numerical_rank : int
        Singular values of V above ``_rank.RANK_RTOL`` times the largest.
    descent_curvature : float
        Where ``numerical_rank`` is below half the rank: the smallest Rayleigh quotient u'Su
        found for S = grad_K f outside V's span (``_rank.descent_certificate``); negative
        proves that V is a rank-deficient saddle, not the optimum (a ConvergenceWarning says
        so). NaN otherwise.
    """

    V: np.ndarray
    objective: float
    objective_initial: float
    objective_trace: list = field(default_factory=list)
    change_trace: list = field(default_factory=list)
    sweep_seconds: list = field(default_factory=list)
    objective_seconds: list = field(default_factory=list)
    kkt_trace: list = field(default_factory=list)
    cg_iterations: list = field(default_factory=list)
    joint_moves: list = field(default_factory=list)
    kkt: float = float("nan")
    fit_seconds: float = 0.0
    setup_seconds: float = 0.0
    converged: bool = False
    n_colours: int = 0
    solver: str = "bcd"
    method: str = "sweeps"
    start: str = "random"
    numerical_rank: int = -1
    descent_curvature: float = float("nan")

    @property
    def n_sweeps(self) -> int:
        # fit_bcd(trace=False) keeps only the final objective; change_trace has every sweep
        return max(len(self.objective_trace), len(self.change_trace))

    def __repr__(self) -> str:
        """One line: what was fitted and how it ended, not V and the traces (``result.V``,
        ``result.objective_trace`` ... hold them)."""
        n, r = np.shape(self.V) if np.ndim(self.V) == 2 else (0, 0)
        return (
            f"{type(self).__name__}(solver={self.solver!r}, method={self.method!r}, "
            f"V={n}x{r}, numerical_rank={self.numerical_rank}, "
            f"objective={self.objective:.6g}, iterations={self.n_sweeps}, "
            f"converged={self.converged}, kkt={self.kkt:.3g}, fit_seconds={self.fit_seconds:.3g})"
        )
