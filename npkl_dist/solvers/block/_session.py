"""A block fit's state for its length (``BlockSession``): the U-block operator, preconditioner,
work arrays and the outer iteration (CG on the unconstrained rows, exact constrained rows,
subspace searches); ``BlockPart`` is one row block's share of it on a Dask worker."""

from __future__ import annotations

import threading

import numba
import numpy as np

from ...linalg._memory import populated_empty
from ...linalg._reductions import chunked_sums, ordered_total
from ...linalg._rowops import CHUNK
from .._sweeps import sweep_units, sweep_units_serial
from ._kernel_set import kernels
from ._kernels import RB, _canonical_sum, _colsum
from ._layout import (
    _u_columns_of_c_rows,
    check_precond,
    colour_units,
    constrained_columns,
    free_matrix,
    free_operator,
)
from ._precond import (
    _AMG_MATRIX_KEY,
    _FINEST_BOUNDS_KEY,
    CANONICAL_OPERATOR_KEY,
    HIERARCHY_KEY,
    AMGPreconditioner,
    JacobiPreconditioner,
    _free_blocks_into,
    pcg_loop,
)
from ._search import SEARCH_NOISE, subspace_search

#: The subspace search takes L D on the U rows from the one-step PCG (alpha Q plus the
#: constrained neighbours) instead of a product with L (one of five passes over L per outer
#: iteration); False: always the product (the reference, for tests).
LD_FROM_CG = True

#: A session of one-step PCGs (``inner_maxiter=1``, the default) on float64 V with the two
#: rules above takes the U rows' outer step D_U as the PCG's alpha Z, exactly what X += alpha Z
#: moved them by (up to the rounding of that sum), instead of V - Vprev: the previous V and
#: L D are then stored for the constrained rows only: two (n, r) arrays fewer to fault in and
#: three fewer streams through the direction and step passes
#: (docs/decisions/block-fit-at-1e6.md). False: Vprev and L D on every row (the reference, for
#: tests).
D_FROM_CG = True

#: With D_FROM_CG in an in-process fit (one part, no halo), the one-step PCG's X += alpha Z
#: is taken where the direction and the step passes read the U rows (rounded as the update
#: rounds it: the same iterates bit for bit), except on the U rows that the C rows' updates
#: read, which move before them: a pass over the U rows less per outer iteration. False: the
#: update as a pass of its own (the reference, for tests).
FOLD_X_UPDATE = True

#: The residual after an outer iteration comes from the residual before it and L S (see
#: ``_subspace_step``) instead of a product with L; False: always the product (the
#: reference, for tests). Rounding does not build up unchecked: a checkpoint stores R
#: (column block 4 of 4), so a resumed fit continues bit for bit, and joint moves and
#: resumes from older checkpoints recompute it exactly.
RESIDUAL_FROM_STEP = True

#: With D_FROM_CG, the own C rows' (L V)_C is carried from step to step as the U rows'
#: residual is: the outer step S leaves V = Vprev + S and L S is formed on those rows, so
#: (L V)_C += (L S)_C, and the objective and KKT terms of the C rows read it instead of their
#: neighbours' rows (scattered over L's order; docs/decisions/block-fit-at-1e6.md).
#: Formed exactly at the first objective and after V is replaced; checkpoints hold it in the
#: C rows of their R block, so a resumed fit continues bit for bit. False: the C rows'
#: neighbours read at every objective (the reference, for tests).
LV_FROM_STEP = True

#: A one-step PCG (``inner_maxiter=1``, the default) takes its direction rounded to float32:
#: Z = M R is stored once in single precision (each entry rounded once) and the step is the
#: exact minimiser along that rounded direction (R*Z, L Z and X += alpha Z all read the
#: stored float32 Z, in float64 arithmetic). The product with L_UU gathers ~14 neighbour rows
#: of Z per row; a float32 row is one cache line instead of two
#: (docs/decisions/block-fit-at-1e6.md). The driver decides for every part at once, so a halo
#: row has its owner's precision. False: float64 directions (the reference, for tests).
DIRECTION_FLOAT32 = True

#: A standalone in-process block fit touches its work arrays' pages in a background thread
#: while its set-up runs (:class:`Prefault`) from this many entries of V (n x rank) on.
PREFAULT_MIN_ENTRIES = 1 << 20


def d_from_cg(extrapolate, dtype, inner_maxiter) -> bool:
    """Whether a block session with these settings takes D_U from its one-step PCG
    (``D_FROM_CG``)."""
    return bool(
        D_FROM_CG
        and LD_FROM_CG
        and RESIDUAL_FROM_STEP
        and extrapolate
        and np.dtype(dtype) == np.float64
        and inner_maxiter == 1
    )


def session_buffers(n, n_free, rank, dtype=np.float64, extrapolate=True, inner_maxiter=1):
    """{name: (shape, dtype)}: the work arrays that an in-process block session
    (:class:`BlockPart` over every row) allocates in a fit with these settings, as its
    ``_buffer`` names them (``tests/solvers/block/test_prefault.py`` checks that a fit asks for exactly
    these)."""
    n, nu, r = int(n), int(n_free), int(rank)
    f64, vdt = np.dtype(np.float64), np.dtype(dtype)
    specs = {"R": ((nu, r), f64), "Q": ((nu, r), f64), "delta2": ((n,), f64), "norm2": ((n,), f64)}
    one_step32 = bool(nu and inner_maxiter == 1 and DIRECTION_FLOAT32)
    if nu and not one_step32:  # a one-step PCG's direction is float32 only (Z32 below)
        specs["Z"] = ((nu, r), f64)
    if vdt != f64:
        specs["X"] = ((nu, r), f64)
    if extrapolate:
        # the C rows' previous V and L D only where D_U comes from the PCG (D_FROM_CG)
        nc = n - nu if d_from_cg(extrapolate, vdt, inner_maxiter) else n
        specs.update(Vprev=((nc, r), f64), LD=((nc, r), f64), S=((n, r), vdt), LS=((n, r), vdt))
    else:
        specs["Xold"] = ((nu, r), f64)
    if one_step32:  # no PCG without U rows
        specs["Z32"] = ((nu, r), np.dtype(np.float32))
    if nu and inner_maxiter > 1:
        specs["P"] = ((nu, r), f64)
    return specs


