"""Two-dimensional searches along a block step: damped Newton on the exact quartic pair terms,
Nelder-Mead and Brent for the hinge's kinks, and the line search they fall back to."""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from scipy.optimize import minimize, minimize_scalar

from ...linalg._rowops import SUM_BLOCK

#: Rounding guard of the subspace search, in units of V's machine epsilon: a step (s1, s2)
#: is taken only if its decrease exceeds SEARCH_NOISE * eps * (|s1| + |s2|) * max(diag L) *
#: ||V||^2. The search's coefficients <LD, V>, <LS, V> carry absolute errors of about
#: eps * ||L|| * ||V||^2 (LD's U rows come from the CG step alpha P, while V moved by the
#: rounded X + alpha P; LS is carried by a recurrence), which a step multiplies. Near a
#: stationary point D and S are at rounding level, the model is flat, and the search found
#: huge steps whose claimed decrease was an increase, which the carried residual then kept as
#: an offset of the objective. Rejected, the outer iteration keeps its plain block step.
#: eps is float64's for every dtype (float32's refused nearly every momentum step near the
#: optimum): docs/decisions/float32.md.
SEARCH_NOISE = 64.0


def subspace_search(a, B, C, gamma, loss_code):
    """argmin over (s1, s2) of  phi(s) = 2 a's + s'Bs + gamma sum [loss(z(s)) - loss(z(0))],
    z(s) = c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12 (C's columns). Returns
    (s1, s2, phi) with phi < 0, or zeros when nothing decreases the objective.

    phi is smooth for the square and squared-hinge losses, so a damped Newton method on its
    exact gradient and Hessian finds the minimiser in a few steps:

    - square loss: the pair sum is a quartic polynomial in s, whose coefficients one pass
      over the pairs gives (:func:`_pair_gram`); Newton then costs nothing per step;
    - squared hinge: each Newton step is one pass (:func:`_pair_derivs`);
    - hinge (not differentiable): :func:`subspace_search_nelder_mead` with its trials
      evaluated on a box around the line search's point (:class:`BoxedPairSum`: the pairs
      that cannot cross their kink inside the box are summed into one quadratic once);
    - linear loss (not solved by block solves; kept for completeness): the plain
      :func:`subspace_search_nelder_mead`.

    Either way the returned step's phi is evaluated exactly, pair by pair (:func:`_phi_pairs`),
    and only a decrease is accepted, so the fit stays monotone. At the papers' protocol
    (1.2 pairs per point) the derivative-free search took 150-220 passes over the pairs per
    outer iteration; these take 1-2 (polynomial) or about 5-30 (squared hinge).
    With S = 0 (the first outer iteration, or after a restart) the search is along D only.
    """
    if loss_code not in (1, 2):
        return subspace_search_nelder_mead(a, B, C, gamma, loss_code, boxed=loss_code == 0)
    C = np.ascontiguousarray(C, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    dims = 2 if B[1, 1] > 0 else 1
    if loss_code == 2:
        Q = _pair_gram(C)

        def fun(s):
            return _poly_phi(a, B, Q, gamma, s[0], s[1] if dims == 2 else 0.0, dims)
    else:

        def fun(s):
            s2 = s[1] if dims == 2 else 0.0
            f, g1, g2, h11, h12, h22 = _pair_derivs(C, s[0], s2, loss_code)
            return _assemble(a, B, gamma, f, g1, g2, h11, h12, h22, s[0], s2, dims)

    s = _damped_newton(fun, dims)
    s1, s2 = float(s[0]), float(s[1]) if dims == 2 else 0.0
    if (s1 == 0.0 and s2 == 0.0) or not (np.isfinite(s1) and np.isfinite(s2)):
        return 0.0, 0.0, 0.0
    v = (
        2.0 * (a[0] * s1 + a[1] * s2)
        + B[0, 0] * s1 * s1
        + 2.0 * B[0, 1] * s1 * s2
        + B[1, 1] * s2 * s2
        + gamma * _phi_pairs(C, s1, s2, loss_code)
    )
    return (s1, s2, v) if v < 0.0 and np.isfinite(v) else (0.0, 0.0, 0.0)


def _assemble(a, B, gamma, f, g1, g2, h11, h12, h22, s1, s2, dims):
    """(phi, gradient, Hessian) in the first ``dims`` coordinates from the pair sums."""
    val = (
        2.0 * (a[0] * s1 + a[1] * s2)
        + B[0, 0] * s1 * s1
        + 2.0 * B[0, 1] * s1 * s2
        + B[1, 1] * s2 * s2
        + gamma * f
    )
    g = np.array(
        [
            2.0 * (a[0] + B[0, 0] * s1 + B[0, 1] * s2) + gamma * g1,
            2.0 * (a[1] + B[0, 1] * s1 + B[1, 1] * s2) + gamma * g2,
        ]
    )
    H = np.array(
        [
            [2.0 * B[0, 0] + gamma * h11, 2.0 * B[0, 1] + gamma * h12],
            [2.0 * B[0, 1] + gamma * h12, 2.0 * B[1, 1] + gamma * h22],
        ]
    )
    return val, g[:dims], H[:dims, :dims]


def _damped_newton(fun, dims, max_iter=100):
    """Minimise from s = 0 by Newton steps damped Levenberg-Marquardt style: the shift mu
    makes H + mu I positive definite and grows until the step lowers the value, so every
    accepted step decreases it. Stops when a step no longer changes s (relative 1e-12) or
    the value, or when the model predicts a decrease below phi's rounding."""
    s = np.zeros(dims)
    val, g, H = fun(s)
    mu = 0.0
    eye = np.eye(dims)
    for _ in range(max_iter):
        if not np.all(np.isfinite(g)) or not np.any(g):
            break
        scale = max(float(np.abs(H).max()), 1e-300)
        lam = float(np.linalg.eigvalsh(H).min())
        if lam <= 1e-14 * scale:
            mu = max(mu, 1e-12 * scale - lam)
        accepted = False
        for _ in range(60):
            try:
                d = np.linalg.solve(H + mu * eye, -g)
            except np.linalg.LinAlgError:
                d = None
            if d is not None and np.all(np.isfinite(d)):
                # the quadratic model's decrease; below rounding of phi, stop (a trial pass
                # would only see rounding noise)
                pred = -float(g @ d) - 0.5 * float(d @ H @ d)
                if pred <= 1e-15 * max(abs(val), 1e-300):
                    break
                nv, ng, nH = fun(s + d)
                if nv <= val:
                    accepted = True
                    break
            mu = max(4.0 * mu, 1e-10 * scale)
        if not accepted:
            break
        s = s + d
        small = float(np.abs(d).max()) <= 1e-12 * max(float(np.abs(s).max()), 1e-300)
        unchanged = nv == val
        val, g, H = nv, ng, nH
        mu *= 0.25
        if small or unchanged:
            break
    return s


@njit(nogil=True, cache=True)
def _pair_gram_rows(C, start, stop, Q):
    """Q (upper triangle) += sum of p p' over pairs start..stop-1 (see :func:`_pair_gram`)."""
    p = np.empty(6)
    for k in range(start, stop):
        p[0] = 1.0 - C[k, 0]
        for q in range(1, 6):
            p[q] = -C[k, q]
        for u in range(6):
            for v in range(u, 6):
                Q[u, v] += p[u] * p[v]


@njit(nogil=True, cache=True, parallel=True)
def _pair_gram(C):
    """The square loss's pair sum as a polynomial in s, from one pass over the pairs: sum
    (1 - z)^2 = m' Q m with m = (1, s1, s2, s1^2, s2^2, s1 s2), Q = sum p p' and
    p = (1 - c0, -c1, -c2, -c11, -c22, -c12). Returns the 6 x 6 Q. Blocks of SUM_BLOCK
    pairs on numba's threads, added in block order (the same bits for any thread count)."""
    m = C.shape[0]
    nb = (m + SUM_BLOCK - 1) // SUM_BLOCK
    part = np.zeros((nb, 6, 6))
    for b in prange(nb):
        _pair_gram_rows(C, b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, m), part[b])
    Q = np.zeros((6, 6))
    for b in range(nb):
        for u in range(6):
            for v in range(u, 6):
                Q[u, v] += part[b, u, v]
    for u in range(6):
        for v in range(u):
            Q[u, v] = Q[v, u]
    return Q


