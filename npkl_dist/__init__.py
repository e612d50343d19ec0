"""npkl-dist: nonparametric low-rank kernel learning from pairwise constraints.

The core (problem model, graph, numba kernels, solvers) imports neither dask, zarr nor prefect.
"""

from pathlib import Path as _Path

from . import _numba_cache

# Before any kernel module is imported: numba caches each kernel under a stamp of all the
# package's kernel sources, so a change to one module recompiles the kernels that inline it.
_numba_cache.cover(_Path(__file__).resolve().parent)

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
from ._version import __version__
from .evaluate import assign_clusters, clustering_metrics, kernel_kmeans, pck_kmeans
from .graph._graph import (
    EXACT_KNN_MAX_POINTS,
    Graph,
    graph_from_edges,
    knn_graph,
    laplacian,
)
from .graph._synthetic import planted_partition
from .job._extend import Extension, embed_new_points
from .model_selection import GammaSelection, select_gamma
from .problem._constraints import Constraints, sample_constraints
from .problem._objective import objective, objective_dense
from .problem._problem import LOSSES, RANK_CAP, NPKLProblem, default_rank
from .problem._result import FitResult
from .solvers._plan import PreparedProblem, SweepPlan, make_plan, prepare
from .solvers.admm._fit import ADMMResult, admm_objective, fit_admm
from .solvers.bcd._fit import fit_bcd
from .solvers.bcd._rank import numerical_rank
from .solvers.bcd._setup import FitSetup, fit_setup
from .solvers.bcd._start import initial_V
from .solvers.inductive import InductiveKernel, fit_inductive
from .solvers.simplenpkl._fit import (
    SimpleNPKLResult,
    fit_simplenpkl,
    simplenpkl_objective,
)

__all__ = [
    "Constraints",
    "ConstraintError",
    "ConstraintWarning",
    "ConvergenceWarning",
    "EXACT_KNN_MAX_POINTS",
    "FitResult",
    "InductiveKernel",
    "fit_inductive",
    "Graph",
    "GraphError",
    "GraphWarning",
    "InputFileError",
    "LOSSES",
    "NPKLProblem",
    "NpklError",
    "NpklWarning",
    "PreparedProblem",
    "RANK_CAP",
    "SweepPlan",
    "ValidationError",
    "assign_clusters",
    "clustering_metrics",
    "default_rank",
    "fit_bcd",
    "FitSetup",
    "fit_setup",
    "graph_from_edges",
    "initial_V",
    "kernel_kmeans",
    "pck_kmeans",
    "knn_graph",
    "laplacian",
    "make_plan",
    "objective",
    "objective_dense",
    "prepare",
    "sample_constraints",
    "__version__",
    "ADMMResult",
    "admm_objective",
    "fit_admm",
    "SimpleNPKLResult",
    "fit_simplenpkl",
    "simplenpkl_objective",
    "GammaSelection",
    "select_gamma",
    "numerical_rank",
    "planted_partition",
    "Extension",
    "embed_new_points",
]
