"""Embeddings: SimpleNPKL's §6 applications (colored MVU, MVE, SPE) on small graphs, exact,
by the saddle-point iteration of npkl_dist.solvers.simplenpkl (simplenpkl-jmlr2011 §6;
docs/algorithms.md, "Embeddings (SimpleNPKL §6)"); group side information as constraints
(``_groups``) and the downstream tasks on an embedding (``_tasks``; §7.5)."""

from ._cmvu import embed_cmvu, label_kernel
from ._distance import edge_distances
from ._groups import (
    Memberships,
    group_constraints,
    group_labels,
    memberships_from_arrays,
    read_group_indicator,
    read_memberships,
)
from ._mve import embed_mve
from ._saddle import EmbeddingResult
from ._spe import MAX_TRIPLETS, embed_spe, spe_triplets
from ._spe_scale import LowRankSPEResult, embed_spe_lowrank, spe_objective, spe_state_arrays
from ._tasks import (
    TRAIN_FRACTIONS,
    EdgeSplit,
    FriendSuggestionScores,
    KnnScores,
    NodeClassificationScores,
    friend_suggestion,
    knn_accuracy,
    node_classification,
    pair_scores,
    split_edges,
    table8_points,
)

__all__ = [
    "MAX_TRIPLETS",
    "TRAIN_FRACTIONS",
    "EdgeSplit",
    "EmbeddingResult",
    "FriendSuggestionScores",
    "KnnScores",
    "LowRankSPEResult",
    "Memberships",
    "NodeClassificationScores",
    "edge_distances",
    "embed_cmvu",
    "embed_mve",
    "embed_spe",
    "embed_spe_lowrank",
    "friend_suggestion",
    "group_constraints",
    "group_labels",
    "knn_accuracy",
    "label_kernel",
    "memberships_from_arrays",
    "node_classification",
    "pair_scores",
    "read_group_indicator",
    "read_memberships",
    "spe_objective",
    "spe_state_arrays",
    "spe_triplets",
    "split_edges",
    "table8_points",
]