def _poly_phi(a, B, Q, gamma, s1, s2, dims):
    """(phi, gradient, Hessian) of the square loss from :func:`_pair_gram`'s polynomial:
    the pair sum minus its value at s = 0 is m'Qm - Q[0, 0]."""
    m = np.array([1.0, s1, s2, s1 * s1, s2 * s2, s1 * s2])
    dm1 = np.array([0.0, 1.0, 0.0, 2.0 * s1, 0.0, s2])
    dm2 = np.array([0.0, 0.0, 1.0, 0.0, 2.0 * s2, s1])
    Qm = Q @ m
    f = float(m @ Qm) - Q[0, 0]
    g1, g2 = 2.0 * float(dm1 @ Qm), 2.0 * float(dm2 @ Qm)
    h11 = 2.0 * (float(dm1 @ Q @ dm1) + 2.0 * Qm[3])  # d2m/ds1^2 = 2 e_3
    h22 = 2.0 * (float(dm2 @ Q @ dm2) + 2.0 * Qm[4])  # d2m/ds2^2 = 2 e_4
    h12 = 2.0 * (float(dm1 @ Q @ dm2) + Qm[5])  # d2m/ds1ds2 = e_5
    return _assemble(a, B, gamma, f, g1, g2, h11, h12, h22, s1, s2, dims)


