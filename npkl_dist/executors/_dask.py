"""Dask executor: block/colour-parallel BCD and KL-ADMM on Dask workers.

Rows (internal, locality-relabelled order) are split into contiguous blocks whose
boundaries are multiples of ``SUM_BLOCK`` (of the executor's ``align``) and, for BCD, also
boundaries of the plan's blocks, so that every unit of a sweep step (the rows of one colour
in one plan block, updated sequentially) lies in one Dask block. Each block lives in one Dask
*actor* on a worker,
holding its rows of V followed by its *halo* -- the rows of other blocks that its rows read
(manifold neighbours and constraint partners) -- in one local array, and its part of L and
of the constraint lists renumbered into that local array with the entries in their global
order. A colour step updates the block's units of that colour in place with the same numba
kernel as the in-process executor, so every row gets bitwise the same arithmetic, and
returns only the updated rows other blocks hold as halo; the driver forwards them with the
next step. V therefore stays in worker memory across colours and sweeps; per colour step
only halo rows move.

Reductions are per-chunk sums (``SUM_BLOCK`` rows) added in row order, as in-process, so
objective values and stopping decisions agree exactly with the oracle.

A dead worker loses its actors. The solver loop then raises :class:`WorkerLostError`;
:func:`npkl_dist.fit_with_recovery` restarts from the last checkpoint (deterministic
replay gives the identical result).
"""

from __future__ import annotations

import numba
import numpy as np

from .._errors import NpklError, ValidationError, fmt_value
from ..linalg import _anderson as A
from ..linalg._anderson import (
    RowMemory,
    anderson_extrapolate,
    anderson_record,
    anderson_state,
)
from ..linalg._reductions import chunked_sums, ordered_total, row_norms2
from ..linalg._rowops import SUM_BLOCK
from ..problem._terms import pair_terms_serial as pair_terms
from ..problem._terms import smooth_terms_serial as smooth_terms
from ..solvers._plan import SweepPlan
from ..solvers._sweeps import sweep_units, sweep_units_serial
from ..solvers.admm._kernels import admm_diag_terms_serial as admm_diag_terms
from ..solvers.admm._kernels import admm_pair_terms_serial as admm_pair_terms
from ..solvers.admm._kernels import admm_row_norms_serial, admm_rows
from ..solvers.admm._kernels import admm_smooth_terms_serial as admm_smooth_terms
from ..store import RunStore
from ._dask_block import DaskBlockSession
from ._dask_rows import (
    BlockSpec,
    _recv_all_positions,
    _recv_positions,
    build_blocks,
    local_rows,
    partition_plan,
    partition_rows,
    write_actor_blocks,
)

__all__ = ["DaskExecutor", "WorkerLostError", "partition_rows", "partition_plan", "build_blocks"]


class WorkerLostError(NpklError, RuntimeError):
    """A Dask worker holding part of the factor died; the fit must resume from a checkpoint."""


