"""The pipeline's configuration: a TOML file (``npkl run CONFIG.toml``), validated once.

Sections ``[input]`` (features or edges; constraints or labels), ``[graph]``, ``[model]``,
``[execution]``, ``[storage]``, ``[output]`` and ``[extend]``; every key, with an example
file: docs/pipelines.md, "The configuration".

Relative paths are taken relative to the TOML file's directory. Every error names the
section and key, the value received and the fix.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

from npkl_dist import ValidationError
from npkl_dist.graph._io import read_features, read_labels
from npkl_dist.job._job import FitConfig, default_max_iterations

__all__ = [
    "SECTIONS",
    "load_config",
    "validate_config",
    "with_defaults",
    "fit_config",
    "run_options",
]

_INT, _FLOAT, _STR, _BOOL, _DICT = int, float, str, bool, dict

#: section -> key -> (type, default, choices or None, is a path)
SECTIONS: dict[str, dict[str, tuple]] = {
    "input": {
        "dataset": (_STR, None, ("digits", "iris", "wine", "breast_cancer"), False),
        "features": (_STR, None, None, True),
        "edges": (_STR, None, None, True),
        "n_points": (_INT, None, None, False),
        "constraints": (_STR, None, None, True),
        "labels": (_STR, None, None, True),
        "groups": (_STR, None, None, True),
        "n_must": (_INT, None, None, False),
        "n_cannot": (_INT, None, None, False),
        "eval_labels": (_STR, None, None, True),
    },
    "graph": {
        "knn": (_INT, 5, None, False),
        "weighting": (_STR, "gaussian", ("gaussian", "mutual"), False),
        "knn_method": (_STR, "auto", ("auto", "exact", "pynndescent"), False),
        "scale": (_STR, "none", ("none", "standard"), False),
        "delta": (_FLOAT, 1e-3, None, False),
        "block": (_INT, 65536, None, False),
        "exact_max_points": (_INT, 50_000, None, False),
        "duplicates": (_STR, "max", ("max", "sum", "mean", "error"), False),
        # edges only: "spectral" learns over the kNN graph of the graph's spectral embedding
        # (npkl_dist.job.spectral_manifold; npkl embed --manifold)
        "manifold": (_STR, "graph", ("graph", "spectral"), False),
    },
    "model": {
        "solver": (_STR, "bcd", ("bcd", "admm", "simplenpkl", "inductive", "spe"), False),
        "loss": (_STR, "square", ("hinge", "squared_hinge", "square", "linear"), False),
        "rank": (_INT, None, None, False),
        "gamma": (_FLOAT, 1.0, None, False),
        "bound": (_FLOAT, 1.0, None, False),
        "diagonal": (_BOOL, None, None, False),
        "max_sweeps": (_INT, None, None, False),  # None: the solver's own cap
        "tol": (_FLOAT, 1e-5, None, False),
        "dtype": (_STR, "float64", ("float32", "float64"), False),
        "seed": (_INT, 0, None, False),
        "method": (_STR, "auto", ("auto", "sweeps", "block"), False),
        "start": (
            _STR,
            "auto",
            ("auto", "random", "propagate", "spectral", "coarse", "coarse-free"),
            False,
        ),
        "tol_objective": (_FLOAT, None, None, False),
        "tol_kkt": (_FLOAT, None, None, False),
        "capacity": (_FLOAT, None, None, False),
        "anderson": (_INT, 0, None, False),
    },
    # solver = "inductive" (kappa_W = alpha kappa + psi'L psi; no graph): [model] gamma is the
    # slack, max_sweeps the passes / FISTA steps, seed the landmarks' and bounds' seed;
    # [graph] scale the feature scaling
    "inductive": {
        "regularizer": (_STR, "logdet", ("logdet", "frobenius", "trace"), False),
        "landmarks": (_INT, None, None, False),  # None: 256, or n when fewer points
        "kernel": (_STR, "rbf", ("rbf", "linear"), False),
        "bandwidth": (_STR, "median", None, False),  # a rule (median, knn) or a number
        "basis": (_STR, "kmeans++", ("kmeans++", "kmeans", "random", "clusters"), False),
        "tol": (_FLOAT, None, None, False),  # None: the regulariser's own
        "chunk_rows": (_INT, None, None, False),  # None: 16,384 (transform stage)
    },
    # solver = "spe" (simplenpkl §6.3 at scale, embed_spe_lowrank; the graph's connectivity,
    # no pairs): [model] max_sweeps the working-set sweeps, seed the search's seed
    "spe": {
        "rank": (_INT, 16, None, False),
        "C": (_FLOAT, 1.0, None, False),
        "capacity": (_FLOAT, None, None, False),  # None: the number of nodes
        "triplets": (_INT, 8, None, False),  # candidates per node and sweep
        "max_iter": (_INT, 200, None, False),  # dual iterations per sweep
        "tol": (_FLOAT, 1e-6, None, False),
    },
    "execution": {
        "executor": (_STR, "auto", ("auto", "inprocess", "dask"), False),
        "workers": (_INT, 2, None, False),
        "dask": (_STR, None, None, False),
        "blocks": (_INT, None, None, False),
        "threads": (_INT, None, None, False),
        "checkpoint_every": (_INT, 1, None, False),
    },
    "storage": {
        "root": (_STR, None, None, False),  # None: <npkl home>/runs
        "options": (_DICT, None, None, False),
    },
    "output": {
        "clusters": (_INT, None, None, False),
        # None: automatic (the unit rows when the free points' rows are short)
        "normalize_kernel": (_BOOL, None, None, False),
        # None: "pck" (constrained k-means) when there are constraints, else "kmeans"
        "cluster_method": (_STR, None, ("kmeans", "pck"), False),
        "out": (_STR, None, None, True),
        "plots": (_BOOL, True, None, False),
        "files": (_BOOL, True, None, False),
    },
    "extend": {
        "features": (_STR, None, None, True),
    },
}
_TOP = {"run": (_STR, None, None, False), "name": (_STR, None, None, False)}
_POSITIVE = {
    "knn",
    "block",
    "exact_max_points",
    "max_sweeps",
    "workers",
    "blocks",
    "threads",
    "checkpoint_every",
    "clusters",
    "rank",
    "n_points",
    "landmarks",
    "chunk_rows",
    "triplets",
    "max_iter",
}
_NONNEG = {"seed", "n_must", "n_cannot", "anderson"}


def _suggest(word, options):
    close = difflib.get_close_matches(word, options, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _bandwidth_value(where, value):
    """[inductive] bandwidth: a positive number (kept as a float) or a rule's name."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value > 0 and math.isfinite(value):
            return float(value)
    elif isinstance(value, str) and value in ("median", "knn"):
        return value
    raise ValidationError(
        f"{where}: bandwidth = {value!r}; expected a number > 0 or one of 'median', 'knn'"
    )