@njit(nogil=True, cache=True)
def _pair_derivs_rows(C, s1, s2, loss_code, start, stop, out):
    """out[0..5] = (f, g1, g2, h11, h12, h22) summed over pairs start..stop-1."""
    f = 0.0
    g1 = 0.0
    g2 = 0.0
    h11 = 0.0
    h12 = 0.0
    h22 = 0.0
    for k in range(start, stop):
        z0 = C[k, 0]
        c11 = C[k, 3]
        c22 = C[k, 4]
        c12 = C[k, 5]
        z = z0 + s1 * (C[k, 1] + s1 * c11) + s2 * (C[k, 2] + s2 * c22) + s1 * s2 * c12
        z1 = C[k, 1] + 2.0 * s1 * c11 + s2 * c12
        z2 = C[k, 2] + 2.0 * s2 * c22 + s1 * c12
        if loss_code == 2:
            e = 1.0 - z
            e0 = 1.0 - z0
            f += e * e - e0 * e0
            l1 = -2.0 * e
            l2 = 2.0
        elif loss_code == 1:
            h = max(1.0 - z, 0.0)
            h0 = max(1.0 - z0, 0.0)
            f += h * h - h0 * h0
            l1 = -2.0 * h
            l2 = 2.0 if h > 0.0 else 0.0
        else:
            l1 = 0.0
            l2 = 0.0
        g1 += l1 * z1
        g2 += l1 * z2
        h11 += l2 * z1 * z1 + 2.0 * l1 * c11
        h22 += l2 * z2 * z2 + 2.0 * l1 * c22
        h12 += l2 * z1 * z2 + l1 * c12
    out[0] = f
    out[1] = g1
    out[2] = g2
    out[3] = h11
    out[4] = h12
    out[5] = h22


@njit(nogil=True, cache=True, parallel=True)
def _pair_derivs(C, s1, s2, loss_code):
    """sum over pairs of loss(z(s)) - loss(z(0)) with its gradient and Hessian in s, for
    the squared hinge (``loss_code`` 1; generalised Hessian: the active pairs') or the square
    loss (2). Returns (f, g1, g2, h11, h12, h22). Blocks of SUM_BLOCK pairs on numba's
    threads, added in block order (the same bits for any thread count)."""
    m = C.shape[0]
    nb = (m + SUM_BLOCK - 1) // SUM_BLOCK
    part = np.zeros((nb, 6))
    for b in prange(nb):
        _pair_derivs_rows(
            C, s1, s2, loss_code, b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, m), part[b]
        )
    t = np.zeros(6)
    for b in range(nb):
        for q in range(6):
            t[q] += part[b, q]
    return t[0], t[1], t[2], t[3], t[4], t[5]


