"""Sweep plans: pure data describing a colour-ordered Gauss-Seidel sweep.

A plan fixes (a) a locality-improving relabelling of the points (reverse Cuthill-McKee of the
manifold graph), (b) a proper colouring of the conflict graph (manifold edges U constraint
pairs) in the relabelled order, and (c) the rows of each colour. Columns of one colour are
mutually independent, so updating them together equals updating them one by one; a sweep is a
sequence of colour steps whose order is drawn per sweep from the run's seeded generator.

Executors (in-process now, Dask later) run the same plan on the same ``PreparedProblem``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from ._kernels import LOSS_CODES, greedy_colouring
from ._problem import NPKLProblem

__all__ = ["SweepPlan", "PreparedProblem", "make_plan", "prepare"]

RELABELLINGS = ("rcm", "none")


@dataclass(frozen=True)
class SweepPlan:
    """Relabelling and colouring of one problem.

    Attributes
    ----------
    order : (n,) int64
        ``order[q]`` is the original index of internal row q.
    rank_of : (n,) int64
        Inverse of ``order``: internal row of original point i.
    colour : (n,) int64
        Colour of each internal row.
    colour_ptr : (n_colours + 1,) int64
    colour_rows : (n,) int64
        Internal rows sorted by (colour, row); colour c is
        ``colour_rows[colour_ptr[c]:colour_ptr[c + 1]]``.
    """

    order: np.ndarray
    rank_of: np.ndarray
    colour: np.ndarray
    colour_ptr: np.ndarray
    colour_rows: np.ndarray

    @property
    def n_colours(self) -> int:
        return int(self.colour_ptr.shape[0] - 1)

    def rows_of(self, c: int) -> np.ndarray:
        return self.colour_rows[self.colour_ptr[c]: self.colour_ptr[c + 1]]

    def colour_order(self, rng: np.random.Generator) -> np.ndarray:
        """The seeded random colour order of one sweep."""
        return rng.permutation(self.n_colours)


@dataclass(frozen=True)
class PreparedProblem:
    """A problem's arrays in internal order, ready for the kernels.

    ``indptr, indices, data``: off-diagonal part of L (CSR); ``diag``: its diagonal;
    ``cptr, cidx, csgn``: symmetric constraint lists; ``pi, pj, pt``: the pairs once each.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    diag: np.ndarray
    cptr: np.ndarray
    cidx: np.ndarray
    csgn: np.ndarray
    pi: np.ndarray
    pj: np.ndarray
    pt: np.ndarray
    pmax: int
    loss_code: int
    gamma: float
    bound: float

    @property
    def n_points(self) -> int:
        return int(self.diag.shape[0])


def _split(L: sp.csr_matrix):
    diag = L.diagonal().copy()
    off = L.tocoo()
    keep = off.row != off.col
    off = sp.csr_matrix((off.data[keep], (off.row[keep], off.col[keep])), shape=L.shape)
    off.sort_indices()
    return off, diag


def make_plan(problem: NPKLProblem, relabel: str = "rcm") -> SweepPlan:
    """Relabel and colour a problem (pure; cheap relative to a fit)."""
    if relabel not in RELABELLINGS:
        from ._errors import ValidationError

        raise ValidationError(f"relabel: {relabel!r} is not one of {RELABELLINGS}")
    n = problem.n_points
    L = problem.L
    if relabel == "rcm":
        order = reverse_cuthill_mckee(sp.csr_matrix(L), symmetric_mode=True).astype(np.int64)
    else:
        order = np.arange(n, dtype=np.int64)
    rank_of = np.empty(n, np.int64)
    rank_of[order] = np.arange(n, dtype=np.int64)
    Lp = L[order][:, order].tocsr()
    Lp.sort_indices()
    cptr, cidx, _ = _constraint_lists(problem, rank_of)
    colour = np.empty(n, np.int64)
    n_colours = greedy_colouring(n, Lp.indptr.astype(np.int64), Lp.indices.astype(np.int64),
                                 cptr, cidx, colour)
    colour_rows = np.lexsort((np.arange(n), colour)).astype(np.int64)
    colour_ptr = np.zeros(n_colours + 1, np.int64)
    np.cumsum(np.bincount(colour, minlength=n_colours), out=colour_ptr[1:])
    return SweepPlan(order, rank_of, colour, colour_ptr, colour_rows)


def _constraint_lists(problem, rank_of):
    c = problem.constraints
    n = problem.n_points
    pi, pj = rank_of[c.i], rank_of[c.j]
    rows = np.concatenate([pi, pj])
    cols = np.concatenate([pj, pi])
    sign = np.concatenate([c.t, c.t]).astype(np.int8)
    order = np.lexsort((cols, rows))
    cptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=cptr[1:])
    return cptr, cols[order].astype(np.int64), sign[order]


def prepare(problem: NPKLProblem, plan: SweepPlan) -> PreparedProblem:
    """The problem's arrays in the plan's internal order."""
    Lp = problem.L[plan.order][:, plan.order].tocsr()
    off, diag = _split(Lp)
    cptr, cidx, csgn = _constraint_lists(problem, plan.rank_of)
    c = problem.constraints
    pmax = int(np.diff(cptr).max()) if cptr[-1] else 0
    return PreparedProblem(
        indptr=off.indptr.astype(np.int64),
        indices=off.indices.astype(np.int64),
        data=off.data.astype(problem.dtype),
        diag=diag.astype(problem.dtype),
        cptr=cptr, cidx=cidx, csgn=csgn,
        pi=plan.rank_of[c.i], pj=plan.rank_of[c.j], pt=c.t.astype(np.int8),
        pmax=pmax,
        loss_code=LOSS_CODES[problem.loss],
        gamma=problem.gamma,
        bound=problem.bound,
    )