class Prefault:
    """A block session's work arrays, allocated with their pages mapped in a background
    thread while the fit's set-up (layout, AMG hierarchy, start) runs on the main thread.

    The first write to a fresh page is a page fault, costly in this kind of VM (a
    standalone fit at n = 1e6 paid most of its first outer iteration in them;
    docs/decisions/block-fit-at-1e6.md). The set-up's serial stretches (reverse Cuthill-McKee,
    pyamg's aggregation and relaxation) leave the second core idle; the faults go there. The
    arrays are on base pages, mapped in one call
    (:func:`~npkl_dist.linalg._memory.populated_empty`): numpy's huge pages cost several times
    more to fault in where the memory was handed back to the host, and kept the second core
    busy through most of the set-up. The thread only allocates and maps, so nothing computed
    depends on it: a fit takes these arrays or fresh ones to the same result, bitwise. The
    arrays exist from the start of the set-up instead of its end, so the set-up's temporaries
    and they overlap: a fit's peak memory can grow by up to their size (about 1 GB at n = 1e6,
    r = 16; the measured peak: docs/decisions/block-fit-at-1e6.md).

    ``specs``: {name: (shape, dtype)} (:func:`session_buffers`)."""

    def __init__(self, specs):
        self.specs = dict(specs)
        self._arrays = {}
        self._ready = {name: threading.Event() for name in self.specs}
        self.missed = []  # names asked for and not held (shape, dtype or name unknown)
        self._thread = threading.Thread(target=self._run, name="npkl-prefault", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            for name, (shape, dtype) in self.specs.items():
                self._arrays[name] = populated_empty(shape, dtype, zeros=True)
                self._ready[name].set()
        finally:  # nobody waits forever for an array the thread did not make
            for ev in self._ready.values():
                ev.set()

    def take(self, name, shape, dtype):
        """The array held as ``name`` if it has this shape and dtype (then no longer held),
        else None. Waits for that array (the arrays are made in the specs' order). Its
        contents are zeros (``populated_empty(..., zeros=True)``)."""
        self._wait(name)
        a = self._arrays.get(name)
        if a is None or a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
            self.missed.append(name)
            return None
        del self._arrays[name]
        return a

    def drop(self, name):
        """Let go of the array held as ``name`` (a fit that turned out not to need it)."""
        self._wait(name)
        self._arrays.pop(name, None)

    def _wait(self, name):
        """Until the array ``name`` is made (a name not in the specs: the whole thread)."""
        ev = self._ready.get(name)
        if ev is not None:
            ev.wait()
        else:
            self._thread.join()

    def left(self):
        """Names of the arrays still held (not taken). Waits for the thread."""
        self._thread.join()
        return sorted(self._arrays)

    def close(self):
        """Wait for the thread and drop what was not taken; returns the names dropped."""
        left = self.left()
        self._arrays.clear()
        return left


class BlockPart:
    """The rows of V that one executor block updates in a block solve, with their halo.

    Rows [base, base + n_own) of the U-first layout, local ``0..n_own``; their first
    ``n_free`` are unconstrained (U), the rest constrained (C). ``V`` holds the own rows
    followed by the halo rows (rows of other parts that the own rows read);
    ``indptr/indices/data`` are the own rows' part of L's off-diagonal in that local
    numbering (entries in their global order), ``cptr/cidx/csgn`` their constraint lists,
    ``colour_rows/unit_ptr`` the own C rows of each colour cut into units, ``pair_*`` the
    pairs whose first point is an own row. The first ``n_free_halo`` halo rows (the halo is
    sorted by global row) are unconstrained. In-process the one part is the whole problem
    and has no halo.

    The preconditioner is built on the part's own diagonal block of L_UU: with several
    parts it is block-Jacobi (additive Schwarz without overlap) with a local AMG cycle or
    Jacobi in each block -- symmetric positive definite, so PCG stays PCG. Every method
    returns per-chunk partial sums (RB rows, chunks aligned when ``base`` is a multiple of
    RB) or per-row values; the driver (:class:`BlockSession`) adds them in a fixed order.
    """

    def __init__(
        self,
        *,
        V,
        n_own,
        n_free,
        n_free_halo,
        base,
        indptr,
        indices,
        data,
        diag,
        cptr,
        cidx,
        csgn,
        pmax,
        colour_rows,
        unit_ptr,
        pair_own,
        pair_other,
        pair_t,
        loss_code,
        gamma,
        bound,
        precond="amg-additive",
        extrapolate=True,
        serial=False,
        cache=None,
        prefault=None,
        inner_maxiter=None,
    ):
        self.K = kernels(serial)
        self._prefault = prefault
        # cache (a FitSetup's): what does not depend on gamma, the loss or V's values -- the
        # U-block operator, the preconditioner, the work arrays -- kept for the next fit
        self._cache = cache
        self.V = V
        n_loc, r = V.shape
        self.n_own, self.nu, self.base = int(n_own), int(n_free), int(base)
        self.indptr, self.indices, self.data, self.diag = indptr, indices, data, diag
        self.cptr, self.cidx, self.csgn, self.pmax = cptr, cidx, csgn, int(pmax)
        self.colour_rows, self.unit_ptr = colour_rows, unit_ptr
        self.pair_own, self.pair_other, self.pair_t = pair_own, pair_other, pair_t
        self.loss_code, self.gamma, self.bound = loss_code, gamma, bound
        nu, nw = self.nu, self.nu + int(n_free_halo)
        whole = cache is not None and not serial and int(n_free_halo) == 0
        if whole and "operator" not in cache and CANONICAL_OPERATOR_KEY not in cache:
            # no U rows in the halo (an in-process fit's one part): the operator, the C
            # columns and the AMG matrix in one pass (the same arrays as the three selections)
            cache[_AMG_MATRIX_KEY] = _free_blocks_into(cache, indptr, indices, data, diag, nu)
        # the AMG matrix as the operator too (its rows are the operator's plus the diagonal,
        # which the product skips: the same sums), or the operator of its own
        self._canonical = cache.get(CANONICAL_OPERATOR_KEY) if whole else None
        if self._canonical is not None:
            A = self._canonical
            self.A_ptr, self.A_idx, self.A_data = A.indptr, A.indices, A.data
        else:
            self.A_ptr, self.A_idx, self.A_data = self._cached(
                "operator",
                lambda: free_operator(
                    indptr, indices, data, nu, self.n_own, int(n_free_halo), serial=serial
                ),
            )
        self.A_diag = np.asarray(diag[:nu], np.float64)
        self.dinv = 1.0 / self.A_diag
        fast = extrapolate and V.dtype == np.float64 and nu > 0
        self.ld_from_cg = bool(LD_FROM_CG) and fast
        self.r_from_step = bool(RESIDUAL_FROM_STEP) and fast
        # D_U = alpha Z (D_FROM_CG): set for the session's PCGs (every part alike, so that
        # halo rows move as their owners do); ``inner_maxiter`` None: not known, not taken
        self.d_from_cg = d_from_cg(extrapolate, V.dtype, inner_maxiter)
        self.nfh = int(n_free_halo)
        if self.ld_from_cg or self.d_from_cg:
            self.uc = self._cached(
                "uc",
                lambda: constrained_columns(
                    indptr, indices, data, nu, self.n_own, int(n_free_halo), serial=serial
                ),
            )
        if self.d_from_cg:  # the U rows with C neighbours, and their L_UC D_C
            self.ucr = self._cached("uc rows", lambda: np.flatnonzero(np.diff(self.uc[0])))
            # n_U x r where most U rows have a C neighbour (docs/decisions/social-embeddings.md)
            self.UCD = populated_empty((self.ucr.shape[0], V.shape[1]))
        # (L V) of the own C rows, carried by the subspace steps (LV_FROM_STEP); valid only
        # while _lv_ok (formed at the next objective otherwise)
        self.lv_from_step = self.d_from_cg and bool(LV_FROM_STEP)
        self.LVC = np.empty((self.n_own - self.nu, r)) if self.lv_from_step else None
        self._lv_ok = False
        # the PCG's X += alpha Z folded into the direction and step passes (FOLD_X_UPDATE):
        # in-process only (a halo row's owner would not know which rows others read early)
        self.fold_x = self.d_from_cg and bool(FOLD_X_UPDATE) and n_loc == self.n_own and nu > 0
        self._x_pending = False
        self.upd = (
            self._cached(
                "C rows' U columns", lambda: _u_columns_of_c_rows(indptr, indices, nu, self.n_own)
            )
            if self.fold_x
            else np.empty(0, np.int64)
        )
        self._cg_steps, self._alpha, self._r_moved = 0, None, False
        self._finish_parts = None
        self._no_q = np.empty((0, V.shape[1]))  # Q and uc of the plain product (unused)
        self._no_lv = np.empty((0, V.shape[1]))  # (L V)_C not carried
        self._no_uc = (np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0))
        self.precond_setup(precond, serial)
        self._x_is_v = V.dtype == np.float64  # X: V's own U rows, or a float64 copy
        if self._x_is_v:
            self.X = V[:nu]
        else:
            self.X = self._buffer("X", (nu, r))
            self.X[...] = V[:nu]
        self.R = self._buffer("R", (nu, r))
        # Z = M R: own rows, then the U halo. In float64, or in float32 for a one-step PCG
        # (DIRECTION_FLOAT32); each allocated on first use, so a fit of one-step PCGs never
        # makes the float64 one (128 MB of fresh pages at n = 1e6, r = 16)
        self._z_shape = (nw, r)
        self.Z, self._Z64, self._Z32 = None, None, None
        # the CG direction: Z itself on a CG iteration's first step (no copy); an array of
        # its own only once a second step needs P and the next Z at once
        self.P, self._P = None, None
        self.Q = self._buffer("Q", (nu, r))
        self.delta2 = self._buffer("delta2", (self.n_own,), zero=True)
        self.norm2 = self._buffer("norm2", (self.n_own,), zero=True)
        self.extrapolate = bool(extrapolate)
        self._vprev_is_v = False  # Vprev holds V (the subspace step leaves it so)
        # chunk sums of ||v_i||^2 over the own rows of V as it is, where the subspace step
        # formed them (None: V moved since, objective_parts sums them itself)
        self._vn = None
        if self.extrapolate:
            # V at the start of the outer iteration (halo rows too); the step D = V - Vprev
            # is formed where it is read, and Vprev's U rows are the block step's start
            if self.d_from_cg:  # the C rows' only: own, then the halo's
                self.Vprev = self._buffer("Vprev", (n_loc - nu - self.nfh, r))
                self.LD = self._buffer("LD", (self.n_own - nu, r))
            else:
                self.Vprev = self._buffer("Vprev", (n_loc, r))
                self.LD = self._buffer("LD", (self.n_own, r))
            # the previous outer iteration's whole step (halo rows too) and L times it (own
            # rows), in V's dtype: checkpointed with V so that a resume continues bitwise
            self.S = self._buffer("S", (n_loc, r), V.dtype, zero=True)
            self.LS = self._buffer("LS", (self.n_own, r), V.dtype, zero=True)
        else:
            self.Xold = self._buffer("Xold", self.X.shape)
            self.Xold[...] = self.X

    def _cached(self, key, build):
        """``build()``, or what the cache holds under ``key`` (built once per setup)."""
        if self._cache is None:
            return build()
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def _buffer(self, name, shape, dtype=np.float64, zero=False):
        """A work array: the cache's from the previous fit, or the prefault's (their pages
        already touched; docs/decisions/block-fit-at-1e6.md),
        or fresh. Its contents are never read before written, or zeroed here (``zero``)."""
        dtype, shape = np.dtype(dtype), tuple(shape)
        key = ("buffer", name)
        a = None if self._cache is None else self._cache.get(key)
        if a is not None and (a.shape != shape or a.dtype != dtype):
            a = None
        fresh = False  # the prefault's: zeros already (fresh mappings)
        if a is None and self._prefault is not None:
            a = self._prefault.take(name, shape, dtype)
            fresh = a is not None
        if a is None:
            if self._cache is None:
                return np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
            a = np.empty(shape, dtype)
        if self._cache is not None:
            self._cache[key] = a
        if zero and not fresh:  # a fresh mapping is zeros already
            a.fill(0)
        return a

    @classmethod
    def whole(
        cls,
        prep,
        layout,
        V,
        precond="amg-additive",
        extrapolate=True,
        cache=None,
        prefault=None,
        inner_maxiter=None,
    ):
        """The one part of an in-process solve: every row, no halo."""
        n = V.shape[0]
        units = [colour_units(layout, c) for c in range(layout.n_colours)]
        rows, ptrs = [u[0] for u in units], [u[1] for u in units]
        return cls(
            V=V,
            n_own=n,
            n_free=layout.n_free,
            n_free_halo=0,
            base=0,
            indptr=prep.indptr,
            indices=prep.indices,
            data=prep.data,
            diag=prep.diag,
            cptr=prep.cptr,
            cidx=prep.cidx,
            csgn=prep.csgn,
            pmax=prep.pmax,
            colour_rows=rows,
            unit_ptr=ptrs,
            pair_own=prep.pi,
            pair_other=prep.pj,
            pair_t=prep.pt,
            loss_code=prep.loss_code,
            gamma=prep.gamma,
            bound=prep.bound,
            precond=precond,
            extrapolate=extrapolate,
            cache=cache,
            prefault=prefault,
            inner_maxiter=inner_maxiter,
        )

    def precond_setup(self, precond, serial):
        self.M = self._cached(
            ("precond", precond, bool(serial)), lambda: self._make_precond(precond, serial)
        )

    def _make_precond(self, precond, serial):
        nu = self.nu
        # the hierarchy the 'coarse-free' start built on this L_UU (an in-process fit's one
        # part: its U block is the whole L_UU)
        h = self._cache.pop(HIERARCHY_KEY, None) if self._cache is not None else None
        # the AMG matrix whole_free_blocks formed with the operator (dropped if not used)
        A = self._cache.pop(_AMG_MATRIX_KEY, None) if self._cache is not None else None
        # its diagonal and Gershgorin ratios, if the pass that formed it took them
        fb = self._cache.pop(_FINEST_BOUNDS_KEY, None) if self._cache is not None else None
        if (
            h is not None
            and precond in ("amg-additive", "amg-plain")
            and nu > 0
            and self.base == 0
            and h.levels[0].A.shape[0] == nu
        ):
            return AMGPreconditioner(
                h.levels[0].A,
                serial=serial,
                smooth=None,
                additive=precond == "amg-additive",
                hierarchy=h,
                finest_bounds=fb,
            )
        if precond.startswith("amg") and nu > 0:
            if A is None:
                A = (
                    self._canonical
                    if self._canonical is not None
                    else free_matrix(
                        self.A_ptr, self.A_idx, self.A_data, self.A_diag, serial=serial
                    )
                )
            return AMGPreconditioner(
                A,
                serial=serial,
                smooth="jacobi" if precond == "amg" else None,
                additive=precond == "amg-additive",
                finest_bounds=fb,
            )
        return JacobiPreconditioner(self.A_diag, serial=serial)

    def _chunks(self, n, width=None):
        n_ch = (n + RB - 1) // RB
        return np.zeros(n_ch) if width is None else np.zeros((n_ch, width))

    # -- the unconstrained block ----------------------------------------------------------
    def residual(self):
        """R = -(L V)_U for the own U rows; chunk sums of X*R and ||dinv R||^2."""
        pxr, pg = self._chunks(self.nu), self._chunks(self.nu)
        if self.nu:
            self.K.neg_residual_rows(
                self.nu,
                self.indptr,
                self.indices,
                self.data,
                self.diag,
                self.V,
                self.X,
                self.R,
                self.dinv,
                pxr,
                pg,
            )
        return pxr, pg

    def save(self):
        self._cg_steps, self._alpha, self._r_moved = 0, None, False
        self._finish_parts = None
        self._x_pending = False
        if self.extrapolate and not self._vprev_is_v:
            if self.d_from_cg:  # the C rows only: own, then the halo's
                nc = self.n_own - self.nu
                self.Vprev[:nc] = self.V[self.nu : self.n_own]
                self.Vprev[nc:] = self.V[self.n_own + self.nfh :]
            else:
                self.K.save(self.V, self.Vprev)
        self._vprev_is_v = False  # the step moves V from here on
        self._vn = None

    def pcg_precondition(self, single=False):
        """Z = M R with the chunk sums of R*Z and R*R. ``single``: Z in float32, the
        direction of a one-step PCG (``DIRECTION_FLOAT32``; every part gets the same)."""
        if single:
            if self._Z32 is None:
                self._Z32 = self._buffer("Z32", self._z_shape, np.float32, zero=True)
            self.Z = self._Z32
        else:
            if self._Z64 is None:
                self._Z64 = self._buffer("Z", self._z_shape, zero=True)
            self.Z = self._Z64
        r = self.R.shape[1]
        pa, pb = self._chunks(self.nu, r), self._chunks(self.nu, r)
        self.M.apply_dots(self.R, self.Z[: self.nu], pa, pb)
        return pa, pb

    def pcg_matvec(self, beta):
        if beta is None:
            self._P = self.Z
        else:
            self.K.direction(self._P, self.Z, beta)
        part = self._chunks(self.nu, self.R.shape[1])
        self.K.matvec_dot(
            self.A_ptr,
            self.A_idx,
            self.A_data,
            self.A_diag,
            self._P,
            self.Q,
            part,
            self._canonical is not None,
        )
        return part

    def pcg_update(self, alpha, precondition):
        if precondition:
            self.K.cg_update(self.X, self.R, self._P, self.Q, alpha)
        else:
            # the last step: R - alpha Q would not be read. The residual is formed anew
            # after the C rows (subspace_step's fused update from R as it stands, or
            # residual()), and the direction pass reads Q, not R.
            parts = (self._chunks(self.nu), self._chunks(self.nu))
            if self.fold_x and self._cg_steps == 0:
                # taken by finish_block on the rows the C rows read, by the direction and
                # step passes on the others (their sums of ||X||^2 come from the direction)
                self._x_pending = True
                self._finish_parts = parts  # zeros: the U part comes with the direction
            else:
                self.K.cg_update_x_sums(self.X, self._P, alpha, *parts)
                if self._cg_steps == 0 and self.extrapolate and self._x_is_v:
                    # also the first step: X's start is Vprev, so these are finish_block's
                    # sums
                    self._finish_parts = parts
        self._r_moved = bool(precondition)
        self._cg_steps += 1
        self._alpha = np.asarray(alpha, np.float64)
        if not precondition:
            return None
        if self._P is self.Z:  # the next Z overwrites this direction: keep it apart
            if self.P is None:
                self.P = self._buffer("P", self.Z.shape)
            self.P[...] = self.Z
            self._P = self.P
        return self.pcg_precondition()

    def finish_block(self):
        """V_U = X (rounded to V's dtype); chunk sums of ||X||^2 and ||X - Xold||^2 (formed
        by the PCG's step where it was the only one)."""
        if self._x_pending:  # the rows the C rows' updates read move now
            self.K.update_rows(self.upd, self.X, self._P, self._alpha)
        if self._finish_parts is not None:
            parts, self._finish_parts = self._finish_parts, None
            return parts
        pn, pd = self._chunks(self.nu), self._chunks(self.nu)
        if self.d_from_cg:  # the PCG took no step: X is its start (no Vprev on U rows)
            self.K.copy_delta(self.X, self.X, self.V, False, False, pn, pd)
            return pn, pd
        old = self.Vprev if self.extrapolate else self.Xold
        self.K.copy_delta(self.X, old, self.V, not self._x_is_v, not self.extrapolate, pn, pd)
        return pn, pd

    # -- the constrained rows -------------------------------------------------------------
    def colour_step(self, c):
        rows, ptr = self.colour_rows[c], self.unit_ptr[c]
        if rows.shape[0]:
            kernel = (
                sweep_units
                if not self.K.serial and numba.get_num_threads() > 1 and rows.shape[0] > 2 * CHUNK
                else sweep_units_serial
            )
            kernel(
                rows,
                ptr,
                self.base,
                self.indptr,
                self.indices,
                self.data,
                self.diag,
                self.cptr,
                self.cidx,
                self.csgn,
                self.V,
                self.loss_code,
                self.gamma,
                self.bound,
                self.pmax,
                self.delta2,
                self.norm2,
            )

    def c_change(self):
        """Per-row change and norm sums of the own C rows (see ``sweep_rows``)."""
        return self.delta2[self.nu :].copy(), self.norm2[self.nu :].copy()

    # -- subspace search ------------------------------------------------------------------
    def direction(self):
        """LD = L D (D = V - Vprev); chunk sums of <LD, V>, <LD, D>, <LS, V>, <LD, S>,
        <LS, S>; the pair coefficients of the owned pairs."""
        K, n = self.K, self.n_own
        pa, pb, part = self._chunks(n), self._chunks(n), self._chunks(n, 3)
        if self.d_from_cg:  # D_U = alpha Z, (L D)_U = alpha Q + L_UC D_C
            use_q, alpha = self._cg_step()
            Z = self._z_or_empty()
            K.uc_products(self.ucr, *self.uc, self.V, self.Vprev, self.nu, n, self.nfh, self.UCD)
            n2 = self._chunks(self.nu)
            K.direction_cg(
                self.ucr,
                self.UCD,
                self.nu,
                n,
                self.nfh,
                self.indptr,
                self.indices,
                self.data,
                self.diag,
                self.V,
                self.Vprev,
                Z,
                alpha,
                use_q,
                self.Q,
                self.LD,
                self.S,
                self.LS,
                pa,
                pb,
                part,
                self.upd,
                self._x_pending,
                n2,
            )
            coeffs = np.empty((self.pair_own.shape[0], 6))
            K.pair_coeffs2_cg(
                self.pair_own,
                self.pair_other,
                self.pair_t,
                self.V,
                self.Vprev,
                self.S,
                Z,
                alpha,
                use_q,
                self.nu,
                n,
                self.nfh,
                coeffs,
            )
            # ||X||^2 over the U rows where the update was folded (finish_block gave zeros)
            return pa, pb, part, coeffs, (n2 if self._x_pending else None)
        if self.ld_from_cg and self._cg_steps <= 1:  # (L D)_U from the PCG step
            use_q, alpha = self._cg_step()
            K.direction_LD(
                *self.uc,
                self.nu,
                self.indptr,
                self.indices,
                self.data,
                self.diag,
                self.V,
                self.Vprev,
                self.Q,
                alpha,
                use_q,
                self.LD,
                self.S,
                self.LS,
                pa,
                pb,
                part,
            )
        else:  # the product with L on every row
            K.direction_LD(
                *self._no_uc,
                0,
                self.indptr,
                self.indices,
                self.data,
                self.diag,
                self.V,
                self.Vprev,
                self._no_q,
                self._alpha0(),
                False,
                self.LD,
                self.S,
                self.LS,
                pa,
                pb,
                part,
            )
        coeffs = np.empty((self.pair_own.shape[0], 6))
        K.pair_coeffs2(
            self.pair_own, self.pair_other, self.pair_t, self.V, self.Vprev, self.S, coeffs
        )
        return pa, pb, part, coeffs

    def subspace_step(self, s1, s2):
        """V += s1 D + s2 S (halo rows included), S and LS become this outer step; then the
        exact residual. Returns chunk sums of ||S||^2, ||V||^2 and the residual's."""
        part = self._chunks(self.n_own, 2)
        fused = self.r_from_step and self._cg_steps <= 1  # the residual in the same pass
        pxr, pg = self._chunks(self.nu), self._chunks(self.nu)
        use_q, alpha = self._cg_step()
        if self.d_from_cg:
            self.K.subspace_step_cg(
                self.V,
                self.Vprev,
                self.LD,
                self.S,
                self.LS,
                s1,
                s2,
                part,
                self.R,
                self.Q,
                alpha,
                use_q,
                use_q and self._r_moved,
                self.dinv,
                fused,
                pxr,
                pg,
                self.ucr,
                self.UCD,
                self._z_or_empty(),
                self.nu,
                self.n_own,
                self.nfh,
                self.upd,
                self._x_pending,
                self.LVC if self._lv_ok else self._no_lv,
            )
            self._x_pending = False
            self._vprev_is_v = True
            self._vn = part[:, 1]
            return part, ((pxr, pg) if fused else self.residual())
        # R is R_start - alpha Q where the PCG's one step updated it, else R_start
        self.K.subspace_step(
            self.V,
            self.Vprev,
            self.LD,
            self.S,
            self.LS,
            s1,
            s2,
            part,
            self.R,
            self.Q,
            alpha,
            use_q and self._r_moved,
            self.dinv,
            fused,
            pxr,
            pg,
        )
        self._vprev_is_v = True
        self._vn = part[:, 1]  # ||V||^2 of the V this step leaves, per chunk
        if self.nu and not self._x_is_v:
            self.X[...] = self.V[: self.nu]
        return part, ((pxr, pg) if fused else self.residual())

    def _alpha0(self):
        return np.zeros(self.V.shape[1])

    def _z_or_empty(self):
        """Z (own U rows, then the halo's), or an empty one where no PCG ran (no U rows)."""
        if self.Z is not None:
            return self.Z
        return np.zeros((0, self.V.shape[1]), np.float32)

    def _cg_step(self):
        """(whether the PCG took its one step, its alpha) for this outer iteration."""
        use_q = self._cg_steps == 1
        return use_q, (self._alpha if use_q else self._alpha0())

    def _residual_sums(self):
        """Chunk sums of X*R and ||dinv R||^2 of R as it is (as :meth:`residual`)."""
        pxr, pg = self._chunks(self.nu), self._chunks(self.nu)
        self.K.residual_dots(self.R, self.X, self.dinv, pxr, pg)
        return pxr, pg

    # -- by-products, state -------------------------------------------------------------------
    def objective_parts(self, with_kkt=True):
        """Per own C row: v_i'(LV)_i and the KKT term (zeros without ``with_kkt``: the row
        box QPs of the hinge are most of this pass); per owned pair: its loss; chunk sums
        of ||v_i||^2 over the own rows (the KKT residual's scale; none without ``with_kkt``),
        taken from the subspace step that left V, which formed them in its own pass (a pass
        over V less per traced outer iteration), else summed
        here."""
        V = self.V
        c = np.arange(self.nu, self.n_own, dtype=np.int64)
        sm = np.empty(c.shape[0])
        g = np.zeros(c.shape[0])
        # from (L V)_C: carried by the steps (LV_FROM_STEP), or formed here (one read of
        # the C rows' neighbours for both terms)
        if self.lv_from_step:
            LVC = self.LVC
        else:
            LVC = np.empty((c.shape[0], V.shape[1]))
        if not (self.lv_from_step and self._lv_ok):
            self.K.rows_lv(c, self.indptr, self.indices, self.data, self.diag, V, LVC)
            self._lv_ok = self.lv_from_step
        self.K.lv_kkt_row_terms(
            c,
            LVC,
            self.diag,
            self.cptr,
            self.cidx,
            self.csgn,
            V,
            self.loss_code,
            self.gamma,
            self.bound,
            self.pmax,
            bool(with_kkt),
            sm,
            g,
        )
        pairs = np.empty(self.pair_own.shape[0])
        self.K.pair_terms(self.pair_own, self.pair_other, self.pair_t, V, self.loss_code, pairs)
        if not with_kkt:
            vn = []
        elif self._vn is not None:
            vn = self._vn
        else:
            vn = chunked_sums(
                np.einsum("ij,ij->i", V[: self.n_own], V[: self.n_own], dtype=np.float64)
            )
        return sm, g, pairs, vn

    def own(self):
        return self.V[: self.n_own]

    def state_arrays(self):
        """Own rows of S, LS and the residual R (on the C rows: the carried (L V)_C where
        the fit carries it, else zero), in V's dtype (empty without extrapolation)."""
        if not self.extrapolate:
            return []
        R = np.empty((self.n_own, self.V.shape[1]), self.V.dtype)
        self._residual_rows(0, self.n_own, R)
        return [self.S[: self.n_own], self.LS, R]

    def _residual_rows(self, start, stop, out):
        """``out`` = rows ``[start, stop)`` of :meth:`state_arrays`' R: the residual on the
        U rows, the carried (L V)_C on the C rows where the fit carries it, else zero."""
        u = min(max(self.nu - start, 0), stop - start)
        out[:u] = self.R[start : start + u]
        if self.lv_from_step and self._lv_ok:
            out[u:] = self.LVC[start + u - self.nu : stop - self.nu]
        else:
            out[u:] = 0

    def checkpoint_rows(self, start=0, stop=None):
        """Own rows ``[start, stop)`` of V and of :meth:`state_arrays`, side by side (a
        copy the size of those rows only: a checkpoint written block by block never holds
        the whole 4r-wide array; docs/decisions/social-embeddings.md)."""
        stop = self.n_own if stop is None else min(int(stop), self.n_own)
        V = self.V[start:stop]
        if not self.extrapolate:
            return V.copy()
        r = V.shape[1]
        W = np.empty((stop - start, 4 * r), V.dtype)
        W[:, :r] = V
        W[:, r : 2 * r] = self.S[start:stop]
        W[:, 2 * r : 3 * r] = self.LS[start:stop]
        self._residual_rows(start, stop, W[:, 3 * r :])
        return W

    def load_state(self, S, LS, R=None):
        """S for the own and halo rows, LS and R (None: checkpoints before R was stored) for
        the own rows. Returns the residual's partial sums (as :meth:`residual`): of the
        stored R where the fit carries it from step to step, else of the exact one."""
        if self.extrapolate:
            self.S[...] = S
            self.LS[...] = LS
        self._lv_ok = False
        if R is not None and self.lv_from_step and np.any(R[self.nu : self.n_own]):
            # the carried (L V)_C (checkpoints from before it was stored: zeros, formed anew)
            self.LVC[...] = R[self.nu : self.n_own]
            self._lv_ok = True
        if R is not None and self.r_from_step:
            self.R[...] = R[: self.nu]
            return self._residual_sums()
        return self.residual()

    def assign(self, V_local):
        """Replace V (own and halo rows): a joint move. The momentum restarts (S = 0);
        returns the exact residual's partial sums (as :meth:`residual`)."""
        self.V[...] = V_local
        self._vprev_is_v = False
        self._vn = None
        self._lv_ok = False
        if self.nu:
            if not self._x_is_v:
                self.X[...] = self.V[: self.nu]
            if not self.extrapolate:
                self.Xold[...] = self.X
        if self.extrapolate:
            self.S[...] = 0
            self.LS[...] = 0
        return self.residual()