def subspace_search_nelder_mead(a, B, C, gamma, loss_code, boxed=False, compiled=True):
    """argmin over (s1, s2) of  phi(s) = 2 a's + s'Bs + gamma sum [loss(z(s)) - loss(z(0))],
    z(s) = c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12 (C's columns), starting from
    the exact line search along the first direction. Returns (s1, s2, phi) with phi < 0, or
    zeros when nothing decreases the objective.

    Derivative-free (a line search, then Nelder-Mead; each trial a pass over the pairs, about
    150-350 of them per call): the hinge's path, and the slow reference of
    :func:`subspace_search`'s Newton solvers.

    ``boxed`` (the hinge): the line search's bracket and Nelder-Mead's trials near the line
    search's point are evaluated by :class:`BoxedPairSum`, which visits only the pairs that
    may cross their kink there (the same function up to rounding); the returned phi is the
    exact pass over every pair, and only a decrease is returned.

    ``compiled``: Nelder-Mead runs as one compiled call (:func:`_nelder_mead_2d`, scipy's
    algorithm and arithmetic step for step, the trials' pair sums in :func:`_phi_pairs`'s
    order), not ``scipy.optimize.minimize``, whose Python loop and per-trial calls dominated
    (docs/decisions/hinge-stopping.md): the same simplex and the same point, bit for bit
    (``tests/solvers/block/test_blocksolve.py``). ``False`` runs scipy's, the reference.
    """
    C = np.ascontiguousarray(C)
    base = _loss_sum(C[:, 0], loss_code)

    def smooth(s1, s2):
        return (
            2.0 * (a[0] * s1 + a[1] * s2)
            + B[0, 0] * s1 * s1
            + 2.0 * B[0, 1] * s1 * s2
            + B[1, 1] * s2 * s2
        )

    def phi(s):
        s1, s2 = float(s[0]), float(s[1])
        return smooth(s1, s2) + gamma * _phi_pairs(C, s1, s2, loss_code)

    def on_box(centre, half):
        box = BoxedPairSum(C, centre, half)

        def phi_box(s):
            s1, s2 = float(s[0]), float(s[1])
            return smooth(s1, s2) + gamma * box(s1, s2)

        return phi_box

    bracket = None
    if boxed:

        def bracket(lo, hi):
            f = on_box((0.5 * (lo + hi), 0.0), (0.5 * (hi - lo), 0.0))
            return lambda t: f((t, 0.0))

    if compiled:
        s1, v1 = _plane_line_search(a, B, C, gamma, loss_code, base, boxed)
    else:
        s1, v1 = line_search(
            a[0],
            B[0, 0],
            C[:, 0],
            C[:, 1],
            C[:, 3],
            gamma,
            loss_code,
            base=base,
            phi=lambda t: phi((t, 0.0)),
            bracket_phi=bracket,
        )
    best = (s1, 0.0, v1)
    exact = not boxed  # whether best's value is the pass over every pair
    if B[1, 1] > 0:
        scale = max(abs(s1), 1e-3)
        simplex = np.array([[s1, 0.0], [s1 + 0.5 * scale, 0.0], [s1, 0.5 * scale]])
        xatol, fatol = 1e-7 * scale, 1e-15 * max(1.0, abs(base))
        centre, half = (s1, 0.0), (2.0 * scale, 2.0 * scale)
        if compiled:
            x = np.empty(2)
            _nelder_mead_2d(
                *_trial_args(a, B, C, gamma, loss_code),
                *_box_args(C, centre, half, boxed),
                simplex,
                float(xatol),
                float(fatol),
                600,
                x,
            )
        else:
            trial = on_box(centre, half) if boxed else phi
            x = minimize(
                trial,
                np.array([s1, 0.0]),
                method="Nelder-Mead",
                options={
                    "xatol": xatol,
                    "fatol": fatol,
                    "maxiter": 600,
                    "initial_simplex": simplex,
                },
            ).x
        v = phi(x)
        if v < best[2]:
            best, exact = (float(x[0]), float(x[1]), v), True
    if not exact and best[2] < 0.0:  # the line search's value came from the box: exact now
        best = (best[0], best[1], phi((best[0], best[1])))
    return best if best[2] < 0.0 else (0.0, 0.0, 0.0)


def _plane_line_search(a, B, C, gamma, loss_code, base, boxed):
    """:func:`line_search` along the plane's first direction as
    :func:`subspace_search_nelder_mead` calls it (phi = its trial at (s, 0); ``boxed``: the
    bracket on a :class:`BoxedPairSum`), with the grid's trials and the bounded Brent search
    compiled (:func:`_brent_bounded`): the same step and value, bit for bit."""
    args = _trial_args(a, B, C, gamma, loss_code)
    hi, grid = _line_grid(float(a[0]), float(B[0, 0]), gamma, base)
    vals = np.empty(16)
    _line_trials(grid, *args, *_box_args(C, None, None, False), vals)
    k, lo_b, hi_b = _line_bracket(grid, vals, hi)
    box = _box_args(C, (0.5 * (lo_b + hi_b), 0.0), (0.5 * (hi_b - lo_b), 0.0), boxed)
    x, fx = _brent_bounded(float(lo_b), float(hi_b), float(1e-6 * hi_b), 500, *args, *box)
    s, v = (float(x), float(fx)) if fx < vals[k] else (float(grid[k]), float(vals[k]))
    return (s, v) if v < 0.0 else (0.0, 0.0)


def _trial_args(a, B, C, gamma, loss_code):
    """The search's data as the compiled trials take it (:func:`_nm_trial`)."""
    return (
        float(a[0]),
        float(a[1]),
        float(B[0, 0]),
        float(B[0, 1]),
        float(B[1, 1]),
        float(gamma),
        C,
        int(loss_code),
    )