class BlockActor:
    """One row block of V (and U, Lam for ADMM) in a worker's memory."""

    def __init__(
        self,
        spec: BlockSpec,
        own_rows,
        loss_code,
        gamma,
        bound,
        n_threads=1,
        halo_rows=None,
        extra=None,
    ):
        self.threads = max(1, min(n_threads, numba.config.NUMBA_NUM_THREADS))
        numba.set_num_threads(self.threads)
        self.spec = spec
        r = own_rows.shape[1]
        nh = spec.halo.shape[0]
        self.X = np.zeros((spec.n_own + nh, r), dtype=own_rows.dtype)
        self.X[: spec.n_own] = own_rows
        if halo_rows is not None:
            self.X[spec.n_own :] = halo_rows
        self.loss_code, self.gamma, self.bound = loss_code, gamma, bound
        self.delta2 = np.zeros(spec.n_own)
        self.norm2 = np.zeros(spec.n_own)
        if extra is not None:  # ADMM: U and Lam (own rows), U's halo
            U_own, U_halo, Lam = extra
            self.U = np.zeros_like(self.X)
            self.U[: spec.n_own] = U_own
            self.U[spec.n_own :] = U_halo
            self.Lam = np.ascontiguousarray(Lam)
            self.out = np.zeros_like(self.X)

    # -- BCD ---------------------------------------------------------------------------
    def bcd_step(self, colour, incoming):
        """Apply the halo rows sent after the previous colour step, update this colour's
        units, return the rows other blocks hold as halo: [(target block, rows)]."""

        spec = self.spec
        for pos, rows in incoming:
            self.X[pos] = rows
        rows, ptr = spec.colour_rows[colour], spec.unit_ptr[colour]
        if rows.shape[0]:
            kernel = sweep_units if self.threads > 1 and ptr.shape[0] > 2 else sweep_units_serial
            kernel(
                rows,
                ptr,
                spec.start,
                spec.indptr,
                spec.indices,
                spec.data,
                spec.diag,
                spec.cptr,
                spec.cidx,
                spec.csgn,
                self.X,
                self.loss_code,
                self.gamma,
                self.bound,
                spec.pmax,
                self.delta2,
                self.norm2,
            )
        return [(t, self.X[local]) for t, local in spec.send[colour]]

    def bcd_apply(self, incoming):
        for pos, rows in incoming:
            self.X[pos] = rows
        return True

    def change_sums(self):
        return chunked_sums(self.delta2), chunked_sums(self.norm2)

    def objective_parts(self):
        """Chunked smooth terms of own rows and chunked pair terms of owned pairs."""

        spec = self.spec
        sm = np.empty(spec.n_own)  # the kernel covers out's rows; X includes the halo
        smooth_terms(spec.indptr, spec.indices, spec.data, spec.diag, self.X, sm)
        pv = np.empty(spec.pair_own.shape[0])
        pair_terms(spec.pair_own, spec.pair_other, spec.pair_t, self.X, self.loss_code, pv)
        per_row = np.bincount(spec.pair_own, weights=pv, minlength=spec.n_own)
        return chunked_sums(sm), chunked_sums(per_row)

    def own(self):
        return self.X[: self.spec.n_own].copy()

    def write_blocks(self, url, ckpt_id, row_block, storage_options=None, which="V"):
        store = RunStore.open(url, mode="r", storage_options=storage_options)
        data = (
            self.own()
            if which == "V"
            else np.hstack([self.X[: self.spec.n_own], self.U[: self.spec.n_own], self.Lam])
        )
        for s in range(0, data.shape[0], row_block):
            store.write_V_block(ckpt_id, self.spec.start + s, data[s : s + row_block])
        return True

    # -- ADMM --------------------------------------------------------------------------
    def admm_half(self, which, incoming, lam_sign, rho, gamma, diagonal):
        """Half-step: rows of ``which`` ('V' or 'U') from the other factor's local array.
        ``incoming``: halo rows of the other factor (positions, rows)."""

        spec = self.spec
        other = self.U if which == "V" else self.X
        for pos, rows in incoming:
            other[pos] = rows
        nb = spec.n_own
        nrm = np.empty(other.shape[0])  # own and halo rows: the constraint partners' norms
        admm_row_norms_serial(other, nrm)
        admm_rows(
            0,
            nb,
            spec.indptr,
            spec.indices,
            spec.data,
            spec.diag,
            spec.cptr,
            spec.cidx,
            spec.csgn,
            bool(diagonal),
            other,
            self.Lam,
            float(lam_sign),
            float(rho),
            float(gamma),
            spec.pmax,
            self.out,
            np.empty(0),
            nrm,
        )
        target = self.X if which == "V" else self.U
        if which == "V":
            self.step2 = row_norms2(self.out[:nb], self.X[:nb])
        target[:nb] = self.out[:nb]
        return [(t, target[local]) for t, local in spec.send_all]

    def admm_dual(self, rho):
        nb = self.spec.n_own
        diff = self.X[:nb].astype(np.float64) - self.U[:nb]
        self.Lam += (rho * diff).astype(self.Lam.dtype)
        return chunked_sums(row_norms2(self.X[:nb], self.U[:nb])), chunked_sums(self.step2)

    def admm_norm2(self):
        nb = self.spec.n_own
        return chunked_sums(row_norms2(self.X[:nb]))

    def admm_objective_parts(self, gamma, diagonal):
        spec = self.spec
        nb = spec.n_own
        sm = np.empty(nb)
        admm_smooth_terms(spec.indptr, spec.indices, spec.data, spec.diag, self.X, sm)
        pv = np.empty(spec.pair_own.shape[0])
        admm_pair_terms(spec.pair_own, spec.pair_other, spec.pair_t, self.X, pv)
        dg = np.empty(self.X.shape[0])
        admm_diag_terms(self.X, dg)
        per_row = np.bincount(spec.pair_own, weights=pv, minlength=nb)
        return chunked_sums(sm), chunked_sums(per_row), chunked_sums(dg[:nb])

    def admm_own(self):
        nb = self.spec.n_own
        return self.X[:nb].copy(), self.U[:nb].copy(), self.Lam.copy()

    # -- KL-ADMM's Anderson acceleration (npkl_dist.linalg._anderson): this block's memory ------
    def aa_init(self, m, block):
        nb = self.spec.n_own
        self.aa = RowMemory(nb, self.X.shape[1], m, self.X.dtype, block)
        return True

    def _u_halo(self):
        return [(t, self.U[local]) for t, local in self.spec.send_all]

    def aa_reset(self, rho):
        nb = self.spec.n_own
        anderson_state(self.U[:nb], self.Lam, 1.0 / rho, self.aa.X)
        return True

    def aa_revert(self, rho):
        """Back to the last plain result; returns U's halo rows for the other blocks."""

        nb, aa = self.spec.n_own, self.aa
        self.X[:nb] = aa.Vsave
        anderson_extrapolate(
            self.U[:nb], self.Lam, rho, aa.Gp, aa.dG, np.empty(0, np.int64), np.empty(0), aa.X
        )
        return self._u_halo()

    def aa_residual(self):
        """Chunked ||U - U_in||^2 of own rows (the fixed-point residual's part)."""
        nb, r = self.spec.n_own, self.X.shape[1]
        return chunked_sums(row_norms2(self.U[:nb], self.aa.X[: nb * r].reshape(nb, r)))

    def aa_record(self, slot, have_prev, valid, rho):
        nb, aa = self.spec.n_own, self.aa
        anderson_record(
            self.U[:nb],
            self.Lam,
            1.0 / rho,
            aa.X,
            aa.Fp,
            aa.Gp,
            aa.dF,
            aa.dG,
            slot,
            have_prev,
            valid,
            aa.block,
            aa.fpart,
            aa.bpart,
        )
        return aa.fpart.copy(), aa.bpart.copy()

    def aa_extrapolate(self, rho, idx, coef):
        """V is kept (for a revert); U, Lam <- the extrapolated state. Returns U's halo."""

        nb, aa = self.spec.n_own, self.aa
        aa.Vsave[...] = self.X[:nb]
        anderson_extrapolate(self.U[:nb], self.Lam, rho, aa.Gp, aa.dG, idx, coef, aa.X)
        return self._u_halo()

    def aa_rows(self):
        return self.aa.arrays()

    def aa_load(self, W):
        self.aa.load_rows(W)
        return True