def _check_value(where, key, value, spec):
    typ, _, choices, _ = spec
    if key == "bandwidth":
        return _bandwidth_value(where, value)
    if key == "gamma" and isinstance(value, str):
        if value.strip().lower() == "cv":
            return "cv"  # chosen by cross-validation on held-out constraints (learn stage)
        raise ValidationError(
            f"{where}: gamma = {value!r}; expected a number > 0 or 'cv' (chosen by "
            f"cross-validation on held-out constraints)"
        )
    ok = isinstance(value, typ) and not (typ in (_INT, _FLOAT) and isinstance(value, bool))
    if typ is _FLOAT and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ValidationError(
            f"{where}: {key} = {value!r} has type {type(value).__name__}; expected "
            f"{typ.__name__}" + (f" (one of {', '.join(map(repr, choices))})" if choices else "")
        )
    if choices and value not in choices:
        raise ValidationError(
            f"{where}: {key} = {value!r} is not one of {', '.join(map(repr, choices))}"
            + _suggest(str(value), choices)
        )
    if key in _POSITIVE and value < 1:
        raise ValidationError(f"{where}: {key} = {value!r}; expected an integer >= 1")
    if key in _NONNEG and value < 0:
        raise ValidationError(f"{where}: {key} = {value!r}; expected an integer >= 0")
    if (
        typ is _FLOAT
        and key in ("delta", "tol", "gamma", "bound", "capacity")
        and not (value > 0 and math.isfinite(value))
        and not (key == "tol" and value == 0)
    ):
        raise ValidationError(f"{where}: {key} = {value!r}; expected a finite number > 0")
    if typ is _FLOAT and key in ("tol_objective", "tol_kkt") and not value >= 0:
        raise ValidationError(f"{where}: {key} = {value!r}; expected a number >= 0")
    return value