def _box_args(C, centre, half, boxed):
    """(boxed, rest, k, lo, hi) of :func:`_nm_trial`: a :class:`BoxedPairSum` on the box of
    ``centre`` and ``half`` when ``boxed``, else empty stand-ins (every trial sums all
    pairs)."""
    if not boxed:
        return False, C[:0], np.zeros(6), np.zeros(2), np.zeros(2)
    box = BoxedPairSum(C, centre, half)
    return True, box.rest, np.array(box.k), np.array(box.lo), np.array(box.hi)


@njit(nogil=True, cache=True)
def _line_trials(grid, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi, out):
    """out[q] = the plane search's trial at (grid[q], 0).  OUT."""
    for q in range(grid.shape[0]):
        out[q] = _nm_trial(
            grid[q], 0.0, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi
        )


@njit(nogil=True, cache=True)
def _brent_bounded(
    x1, x2, xatol, maxfun, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi
):
    """scipy.optimize.minimize_scalar(method='bounded') on [x1, x2] of the plane search's
    trial at (s, 0), step for step (scipy's ``_minimize_scalar_bounded``: the same golden
    and parabolic steps by the same expressions). Returns (x, f(x))."""
    sqrt_eps = np.sqrt(2.2e-16)
    golden_mean = 0.5 * (3.0 - np.sqrt(5.0))
    a, b = x1, x2
    fulc = a + golden_mean * (b - a)
    nfc, xf = fulc, fulc
    rat = 0.0
    e = 0.0
    x = xf
    fx = _nm_trial(x, 0.0, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi)
    num = 1
    ffulc = fx
    fnfc = fx
    xm = 0.5 * (a + b)
    tol1 = sqrt_eps * np.abs(xf) + xatol / 3.0
    tol2 = 2.0 * tol1
    while np.abs(xf - xm) > (tol2 - 0.5 * (b - a)):
        golden = True
        if np.abs(e) > tol1:
            golden = False
            r = (xf - nfc) * (fx - ffulc)
            q = (xf - fulc) * (fx - fnfc)
            p = (xf - fulc) * q - (xf - nfc) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = np.abs(q)
            r = e
            e = rat
            if (np.abs(p) < np.abs(0.5 * q * r)) and (p > q * (a - xf)) and (p < q * (b - xf)):
                rat = (p + 0.0) / q
                x = xf + rat
                if ((x - a) < tol2) or ((b - x) < tol2):
                    si = np.sign(xm - xf) + (1.0 if (xm - xf) == 0 else 0.0)
                    rat = tol1 * si
            else:
                golden = True
        if golden:
            if xf >= xm:
                e = a - xf
            else:
                e = b - xf
            rat = golden_mean * e
        si = np.sign(rat) + (1.0 if rat == 0 else 0.0)
        x = xf + si * max(np.abs(rat), tol1)
        fu = _nm_trial(x, 0.0, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi)
        num += 1
        if fu <= fx:
            if x >= xf:
                a = xf
            else:
                b = xf
            fulc, ffulc = nfc, fnfc
            nfc, fnfc = xf, fx
            xf, fx = x, fu
        else:
            if x < xf:
                a = x
            else:
                b = x
            if (fu <= fnfc) or (nfc == xf):
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = x, fu
            elif (fu <= ffulc) or (fulc == xf) or (fulc == nfc):
                fulc, ffulc = x, fu
        xm = 0.5 * (a + b)
        tol1 = sqrt_eps * np.abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        if num >= maxfun:
            break
    return xf, fx


#: Pairs up to which the compiled search sums them on the calling thread (the same blocks
#: and order as :func:`_phi_pairs`, so the same bits; a parallel region per trial costs more
#: than it saves on a few thousand pairs).
_SERIAL_PAIRS_MAX = 8 * SUM_BLOCK


@njit(nogil=True, cache=True)
def _phi_pairs_any(C, s1, s2, loss_code):
    """:func:`_phi_pairs`, on this thread when C is short: the same partial sums in the
    same order either way."""
    m = C.shape[0]
    if m > _SERIAL_PAIRS_MAX:
        return _phi_pairs(C, s1, s2, loss_code)
    tot = 0.0
    for start in range(0, m, SUM_BLOCK):
        tot += _phi_pair_rows(C, s1, s2, loss_code, start, min(start + SUM_BLOCK, m))
    return tot