def _learning_step(note: dict) -> dict:
    """The task a worker runs per learning iteration (:meth:`DaskExecutor.progress_callback`):
    it marks the iteration on the dashboard's task stream and returns its numbers."""
    return note


def _is_worker_loss(exc) -> bool:
    from distributed.client import FutureCancelledError  # optional engine: only with dask

    names = {
        "KilledWorker",
        "CommClosedError",
        "FutureCancelledError",
        "StreamClosedError",
        "CancelledError",
        "WorkerLost",
    }
    msg = str(exc).lower()
    # an actor whose worker process was SIGKILLed: "Unable to contact Actor's worker" (OSError)
    return (
        isinstance(exc, FutureCancelledError)
        or type(exc).__name__ in names
        or ("worker" in msg and ("lost" in msg or "died" in msg or "unable to contact" in msg))
    )


class DaskExecutor:
    """Runs BCD sweeps, block-exact BCD (``method='block'``, see ``_dask_block``) and KL-ADMM
    iterations on a Dask cluster.

    Parameters
    ----------
    client : distributed.Client, optional
        An existing client. Otherwise ``address`` (an existing scheduler) or a new
        ``LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True)``.
    address : str, optional
    workers : int
        Workers of the LocalCluster (default 2).
    threads : int
        Threads per worker, also numba's thread count inside each block (default 1).
    blocks : int, optional
        Row blocks (default: one per worker). For BCD they are cut only at the plan's block
        boundaries that are multiples of ``align`` (see :func:`partition_plan`), so a plan
        with fewer such boundaries runs on fewer blocks: make plans for Dask with
        ``make_plan(..., align=executor.align)`` (the run store's job does).
    dashboard_address : str, optional
        The LocalCluster's dashboard (e.g. ``":8787"``; ``":0"`` a free port; needs bokeh);
        None (default): no dashboard, the fastest start. Learning shows on it through
        :meth:`progress_callback`.
    """

    name = "dask"
    supports_block = True

    def __init__(
        self,
        client=None,
        *,
        address=None,
        workers: int = 2,
        threads: int = 1,
        blocks: int | None = None,
        processes: bool = True,
        dashboard_address: str | None = None,
    ):
        from distributed import Client, LocalCluster  # optional engine: only with dask

        for nm, val in (("workers", workers), ("threads", threads)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValidationError(f"{nm}: expected a positive integer, got {fmt_value(val)}")
        self._own_cluster = None
        if client is None:
            if address is not None:
                client = Client(address)
            else:
                # numba threads are set explicitly inside each actor (numba.set_num_threads)
                # (worker processes only: thread workers share this process's environment)
                env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
                self._own_cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=threads,
                    processes=processes,
                    dashboard_address=dashboard_address,
                    **({"env": env} if processes else {}),
                )
                client = Client(self._own_cluster)
        self.client = client
        self.threads = threads
        n_workers = max(1, len(client.ncores()))  # the scheduler's answer, not a cache
        # one block per worker: fewest actor round trips per colour step
        # (docs/decisions/dask-executor.md)
        self.blocks = blocks or n_workers
        self.align = SUM_BLOCK  # block boundaries: multiples of this (checkpoint shards)

    def close(self):
        if self._own_cluster is not None:
            _close_own_cluster(self.client, self._own_cluster)
            self._own_cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- helpers -----------------------------------------------------------------------
    def _worker_addresses(self, timeout: float = 60.0) -> list:
        """The workers' addresses, asked of the scheduler (``ncores``: not the client's
        periodically refreshed ``scheduler_info`` cache, which can be momentarily empty).
        With none connected, waits up to ``timeout`` s for one; then a clear error."""
        workers = sorted(self.client.ncores())
        if not workers:
            try:
                self.client.wait_for_workers(1, timeout=timeout)
            except Exception:  # noqa: BLE001 - distributed raises TimeoutError variants
                pass
            workers = sorted(self.client.ncores())
        if not workers:
            raise WorkerLostError(
                f"dask: the cluster at {self.client.scheduler.address} has no workers "
                f"(none joined within {timeout:g} s); start workers, or use the "
                f"in-process executor"
            )
        return workers

    def _actors(self, specs, make_args, cls=None):
        workers = self._worker_addresses()
        futs = []
        with self.client.as_current():  # actor handles bind to the current client
            for k, spec in enumerate(specs):
                w = workers[k % len(workers)]
                # a block's arrays are scattered to its worker rather than embedded in the
                # task: a task's arguments travel inside the graph through the scheduler
                # (distributed warns "Sending large graph" from a few MiB; a block at
                # n = 1e6 holds hundreds). Each argument is one scattered object.
                data = self.client.scatter([spec, *make_args(spec)], workers=[w], hash=False)
                futs.append(
                    self.client.submit(
                        cls or BlockActor,
                        *data,
                        actor=True,
                        workers=[w],
                        allow_other_workers=True,
                        pure=False,
                    )
                )
            return [f.result() for f in futs]

    def _gather(self, make_futures):
        """Submit actor calls (``make_futures()``) and wait for them; a dead worker, at
        submission or while waiting, becomes :class:`WorkerLostError`."""
        try:
            with self.client.as_current():
                return [f.result() for f in make_futures()]
        except Exception as exc:  # noqa: BLE001 - classify, then re-raise
            if _is_worker_loss(exc):
                raise WorkerLostError(
                    f"dask: a worker died during the fit ({type(exc).__name__}: {exc}); resume "
                    f"from the last checkpoint"
                ) from exc
            raise

    # -- the dashboard -----------------------------------------------------------------
    def progress_callback(self, total: int | None = None, label: str = "sweep"):
        """A ``callback(iteration, objective, change, seconds)`` that makes learning visible
        on the Dask dashboard.

        The blocks' work runs in actor calls, which the dashboard does not show as tasks.
        Per iteration this submits, without waiting, one small task to every worker, keyed
        ``learn-<label>-<iteration>-of-<total>-w<i>`` (the task stream and the progress
        panel show them under the prefix ``learn-<label>``; each returns the iteration's
        numbers), and logs the event ``{"action": "<label> <iteration>", ...}`` on the
        scheduler's topic ``npkl-learn``. Best effort: a failure to report never stops a fit.
        """
        from distributed import fire_and_forget  # optional engine: only with dask

        of = "?" if total is None else int(total)

        def cb(iteration, objective, change, seconds):
            k = int(iteration)
            note = {
                "action": f"{label} {k}",
                "iteration": k,
                "of": None if total is None else int(total),
                "objective": float(objective),
                "change": float(change),
                "seconds": float(seconds),
            }
            try:
                futs = [
                    self.client.submit(
                        _learning_step,
                        note,
                        key=f"learn-{label}-{k}-of-{of}-w{i}",
                        workers=[w],
                        allow_other_workers=True,
                        pure=False,
                    )
                    for i, w in enumerate(sorted(self.client.ncores()))
                ]
                fire_and_forget(futs)
                self.client.log_event("npkl-learn", note)
            except Exception:  # noqa: BLE001 - the dashboard must not stop a fit
                pass

        return cb

    # -- general row-block primitives --------------------------------------------------
    def map_row_blocks(self, fn, blocks):
        """``[fn(start, stop) for (start, stop) in blocks]`` as Dask tasks, results in order
        (see :class:`~npkl_dist.executors.base.Executor`); a dead worker becomes
        :class:`WorkerLostError`."""
        blocks = [(int(a), int(b)) for a, b in blocks]
        if not blocks:
            return []
        starts, stops = zip(*blocks)
        return self._gather(lambda: self.client.map(fn, starts, stops, pure=False))

    # -- sessions ----------------------------------------------------------------------
    def bcd_session(self, prep, plan, V):
        return _DaskBCDSession(self, prep, plan, V)

    def admm_session(self, prep, V, U, Lam):
        return _DaskADMMSession(self, prep, V, U, Lam)

    def block_session(
        self,
        prep,
        layout,
        V,
        precond="amg-additive",
        extrapolate=True,
        cache=None,
        inner_maxiter=None,
    ):
        """A block-exact BCD fit's state in the workers (``npkl_dist.executors._dask_block``):
        distributed products with halo exchange, PCG with global reductions on the driver
        and a block-Jacobi preconditioner (``precond`` per block: local AMG or Jacobi).
        ``cache`` (a FitSetup's) is not used: each fit's workers build their own blocks.
        ``inner_maxiter``: the PCG steps of every outer iteration, if fixed (None: any)."""

        return DaskBlockSession(
            self,
            prep,
            layout,
            V,
            precond=precond,
            extrapolate=extrapolate,
            inner_maxiter=inner_maxiter,
        )


