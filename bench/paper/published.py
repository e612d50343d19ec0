"""The papers' published clustering numbers, transcribed from /work/shared/papers/.

Every number is the paper's "mean ± std" over its repetitions; accuracies are the pairwise
(Rand) clustering accuracy in percent, CPU times in seconds. Cells are ``Cell(mean, std)``;
``NOT_RUN`` is a "-" in the paper (method not run / cannot handle the data set); a cell whose
number cannot be read is ``Cell(None, None, note=...)``.

Tables (``TABLES``, keyed ``"<paper>/<table>"``):

* ``bcdkl-tnnls2015/III`` and ``/V`` (accuracy, smaller data sets / adult) and ``/IV``, ``/VI``
  are NOT transcribable: in ``bcdkl-tnnls2015.txt`` only their captions survived the PDF
  extraction, the bodies are absent (so is Table II, the data-set list). They are kept with
  ``body_missing=True`` and every cell None, so a harness can name what it could not compare
  against; the only facts that survived are the "-" cells stated by Table V's caption.
* ``kl-admm-ijcai2013/2-accuracy`` and ``/2-cpu``: Table 2 (15 data sets x KLADMM,
  SimpleNPKL, hybrid, MFPC), complete.
* ``simplenpkl-jmlr2011/2`` (accuracy, 9 data sets), ``/3`` (CPU), ``/7-accuracy`` and
  ``/7-cpu`` (adult A1a-A5a), ``/4`` and ``/5`` (iris/protein sensitivity to B and p).

``best_published(dataset)`` gives the best kernel-learning accuracy over the main accuracy
tables; ``published_value(dataset, method)`` the number matching one of the runner's method
names (``bench/paper/run.py``). Data-set names follow ``bench.paper.datasets`` (``dbl-spiral``,
``adult-a1a``; the papers' spellings -- Spiral, Double-Spiral, A1a, a1a -- are accepted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "Cell",
    "Table",
    "NOT_RUN",
    "TABLES",
    "best_published",
    "published_value",
    "published_rows",
    "normalize",
    "PAPERS_DIR",
]

PAPERS_DIR = "/work/shared/papers"


@dataclass(frozen=True)
class Cell:
    mean: float | None
    std: float | None
    note: str = ""
    bold: bool = False  # highlighted (best / comparable) in the paper, where the text kept it

    @property
    def ok(self) -> bool:
        return self.mean is not None


NOT_RUN = Cell(None, None, "'-' in the paper: not run / cannot handle this data set")
MISSING = Cell(None, None, "table body missing from the text copy of the paper")


@dataclass(frozen=True)
class Table:
    key: str
    paper: str  # file name under PAPERS_DIR
    table: str  # the paper's table number
    caption: str
    quantity: str  # "accuracy" (%) | "cpu" (seconds)
    role: str  # "main" | "sensitivity"
    columns: tuple
    rows: dict  # dataset -> {column: Cell}
    baselines: tuple = ()  # columns that are not kernel learning (k-means, ck-means)
    protocol: str = ""
    notes: str = ""
    body_missing: bool = False
    extra: dict = field(default_factory=dict)  # non-Cell columns (e.g. #constraints)

    def source(self, column: str) -> str:
        what = "clustering accuracy %" if self.quantity == "accuracy" else "CPU seconds"
        return f"{self.paper} {self.table}, column '{column}' ({what})"


# --------------------------------------------------------------------------------------------
# Parsing helpers: cells are transcribed as the paper prints them
# --------------------------------------------------------------------------------------------

_NUM = re.compile(
    r"^\s*(\*\*)?\s*(-?[\d,]+(?:\.\d+)?)\s*(?:±\s*([\d,]+(?:\.\d+)?))?\s*(\*\*)?\s*$"
)


def _c(text: str) -> Cell:
    """'91.28±4.17' -> Cell(91.28, 4.17); '**97.4±0.0**' -> bold; '-' -> NOT_RUN; '8.5' -> no
    std."""
    if text.strip() == "-":
        return NOT_RUN
    m = _NUM.match(text)
    if not m:
        raise ValueError(f"cannot parse cell {text!r}")
    mean = float(m.group(2).replace(",", ""))
    std = float(m.group(3).replace(",", "")) if m.group(3) else None
    return Cell(mean, std, bold=bool(m.group(1)))


def _rows(columns, body: str) -> dict:
    rows = {}
    for line in body.strip().splitlines():
        name, *cells = [x.strip() for x in line.split("|")]
        if len(cells) != len(columns):
            raise ValueError(f"{name}: {len(cells)} cells for {len(columns)} columns")
        rows[normalize(name)] = {col: _c(x) for col, x in zip(columns, cells)}
    return rows


_ALIASES = {
    "spiral": "dbl-spiral",
    "double-spiral": "dbl-spiral",
    "dbl_spiral": "dbl-spiral",
    "soybean-small": "soybean",
    "statlog-heart": "heart",
}


def normalize(name: str) -> str:
    """Data-set name as in bench.paper.datasets: 'Spiral' -> 'dbl-spiral', 'A1a' -> 'adult-a1a'."""
    key = name.strip().lower().replace(" ", "-")
    if re.fullmatch(r"a\d+a", key):
        return f"adult-{key}"
    return _ALIASES.get(key, key)


# --------------------------------------------------------------------------------------------
# bcdkl-tnnls2015 (Hu & Kwok, IEEE TNNLS 26(9), 2015)
# --------------------------------------------------------------------------------------------

_LOSSES = ("hinge", "squared hinge", "square", "linear")
_BCDKL_PROTOCOL = (
    "kNN graph k=5 (50 on adult); 0.6n must-link + 0.6n cannot-link random pairs; rank r = "
    "largest with r(r+1)/2 <= m; SimpleNPKL p=2, B=100 (100n on adult); BCDKL itermax 1000 "
    "(800 on adult), eps 1e-5; kernel k-means, 20 random restarts; Rand index (%)."
)
_BCDKL_MISSING = (
    "Only the caption is in bcdkl-tnnls2015.txt: the table body (and Table II, "
    "the data-set list) did not survive the PDF-to-text conversion. No number "
    "can be transcribed; every cell is None."
)

_B3_COLS = tuple(f"{s} {loss}" for s in ("BCDKL", "SimpleNPKL", "SDPLR") for loss in _LOSSES)
_B5_COLS = tuple(f"{s} {loss}" for s in ("BCDKL", "SimpleNPKL") for loss in _LOSSES)


def _bcdkl_adult_rows():
    # Rows inferred, not read: Table V covers "the adult data sets" of Table II, whose largest
    # is a7a (Section IV-D) and whose caption names a6a and a7a. Only the caption's "-" cells
    # (SimpleNPKL cannot handle a6a/a7a with hinge, squared hinge or square loss) are known.
    rows = {}
    for k in range(1, 8):
        row = {c: MISSING for c in _B5_COLS}
        if k >= 6:
            for loss in ("hinge", "squared hinge", "square"):
                row[f"SimpleNPKL {loss}"] = NOT_RUN
        rows[f"adult-a{k}a"] = row
    return rows


_BCDKL = [
    Table(
        "bcdkl-tnnls2015/III",
        "bcdkl-tnnls2015.txt",
        "Table III",
        "Clustering accuracies (%) on the smaller data sets. The best and comparable results "
        "(according to the pairwise t-test with 95% confidence) are highlighted.",
        "accuracy",
        "main",
        _B3_COLS,
        {},
        protocol=_BCDKL_PROTOCOL,
        notes=_BCDKL_MISSING + " Data sets named in the text: soybean (Figs. 2-3), iris "
        "(Fig. 5); the rows are unknown, so none are listed.",
        body_missing=True,
    ),
    Table(
        "bcdkl-tnnls2015/IV",
        "bcdkl-tnnls2015.txt",
        "Table IV",
        "CPU time (in seconds) on the smaller data sets.",
        "cpu",
        "main",
        _B3_COLS,
        {},
        protocol=_BCDKL_PROTOCOL,
        notes=_BCDKL_MISSING,
        body_missing=True,
    ),
    Table(
        "bcdkl-tnnls2015/V",
        "bcdkl-tnnls2015.txt",
        "Table V",
        "Clustering accuracies (%) on the adult data sets. ... Note that SimpleNPKL cannot "
        "handle the two largest data sets (a6a and a7a) when the hinge loss, squared hinge "
        "loss, or square loss is used.",
        "accuracy",
        "main",
        _B5_COLS,
        _bcdkl_adult_rows(),
        protocol=_BCDKL_PROTOCOL,
        notes=_BCDKL_MISSING + " Rows a1a..a7a are inferred (Table II lists 'the adult data "
        "sets', a7a the largest); SDPLR is not reported on adult (text, Sec. IV-C). "
        "Only the '-' cells stated by the caption are known.",
        body_missing=True,
    ),
    Table(
        "bcdkl-tnnls2015/VI",
        "bcdkl-tnnls2015.txt",
        "Table VI",
        "CPU time (in seconds) on the adult data sets.",
        "cpu",
        "main",
        _B5_COLS,
        _bcdkl_adult_rows(),
        protocol=_BCDKL_PROTOCOL,
        notes=_BCDKL_MISSING,
        body_missing=True,
    ),
]

# --------------------------------------------------------------------------------------------
# kl-admm-ijcai2013 (Hu & Kwok, IJCAI 2013), Table 2
# --------------------------------------------------------------------------------------------

_KLADMM_COLS = ("KLADMM", "SimpleNPKL", "hybrid", "MFPC")
_KLADMM_PROTOCOL = (
    "Gaussian weights, sigma = half the mean distance to the 10 nearest neighbours; kNN graph "
    "k=5 (50 on adult); 0.6n must-link + 0.6n cannot-link random pairs plus n must-link (i, i) "
    "pairs; rank r = largest with r(r+1)/2 <= m (Table 1); square loss; KLADMM rho=100, "
    "IterMax 500 (100 on adult); SimpleNPKL extended to the square loss, B = 100n; kernel "
    "k-means; pairwise accuracy (%)."
)

_KLADMM_ACC = """
chessboard | 91.28±4.17 | 89.09±5.33 | 91.28±4.22 | 71.09±4.87
dbl-spiral | 99.70±0.96 | 98.71±1.27 | 99.70±0.96 | 99.68±2.31
glass      | 83.56±2.02 | 84.24±1.87 | 83.70±1.73 | 77.25±1.39
heart      | 78.88±2.79 | 78.03±3.93 | 79.00±2.75 | 58.34±4.09
iris       | 98.69±1.08 | 97.55±1.05 | 98.69±1.10 | 97.36±0.88
protein    | 90.34±2.21 | 87.93±1.97 | 90.27±2.20 | 85.39±1.87
sonar      | 91.54±2.49 | 89.53±2.34 | 91.59±2.54 | 71.84±3.39
soybean    | 98.73±3.84 | 96.10±5.07 | 98.73±4.40 | 93.80±5.85
wine       | 84.11±2.29 | 83.79±2.36 | 84.14±2.54 | 76.37±2.69
adult-a1a  | 95.85±1.35 | 85.68±2.06 | -          | 66.29±1.83
adult-a2a  | 95.65±0.58 | 85.70±1.46 | -          | 65.46±1.07
adult-a3a  | 93.16±0.93 | 83.68±1.07 | -          | 62.07±2.31
adult-a4a  | 93.23±0.46 | 82.97±0.62 | -          | 61.94±2.82
adult-a5a  | 92.93±0.44 | -          | -          | 63.21±0.88
adult-a6a  | 93.36±0.30 | -          | -          | 65.17±1.62
"""

_KLADMM_CPU = """
chessboard | 3.08±0.05   | 17.06±0.34    | 38.95±3.57    | 1.22±0.23
dbl-spiral | 0.74±0.23   | 10.44±0.40    | 15.61±2.62    | 1.32±0.06
glass      | 17.56±0.18  | 71.38±1.75    | 231.43±22.12  | 4.03±0.78
heart      | 37.14±0.16  | 113.85±2.73   | 400.60±37.63  | 5.64±0.45
iris       | 3.44±0.19   | 35.26±8.26    | 53.48±3.13    | 1.90±0.60
protein    | 3.91±0.18   | 22.44±0.56    | 54.34±4.23    | 1.66±0.17
sonar      | 16.28±0.21  | 62.35±2.20    | 174.27±15.22  | 3.39±0.13
soybean    | 0.77±0.18   | 1.96±0.09     | 5.80±0.73     | 0.20±0.11
wine       | 6.89±0.20   | 45.58±1.20    | 118.70±11.06  | 2.82±0.28
adult-a1a  | 54.99±0.78  | 365.68±26.33  | -             | 120.42±14.32
adult-a2a  | 92.02±1.64  | 988.12±23.13  | -             | 157.08±2.06
adult-a3a  | 161.60±3.25 | 2800.0±120.04 | -             | 332.34±1.81
adult-a4a  | 319.29±2.71 | 8767.8±334.44 | -             | 821.76±71.70
adult-a5a  | 1724.9±3.23 | -             | -             | 1407.0±135.92
adult-a6a  | 7661.7±4.20 | -             | -             | 4786.6±207.36
"""

_KLADMM = [
    Table(
        "kl-admm-ijcai2013/2-accuracy",
        "kl-admm-ijcai2013.md",
        "Table 2",
        "Comparison on clustering accuracy (%) and CPU time (second) on the data sets. "
        "[left half: clustering accuracy (%)]",
        "accuracy",
        "main",
        _KLADMM_COLS,
        _rows(_KLADMM_COLS, _KLADMM_ACC),
        protocol=_KLADMM_PROTOCOL,
        notes="Highlighting (best/comparable) is lost in the text copy. 'SimpleNPKL' here "
        "uses the square loss. hybrid = Laue 2012; MFPC = Shang et al. 2012.",
    ),
    Table(
        "kl-admm-ijcai2013/2-cpu",
        "kl-admm-ijcai2013.md",
        "Table 2",
        "Comparison on clustering accuracy (%) and CPU time (second) on the data sets. "
        "[right half: CPU time (sec) for learning K]",
        "cpu",
        "main",
        _KLADMM_COLS,
        _rows(_KLADMM_COLS, _KLADMM_CPU),
        protocol=_KLADMM_PROTOCOL,
        notes="i7-3370 3.4GHz, MATLAB.",
    ),
]

# --------------------------------------------------------------------------------------------
# simplenpkl-jmlr2011 (Zhuang, Tsang & Hoi, JMLR 12, 2011)
# --------------------------------------------------------------------------------------------

_SNPKL_PROTOCOL = (
    "kNN graph k=5 (50 on adult), cover tree; random pairwise constraints, their number set by "
    "the ratio of connected components r ~ 70% of N (Hoi et al. 2007); B=1 (B=N on adult), "
    "C in (0, 1] (C=1 on adult), p=2; kernel k-means; 20 random repetitions; pairwise "
    "accuracy (%)."
)

_SNPKL2_COLS = ("k-means", "ck-means", "NPKL LL", "NPKL HL", "SimpleNPKL LL", "SimpleNPKL SHL")
_SNPKL2 = """
chessboard | 49.8±0.2 | 50.1±0.3 | **61.1±6.9** | 56.3±6.1       | 60.2±0.0       | 58.8±0.8
glass      | 69.7±1.9 | 69.2±1.7 | 74.4±3.7     | **79.1±4.9**   | 73.0±2.5       | 73.5±2.9
heart      | 51.5±0.1 | 52.3±3.7 | 86.0±0.3     | 86.2±0.0       | 86.8±0.0       | **89.4±0.1**
iris       | 84.5±6.5 | 89.4±8.5 | 96.0±6.1     | **97.4±0.0**   | **97.4±0.0**   | **97.4±0.0**
protein    | 76.2±2.0 | 80.7±3.1 | 78.2±3.2     | **86.4±3.8**   | 81.8±1.8       | 75.9±2.0
sonar      | 50.2±0.1 | 50.8±0.2 | 76.8±0.3     | 64.5±6.8       | 70.2±10        | **78.0±0.0**
soybean    | 82.1±6.1 | 83.8±8.3 | 90.2±7.7     | **100.0±0.0**  | 95.3±5.1       | 95.4±4.9
spiral     | 50.1±0.6 | 50.6±1.3 | 86.5±0.0     | **94.1±0.0**   | 92.2±0.0       | **94.1±0.0**
wine       | 71.2±1.2 | 76.1±2.8 | 78.1±1.7     | **85.5±5.3**   | 83.7±4.8       | 85.0±2.6
"""

_SNPKL3_COLS = ("NPKL LL", "NPKL HL", "SimpleNPKL LL", "SimpleNPKL SHL")
_SNPKL3 = """
chessboard | 1.38±0.07 | 5.23±0.06  | **0.05±0.00** | 0.13±0.00
glass      | 1.85±0.04 | 32.36±0.37 | **0.11±0.00** | 2.95±0.00
heart      | 2.64±0.10 | 63.84±0.68 | **0.17±0.01** | 13.15±0.08
iris       | 1.36±0.03 | 1.65±0.04  | **0.04±0.00** | 3.45±0.01
protein    | 1.80±0.06 | 8.16±0.11  | **0.05±0.00** | 1.32±0.00
sonar      | 1.77±0.08 | 30.38±0.24 | **0.11±0.00** | 3.91±0.03
soybean    | 1.51±0.05 | 3.25±0.04  | **0.01±0.00** | 0.16±0.00
spiral     | 1.78±0.10 | 6.23±0.08  | **0.05±0.00** | 1.95±0.00
wine       | 2.54±0.04 | 30.91±1.30 | **0.09±0.00** | 1.53±0.01
"""
_SNPKL3_SPEEDUP = {
    "chessboard": 27.6,
    "glass": 16.8,
    "heart": 15.5,
    "iris": 34.0,
    "protein": 36.0,
    "sonar": 16.1,
    "soybean": 151.0,
    "dbl-spiral": 36.6,
    "wine": 28.2,
}

_SNPKL7_COLS = ("k-means", "ck-means", "SimpleNPKL LL", "SimpleNPKL SHL")
_SNPKL7 = """
A1a | 56.4±3.5 | 59.0±2.3 | **61.4±1.7** | 60.7±2.7
A2a | 57.3±3.6 | 60.2±0.1 | 61.1±1.3     | **61.4±1.2**
A3a | 57.8±3.5 | 59.2±3.0 | 61.1±1.7     | **61.5±2.0**
A4a | 58.8±1.6 | 59.3±3.9 | **61.6±1.3** | 61.4±1.5
A5a | 57.7±3.1 | 59.8±2.2 | 60.8±3.1     | **61.9±1.7**
"""
_SNPKL7_CPU_COLS = ("SimpleNPKL LL", "SimpleNPKL SHL")
_SNPKL7_CPU = """
A1a | **8.5**  | 322.9
A2a | **15.3** | 637.2
A3a | **28.8** | 1,160.8
A4a | **66.3** | 2,341.3
A5a | **79.6** | 3,692.1
"""
_SNPKL7_CONSTRAINTS = {
    "adult-a1a": 4104,
    "adult-a2a": 5443,
    "adult-a3a": 7773,
    "adult-a4a": 12465,
    "adult-a5a": 16161,
}

_SNPKL4_COLS = tuple(f"B={b}" for b in ("1", "1.5", "2", "2.5", "3", "3.5", "4"))
_SNPKL4 = """
iris    | 94.8±0.0     | 94.8±0.0 | 95.2±0.4 | **95.7±0.0** | 95.7±0.0 | 95.7±0.0 | 95.7±0.0
protein | **74.5±0.8** | 73.6±1.6 | 74.4±0.8 | 74.3±0.9     | 74.1±1.0 | 73.7±1.1 | 73.7±1.0
"""
_SNPKL4_ITERS = {"iris": (11, 13, 14, 10, 10, 31, 26), "protein": (51, 32, 51, 11, 14, 27, 19)}

_SNPKL5_COLS = tuple(f"p={p}" for p in ("1", "1.5", "2", "2.5", "3", "3.5", "4"))
_SNPKL5 = """
iris    | 61.6±3.5 | 58.6±4.0 | 94.8±0.0     | 94.8±0.0 | 95.1±0.4 | 94.8±0.0 | **95.6±0.2**
protein | 72.3±1.3 | 72.8±2.2 | **74.5±0.8** | 73.6±1.5 | 73.6±1.6 | 73.5±1.6 | 73.5±1.6
"""
_SNPKL5_ITERS = {"iris": (51, 6, 11, 9, 19, 10, 9), "protein": (32, 35, 51, 40, 11, 11, 21)}

_SNPKL = [
    Table(
        "simplenpkl-jmlr2011/2",
        "simplenpkl-jmlr2011.md",
        "Table 2",
        "Clustering accuracy of SimpleNPKL, compared with the results of NPKL in (10) using "
        "a standard SDP solver, and k-means.",
        "accuracy",
        "main",
        _SNPKL2_COLS,
        _rows(_SNPKL2_COLS, _SNPKL2),
        baselines=("k-means", "ck-means"),
        protocol=_SNPKL_PROTOCOL,
        notes="LL = linear loss, HL = hinge loss, SHL = squared hinge loss; NPKL = Hoi et al. "
        "2007 with SDPT3 (its HL numbers are those reported by Hoi et al.). ck-means = "
        "constrained k-means (Wagstaff et al. 2001, COP-KMeans). Sonar SimpleNPKL LL is "
        "printed '70.2 ± 10' (std 10, one digit). Bold = the paper's best.",
    ),
    Table(
        "simplenpkl-jmlr2011/3",
        "simplenpkl-jmlr2011.md",
        "Table 3",
        "CPU time of SimpleNPKL, compared with the results of NPKL in (10) using a standard "
        "SDP solver.",
        "cpu",
        "main",
        _SNPKL3_COLS,
        _rows(_SNPKL3_COLS, _SNPKL3),
        protocol=_SNPKL_PROTOCOL,
        extra={"Speedup (LL)": _SNPKL3_SPEEDUP},
        notes="Clustering time excluded. 32-bit Windows PC, 3.4GHz, 3GB RAM.",
    ),
    Table(
        "simplenpkl-jmlr2011/7-accuracy",
        "simplenpkl-jmlr2011.md",
        "Table 7",
        "Evaluation results on Adult data set. [accuracy (%) columns]",
        "accuracy",
        "main",
        _SNPKL7_COLS,
        _rows(_SNPKL7_COLS, _SNPKL7),
        baselines=("k-means", "ck-means"),
        protocol=_SNPKL_PROTOCOL,
        extra={"#Constraints": _SNPKL7_CONSTRAINTS},
        notes="A1a..A5a = LIBSVM a1a..a5a (Table 6: 1,605 / 2,265 / 3,185 / 4,781 / 6,414 "
        "instances, 123 features). B = N, C = 1.",
    ),
    Table(
        "simplenpkl-jmlr2011/7-cpu",
        "simplenpkl-jmlr2011.md",
        "Table 7",
        "Evaluation results on Adult data set. [CPU time (s) columns, no std printed]",
        "cpu",
        "main",
        _SNPKL7_CPU_COLS,
        _rows(_SNPKL7_CPU_COLS, _SNPKL7_CPU),
        protocol=_SNPKL_PROTOCOL,
        extra={"#Constraints": _SNPKL7_CONSTRAINTS},
    ),
    Table(
        "simplenpkl-jmlr2011/4",
        "simplenpkl-jmlr2011.md",
        "Table 4",
        "Results of varying capacity parameter B with fixed p = 2 and C = 1 on Iris and "
        "protein data sets.",
        "accuracy",
        "sensitivity",
        _SNPKL4_COLS,
        _rows(_SNPKL4_COLS, _SNPKL4),
        protocol=_SNPKL_PROTOCOL,
        extra={"#Iterations": _SNPKL4_ITERS},
        notes="SimpleNPKL + squared hinge loss. Bold in the paper also marks iteration "
        "counts (iris B=2.5; protein B=2.5).",
    ),
    Table(
        "simplenpkl-jmlr2011/5",
        "simplenpkl-jmlr2011.md",
        "Table 5",
        "Results of varying p in the p-norm regularization over K with fixed B = 1 and C = 1 "
        "on Iris and protein data sets.",
        "accuracy",
        "sensitivity",
        _SNPKL5_COLS,
        _rows(_SNPKL5_COLS, _SNPKL5),
        protocol=_SNPKL_PROTOCOL,
        extra={"#Iterations": _SNPKL5_ITERS},
        notes="SimpleNPKL + squared hinge loss. Bold iteration counts: iris p=1.5; protein "
        "p=3 and p=3.5.",
    ),
]

TABLES: dict[str, Table] = {t.key: t for t in _BCDKL + _KLADMM + _SNPKL}

# --------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------

#: Runner method name -> [(table key, column)] in order of preference (protocol closest to the
#: runner's first: bcdkl / kl-admm use 0.6n + 0.6n random pairs like bench/paper/run.py).
METHOD_COLUMNS = {
    "BCD-hinge": [("bcdkl-tnnls2015/III", "BCDKL hinge"), ("bcdkl-tnnls2015/V", "BCDKL hinge")],
    "BCD-sqhinge": [
        ("bcdkl-tnnls2015/III", "BCDKL squared hinge"),
        ("bcdkl-tnnls2015/V", "BCDKL squared hinge"),
    ],
    "BCD-square": [("bcdkl-tnnls2015/III", "BCDKL square"), ("bcdkl-tnnls2015/V", "BCDKL square")],
    "BCD-linear": [("bcdkl-tnnls2015/III", "BCDKL linear"), ("bcdkl-tnnls2015/V", "BCDKL linear")],
    "KL-ADMM": [("kl-admm-ijcai2013/2-accuracy", "KLADMM")],
    "SimpleNPKL-linear": [
        ("bcdkl-tnnls2015/III", "SimpleNPKL linear"),
        ("bcdkl-tnnls2015/V", "SimpleNPKL linear"),
        ("simplenpkl-jmlr2011/2", "SimpleNPKL LL"),
        ("simplenpkl-jmlr2011/7-accuracy", "SimpleNPKL LL"),
    ],
    "SimpleNPKL-sqhinge": [
        ("bcdkl-tnnls2015/III", "SimpleNPKL squared hinge"),
        ("bcdkl-tnnls2015/V", "SimpleNPKL squared hinge"),
        ("simplenpkl-jmlr2011/2", "SimpleNPKL SHL"),
        ("simplenpkl-jmlr2011/7-accuracy", "SimpleNPKL SHL"),
    ],
    "SimpleNPKL-square": [
        ("bcdkl-tnnls2015/III", "SimpleNPKL square"),
        ("bcdkl-tnnls2015/V", "SimpleNPKL square"),
        ("kl-admm-ijcai2013/2-accuracy", "SimpleNPKL"),
    ],
    "SDPLR-hinge": [("bcdkl-tnnls2015/III", "SDPLR hinge")],
    "hybrid": [("kl-admm-ijcai2013/2-accuracy", "hybrid")],
    "MFPC": [("kl-admm-ijcai2013/2-accuracy", "MFPC")],
    "NPKL-hinge": [("simplenpkl-jmlr2011/2", "NPKL HL")],
    "NPKL-linear": [("simplenpkl-jmlr2011/2", "NPKL LL")],
    "k-means": [
        ("simplenpkl-jmlr2011/2", "k-means"),
        ("simplenpkl-jmlr2011/7-accuracy", "k-means"),
    ],
    "COP-KMeans": [
        ("simplenpkl-jmlr2011/2", "ck-means"),
        ("simplenpkl-jmlr2011/7-accuracy", "ck-means"),
    ],
}


#: Accuracy table -> the CPU-time table reporting the same runs.
CPU_TABLE_OF = {
    "bcdkl-tnnls2015/III": "bcdkl-tnnls2015/IV",
    "bcdkl-tnnls2015/V": "bcdkl-tnnls2015/VI",
    "kl-admm-ijcai2013/2-accuracy": "kl-admm-ijcai2013/2-cpu",
    "simplenpkl-jmlr2011/2": "simplenpkl-jmlr2011/3",
    "simplenpkl-jmlr2011/7-accuracy": "simplenpkl-jmlr2011/7-cpu",
}


def published_rows(dataset: str, *, quantity: str = "accuracy", role: str | None = "main"):
    """Every transcribed cell for ``dataset``: list of (table, column, Cell), None cells too."""
    name = normalize(dataset)
    out = []
    for t in TABLES.values():
        if t.quantity != quantity or (role is not None and t.role != role):
            continue
        for col, cell in t.rows.get(name, {}).items():
            out.append((t, col, cell))
    return out


def best_published(dataset: str, *, include_baselines: bool = False, paper: str | None = None):
    """``(mean, std, source)`` of the highest published kernel-learning accuracy, or None.

    Looks at the main accuracy tables (not the B/p sensitivity tables), skips k-means /
    ck-means unless ``include_baselines``, and, with ``paper`` (e.g. "kl-admm"), only that
    paper's tables. Ties keep the first table in ``TABLES`` order (bcdkl, kl-admm, simplenpkl).
    """
    best = None
    for t, col, cell in published_rows(dataset):
        if not cell.ok or (paper and not t.paper.startswith(paper)):
            continue
        if col in t.baselines and not include_baselines:
            continue
        if best is None or cell.mean > best[0]:
            best = (cell.mean, cell.std, t.source(col))
    return best


def published_value(dataset: str, method: str, *, quantity: str = "accuracy"):
    """``(mean, std, source)`` for one of the runner's methods on ``dataset``, or None.

    Uses ``METHOD_COLUMNS`` (first table with a number wins); ``quantity="cpu"`` looks up the
    CPU-time table of the same runs (``CPU_TABLE_OF``).
    """
    name = normalize(dataset)
    for key, col in METHOD_COLUMNS.get(method, []):
        if quantity == "cpu":
            key = CPU_TABLE_OF.get(key)
            if key is None:
                continue
        t = TABLES[key]
        cell = t.rows.get(name, {}).get(col)
        if cell is not None and cell.ok:
            return (cell.mean, cell.std, t.source(col))
    return None


def summary() -> str:
    """One line per table: key, rows, columns, numbers transcribed."""
    lines = []
    for t in TABLES.values():
        n_num = sum(c.ok for r in t.rows.values() for c in r.values())
        n_cells = sum(len(r) for r in t.rows.values())
        flag = " [BODY MISSING in text]" if t.body_missing else ""
        lines.append(
            f"{t.key:32s} {t.table:10s} {t.quantity:8s} rows={len(t.rows):2d} "
            f"cols={len(t.columns):2d} numbers={n_num}/{n_cells}{flag}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary())
    print()
    for ds in (
        "chessboard",
        "dbl-spiral",
        "glass",
        "heart",
        "iris",
        "protein",
        "sonar",
        "soybean",
        "wine",
        *(f"adult-a{k}a" for k in range(1, 8)),
    ):
        print(f"{ds:12s} {best_published(ds)}")