def validate_config(raw: dict, *, source: str = "config", base_dir=None) -> dict:
    """A complete, validated configuration (every section, defaults filled in).

    Parameters
    ----------
    raw : dict
        As parsed from TOML (or built in Python).
    source : str
        Named in error messages (the file name).
    base_dir : path, optional
        Relative paths are made absolute against it.
    """
    if not isinstance(raw, dict):
        raise ValidationError(f"{source}: expected a table of sections, got {type(raw).__name__}")
    out: dict = {}
    for key, value in raw.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ValidationError(
                    f"{source}: [{key}] must be a table (a [{key}] section), got {value!r}"
                )
            continue
        if key not in _TOP:
            raise ValidationError(
                f"{source}: unknown top-level key {key!r}{_suggest(key, [*_TOP, *SECTIONS])} "
                f"(valid: {', '.join(_TOP)} and the sections {', '.join(SECTIONS)})"
            )
        out[key] = _check_value(source, key, value, _TOP[key])
    if "run" not in out:
        raise ValidationError(
            f'{source}: missing run = "..." (a run id such as "digits", a path, or a store '
            f'URL such as "s3://bucket/runs/digits"); add it at the top of the file'
        )
    for section, spec in SECTIONS.items():
        given = raw.get(section, {}) or {}
        where = f"{source} [{section}]"
        unknown = [k for k in given if k not in spec]
        if unknown:
            k = unknown[0]
            raise ValidationError(
                f"{where}: unknown key {k!r}{_suggest(k, spec)} (valid keys: {', '.join(spec)})"
            )
        sec = {}
        for key, s in spec.items():
            if key in given and given[key] is not None:
                value = _check_value(where, key, given[key], s)
                if s[3] and base_dir is not None and "://" not in value:
                    value = os.path.abspath(os.path.join(base_dir, os.path.expanduser(value)))
                sec[key] = value
            else:
                sec[key] = s[1]
        out[section] = sec
    inp = out["input"]
    if inp["dataset"] is not None:
        mark = f"dataset:{inp['dataset']}"
        if inp["features"] not in (None, mark) or inp["edges"] is not None:
            raise ValidationError(
                f"{source} [input]: dataset = {inp['dataset']!r} brings its own features; drop "
                f"features / edges, or drop dataset"
            )
        no_pairs = inp["constraints"] is None and inp["labels"] is None and inp["groups"] is None
        if no_pairs and out["model"]["solver"] != "spe":
            inp["labels"] = f"dataset:{inp['dataset']}"
        if inp["eval_labels"] is None:
            inp["eval_labels"] = f"dataset:{inp['dataset']}"
        inp["features"] = f"dataset:{inp['dataset']}"
    if (inp["features"] or "").startswith("dataset:") and (raw.get("graph") or {}).get(
        "scale"
    ) is None:
        # a bundled data set is read raw and standardised by the graph stage, which records
        # the scaling, so that `npkl extend` scales new raw rows alike
        out["graph"]["scale"] = "standard"
    if (inp["features"] is None) == (inp["edges"] is None):
        raise ValidationError(
            f'{source} [input]: give exactly one of features = "X.npy" (feature rows; a kNN '
            f'graph is built) or edges = "graph.csv" (a given graph)'
        )
    if out["graph"]["manifold"] != "graph":
        if inp["edges"] is None:
            raise ValidationError(
                f"{source} [graph]: manifold = {out['graph']['manifold']!r} is built from a "
                f'given graph, but [input] gives features; give edges = "graph.csv" or drop '
                f"manifold (a kNN graph of the features is built)"
            )
        if out["model"]["solver"] == "spe":
            raise ValidationError(
                f"{source} [graph]: solver = 'spe' embeds the given graph's own connectivity; "
                f'drop manifold or choose solver = "bcd"'
            )
    given = [k for k in ("constraints", "labels", "groups") if inp[k] is not None]
    if out["model"]["solver"] == "spe":
        if given:
            raise ValidationError(
                f"{source} [input]: solver = 'spe' embeds the graph from its connectivity "
                f"alone and takes no pairs; drop {given[0]} (eval_labels scores and colours "
                f'the result), or choose solver = "bcd" to learn from them'
            )
        if out["extend"]["features"] is not None:
            raise ValidationError(
                f"{source} [extend]: solver = 'spe' has no map for new points; drop [extend]"
            )
    elif len(given) != 1:
        raise ValidationError(
            f'{source} [input]: give exactly one of constraints = "pairs.csv" (i, j, type), '
            f'labels = "y.npy" (partial labels, -1 = unknown; pairs are sampled) or groups = '
            f'"memberships.csv" (node, group; pairs are sampled from shared groups)'
        )
    for key in ("features", "edges", "constraints", "labels", "groups", "eval_labels"):
        path = inp[key]
        if (
            path is not None
            and "://" not in path
            and not path.startswith("dataset:")
            and not Path(path).is_file()
        ):
            raise ValidationError(
                f"{source} [input]: {key} = {path!r} does not exist; check the path (relative "
                f"paths are taken from the config file's directory)"
            )
    ext = out["extend"]["features"]
    if ext is not None:
        if inp["features"] is None:
            raise ValidationError(
                f"{source} [extend]: features = {ext!r} needs a graph built from features; a "
                f"run on a given graph (edges) cannot place new points: drop [extend]"
            )
        if not ext.startswith("dataset:") and not Path(ext).is_file():
            raise ValidationError(f"{source} [extend]: features = {ext!r} does not exist")
    if out["model"]["solver"] == "inductive":
        if inp["features"] is None:
            raise ValidationError(
                f"{source} [model]: solver = 'inductive' learns a kernel on features, but "
                f'[input] gives edges; give features = "X.npy" or choose solver = "bcd"'
            )
        if out["model"]["gamma"] == "cv":
            raise ValidationError(
                f"{source} [model]: gamma = 'cv' is not available with solver = 'inductive'; "
                f"give a number (the slack; 1 by default)"
            )
    if out["model"]["anderson"] and out["model"]["solver"] != "admm":
        raise ValidationError(
            f"{source} [model]: anderson = {out['model']['anderson']} accelerates solver = "
            f"'admm' only, got solver = {out['model']['solver']!r}; drop anderson or set "
            f'solver = "admm"'
        )
    if out["model"]["solver"] == "admm" and out["model"]["loss"] != "square":
        raise ValidationError(
            f"{source} [model]: solver = 'admm' fits the square loss only, got loss = "
            f'{out["model"]["loss"]!r}; set loss = "square" or solver = "bcd"'
        )
    ex = out["execution"]
    if ex["dask"] is not None and not (
        ex["dask"] == "slurm" or "://" in ex["dask"] or ":" in ex["dask"]
    ):
        raise ValidationError(
            f"{source} [execution]: dask = {ex['dask']!r} is neither a scheduler address "
            f'(tcp://host:8786) nor "slurm" (a dask-jobqueue SLURMCluster from the Dask '
            f"configuration, see deploy/jobqueue.yaml)"
        )
    if ex["dask"] is not None and ex["executor"] == "inprocess":
        raise ValidationError(
            f"{source} [execution]: dask = {ex['dask']!r} with executor = 'inprocess'; use "
            f'executor = "dask" (or "auto") to run on that cluster, or drop dask'
        )
    opts = out["storage"]["options"]
    if opts is not None and "://" not in out["run"]:
        raise ValidationError(
            f"{source} [storage]: options apply to store URLs only, but run = {out['run']!r} is "
            f"local; drop [storage] options or use a URL such as s3://bucket/runs/x"
        )
    _default_cap(out["model"], out["inductive"])
    return out