class _DaskBCDSession:
    def __init__(self, ex: DaskExecutor, prep, plan, V):
        self.ex = ex
        self.gamma = prep.gamma
        self.starts = partition_plan(plan, ex.blocks, ex.align)
        self.specs = build_blocks(prep, plan, self.starts)
        self.actors = ex._actors(
            self.specs,
            lambda sp: (
                V[sp.start : sp.stop],
                prep.loss_code,
                prep.gamma,
                prep.bound,
                ex.threads,
                V[sp.halo],
            ),
        )
        self.pending = [[] for _ in self.specs]  # (positions, rows) to apply next
        self.halo_bytes = []  # bytes moved per colour step

    def sweep(self, colour_order):
        ex = self.ex
        for c in colour_order:
            c = int(c)
            outgoing = ex._gather(
                lambda: [actor.bcd_step(c, self.pending[b]) for b, actor in enumerate(self.actors)]
            )
            self.pending = [[] for _ in self.specs]
            nbytes = 0
            for a, msgs in enumerate(outgoing):
                for target, rows in msgs:
                    self.pending[target].append((_recv_positions(self.specs[target], a, c), rows))
                    nbytes += rows.nbytes
            self.halo_bytes.append(nbytes)
        self._flush()
        parts = ex._gather(lambda: [a.change_sums() for a in self.actors])
        d2 = ordered_total([x for p in parts for x in p[0]])
        n2 = ordered_total([x for p in parts for x in p[1]])
        return d2, n2

    def _flush(self):
        if any(self.pending):
            self.ex._gather(
                lambda: [a.bcd_apply(self.pending[b]) for b, a in enumerate(self.actors)]
            )
            self.pending = [[] for _ in self.specs]

    def objective(self) -> float:
        self._flush()
        parts = self.ex._gather(lambda: [a.objective_parts() for a in self.actors])
        smooth = ordered_total([x for p in parts for x in p[0]])
        pairs = ordered_total([x for p in parts for x in p[1]])
        return smooth + self.gamma * pairs

    def gather(self) -> np.ndarray:
        self._flush()
        return np.concatenate(self.ex._gather(lambda: [a.own() for a in self.actors]))

    def assign(self, V):
        """Replace V (internal order) in every block, own rows and halo: a joint move."""
        # every own and halo row is overwritten: halo rows still pending are superseded
        self.pending = [
            [(np.arange(sp.n_own + sp.halo.shape[0]), local_rows(V, sp))] for sp in self.specs
        ]
        self._flush()

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        self._flush()
        write_actor_blocks(self.ex, self.actors, self.specs, store, ckpt_id, row_block)

    def close(self):
        self.actors = []