@njit(nogil=True, cache=True)
def _nm_trial(s1, s2, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi):
    """One Nelder-Mead trial of :func:`subspace_search_nelder_mead`: ``phi`` or, ``boxed``,
    ``phi_box`` (:class:`BoxedPairSum` with constants ``k`` on [lo, hi]), the same
    expressions in the same order."""
    sm = 2.0 * (a0 * s1 + a1 * s2) + B00 * s1 * s1 + 2.0 * B01 * s1 * s2 + B11 * s2 * s2
    if boxed and lo[0] <= s1 <= hi[0] and lo[1] <= s2 <= hi[1]:
        pairs = (
            k[0]
            - s1 * (k[1] + s1 * k[3])
            - s2 * (k[2] + s2 * k[4])
            - s1 * s2 * k[5]
            + _phi_pairs_any(rest, s1, s2, 0)
        )
    else:
        pairs = _phi_pairs_any(C, s1, s2, loss_code)
    return sm + gamma * pairs


@njit(nogil=True, cache=True, inline="always")
def _nm_less(x, y):
    """x < y in numpy's sort order (NaN last)."""
    return x < y or (np.isnan(y) and not np.isnan(x))


@njit(nogil=True, cache=True, inline="always")
def _nm_sort(sim, fsim):
    """Sort the three vertices by value: numpy's argsort on three entries (an insertion
    sort, stable), as scipy's ``np.argsort(fsim)`` and ``np.take``."""
    for j in range(1, 3):
        f = fsim[j]
        x0 = sim[j, 0]
        x1 = sim[j, 1]
        i = j - 1
        while i >= 0 and _nm_less(f, fsim[i]):
            fsim[i + 1] = fsim[i]
            sim[i + 1, 0] = sim[i, 0]
            sim[i + 1, 1] = sim[i, 1]
            i -= 1
        fsim[i + 1] = f
        sim[i + 1, 0] = x0
        sim[i + 1, 1] = x1


@njit(nogil=True, cache=True)
def _nelder_mead_2d(
    a0,
    a1,
    B00,
    B01,
    B11,
    gamma,
    C,
    loss_code,
    boxed,
    rest,
    k,
    lo,
    hi,
    simplex,
    xatol,
    fatol,
    maxiter,
    x,
):
    """scipy.optimize.minimize(method='Nelder-Mead') in two dimensions (rho 1, chi 2, psi
    0.5, sigma 0.5; no bounds, no maxfev) from ``simplex`` on :func:`_nm_trial`, step for
    step: the same reflections, expansions, contractions and shrinks, computed by the same
    expressions, and the same stopping test. OUT: x, the best vertex. Returns its value."""
    sim = simplex.copy()
    fsim = np.empty(3)
    for j in range(3):
        fsim[j] = _nm_trial(
            sim[j, 0],
            sim[j, 1],
            a0,
            a1,
            B00,
            B01,
            B11,
            gamma,
            C,
            loss_code,
            boxed,
            rest,
            k,
            lo,
            hi,
        )
    _nm_sort(sim, fsim)
    iterations = 1
    while iterations < maxiter:
        dx = 0.0
        df = 0.0
        for j in range(1, 3):
            dx = max(dx, abs(sim[j, 0] - sim[0, 0]), abs(sim[j, 1] - sim[0, 1]))
            df = max(df, abs(fsim[0] - fsim[j]))
        if dx <= xatol and df <= fatol:
            break
        xb0 = (sim[0, 0] + sim[1, 0]) / 2
        xb1 = (sim[0, 1] + sim[1, 1]) / 2
        xr0 = 2.0 * xb0 - sim[2, 0]
        xr1 = 2.0 * xb1 - sim[2, 1]
        fxr = _nm_trial(
            xr0, xr1, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi
        )
        if fxr < fsim[0]:
            xe0 = 3.0 * xb0 - 2.0 * sim[2, 0]
            xe1 = 3.0 * xb1 - 2.0 * sim[2, 1]
            fxe = _nm_trial(
                xe0, xe1, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi
            )
            if fxe < fxr:
                sim[2, 0], sim[2, 1], fsim[2] = xe0, xe1, fxe
            else:
                sim[2, 0], sim[2, 1], fsim[2] = xr0, xr1, fxr
        elif fxr < fsim[1]:
            sim[2, 0], sim[2, 1], fsim[2] = xr0, xr1, fxr
        else:
            shrink = False
            if fxr < fsim[2]:  # outside contraction
                xc0 = 1.5 * xb0 - 0.5 * sim[2, 0]
                xc1 = 1.5 * xb1 - 0.5 * sim[2, 1]
                fxc = _nm_trial(
                    xc0, xc1, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi
                )
                if fxc <= fxr:
                    sim[2, 0], sim[2, 1], fsim[2] = xc0, xc1, fxc
                else:
                    shrink = True
            else:  # inside contraction
                xc0 = 0.5 * xb0 + 0.5 * sim[2, 0]
                xc1 = 0.5 * xb1 + 0.5 * sim[2, 1]
                fxc = _nm_trial(
                    xc0, xc1, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi
                )
                if fxc < fsim[2]:
                    sim[2, 0], sim[2, 1], fsim[2] = xc0, xc1, fxc
                else:
                    shrink = True
            if shrink:
                for j in range(1, 3):
                    sim[j, 0] = sim[0, 0] + 0.5 * (sim[j, 0] - sim[0, 0])
                    sim[j, 1] = sim[0, 1] + 0.5 * (sim[j, 1] - sim[0, 1])
                    fsim[j] = _nm_trial(
                        sim[j, 0],
                        sim[j, 1],
                        a0,
                        a1,
                        B00,
                        B01,
                        B11,
                        gamma,
                        C,
                        loss_code,
                        boxed,
                        rest,
                        k,
                        lo,
                        hi,
                    )
        iterations += 1
        _nm_sort(sim, fsim)
    x[0] = sim[0, 0]
    x[1] = sim[0, 1]
    return fsim[0]


