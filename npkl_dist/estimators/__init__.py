"""scikit-learn estimators over the solver functions (no numerics of their own).

- :class:`NPKLClustering`: the transductive kernel, then constrained clustering
  (``fit(X, y)`` with partial labels, or ``fit(X, pairs=..., pair_labels=...)``).
- :class:`NPKLEmbedding`: the transductive kernel as a transformer (new points by the
  out-of-sample extension).
- :class:`InductiveKernel`: the inductive kernel learned from pairs, in metric-learn's pairs
  convention (the fitted ``npkl_dist.InductiveKernel`` is its ``model_``).

docs/estimators.md gives the memory and time of each and the metric-learn equivalents.
"""

from ._pairs import InductiveKernel, pair_indices
from ._transductive import NPKLClustering, NPKLEmbedding

__all__ = ["InductiveKernel", "NPKLClustering", "NPKLEmbedding", "pair_indices"]