#: solver = "spe": working-set sweeps when [model] max_sweeps is not given (embed_spe_lowrank's)
SPE_MAX_SWEEPS = 30


def _default_cap(model: dict, inductive: dict | None = None) -> None:
    """max_sweeps not given: the configured solver's own iteration cap."""
    if model.get("max_sweeps") is None:
        if model["solver"] == "spe":
            model["max_sweeps"] = SPE_MAX_SWEEPS
        elif model["solver"] == "inductive":
            from npkl_dist.solvers.inductive import default_max_iter

            model["max_sweeps"] = default_max_iter((inductive or {}).get("regularizer", "logdet"))
        else:
            model["max_sweeps"] = default_max_iterations(model["solver"])


def with_defaults(cfg: dict) -> dict:
    """A validated configuration with the keys added since it was stored filled in with their
    defaults (runs written by an earlier version resume unchanged)."""
    out = dict(cfg)
    for section, spec in SECTIONS.items():
        out[section] = {**{k: s[1] for k, s in spec.items()}, **(cfg.get(section) or {})}
    _default_cap(out["model"], out["inductive"])
    return out


def read_input(path: str, what: str):
    """Read a configured input file, or ``dataset:NAME`` (scikit-learn's bundled data sets,
    features as shipped: the configuration's ``[graph] scale`` defaults to "standard" for
    them, and the graph stage records it) for ``what`` in features / labels."""

    if path.startswith("dataset:"):
        import numpy as np  # lazy: reading a config stays light
        import sklearn.datasets as skd  # lazy: only for the bundled datasets

        X, y = getattr(skd, f"load_{path.split(':', 1)[1]}")(return_X_y=True)
        return np.asarray(X, np.float64) if what == "features" else np.asarray(y, np.int64)
    return read_features(path) if what == "features" else read_labels(path)