class BoxedPairSum:
    """The hinge's pair sum  sum_k max(1 - z_k(s), 0) - max(1 - z_k(0), 0)  for s in a box
    |s1 - c1| <= h1, |s2 - c2| <= h2, visiting only the pairs that may cross their kink there.

    z_k(s) = z_k(c) + grad z_k(c)'u + c11 u1^2 + c22 u2^2 + c12 u1 u2 (u = s - c), so over the
    box |z_k(s) - z_k(c)| <= |dz1| h1 + |dz2| h2 + |c11| h1^2 + |c22| h2^2 + |c12| h1 h2 =: b_k.
    Pairs with z_k(c) - b_k > 1 are inactive everywhere in the box (they add the constant
    -h0_k); pairs with z_k(c) + b_k < 1 are active everywhere (they add 1 - z_k(s) - h0_k, a
    quadratic in s whose six coefficients are summed once). The rest are evaluated pair by
    pair at every call. Outside the box every pair is (:func:`_phi_pairs`). The classification
    keeps a relative margin of 1e-12, so rounding can only move a pair to the exact list.
    """

    def __init__(self, C, centre, half):
        C = np.ascontiguousarray(C, dtype=np.float64)
        self.C = C
        c1, c2 = float(centre[0]), float(centre[1])
        h1, h2 = abs(float(half[0])), abs(float(half[1]))
        self.lo = (c1 - h1, c2 - h2)
        self.hi = (c1 + h1, c2 + h2)
        z0 = C[:, 0]
        zc = z0 + c1 * (C[:, 1] + c1 * C[:, 3]) + c2 * (C[:, 2] + c2 * C[:, 4]) + c1 * c2 * C[:, 5]
        d1 = C[:, 1] + 2.0 * c1 * C[:, 3] + c2 * C[:, 5]
        d2 = C[:, 2] + 2.0 * c2 * C[:, 4] + c1 * C[:, 5]
        b = (
            np.abs(d1) * h1
            + np.abs(d2) * h2
            + np.abs(C[:, 3]) * h1 * h1
            + np.abs(C[:, 4]) * h2 * h2
            + np.abs(C[:, 5]) * h1 * h2
        )
        b = b + 1e-12 * (np.abs(zc) + b + 1.0)
        off = zc - b > 1.0
        on = zc + b < 1.0
        h0 = np.maximum(1.0 - z0, 0.0)
        Con = C[on]
        # active pairs: sum (1 - z(s)) - h0 = k0 - s1 k1 - s2 k2 - s1^2 k11 - s2^2 k22 - s1 s2 k12
        self.k = (float(np.sum(1.0 - Con[:, 0] - h0[on])) - float(np.sum(h0[off])),) + tuple(
            float(x) for x in Con[:, 1:].sum(axis=0)
        )
        self.rest = np.ascontiguousarray(C[~(on | off)])

    def __call__(self, s1, s2):
        if not (self.lo[0] <= s1 <= self.hi[0] and self.lo[1] <= s2 <= self.hi[1]):
            return _phi_pairs(self.C, s1, s2, 0)
        k0, k1, k2, k11, k22, k12 = self.k
        return (
            k0
            - s1 * (k1 + s1 * k11)
            - s2 * (k2 + s2 * k22)
            - s1 * s2 * k12
            + _phi_pairs(self.rest, s1, s2, 0)
        )


