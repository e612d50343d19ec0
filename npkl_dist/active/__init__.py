"""Active constraint selection (issue 78): candidate pools that never enumerate n^2 pairs,
the selection strategies on the low-rank kernel K = V V' (``_select``), and the loop that
fits, asks, adds the answers and refits warm-started (``_loop``). docs/algorithms.md,
"Active constraint selection"."""

from ._loop import ActiveResult, ActiveRound, active_learning, add_answers, labels_oracle
from ._select import (
    STRATEGIES,
    candidate_pool,
    drop_pairs,
    pair_kernel,
    pair_scores,
    point_margins,
    select_pairs,
)

__all__ = [
    "STRATEGIES",
    "ActiveResult",
    "ActiveRound",
    "active_learning",
    "add_answers",
    "candidate_pool",
    "drop_pairs",
    "labels_oracle",
    "pair_kernel",
    "pair_scores",
    "point_margins",
    "select_pairs",
]