class BlockSession:
    """State of a block-exact fit on one machine: V (internal U-first order) updated in place.

    The algorithm (one :meth:`step`) is written against parts (:class:`BlockPart`) and
    reductions of their partial sums: in-process one part holds everything; the Dask
    executor subclasses this with one part per worker block and halo exchanges
    (``npkl_dist.executors._dask``). The driver adds partial sums in row order, so the
    stopping decisions are those of the sums, not of the partitioning.

    Parameters
    ----------
    prep : PreparedProblem in the layout's order
    layout : BlockLayout
    V : (n, r) array, the factor (its dtype is the problem's)
    n_threads : int
    precond : {'amg-plain', 'amg-additive', 'amg', 'jacobi'}
    extrapolate : bool
    cache : dict, optional
        A :class:`~npkl_dist.FitSetup`'s: the U-block operator, the preconditioner and the
        work arrays are taken from it (and left in it for the next fit of the setup).
    prefault : Prefault, optional
        Work arrays whose pages a background thread touched during the fit's set-up; taken
        where the cache holds none.
    """

    def __init__(
        self,
        prep,
        layout,
        V,
        n_threads=1,
        precond="amg-additive",
        extrapolate=True,
        cache=None,
        prefault=None,
        inner_maxiter=None,
    ):
        check_precond(precond)
        self._prefault = prefault
        # the PCG steps each outer iteration takes, where fixed for the session (1: the
        # parts may take D_U from the PCG step, D_FROM_CG); None: any
        self.inner_maxiter = None if inner_maxiter is None else int(inner_maxiter)
        self.prep, self.layout = prep, layout
        self.n_threads = int(n_threads)
        self.n_free = layout.n_free
        self.extrapolate = bool(extrapolate)
        self.cg_iterations = []
        self.steps_taken = []
        self._cache = cache
        self._noise = (
            SEARCH_NOISE
            * float(np.finfo(np.float64).eps)
            * (float(np.max(prep.diag)) if prep.diag.size else 0.0)
        )
        self._threads(self._setup, prep, layout, V, precond)
        self._threads(self._residual)

    def _setup(self, prep, layout, V, precond):
        self.V = V
        self.parts = [
            BlockPart.whole(
                prep,
                layout,
                V,
                precond=precond,
                extrapolate=self.extrapolate,
                cache=self._cache,
                prefault=self._prefault,
                inner_maxiter=self.inner_maxiter,
            )
        ]
        self.pair_index = [np.arange(prep.pi.shape[0])]

    # -- how parts are called (overridden by the partitioned session) ------------------------
    def _call(self, name, *args, send=None):
        """``part.name(*args)`` on every part, results in part order. ``send`` names the
        rows to pass on to the other parts' halos ('Z' or ('V', route)): nothing to do with
        one part."""
        return [getattr(p, name)(*args) for p in self.parts]

    def _threads(self, fn, *args):
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads)
        try:
            return fn(*args)
        finally:
            numba.set_num_threads(previous)

    @staticmethod
    def _total(parts):
        """Chunk partials of every part, in order, added in order."""
        parts = [np.asarray(p) for p in parts]
        shape = next((p.shape[1:] for p in parts if p.ndim), ())
        return _colsum(np.concatenate([p.reshape((-1,) + shape) for p in parts]))

    def _residual(self):
        res = self._call("residual")
        self._set_residual(res)

    def _set_residual(self, res):
        self._xr = float(self._total([x[0] for x in res]))
        self._gU = float(self._total([x[1] for x in res]))

    # -- one outer iteration ------------------------------------------------------------------
    def step(self, colour_order, rtol, maxiter):
        """Block solve of U, then the exact row updates of C in ``colour_order``.

        Returns (delta2, norm2, cg_iterations)."""
        if self.inner_maxiter is not None and int(maxiter) != self.inner_maxiter:
            raise ValueError(
                f"maxiter: this session was set up for {self.inner_maxiter} PCG step(s) per "
                f"outer iteration (its work arrays depend on it), got {maxiter}; make a "
                f"session with inner_maxiter={maxiter}"
            )
        return self._threads(self._step, colour_order, rtol, maxiter)

    def _pcg(self, rtol, maxiter):
        tot = self._total
        single = bool(DIRECTION_FLOAT32) and maxiter == 1

        def precondition():  # before the first step: a one-step PCG's direction
            res = self._call("pcg_precondition", single, send="Z")
            return tot([x[0] for x in res]), tot([x[1] for x in res])

        def matvec(beta):
            return tot(self._call("pcg_matvec", beta))

        def update(alpha, again):
            res = self._call("pcg_update", alpha, again, send="Z" if again else None)
            return (tot([x[0] for x in res]), tot([x[1] for x in res])) if again else None

        return pcg_loop(precondition, matvec, update, None, rtol=rtol, maxiter=maxiter)

    def _step(self, colour_order, rtol, maxiter):
        self._call("save")
        it = 0
        d2 = n2 = 0.0
        if self.n_free:
            it = self._pcg(rtol, maxiter)
            res = self._call("finish_block", send=("V", self.layout.n_colours))
            n2 = float(self._total([x[0] for x in res]))
            d2 = float(self._total([x[1] for x in res]))
        for c in colour_order:
            self._call("colour_step", int(c), send=("V", int(c)))
        res = self._call("c_change")
        d2 += float(_canonical_sum(np.concatenate([x[0] for x in res])))
        n2 += float(_canonical_sum(np.concatenate([x[1] for x in res])))
        if self.extrapolate:
            d2, n2 = self._extrapolate(n2)  # ends with the exact residual
        else:
            self._residual()
        self.cg_iterations.append(it)
        return d2, n2, it

    def _extrapolate(self, norm2):
        """Exact minimisation of the objective over V + s1 D + s2 S, D = this outer step and
        S = the previous outer iteration's whole step (a conjugate-gradient-like momentum);
        accepted only where it lowers the objective by more than the search's rounding
        (``SEARCH_NOISE``; ``norm2`` = ||V||^2), so the fit stays monotone."""
        p = self.prep
        res = self._call("direction")
        if len(res[0]) > 4 and res[0][4] is not None:
            # the U rows' ||X||^2, formed by the direction pass (FOLD_X_UPDATE); norm2 held
            # the C rows' part: the same sum as the U part plus it
            norm2 = float(self._total([x[4] for x in res])) + norm2
        tot = self._total([x[2] for x in res])
        a = np.array([float(self._total([x[0] for x in res])), tot[0]])
        B = np.array([[float(self._total([x[1] for x in res])), tot[1]], [tot[1], tot[2]]])
        coeffs = np.empty((p.pi.shape[0], 6))
        for idx, x in zip(self.pair_index, res):
            coeffs[idx] = x[3]
        s1, s2, v = subspace_search(a, B, coeffs, p.gamma, p.loss_code)
        if -v <= self._noise * (abs(s1) + abs(s2)) * norm2:
            s1 = s2 = 0.0
        self.steps_taken.append((s1, s2))
        res = self._call("subspace_step", s1, s2)
        tot2 = self._total([x[0] for x in res])
        self._set_residual([x[1] for x in res])
        return float(tot2[0]), float(tot2[1])

    def state_arrays(self):
        """Arrays beyond V that a checkpoint must hold to resume bitwise."""
        return self.parts[0].state_arrays()

    def load_state_arrays(self, arrays):
        """S, LS and (checkpoints since R was stored) R; the residual follows."""
        if self.extrapolate:
            self._set_residual(self._threads(lambda: [self.parts[0].load_state(*arrays)]))

    # -- by-products ----------------------------------------------------------------------------
    def objective_kkt(self, with_kkt=True):
        """(objective, kkt) of the current V, from the exact residual and the C rows; kkt is
        None without ``with_kkt`` (the objective alone: the same value)."""
        return self._threads(self._objective_kkt, with_kkt)

    def _objective_kkt(self, with_kkt=True):
        p = self.prep
        res = self._call("objective_parts", with_kkt)
        sm = np.concatenate([x[0] for x in res])
        g = np.concatenate([x[1] for x in res])
        pairs = np.empty(p.pi.shape[0])
        for idx, x in zip(self.pair_index, res):
            pairs[idx] = x[2]
        obj = -self._xr + float(_canonical_sum(sm)) + p.gamma * float(_canonical_sum(pairs))
        if not with_kkt:
            return obj, None
        vn = ordered_total([v for x in res for v in x[3]])
        num = self._gU + float(_canonical_sum(g))
        kkt = float(np.sqrt(num / vn)) if vn > 0 else float(np.sqrt(num))
        return obj, kkt

    def gather(self):
        return self.V

    def assign(self, V):
        """Replace V (internal order): a joint move (``npkl_dist.solvers.bcd._joint``). The momentum
        restarts, the residual is recomputed exactly."""
        self._set_residual(self._threads(self._assign_parts, V))

    def _assign_parts(self, V):
        return [self.parts[0].assign(V)]

    def checkpoint_array(self):
        """V and the state arrays side by side: what a checkpoint stores."""
        return self.parts[0].checkpoint_rows() if self.extrapolate else self.gather()

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        # block by block: the 4r-wide rows of one block at a time, never the whole array
        part = self.parts[0]
        for start in range(0, part.n_own, row_block):
            store.write_V_block(ckpt_id, start, part.checkpoint_rows(start, start + row_block))

    def close(self):
        pass
