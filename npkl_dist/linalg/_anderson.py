"""Anderson acceleration of KL-ADMM's fixed-point map, with a safeguard.

One KL-ADMM iteration maps the state x = (U, Lam / rho) (n x 2r: the factor and the scaled
dual of ADMM's scaled form) to g(x). Plain ADMM iterates x <- g(x); its tail converges
linearly and slowly (docs/decisions/kl-admm.md).
Anderson acceleration (type II, memory m; Walker & Ni 2011, and Fu, Zhang & Boyd 2019 for
ADMM) takes instead

    x+ = g_k - sum_j c_j dG_j,   c = argmin || f_k - sum_j c_j dF_j ||,

with f = g(x) - x, dF_j, dG_j the differences of consecutive f and g over the last m
iterations. c solves the m x m normal equations (dF'dF + eps tr(dF'dF) I) c = dF'f_k, whose
Gram matrix is kept up to date one column per iteration.

The objective is not convex in the factor, and its stationary points include V = 0 (the
quartic has no linear term). An extrapolation can land near such a point, which plain ADMM
leaves and an accelerated iterate may not (seen at gamma = 0.1 on the papers' sets). So the
step is **safeguarded by the objective**: an iteration that started from an extrapolated
state and ends at a higher objective than the iteration before it is rejected; V, U and Lam
go back to that iteration's plain result g_k, the memory is cleared, and ADMM continues
plainly from there. The memory is cleared too whenever rho changes (eq. 15): g depends on
rho, so older differences describe another map.

Stopping: the plain rule (the primal residual ||V - U|| and the change of V, relative to
||V||, below tol) and, since an extrapolated start makes those two small without a fixed
point, the map's residual ||U(k+1) - U_in|| / ||V|| below tol too. A fit never stops on a
rejected iteration.

Note for development: ``_kernels.admm_run`` inlines ``anderson_after``, and numba's on-disk
cache of admm_run does not see edits to this module; clear ``npkl_dist/__pycache__`` of
``*admm_run*`` after changing it.

Memory: 2 (m + 2) + 1/2 arrays of n x 2r float64 besides the fit's own (m = 5: 15 n x 2r).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._rowops import _block_total, row_sq_dist
from ._smallqp import _cholesky_solve

#: Tikhonov weight of the normal equations, relative to the Gram matrix's trace.
AA_REG = 1e-10


@njit(nogil=True, cache=True)
def _dot(a, b):
    """<a, b> in 8 interleaved partial sums (a fixed order that the CPU can overlap; a single
    running sum is bound by the add latency), then added pairwise."""
    n = a.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    k = 0
    while k + 8 <= n:
        s0 += a[k] * b[k]
        s1 += a[k + 1] * b[k + 1]
        s2 += a[k + 2] * b[k + 2]
        s3 += a[k + 3] * b[k + 3]
        s4 += a[k + 4] * b[k + 4]
        s5 += a[k + 5] * b[k + 5]
        s6 += a[k + 6] * b[k + 6]
        s7 += a[k + 7] * b[k + 7]
        k += 8
    while k < n:
        s0 += a[k] * b[k]
        k += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(nogil=True, cache=True, inline="always")
def _record_entry(k, g, X, Fp, Gp, dF, dG, slot, have_prev):
    fk = g - X[k]
    if have_prev:
        dF[slot, k] = fk - Fp[k]
        dG[slot, k] = g - Gp[k]
    Fp[k] = fk
    Gp[k] = g


@njit(nogil=True, cache=True)
def _block_dot(a, b, c, nl, r, block):
    """Row block c's part of <a, b> for flat local states (U rows, then Lam rows): the U
    segment's dot plus the Lam segment's."""
    h = nl * r
    s = c * block * r
    e = min((c + 1) * block, nl) * r
    return _dot(a[s:e], b[s:e]) + _dot(a[h + s : h + e], b[h + s : h + e])


@njit(nogil=True, cache=True)
def anderson_record(
    U, Lam, inv_rho, X, Fp, Gp, dF, dG, slot, have_prev, valid, block, fpart, bpart
):
    """Record one application of the map on these rows, and the partial dots of the new
    difference.

    States are flat (2 nl r,): the rows' U entries row by row, then their Lam / rho entries.
    g = (U, Lam * inv_rho) in float64 (the map's output), f = g - X (X: the state the map was
    applied to). If ``have_prev``: dF[slot] = f - Fp, dG[slot] = g - Gp. Then Fp = f, Gp = g,
    and for each block of ``block`` rows c (the rows start at a multiple of ``block``):
    fpart[c, j] = block c's part of <dF[slot], dF[j]> for the ``valid`` slots j (the new one
    included), bpart[c] of <dF[slot], f>. Totals are the partials added in block order (by
    every executor).  OUT: Fp, Gp, dF (m, 2 nl r), dG, fpart (n_blocks, m), bpart."""
    n, r = U.shape
    h = n * r
    for i in range(n):
        for q in range(r):
            _record_entry(i * r + q, np.float64(U[i, q]), X, Fp, Gp, dF, dG, slot, have_prev)
    for i in range(n):
        for q in range(r):
            _record_entry(
                h + i * r + q, np.float64(Lam[i, q]) * inv_rho, X, Fp, Gp, dF, dG, slot, have_prev
            )
    if not have_prev:
        return
    for c in range(bpart.shape[0]):
        for j in range(dF.shape[0]):
            fpart[c, j] = _block_dot(dF[slot], dF[j], c, n, r, block) if valid[j] else 0.0
        bpart[c] = _block_dot(dF[slot], Fp, c, n, r, block)


@njit(nogil=True, cache=True)
def anderson_next_slot(order, ints):
    """The history slot the next difference goes to (the oldest one once all m are used),
    with ``order`` (oldest first) and the count updated. Returns (slot, count); slot is -1
    when there is no previous application to take a difference from."""
    m = order.shape[0]
    count = ints[_COUNT]
    if ints[_HAVE_PREV] == 0:
        return -1, count
    slot = 0
    if count == m:  # the oldest slot is reused
        slot = order[0]
        for k in range(m - 1):
            order[k] = order[k + 1]
        count -= 1
    else:
        used = np.zeros(m, np.bool_)
        for k in range(count):
            used[order[k]] = True
        while used[slot]:
            slot += 1
    order[count] = slot
    return slot, count + 1


@njit(nogil=True, cache=True)
def anderson_valid(order, count):
    valid = np.zeros(order.shape[0], np.bool_)
    for k in range(count):
        valid[order[k]] = True
    return valid


@njit(nogil=True, cache=True)
def anderson_coefficients(fpart, bpart, slot, count, order, valid, gram, bdot, coef):
    """From the new difference's partial dots (all blocks, in order): the Gram matrix's new
    column, <dF_j, f> (the older slots' from their previous value: f - f_prev is the new
    difference), and the coefficients c of the regularised normal equations, in coef[:count]
    (slots in ``order``; ``valid`` marks them). False if the system is not numerically
    positive definite or c not finite."""
    m = gram.shape[0]
    for j in range(m):
        if valid[j]:
            t = 0.0
            for c in range(fpart.shape[0]):
                t += fpart[c, j]
            gram[slot, j] = t
            gram[j, slot] = t
    for j in range(m):
        if valid[j] and j != slot:  # <dF_j, f_k> = <dF_j, f_(k-1)> + <dF_j, dF_new>
            bdot[j] += gram[slot, j]
    t = 0.0
    for c in range(bpart.shape[0]):
        t += bpart[c]
    bdot[slot] = t
    A = np.empty((count, count))
    rhs = np.empty(count)
    trace = 0.0
    for a in range(count):
        rhs[a] = bdot[order[a]]
        for c in range(count):
            A[a, c] = gram[order[a], order[c]]
        trace += A[a, a]
    for a in range(count):
        A[a, a] += AA_REG * trace
    if not _cholesky_solve(A, rhs, count):
        return False
    for a in range(count):
        if not np.isfinite(rhs[a]):
            return False
        coef[a] = rhs[a]
    return True


@njit(nogil=True, cache=True)
def anderson_extrapolate(U, Lam, rho, Gp, dG, idx, coef, X):
    """x+ = g - sum_k coef[k] dG[idx[k]] (flat states, as ``anderson_record``), written to
    U and Lam (Lam = rho x's dual part, rounded to Lam's dtype), and X = x+ as stored (the
    point the next map is applied to). With no coefficients, x+ = g.  OUT: U, Lam, X."""
    n, r = U.shape
    h = n * r
    X[:] = Gp
    for t in range(idx.shape[0]):
        c = coef[t]
        d = dG[idx[t]]
        for k in range(X.shape[0]):
            X[k] -= c * d[k]
    inv_rho = 1.0 / rho
    for i in range(n):
        for q in range(r):
            U[i, q] = X[i * r + q]
            X[i * r + q] = np.float64(U[i, q])
    for i in range(n):
        for q in range(r):
            k = h + i * r + q
            Lam[i, q] = rho * X[k]
            X[k] = np.float64(Lam[i, q]) * inv_rho


@njit(nogil=True, cache=True)
def anderson_state(U, Lam, inv_rho, X):
    """X = (U, Lam * inv_rho) flattened, in float64.  OUT: X."""
    n, r = U.shape
    h = n * r
    for i in range(n):
        for q in range(r):
            X[i * r + q] = np.float64(U[i, q])
            X[h + i * r + q] = np.float64(Lam[i, q]) * inv_rho


# indices into the accelerator's integer and float state
_COUNT, _HAVE_PREV, _PENDING, _STEPS, _REJECTED = 0, 1, 2, 3, 4
_OBJ_BEFORE, _OBJ_KEPT = 0, 1


@njit(nogil=True, cache=True)
def anderson_clear(ints):
    ints[_COUNT] = 0
    ints[_HAVE_PREV] = 0
    ints[_PENDING] = 0


@njit(nogil=True, cache=True)
def anderson_reset(U, Lam, rho, X, ints):
    """Clear the memory; the next map is applied to the current (U, Lam / rho)."""
    anderson_clear(ints)
    anderson_state(U, Lam, 1.0 / rho, X)


@njit(nogil=True, cache=True)
def anderson_after(
    obj,
    rho_used,
    rho_next,
    converged,
    tol,
    vnorm,
    V,
    U,
    Lam,
    X,
    Fp,
    Gp,
    dF,
    dG,
    gram,
    order,
    ints,
    floats,
    bdot,
    Vsave,
    block,
    fpart,
    bpart,
    coef,
):
    """The accelerator's part of one KL-ADMM iteration, run by the in-process loops (compiled
    and reference) after the iteration's stopping test and eq. (15); the Dask session's
    ``anderson_after`` composes the same steps over its blocks.

    The iteration ran at ``rho_used``, its new V has objective ``obj``; eq. (15) proposes
    ``rho_next``. If it started from an extrapolated state and raised the objective, it is
    undone: V <- Vsave, (U, Lam) <- the previous plain result, memory cleared, and it is not
    a stop. A stop also needs the map's fixed-point residual ||U(k+1) - U_in|| below
    ``tol * vnorm`` (U_in: the U the iteration started from; plain ADMM's U(k), an
    extrapolated one here, where ||V - U|| and the change of V alone can be small away from a
    fixed point). Otherwise, unless converged: rho changed -> memory cleared; else the map's
    output is recorded and replaced by the extrapolated state. floats[1] gets the objective
    of the V kept. Returns (next rho, converged).  IN/OUT: V, U, Lam and the memory arrays;
    fpart (n_blocks, m), bpart (n_blocks,), coef (m,) scratch. The fixed-point residual is
    summed as the executors sum ||V - U|| (row sums, then ``block_sums`` in order)."""
    if ints[_PENDING] and not obj <= floats[_OBJ_BEFORE]:
        ints[_REJECTED] += 1
        V[...] = Vsave
        anderson_extrapolate(U, Lam, rho_used, Gp, dG, np.empty(0, np.int64), np.empty(0), X)
        anderson_clear(ints)
        floats[_OBJ_KEPT] = floats[_OBJ_BEFORE]
        return rho_used, False
    floats[_OBJ_KEPT] = obj
    ints[_PENDING] = 0
    if converged:
        n, r = U.shape
        rows = np.empty(n)
        row_sq_dist(U, X[: n * r].reshape(n, r), rows)
        if np.sqrt(_block_total(rows, n)) < tol * vnorm:
            return rho_next, True
        converged = False
    if rho_next != rho_used:
        anderson_reset(U, Lam, rho_next, X, ints)
        return rho_next, False
    slot, count = anderson_next_slot(order, ints)
    valid = anderson_valid(order, count)
    anderson_record(
        U,
        Lam,
        1.0 / rho_used,
        X,
        Fp,
        Gp,
        dF,
        dG,
        max(slot, 0),
        slot >= 0,
        valid,
        block,
        fpart,
        bpart,
    )
    ints[_HAVE_PREV] = 1
    ints[_COUNT] = count
    if slot < 0 or not anderson_coefficients(
        fpart, bpart, slot, count, order, valid, gram, bdot, coef
    ):
        anderson_state(U, Lam, 1.0 / rho_used, X)  # nothing to combine yet, or singular
        return rho_next, False
    Vsave[...] = V
    anderson_extrapolate(U, Lam, rho_used, Gp, dG, order[:count].copy(), coef[:count], X)
    ints[_PENDING] = 1
    ints[_STEPS] += 1
    floats[_OBJ_BEFORE] = obj
    return rho_next, False


class RowMemory:
    """The accelerator's arrays for a set of rows (all of them in-process, one block's on a
    Dask worker): the flat states X, Fp, Gp (U rows, then Lam / rho rows), the m differences
    dF, dG, V before the last extrapolation, and the partial-dot scratch."""

    def __init__(self, n: int, r: int, m: int, dtype=np.float64, block: int = 1024):
        self.n, self.r, self.m, self.block = n, r, m, int(block)
        N = 2 * n * r
        self.X = np.zeros(N)
        self.Fp = np.zeros(N)
        self.Gp = np.zeros(N)
        self.dF = np.zeros((m, N))
        self.dG = np.zeros((m, N))
        self.Vsave = np.zeros((n, r), dtype=dtype)
        nb = max(-(-n // self.block), 1)
        self.fpart = np.zeros((nb, m))
        self.bpart = np.zeros(nb)

    def _rows(self, flat):
        """A flat state as (n, 2r): each row's U part, then its Lam / rho part."""
        n, r = self.n, self.r
        return np.hstack([flat[: n * r].reshape(n, r), flat[n * r :].reshape(n, r)])

    def _flat(self, rows):
        return np.concatenate([rows[:, : self.r].ravel(), rows[:, self.r :].ravel()])

    def arrays(self) -> np.ndarray:
        """(n, width) float64: X, Fp, Gp, dF, dG (n x 2r each), Vsave side by side, so that
        a checkpoint's row blocks hold their rows' memory (see ``Anderson.width``)."""
        flat = [self.X, self.Fp, self.Gp, *self.dF, *self.dG]
        return np.hstack([self._rows(v) for v in flat] + [self.Vsave.astype(np.float64)])

    def load_rows(self, W):
        m, k = self.m, 2 * self.r
        W = np.asarray(W, dtype=np.float64)
        self.X[...] = self._flat(W[:, 0:k])
        self.Fp[...] = self._flat(W[:, k : 2 * k])
        self.Gp[...] = self._flat(W[:, 2 * k : 3 * k])
        for j in range(m):
            self.dF[j] = self._flat(W[:, (3 + j) * k : (4 + j) * k])
            self.dG[j] = self._flat(W[:, (3 + m + j) * k : (4 + m + j) * k])
        self.Vsave[...] = W[:, (3 + 2 * m) * k :]


