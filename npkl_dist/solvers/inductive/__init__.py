"""The inductive kernel with S = J L J' (inductive-lt-kernel-nips2010): a kernel *function*
learned from pairwise constraints, applicable to points never seen in training.

``_kernels``: base kernels and the tiled, chunk-independent map x -> k_B(x);
``_regularizers``: the r x r problems (LogDet by ITML's Bregman projections, Frobenius and
trace by proximal gradient); ``_fit``: ``fit_inductive`` and the ``InductiveKernel`` model."""

from ._fit import BASES, InductiveKernel, default_max_iter, fit_inductive
from ._kernels import KERNELS, TILE
from ._regularizers import REGULARIZERS

__all__ = [
    "BASES",
    "KERNELS",
    "REGULARIZERS",
    "TILE",
    "InductiveKernel",
    "default_max_iter",
    "fit_inductive",
]