def expand_run(run: str, flow_run_name: str | None = None, when: datetime | None = None) -> str:
    """``{date}`` (UTC, YYYYmmdd-HHMMSS; ``when``, default now) and ``{flow_run}`` in a run
    name: scheduled deployments get a new run each time."""

    if "{" not in run:
        return run
    when = datetime.now(UTC) if when is None else when.astimezone(UTC)
    return run.replace("{date}", when.strftime("%Y%m%d-%H%M%S")).replace(
        "{flow_run}", flow_run_name or "local"
    )


def load_config(path) -> dict:
    """Read and validate a TOML configuration file."""

    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"CONFIG: {str(path)!r} does not exist; pass a TOML file")
    try:
        raw = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"CONFIG: {str(path)!r} is not valid TOML: {exc}") from None
    return validate_config(raw, source=p.name, base_dir=str(p.resolve().parent))


def fit_config(cfg: dict):
    """The library's FitConfig for a validated pipeline configuration."""

    inp, g, m = cfg["input"], cfg["graph"], cfg["model"]
    names = {f.name for f in fields(FitConfig)}
    kw = {k: v for k, v in {**inp, **m}.items() if k in names}
    kw.update(
        knn=g["knn"],
        weighting=g["weighting"],
        knn_method=g["knn_method"],
        scale=g.get("scale", "none"),  # runs stored before [graph] scale
        delta=g["delta"],
        duplicates=g.get("duplicates", "max"),  # runs stored before [graph] duplicates
        clusters=cfg["output"]["clusters"],
        normalize_kernel=cfg["output"]["normalize_kernel"],
        cluster_method=cfg["output"].get("cluster_method"),  # runs stored before the key
        threads=cfg["execution"]["threads"],
    )
    return FitConfig(**kw)


def run_options(cfg: dict, n_points: int | None = None, rank: int | None = None) -> dict:
    """Executor options for the learn stage; ``executor = "auto"`` chooses by size:
    an existing cluster when ``dask`` is given, in-process numba when V and the graph take at
    most a quarter of this machine's memory (the fastest), a local Dask cluster otherwise."""
    ex = dict(cfg["execution"])
    if ex["executor"] == "auto":
        if ex["dask"]:
            ex["executor"] = "dask"
        else:
            ex["executor"] = "inprocess"
            if n_points is not None:
                try:
                    import psutil  # optional (the prefect extra): memory figures only

                    total = psutil.virtual_memory().total
                except ImportError:  # pragma: no cover
                    total = 1 << 40
                need = 8 * n_points * (3 * (rank or 128) + 3 * cfg["graph"]["knn"])
                if need > total // 4:
                    ex["executor"] = "dask"
    return ex