class _DaskADMMSession:
    def __init__(self, ex: DaskExecutor, prep, V, U, Lam):
        self.ex = ex
        self.n = V.shape[0]
        self.starts = partition_rows(self.n, ex.blocks, ex.align)
        self.specs = build_blocks(prep, _no_colour(prep), self.starts)
        self.actors = ex._actors(
            self.specs,
            lambda sp: (
                V[sp.start : sp.stop],
                2,
                prep.gamma,
                prep.bound,
                ex.threads,
                V[sp.halo],
                (U[sp.start : sp.stop], U[sp.halo], Lam[sp.start : sp.stop]),
            ),
        )
        self.halo_bytes = []

    def _exchange(self, outgoing):
        inbox = [[] for _ in self.specs]
        nbytes = 0
        for a, msgs in enumerate(outgoing):
            for target, rows in msgs:
                inbox[target].append((_recv_all_positions(self.specs[target], a), rows))
                nbytes += rows.nbytes
        self.halo_bytes.append(nbytes)
        return inbox

    def iterate(self, rho, gamma, diagonal):
        ex = self.ex
        # U's halo is current from the previous U-step exchange (kept in self._u_inbox)
        inbox = getattr(self, "_u_inbox", [[] for _ in self.specs])
        out = ex._gather(
            lambda: [
                a.admm_half("V", inbox[b], -1.0, rho, gamma, diagonal)
                for b, a in enumerate(self.actors)
            ]
        )
        v_inbox = self._exchange(out)
        out = ex._gather(
            lambda: [
                a.admm_half("U", v_inbox[b], 1.0, rho, gamma, diagonal)
                for b, a in enumerate(self.actors)
            ]
        )
        self._u_inbox = self._exchange(out)
        parts = ex._gather(lambda: [a.admm_dual(rho) for a in self.actors])
        primal2 = ordered_total([x for p in parts for x in p[0]])
        step2 = ordered_total([x for p in parts for x in p[1]])
        return primal2, step2

    def norm2(self) -> float:
        parts = self.ex._gather(lambda: [a.admm_norm2() for a in self.actors])
        return ordered_total([x for p in parts for x in p])

    def objective(self, gamma, diagonal) -> float:
        parts = self.ex._gather(
            lambda: [a.admm_objective_parts(gamma, diagonal) for a in self.actors]
        )
        total = ordered_total([x for p in parts for x in p[0]])
        total += gamma * ordered_total([x for p in parts for x in p[1]])
        if diagonal:
            total += 0.5 * gamma * ordered_total([x for p in parts for x in p[2]])
        return total

    def gather(self):
        parts = self.ex._gather(lambda: [a.admm_own() for a in self.actors])
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))

    # -- Anderson acceleration: ``_anderson.anderson_after``'s steps over the blocks ------
    def _all(self, call):
        return self.ex._gather(lambda: [call(a) for a in self.actors])

    def anderson_start(self, aa, rho, W=None):
        """Each block's memory (``_anderson.RowMemory``): empty, or its rows of a checkpoint's
        memory columns ``W``."""
        if any(st % aa.block for st in self.starts[:-1]):
            raise ValidationError(
                f"anderson: block boundaries {list(self.starts)} are not "
                f"multiples of {aa.block}; use the executor's default align"
            )
        self._all(lambda a: a.aa_init(aa.m, aa.block))
        if W is None:
            self._all(lambda a: a.aa_reset(rho))
        else:
            st = self.starts
            self.ex._gather(
                lambda: [a.aa_load(W[st[b] : st[b + 1]]) for b, a in enumerate(self.actors)]
            )

    def anderson_rows(self):
        return np.vstack(self._all(lambda a: a.aa_rows()))

    def anderson_after(self, aa, obj, rho_used, rho_next, converged, tol, vnorm):
        """``_anderson.anderson_after``, step for step, with the row work in the blocks and
        the partial sums added in block order (so the result is the in-process one)."""

        ints, floats = aa.ints, aa.floats
        if ints[A._PENDING] and not obj <= floats[A._OBJ_BEFORE]:
            ints[A._REJECTED] += 1
            self._u_inbox = self._exchange(self._all(lambda a: a.aa_revert(rho_used)))
            A.anderson_clear(ints)
            floats[A._OBJ_KEPT] = floats[A._OBJ_BEFORE]
            return rho_used, False
        floats[A._OBJ_KEPT] = obj
        ints[A._PENDING] = 0
        if converged:
            fu = ordered_total([x for p in self._all(lambda a: a.aa_residual()) for x in p])
            if np.sqrt(fu) < tol * vnorm:
                return rho_next, True
            converged = False
        if rho_next != rho_used:
            self._all(lambda a: a.aa_reset(rho_next))
            A.anderson_clear(ints)
            return rho_next, False
        slot, count = A.anderson_next_slot(aa.order, ints)
        valid = A.anderson_valid(aa.order, count)
        parts = self._all(lambda a: a.aa_record(max(slot, 0), slot >= 0, valid, rho_used))
        ints[A._HAVE_PREV] = 1
        ints[A._COUNT] = count
        fpart = np.vstack([p[0] for p in parts])
        bpart = np.concatenate([p[1] for p in parts])
        if slot < 0 or not A.anderson_coefficients(
            fpart, bpart, slot, count, aa.order, valid, aa.gram, aa.bdot, aa.coef
        ):
            self._all(lambda a: a.aa_reset(rho_used))
            return rho_next, False
        idx, coef = aa.order[:count].copy(), aa.coef[:count].copy()
        self._u_inbox = self._exchange(self._all(lambda a: a.aa_extrapolate(rho_used, idx, coef)))
        ints[A._PENDING] = 1
        ints[A._STEPS] += 1
        floats[A._OBJ_BEFORE] = obj
        return rho_next, False

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        self.ex._gather(
            lambda: [
                a.write_blocks(
                    store.url,
                    ckpt_id,
                    row_block,
                    getattr(store, "storage_options", None),
                    which="VUL",
                )
                for a in self.actors
            ]
        )

    def close(self):
        self.actors = []


