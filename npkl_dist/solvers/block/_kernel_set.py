"""The compiled kernels of a block solve gathered in one object, parallel or serially
compiled (a Dask actor's block runs on one thread), looked up by name."""

from __future__ import annotations

from ...linalg._rowops import serial_variant
from ...problem._terms import pair_terms, pair_terms_serial
from .._kkt import lv_kkt_row_terms, rows_lv
from ._kernels import (
    _additive_dots,
    _cg_update,
    _cg_update_x_sums,
    _csr_mm,
    _diag_gershgorin,
    _direction,
    _dots,
    _matvec_dot,
    _post_smooth,
    _pre_smooth,
    _restrict_scatter,
    _scale_rows,
    _select_columns,
)
from ._search import _save
from ._steps import (
    _copy_delta,
    _direction_cg,
    _direction_LD,
    _neg_residual_rows,
    _pair_coeffs2,
    _pair_coeffs2_cg,
    _residual_dots,
    _subspace_step,
    _subspace_step_cg,
    _uc_products,
    _update_rows,
)


class _Kernels:
    """The parallel kernels of a block solve, or their serial compilations (Dask actors)."""

    #: the kernels, each set as an attribute without its leading underscore
    KERNELS = (
        _matvec_dot,
        _pre_smooth,
        _post_smooth,
        _csr_mm,
        _scale_rows,
        _cg_update,
        _cg_update_x_sums,
        _dots,
        _additive_dots,
        _direction,
        _neg_residual_rows,
        _copy_delta,
        _direction_LD,
        _residual_dots,
        _subspace_step,
        _save,
        _pair_coeffs2,
        _direction_cg,
        _pair_coeffs2_cg,
        _subspace_step_cg,
        _uc_products,
        _update_rows,
        _restrict_scatter,
        _select_columns,
        _diag_gershgorin,
    )

    def __init__(self, serial: bool):
        for fn in self.KERNELS:
            setattr(self, fn.__name__.lstrip("_"), serial_variant(fn) if serial else fn)
        self.rows_lv = serial_variant(rows_lv) if serial else rows_lv
        self.lv_kkt_row_terms = serial_variant(lv_kkt_row_terms) if serial else lv_kkt_row_terms
        self.pair_terms = pair_terms_serial if serial else pair_terms
        self.serial = serial


_KERNELS = {}


def kernels(serial: bool = False) -> _Kernels:
    """The kernel set (built once per process: serial ones compile on first use)."""
    if serial not in _KERNELS:
        _KERNELS[serial] = _Kernels(serial)
    return _KERNELS[serial]
