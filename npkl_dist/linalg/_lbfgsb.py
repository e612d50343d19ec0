"""L-BFGS-B on a box without ``scipy.optimize.minimize``'s per-call set-up.

SimpleNPKL maximises its dual by L-BFGS-B (docs/algorithms.md, "SimpleNPKL in detail"). On the
small data sets ``minimize(method='L-BFGS-B')`` spent a large share of a whole fit outside the
function: the bounds converted to a list of pairs and back, a ``ScalarFunction`` with its
array-namespace checks, an ``OptimizeResult`` per iteration
(docs/decisions/simplenpkl-fast-paths.md).

:func:`minimize_box` runs the same loop as scipy's ``_minimize_lbfgsb`` around the same
compiled routine (``scipy.optimize._lbfgsb.setulb``), so the iterates are bitwise scipy's:
the same evaluations at the same points, the same callbacks. That routine is private to
scipy (its arguments changed in 1.15), so before its first use in a process the driver is
checked against ``minimize`` on a small box-constrained problem (:func:`_probe`); if the
routine is missing, raises, or gives other iterates, every call goes through ``minimize``
itself (``minimize_box_reference``, also the tests' reference).
"""

from __future__ import annotations

import logging

import numpy as np
from scipy import optimize
from scipy.optimize import _lbfgsb

__all__ = ["minimize_box", "minimize_box_reference"]

_log = logging.getLogger(__name__)

#: scipy's default maximum number of line-search steps per iteration
_MAXLS = 20

#: None until the first call; then whether :func:`_minimize_direct` matches ``minimize``
_DIRECT_OK: bool | None = None


def minimize_box(
    fun,
    x0,
    lower,
    upper,
    *,
    callback=None,
    maxiter: int,
    maxfun: int,
    maxcor: int = 10,
    ftol: float = 0.0,
    gtol: float = 0.0,
) -> int:
    """Minimise ``fun`` (returning ``(f, gradient)``) over lower <= x <= upper by L-BFGS-B.

    The arguments mean what ``scipy.optimize.minimize(fun, x0, jac=True,
    method='L-BFGS-B', bounds=Bounds(lower, upper), callback=..., options={...})`` makes
    of them, and the iterates are bitwise that call's: ``callback(x)`` after each
    iteration (raise ``StopIteration`` to stop), ``fun(x)`` on a copy of each new point.
    Infinite bounds are absent bounds. Returns the number of iterations.
    """
    global _DIRECT_OK
    if _DIRECT_OK is None:
        _DIRECT_OK = _probe()
    run = _minimize_direct if _DIRECT_OK else minimize_box_reference
    return run(
        fun,
        x0,
        lower,
        upper,
        callback=callback,
        maxiter=maxiter,
        maxfun=maxfun,
        maxcor=maxcor,
        ftol=ftol,
        gtol=gtol,
    )


def minimize_box_reference(
    fun,
    x0,
    lower,
    upper,
    *,
    callback=None,
    maxiter: int,
    maxfun: int,
    maxcor: int = 10,
    ftol: float = 0.0,
    gtol: float = 0.0,
) -> int:
    """:func:`minimize_box` through ``scipy.optimize.minimize`` (the reference)."""
    count = [0]

    def cb(intermediate_result):
        count[0] += 1
        if callback is not None:
            callback(intermediate_result.x)

    optimize.minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=optimize.Bounds(lower, upper),
        callback=cb,
        options={
            "maxiter": maxiter,
            "maxfun": maxfun,
            "maxcor": maxcor,
            "ftol": ftol,
            "gtol": gtol,
            "maxls": _MAXLS,
        },
    )
    return count[0]


def _minimize_direct(
    fun,
    x0,
    lower,
    upper,
    *,
    callback=None,
    maxiter: int,
    maxfun: int,
    maxcor: int = 10,
    ftol: float = 0.0,
    gtol: float = 0.0,
) -> int:
    """scipy's ``_minimize_lbfgsb`` loop (scipy >= 1.15) without its set-up."""

    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    n = lower.size
    has_lo, has_up = np.isfinite(lower), np.isfinite(upper)
    # L-BFGS-B's bound codes: 0 none, 1 lower, 2 both, 3 upper
    nbd = np.where(has_lo, np.where(has_up, 2, 1), np.where(has_up, 3, 0)).astype(np.int32)
    low = np.where(has_lo, lower, 0.0)
    up = np.where(has_up, upper, 0.0)
    x = np.clip(np.array(x0, dtype=np.float64), lower, upper)
    f = np.array(0.0)
    g = np.zeros(n)
    m = int(maxcor)
    wa = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m)
    iwa = np.zeros(3 * n, dtype=np.int32)
    task = np.zeros(2, dtype=np.int32)
    ln_task = np.zeros(2, dtype=np.int32)
    lsave = np.zeros(4, dtype=np.int32)
    isave = np.zeros(44, dtype=np.int32)
    dsave = np.zeros(29)
    factr = ftol / np.finfo(float).eps
    x_eval = None  # the point of the last evaluation (scipy evaluates each new point once)
    nfev = nit = 0
    while True:
        _lbfgsb.setulb(
            m,
            x,
            low,
            up,
            nbd,
            f,
            g,
            factr,
            gtol,
            wa,
            iwa,
            task,
            lsave,
            isave,
            dsave,
            _MAXLS,
            ln_task,
        )
        if task[0] == 3:  # f and g at x
            if x_eval is None or not np.array_equal(x, x_eval):
                x_eval = x.copy()
                fx, gx = fun(x.copy())
                nfev += 1
                f = np.array(float(fx))
                g = np.array(gx, dtype=np.float64).reshape(n)
        elif task[0] == 1:  # a new iteration
            nit += 1
            if callback is not None:
                try:
                    callback(x)
                except StopIteration:
                    task[0], task[1] = 5, 505
            if task[0] != 5:
                if nit >= maxiter:
                    task[0], task[1] = 5, 504
                elif nfev > maxfun:
                    task[0], task[1] = 5, 502
        else:
            return nit


def _probe() -> bool:
    """Whether :func:`_minimize_direct` reproduces ``minimize`` here (a box-constrained
    quadratic, some variables at their bounds): the same points, bit for bit."""
    rng = np.random.default_rng(7)
    n = 12
    Q = rng.standard_normal((n, n))
    H = Q @ Q.T / n + 0.5 * np.eye(n)
    b = rng.standard_normal(n)
    lower = np.r_[np.zeros(6), np.full(6, -np.inf)]
    upper = np.r_[np.full(3, np.inf), np.full(3, 0.4), np.full(3, np.inf), np.full(3, 0.2)]

    def fun(x):
        Hx = H @ x
        return float(0.5 * x @ Hx - b @ x), Hx - b

    runs = []
    for run in (_minimize_direct, minimize_box_reference):
        xs = []
        try:
            nit = run(
                fun,
                np.full(n, 0.3),
                lower,
                upper,
                callback=lambda x: xs.append(x.copy()),
                maxiter=30,
                maxfun=70,
                maxcor=5,
            )
        except Exception as exc:  # noqa: BLE001 - any failure of the private routine
            _log.debug("L-BFGS-B driver: scipy's setulb unusable (%r); using minimize", exc)
            return False
        runs.append((nit, xs))
    (n1, x1), (n2, x2) = runs
    same = n1 == n2 and len(x1) == len(x2) and all(np.array_equal(a, c) for a, c in zip(x1, x2))
    if not same:
        _log.debug("L-BFGS-B driver: iterates differ from minimize's; using minimize")
    return same