def _quiet_shutdown_logs():
    """Run on each worker of a cluster we are about to close: its last heartbeat can race the
    scheduler's shutdown and log a traceback of a closed stream (dask/distributed#7105), which
    reads as a failure at the end of a run that succeeded."""

    import logging

    for name in (
        "distributed.worker",
        "distributed.core",
        "distributed.comm",
        "distributed.nanny",
    ):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _close_own_cluster(client, cluster, timeout: float = 30.0):
    """Close a LocalCluster the executor started: workers first, while the scheduler still
    answers them, then the client and the scheduler."""

    import logging
    import time

    # the scheduler lives in this process: its side of the same race (a batched stream to a
    # retiring worker) and its note that retiring workers drops their finished tasks are
    # shutdown noise too, for this close only
    names = (
        "distributed.batched",
        "distributed.core",
        "distributed.comm",
        "distributed.scheduler",
    )
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        try:
            client.run(_quiet_shutdown_logs)
            cluster.scale(0)
            t_end = time.monotonic() + timeout
            while client.ncores() and time.monotonic() < t_end:  # asked of the scheduler
                time.sleep(0.05)
        except Exception:  # noqa: BLE001 - a cluster already going down: closing is all that is left
            pass
        client.close()
        cluster.close()
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _no_colour(prep):
    """ADMM needs no colouring: a plan whose one colour holds every row."""

    n = prep.n_points
    rows = np.arange(n, dtype=np.int64)
    return SweepPlan(rows, rows, np.zeros(n, np.int64), np.array([0, n], np.int64), rows)