class Anderson:
    """The accelerator's state for one fit: the small part (Gram matrix, history order,
    counters, <dF_j, f>) here, the row arrays in a ``RowMemory`` -- this object's own for
    the in-process executor, one per block in the workers for Dask (whose session then runs
    ``anderson_after``'s steps itself). The compiled loop (``_kernels.admm_run``) and the
    Python loop run the same kernels, so all give the same iterates bit for bit.

    ``state_dict`` / ``arrays`` / ``load`` make it part of a checkpoint, so that a resumed fit
    continues bitwise as the uninterrupted one."""

    def __init__(
        self, n: int, r: int, m: int, dtype=np.float64, block: int = 1024, rows: bool = True
    ):
        if m < 1:
            raise ValueError(f"Anderson: memory m={m} must be >= 1")
        self.n, self.r, self.m, self.block = n, r, m, int(block)
        self.mem = RowMemory(n, r, m, dtype, block) if rows else None
        self.gram = np.zeros((m, m))
        self.order = np.zeros(m, np.int64)
        self.ints = np.zeros(5, np.int64)
        self.floats = np.zeros(2)  # read only once set (pending, or after a call)
        self.bdot = np.zeros(m)
        self.coef = np.zeros(m)

    @property
    def n_steps(self) -> int:
        return int(self.ints[_STEPS])

    @property
    def n_rejected(self) -> int:
        return int(self.ints[_REJECTED])

    @property
    def objective_kept(self) -> float:
        return float(self.floats[_OBJ_KEPT])

    def kernel_args(self):
        """The memory in ``anderson_after``'s order (after V, U, Lam)."""
        mm = self.mem
        return (
            mm.X,
            mm.Fp,
            mm.Gp,
            mm.dF,
            mm.dG,
            self.gram,
            self.order,
            self.ints,
            self.floats,
            self.bdot,
            mm.Vsave,
            self.block,
            mm.fpart,
            mm.bpart,
            self.coef,
        )

    def start(self, session, rho, state=None, W=None):
        """At the fit's start (or resume: ``state`` and the memory columns ``W``)."""
        if state is not None:
            self._load_state(state)
        if self.mem is None:
            session.anderson_start(self, rho, W)
        elif W is None:
            anderson_reset(session.U, session.Lam, float(rho), self.mem.X, self.ints)
        else:
            self.mem.load_rows(W)

    def after(self, session, obj, rho_used, rho_next, converged, tol, vnorm):
        """``anderson_after`` on the session's arrays. Returns (next rho, converged)."""
        args = (
            float(obj),
            float(rho_used),
            float(rho_next),
            bool(converged),
            float(tol),
            float(vnorm),
        )
        if self.mem is None:
            rho, conv = session.anderson_after(self, *args)
        else:
            rho, conv = anderson_after(
                *args, session.V, session.U, session.Lam, *self.kernel_args()
            )
        return float(rho), bool(conv)

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "m": self.m,
            "order": self.order.tolist(),
            "ints": self.ints.tolist(),
            "floats": [float(x) for x in self.floats],
            "gram": self.gram.tolist(),
            "bdot": self.bdot.tolist(),
        }

    def arrays(self, session) -> np.ndarray:
        return self.mem.arrays() if self.mem is not None else session.anderson_rows()

    @staticmethod
    def width(r: int, m: int) -> int:
        return 2 * r * (3 + 2 * m) + r

    def _load_state(self, state: dict):
        m = self.m
        if int(state["m"]) != m:
            raise ValueError(f"Anderson: checkpoint memory {state['m']} != {m}")
        self.order[...] = state["order"]
        self.ints[...] = state["ints"]
        self.floats[...] = state["floats"]
        self.gram[...] = np.asarray(state["gram"], dtype=np.float64).reshape(m, m)
        self.bdot[...] = state["bdot"]