@njit(nogil=True, cache=True, parallel=True)
def _save(V, Vprev):
    n, r = V.shape
    for i in prange(n):
        for c in range(r):
            Vprev[i, c] = V[i, c]


@njit(nogil=True, cache=True)
def _phi_pair_rows(C, s1, s2, loss_code, start, stop):
    """sum over pairs start..stop-1 of loss(z(s)) - loss(z(0)) (in pair order)."""
    tot = 0.0
    for k in range(start, stop):
        z0 = C[k, 0]
        z = z0 + s1 * (C[k, 1] + s1 * C[k, 3]) + s2 * (C[k, 2] + s2 * C[k, 4]) + s1 * s2 * C[k, 5]
        if loss_code == 0:
            tot += max(1.0 - z, 0.0) - max(1.0 - z0, 0.0)
        elif loss_code == 1:
            h = max(1.0 - z, 0.0)
            h0 = max(1.0 - z0, 0.0)
            tot += h * h - h0 * h0
        elif loss_code == 2:
            tot += (1.0 - z) * (1.0 - z) - (1.0 - z0) * (1.0 - z0)
        else:
            tot += z0 - z
    return tot


@njit(nogil=True, cache=True, parallel=True)
def _phi_pairs(C, s1, s2, loss_code):
    """sum over pairs of loss(z(s)) - loss(z(0)), z(s) from the coefficient rows of C.

    Fixed blocks of SUM_BLOCK pairs run on numba's threads; their partial sums are added in
    block order, so the value does not depend on the thread count."""
    m = C.shape[0]
    nb = (m + SUM_BLOCK - 1) // SUM_BLOCK
    part = np.zeros(nb)
    for b in prange(nb):
        part[b] = _phi_pair_rows(C, s1, s2, loss_code, b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, m))
    tot = 0.0
    for b in range(nb):
        tot += part[b]
    return tot


def _loss_sum(z, loss_code):
    if loss_code == 0:
        return float(np.maximum(1.0 - z, 0.0).sum())
    if loss_code == 1:
        return float((np.maximum(1.0 - z, 0.0) ** 2).sum())
    if loss_code == 2:
        return float(((1.0 - z) ** 2).sum())
    return float(-z.sum())


def _line_grid(a, b, gamma, base):
    """The line search's upper bound on s and its 16 geometric trial points: the loss is
    >= 0, so it cannot fall by more than gamma * base, which bounds s."""
    if b > 0:
        hi = (-a + np.sqrt(a * a + b * gamma * max(base, 0.0))) / b
    else:
        hi = 16.0
    hi = float(min(max(hi, 1e-12), 1e6))
    return hi, hi * np.geomspace(1e-3, 1.0, 16)


def _line_bracket(grid, vals, hi):
    """(index of the best trial, the bracket around it) for the bounded search."""
    k = int(np.argmin(vals))
    lo_b = grid[k - 1] if k > 0 else 0.0
    hi_b = grid[k + 1] if k + 1 < grid.shape[0] else hi
    return k, lo_b, hi_b


def line_search(a, b, c0, c1, c2, gamma, loss_code, base=None, phi=None, bracket_phi=None):
    """argmin over s >= 0 of  phi(s) = 2 s a + s^2 b + gamma sum loss(c0 + s c1 + s^2 c2)
    minus phi(0); returns (s, phi(s) - phi(0)) with s = 0 when nothing decreases.

    phi is exact (the smooth part is the quadratic <V+sD, L(V+sD)>), so accepting only
    decreases keeps the objective monotone. ``bracket_phi(lo, hi)``, if given, returns the
    function the bounded search evaluates inside the bracket [lo, hi] (the same phi, cheaper
    there: :class:`BoxedPairSum`).
    """

    if base is None:
        base = _loss_sum(c0, loss_code)
    if phi is None:

        def phi(s):
            return (
                2.0 * s * a
                + s * s * b
                + gamma * (_loss_sum(c0 + s * (c1 + s * c2), loss_code) - base)
            )

    hi, grid = _line_grid(a, b, gamma, base)
    vals = np.array([phi(s) for s in grid])
    k, lo_b, hi_b = _line_bracket(grid, vals, hi)
    inner = phi if bracket_phi is None else bracket_phi(lo_b, hi_b)
    res = minimize_scalar(
        inner, bounds=(lo_b, hi_b), method="bounded", options={"xatol": 1e-6 * hi_b}
    )
    s, v = (
        (float(res.x), float(res.fun)) if res.fun < vals[k] else (float(grid[k]), float(vals[k]))
    )
    return (s, v) if v < 0.0 else (0.0, 0.0)
