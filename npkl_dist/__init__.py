"""npkl-dist: nonparametric low-rank kernel learning from pairwise constraints.

The core (problem model, graph, numba kernels, solvers) imports neither dask, zarr nor prefect.
"""

from pathlib import Path as _Path

from . import _numba_cache

# Before any kernel module is imported: numba caches each kernel under a stamp of all the
# package's kernel sources, so a change to one module recompiles the kernels that inline it.
_numba_cache.cover(_Path(__file__).resolve().parent)

from ._bcd import FitResult, FitSetup, fit_bcd, fit_setup, initial_V
from ._constraints import Constraints, sample_constraints
from ._errors import (
    ConstraintError,
    ConstraintWarning,
    ConvergenceWarning,
    GraphError,
    GraphWarning,
    InputFileError,
    NpklError,
    NpklWarning,
    ValidationError,
)
from ._evaluate import clustering_metrics, kernel_kmeans
from ._graph import EXACT_KNN_MAX_POINTS, Graph, graph_from_edges, knn_graph, laplacian
from ._objective import objective, objective_dense
from ._plan import PreparedProblem, SweepPlan, make_plan, prepare
from ._problem import LOSSES, RANK_CAP, NPKLProblem, default_rank
from ._admm import ADMMResult, admm_objective, fit_admm
from ._simplenpkl import SimpleNPKLResult, fit_simplenpkl, simplenpkl_objective
from ._select import GammaSelection, select_gamma
from ._rank import numerical_rank
from ._synthetic import planted_partition

__version__ = "0.1.0"

__all__ = [
    "Constraints", "ConstraintError", "ConstraintWarning", "ConvergenceWarning",
    "EXACT_KNN_MAX_POINTS", "FitResult", "Graph", "GraphError", "GraphWarning",
    "InputFileError", "LOSSES", "NPKLProblem", "NpklError", "NpklWarning", "PreparedProblem",
    "RANK_CAP", "SweepPlan", "ValidationError", "clustering_metrics", "default_rank", "fit_bcd",
    "FitSetup", "fit_setup",
    "graph_from_edges", "initial_V", "kernel_kmeans", "knn_graph", "laplacian", "make_plan",
    "objective", "objective_dense", "prepare", "sample_constraints", "__version__",
    "ADMMResult", "admm_objective", "fit_admm", "SimpleNPKLResult", "fit_simplenpkl",
    "simplenpkl_objective", "GammaSelection", "select_gamma", "numerical_rank",
    "planted_partition",
]
