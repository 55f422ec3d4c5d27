"""Study 4: attention redundancy patterns (Bian et al. 2021), the Five Ws and How.

A redundancy matrix holds the distance between every pair of heads' attention maps on a probe (a set of
inputs), averaged over its sentences (``redundancy.py`` defines the six distances; ``clustering.py``
clusters heads and compares matrices). Cells are (model, probe) pairs; each stores the matrices of every
distance on the two halves of its probe (so the split-half agreement, the probe-noise ceiling of every
comparison, comes for free; the full matrix is the sentence-weighted mean of the halves):

- What/How: the pre-trained model on generic text (``generic``: single sentences pooled from the probe tasks'
  dev splits), every distance; how the distances agree.
- Where: the clusters of the pre-trained model's matrix (``cluster_metric``).
- When: the pre-trained vs the fine-tuned model (``tasks`` x ``seeds``, the fine-tuned models shared with
  studies 1-3) on the same task inputs (``task-<T>`` probes): phase independence.
- Who: the pre-trained model on every probe task's dev inputs and on random token sequences
  (``random-<r>``): task independence.
- Why: the pre-trained model after brief continued masked-LM training with dropout ``p`` (``mlm.py`` says what
  this is and is not), on the generic probe, against seed-to-seed variation at the same ``p``.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .. import batching, clustering, costs, data, glue_workbench, mlm, models, probes, redundancy
from ..config import ParameterError
from ..paths import StudyPaths
from ..results import fingerprint
from .base import Cell, Claim, Cost, Study

NAME = "redundancy_patterns"
# Bump when a code change alters this study's results: old cells then no longer match.
RESULTS_VERSION = 1


@dataclass(frozen=True)
class RedundancyPatternsConfig(glue_workbench.GlueStudyConfig):
    """Parameters of the study (the shared ones, used for the fine-tuned models, in ``glue_workbench.GlueStudyConfig``)."""

    metrics: list[str] = field(default_factory=lambda: list(redundancy.METRICS))  # distances (redundancy.METRICS)
    probe_size: int = 48                        # sentences per probe (two halves: the split-half ceiling)
    probe_max_length: int = 48                  # probe inputs truncated to this many tokens (sentence distances cost ~n^3)
    probe_tasks: list[str] = field(default_factory=lambda: ["all"])  # "Who": tasks whose dev inputs probe the model; ["all"]: every task with local dev data
    random_probes: int = 2                      # probes of random token sequences (seeds 0, 1, ...)
    cluster_metric: str = "js"                  # the distance clustered and drawn in detail
    k_min: int = 2                              # clusters tried (silhouette criterion): k_min..k_max
    k_max: int = 16
    dropouts: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.3])  # "Why": dropout of continued MLM training
    mlm_seeds: list[int] = field(default_factory=lambda: [0, 1])  # MLM runs per dropout (seed-to-seed variation)
    mlm_steps: int = 50                         # encoder steps of continued MLM training
    mlm_head_steps: int = 100                   # steps training a new MLM head alone first (0: the checkpoint has one)
    mlm_lr: float = 1e-4
    mlm_batch_size: int = 16
    mlm_text_size: int = 4000                   # training sentences (pooled GLUE train text, labels unused)
    n_permutations: int = 999                   # Mantel test permutations
    n_null: int = 99                            # shuffled matrices for the silhouette null (cluster structure)
    min_cluster_size: int = 3                   # smaller clusters hold "unique" heads, not structure (see clustering.core_silhouette)

    def check(self) -> None:
        unknown = [m for m in self.metrics if m not in redundancy.METRICS]
        if unknown or not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise ParameterError(f"metrics must be distinct names from {list(redundancy.METRICS)}, got {self.metrics}")
        if self.cluster_metric not in self.metrics:
            raise ParameterError(f"cluster_metric {self.cluster_metric!r} must be one of metrics {self.metrics}")
        if self.probe_max_length < 4:
            raise ParameterError(f"probe_max_length must be >= 4, got {self.probe_max_length}")
        if self.probe_size < 4:
            raise ParameterError(f"probe_size must be >= 4 (two halves of >= 2 sentences), got {self.probe_size}")
        if self.random_probes < 0:
            raise ParameterError(f"random_probes must be >= 0, got {self.random_probes}")
        if self.min_cluster_size < 1:
            raise ParameterError(f"min_cluster_size must be >= 1, got {self.min_cluster_size}")
        if not 2 <= self.k_min <= self.k_max:
            raise ParameterError(f"need 2 <= k_min <= k_max, got {self.k_min}, {self.k_max}")
        if any(not 0.0 <= p < 1.0 for p in self.dropouts) or len(set(self.dropouts)) != len(self.dropouts):
            raise ParameterError(f"dropouts must be distinct values in [0, 1), got {self.dropouts}")
        if self.dropouts and (not self.mlm_seeds or len(set(self.mlm_seeds)) != len(self.mlm_seeds)):
            raise ParameterError("mlm_seeds must be a non-empty list of distinct seeds when dropouts are given")
        for name in ("mlm_steps", "mlm_batch_size", "mlm_text_size"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.mlm_head_steps < 0 or not self.mlm_lr > 0:
            raise ParameterError("mlm_head_steps must be >= 0 and mlm_lr > 0")
        if self.n_permutations < 99 or self.n_null < 19:
            raise ParameterError(f"n_permutations must be >= 99 and n_null >= 19, got {self.n_permutations}, {self.n_null}")
        if self.probe_tasks != ["all"]:
            for t in self.probe_tasks:
                try:
                    data.get_task(t)
                except ValueError as exc:
                    raise ParameterError(f"probe_tasks: {exc}") from None
        super().check()
        n_layers, n_heads = self.head_shape()
        if self.k_max > n_layers * n_heads - 1:
            raise ParameterError(f"k_max must be < the number of heads ({n_layers * n_heads}), got {self.k_max}")


# ------------------------------------------------------------------------------------------------ cells

def resolve_probe_tasks(cfg: RedundancyPatternsConfig) -> list[str]:
    """Tasks whose dev inputs probe the model: ``probe_tasks`` (``["all"]``: every task with local dev data,
    else every task from the hub) plus the fine-tuning tasks (their pre-trained matrices anchor "When")."""
    if cfg.probe_tasks == ["all"]:
        avail = data.task_availability(list(data.TASKS), cfg.data_dir, allow_hub=False)
        names = [t for t in data.TASKS if avail[t]["dev"]]
        if not names and cfg.allow_hub:
            names = list(data.TASKS)
    else:
        names = [data.get_task(t).name for t in cfg.probe_tasks]
    fine = finetuned_tasks(cfg)
    return names + [t for t in fine if t not in names]


def text_tasks(cfg: RedundancyPatternsConfig, split: str) -> list[str]:
    """The probe tasks that have ``split`` locally (QNLI has no local train split); all of them when none
    has it and the hub is allowed."""
    names = resolve_probe_tasks(cfg)
    avail = data.task_availability(names, cfg.data_dir, allow_hub=False)
    local = [t for t in names if avail[t][split]]
    if local:
        return local
    if cfg.allow_hub:
        return names
    raise data.DataUnavailableError(f"no probe task has a local {split} split: {names}")


def finetuned_tasks(cfg: RedundancyPatternsConfig) -> list[str]:
    """The tasks of the fine-tuned models ("When"): ``tasks``, resolved (those without data left out)."""
    return glue_workbench.resolve_tasks(cfg)[0]


def probe_names(cfg: RedundancyPatternsConfig) -> list[str]:
    """Every probe of the pre-trained model, in plan order: generic text, the random token sequences, the dev
    inputs of every probe task."""
    return (["generic"] + [f"random-{r}" for r in range(cfg.random_probes)]
            + [f"task-{t}" for t in resolve_probe_tasks(cfg)])


def plan_cells(cfg: RedundancyPatternsConfig) -> list[Cell]:
    """Every cell of the study: the pre-trained model on every probe, each fine-tuned model on its task's inputs,
    then the MLM-trained models (seed by seed, every dropout) on generic text.

    No cell reads another's result (the analysis compares the matrices afterwards; the fine-tuned models come
    from the cache shared with studies 1-3), so none requires another. Groups: the pre-trained model's cells
    share one loaded model (and the generic probe, whose lengths the random probes copy); the MLM cells of one
    seed share the prepared MLM model (its new head trained once per seed). A fine-tuned model's cell is alone.
    """
    estimate = _CostModel(cfg)
    cells = [Cell({"model": "pretrained", "probe": name}, group=("pretrained",), cost=Cost(estimate.matrices(name)))
             for name in probe_names(cfg)]
    for t in finetuned_tasks(cfg):
        cells += [Cell({"model": f"finetuned-{t}-s{s}", "probe": f"task-{t}"},
                       cost=Cost(glue_workbench.finetune_cost(cfg, t) + estimate.matrices(f"task-{t}")))
                  for s in cfg.seeds]
    for s in cfg.mlm_seeds if cfg.dropouts else []:
        cells += [Cell({"model": f"mlm-p{p:g}-s{s}", "probe": "generic"}, group=("mlm", int(s)),
                       cost=Cost(estimate.mlm(prepare=i == 0) + estimate.matrices("generic")))
                  for i, p in enumerate(cfg.dropouts)]
    return cells


class _CostModel:
    """Estimated FLOPs of the cells (rough, for ``--plan`` and the executors; see :mod:`headprune_utils.costs`).

    A cell's matrices: the model's forward pass over the probe (``probe_size`` sentences at their mean length,
    at most ``probe_max_length`` tokens) plus the distances of every head pair per sentence of ``n`` tokens:
    about 4 n^2 per token-based distance, 2 n^2 per pair and 3 n^3 per head for "dcor", 5 n^3 per pair for
    "procrustes" (a product and its singular values). A fine-tuned model's cell adds its fine-tuning (shared
    through the cache, counted as if trained here). An MLM cell adds ``mlm_steps`` training steps (the encoder,
    and the MLM head at the 15% masked tokens), the first cell of a seed also the ``mlm_head_steps`` steps that
    train the new head (the encoder forward only). Generic text and the MLM text are single sentences of the
    probe tasks (their length estimated on the dev splits).
    """

    MASKED = 0.15  # share of the tokens the MLM loss (and so the vocabulary projection) sees

    def __init__(self, cfg: RedundancyPatternsConfig):
        self.cfg = cfg
        self.shape = costs.Shape.of(cfg.model)
        self.vocab = int(models.load_config(cfg.model).vocab_size)
        self.sentence = float(np.mean([self._sentence_length(t) for t in resolve_probe_tasks(cfg)]))

    def _sentence_length(self, task: str) -> float:
        """Mean word pieces of ONE sentence of the task's dev split (a pair counts as two), specials included."""
        _, length = costs.split_tokens(task, "dev", None, self.cfg.data_dir)
        return (length - 3) / 2 + 2 if data.get_task(task).hub_text_b is not None else length

    def matrices(self, probe: str) -> float:
        cfg = self.cfg
        if probe.startswith("task-"):  # the task's own inputs, pairs as pairs
            n_sent, length = costs.split_tokens(probe[len("task-"):], "dev", cfg.probe_size, cfg.data_dir)
        else:  # generic text, and random sequences of its lengths
            n_sent, length = cfg.probe_size, self.sentence
        n = min(length, cfg.probe_max_length)
        heads = self.shape.n_layers * self.shape.n_heads
        pairs = heads * (heads - 1) / 2
        per_sentence = 0.0
        for m in cfg.metrics:
            if m in redundancy.TOKEN_METRICS:
                per_sentence += 4 * n ** 2 * pairs
            elif m == "dcor":
                per_sentence += 2 * n ** 2 * pairs + 3 * n ** 3 * heads
            else:  # procrustes
                per_sentence += 5 * n ** 3 * pairs
        return costs.forward_flops(self.shape, n_sent * n, n) + n_sent * per_sentence

    def mlm(self, prepare: bool) -> float:
        cfg = self.cfg
        length = min(self.sentence, cfg.max_length, 64)
        d = self.shape.d_model
        head = 2 * d * (d + self.vocab) * self.MASKED  # per token: the MLM head's transform and vocabulary projection
        tokens = cfg.mlm_steps * cfg.mlm_batch_size * length
        flops = costs.train_flops(self.shape, tokens, length) + 3 * head * tokens
        if prepare:
            tokens = cfg.mlm_head_steps * cfg.mlm_batch_size * length
            flops += costs.forward_flops(self.shape, tokens, length) + 3 * head * tokens
        return flops


def study_fingerprint(cfg: RedundancyPatternsConfig, device: torch.device) -> str:
    d = glue_workbench.result_params(cfg, device, RESULTS_VERSION,
                                     drop=("probe_tasks", "random_probes", "dropouts", "mlm_seeds",
                                           "cluster_metric", "k_min", "k_max", "n_permutations", "n_null",
                                           "min_cluster_size"))
    d["probe_data"] = glue_workbench.data_fingerprints(cfg, resolve_probe_tasks(cfg))  # the probes' texts
    return fingerprint(d)


class Context(glue_workbench.Workbench):
    """The Workbench plus the probes and the prepared MLM models of one process."""

    def __init__(self, cfg: RedundancyPatternsConfig, device: torch.device, cache_dir):
        super().__init__(cfg, device, cache_dir)
        self._probes: dict[str, batching.Encoded] = {}
        self._pretrained = None
        self._mlm_base: tuple[int, torch.nn.Module] | None = None

    def probe(self, name: str) -> batching.Encoded:
        cfg = self.cfg
        if name not in self._probes:
            if name == "generic":
                enc = probes.glue_text(self.tokenizer, text_tasks(cfg, "dev"), "dev", cfg.probe_size, cfg.subset_seed,
                                       cfg.probe_max_length, cfg.data_dir, cfg.allow_hub)
            elif name.startswith("random-"):
                enc = probes.random_tokens(self.tokenizer, self.probe("generic").lengths, int(name.split("-", 1)[1]))
            elif name.startswith("task-"):
                enc = probes.task_text(self.tokenizer, name.split("-", 1)[1], "dev", cfg.probe_size, cfg.subset_seed,
                                       cfg.probe_max_length, cfg.data_dir, cfg.allow_hub)
            else:
                raise ValueError(f"unknown probe {name!r}")
            self._probes[name] = enc
        return self._probes[name]

    def pretrained(self):
        if self._pretrained is None:
            self._pretrained = models.load_classifier(self.cfg.model, 2, device=self.device, seed=0).eval()
        return self._pretrained

    def mlm_model(self, dropout: float, seed: int):
        """The MLM-trained encoder of (dropout, seed) and its training record."""
        cfg = self.cfg
        text = probes.glue_text(self.tokenizer, text_tasks(cfg, "train"), "train", cfg.mlm_text_size, cfg.subset_seed,
                                min(cfg.max_length, 64), cfg.data_dir, cfg.allow_hub) if "mlm_text" not in self._probes \
            else self._probes["mlm_text"]
        self._probes["mlm_text"] = text
        if self._mlm_base is None or self._mlm_base[0] != seed:
            base, head_hist = mlm.prepare_mlm(cfg.model, text, self.tokenizer, seed, cfg.mlm_head_steps,
                                              cfg.mlm_batch_size, device=self.device, progress=cfg.progress)
            self._mlm_base = (seed, base, head_hist)
        model = copy.deepcopy(self._mlm_base[1])
        hist = mlm.continue_mlm(model, text, self.tokenizer, dropout, cfg.mlm_steps, seed, cfg.mlm_batch_size,
                                cfg.mlm_lr, progress=cfg.progress)
        return model.base_model, {**self._mlm_base[2], **{k: v for k, v in hist.items() if k != "loss"}}


def _halves(enc: batching.Encoded) -> tuple[batching.Encoded, batching.Encoded]:
    n = len(enc) // 2

    def part(sl):
        return batching.Encoded(enc.input_ids[sl], enc.token_type_ids[sl] if enc.token_type_ids else None,
                                enc.labels[sl], enc.pad_id)

    return part(slice(0, n)), part(slice(n, None))


def probe_matrices(model, enc: batching.Encoded, metrics: list[str], device) -> dict:
    """{metric: {"a": upper triangle on the first half, "b": on the second}, "n_a", "n_b"} (lists, 7 decimals)."""
    out: dict = {}
    for half_name, half in zip(("a", "b"), _halves(enc)):
        mats = redundancy.redundancy_matrices(model, glue_workbench.batches(half, device), metrics)
        for m in metrics:
            out.setdefault(m, {})[half_name] = np.round(clustering.upper(mats[m]), 7).tolist()
        out[f"n_{half_name}"] = len(half)
    return out


def run_cell(ctx: Context, cell: dict) -> dict:
    t0 = time.perf_counter()
    name, extra = cell["model"], {}
    if name == "pretrained":
        model = ctx.pretrained()
    elif name.startswith("finetuned-"):
        task, s = name[len("finetuned-"):].rsplit("-s", 1)
        model = ctx.full_model(task, int(s))[0]
    elif name.startswith("mlm-"):
        p, s = name[len("mlm-p"):].rsplit("-s", 1)
        model, extra = ctx.mlm_model(float(p), int(s))
    else:
        raise ValueError(f"unknown model {name!r}")
    mats = probe_matrices(model, ctx.probe(cell["probe"]), list(ctx.cfg.metrics), ctx.device)
    return {"matrices": mats, **extra, "seconds": time.perf_counter() - t0}


class RedundancyPatterns(Study):
    """Study 4 (see the module docstring)."""

    name = NAME
    notebook = "04_redundancy_patterns.ipynb"
    Config = RedundancyPatternsConfig
    claims = (
        Claim("bian.what_token", "Bian et al. 2021 (What/How)",
              "Token-based distances between heads' attention maps agree with each other: the same heads are redundant.",
              quantity="Mantel r between the pre-trained model's matrices of every two token-based distances (generic text)",
              precondition="at least two token-based distances among the metrics"),
        Claim("bian.what_sentence", "Bian et al. 2021 (What/How)",
              "Sentence-based distances between heads' attention maps agree with each other.",
              quantity="Mantel r between the pre-trained model's matrices of every two sentence-based distances (generic text)",
              precondition="at least two sentence-based distances among the metrics"),
        Claim("bian.what_token_sentence", "Bian et al. 2021 (What/How)",
              "Token-based and sentence-based distances agree.",
              quantity="Mantel r between a token-based and a sentence-based distance's matrices (generic text)",
              precondition="at least one distance of each kind among the metrics"),
        Claim("bian.where", "Bian et al. 2021 (Where)",
              "Heads form clear clusters of mutually redundant heads.",
              quantity="silhouette of the groups of the cluster_metric matrix (pre-trained, generic text), against the "
                       "same criterion on matrices shuffled over head pairs",
              precondition="more heads than k_max"),
        Claim("bian.when", "Bian et al. 2021 (When)",
              "The redundancy patterns are the same before and after fine-tuning (phase-independent).",
              quantity="Mantel r between the pre-trained and each fine-tuned model's matrix on the task's inputs, "
                       "beside the probe's split-half ceiling",
              precondition="the task probe's split-half agreement leaves room to tell alike from not"),
        Claim("bian.who_tasks", "Bian et al. 2021 (Who)",
              "The redundancy patterns are the same across GLUE tasks (task-agnostic).",
              quantity="Mantel r between the pre-trained model's matrices on every two task probes",
              precondition="at least two probe tasks"),
        Claim("bian.who_random", "Bian et al. 2021 (Who)",
              "The redundancy patterns are the same on random token sequences as on task inputs.",
              quantity="Mantel r between the pre-trained model's matrices on a random-token probe and on a task probe",
              precondition="at least one random probe and one task probe"),
        Claim("bian.why", "Bian et al. 2021 (Why)",
              "Dropout changes redundancy (the paper varies pre-training dropout; here, continued masked-LM training).",
              quantity="OLS slope of the mean distance on the dropout ratio; mean |difference| between dropout ratios "
                       "against between seeds",
              precondition="at least two dropout ratios (and two MLM seeds for the between-seed comparison)"),
    )

    def plan(self, cfg: RedundancyPatternsConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: RedundancyPatternsConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def context(self, cfg: RedundancyPatternsConfig, device, paths: StudyPaths) -> Context:
        return Context(cfg, device, paths.finetuned_cache)

    def run(self, ctx: Context, cells: list[Cell], inputs):
        for cell in cells:
            yield cell, run_cell(ctx, dict(cell.axes))

    def run_params(self, cfg: RedundancyPatternsConfig) -> dict:
        return {"tasks_run": finetuned_tasks(cfg), "probe_tasks_run": resolve_probe_tasks(cfg)}


STUDY = RedundancyPatterns()


# ---------------------------------------------------------------------------------------------- analysis

def _square(upper: list[float], n: int) -> np.ndarray:
    out = np.zeros((n, n))
    out[np.triu_indices(n, k=1)] = upper
    return out + out.T


class Matrices:
    """The cells' matrices: ``get(model, probe, metric, half="full"|"a"|"b") -> [N, N]``."""

    def __init__(self, table: pd.DataFrame, shape: tuple[int, int]):
        self.shape = shape
        self.n = shape[0] * shape[1]
        self._cells = {(r.model, r.probe): r.matrices for r in table.itertuples()}
        self.extra = table.drop(columns=["matrices"]).set_index(["model", "probe"])

    def keys(self) -> list[tuple[str, str]]:
        return list(self._cells)

    def get(self, model: str, probe: str, metric: str, half: str = "full") -> np.ndarray:
        c = self._cells[(model, probe)]
        if half in ("a", "b"):
            return _square(c[metric][half], self.n)
        wa, wb = c["n_a"], c["n_b"]
        return (wa * _square(c[metric]["a"], self.n) + wb * _square(c[metric]["b"], self.n)) / (wa + wb)

    def by_metric(self, model: str, probe: str, metrics: list[str]) -> dict[str, np.ndarray]:
        """``{metric: [N, N]}``: the full matrices of one cell, every distance in ``metrics``."""
        return {m: self.get(model, probe, m) for m in metrics}

    def split_half(self, model: str, probe: str, metric: str) -> float:
        """Mantel r between the two halves of the probe: the ceiling of any comparison on this probe."""
        return clustering.mantel(self.get(model, probe, metric, "a"), self.get(model, probe, metric, "b"), n_perm=0)[0]


def metric_agreement(mats: Matrices, metrics: list[str], n_perm: int, model: str = "pretrained",
                     probe: str = "generic") -> pd.DataFrame:
    """Mantel (Pearson and Spearman) between the matrices of every two distances, and each one's split-half r."""
    rows = []
    for i, a in enumerate(metrics):
        for b in metrics[i:]:
            if a == b:
                r, p = mats.split_half(model, probe, a), np.nan
                rows.append({"metric_a": a, "metric_b": b, "pearson_r": r, "spearman_r": np.nan, "mantel_p": p,
                             "what": "split-half agreement of one distance"})
                continue
            A, B = mats.get(model, probe, a), mats.get(model, probe, b)
            r, p = clustering.mantel(A, B, n_perm)
            rs, _ = clustering.mantel(A, B, n_perm=0, method="spearman")
            rows.append({"metric_a": a, "metric_b": b, "pearson_r": r, "spearman_r": rs, "mantel_p": p,
                         "what": "two distances"})
    return pd.DataFrame(rows)


def summary_stats(mats: Matrices, metrics: list[str]) -> pd.DataFrame:
    """Per cell and distance: mean, median and spread of the off-diagonal distances (lower = more redundant)."""
    rows = []
    for model, probe in mats.keys():
        for m in metrics:
            u = clustering.upper(mats.get(model, probe, m))
            rows.append({"model": model, "probe": probe, "metric": m, "mean": float(u.mean()),
                         "median": float(np.median(u)), "sd": float(u.std()), "min": float(u.min()),
                         "max": float(u.max())})
    return pd.DataFrame(rows)


def where(mats: Matrices, cfg: RedundancyPatternsConfig, model: str = "pretrained", probe: str = "generic"):
    """(clusters, a one-row table about them, the criterion by k).

    Average-linkage clustering of the ``cluster_metric`` matrix; k by the silhouette of the clusters of at
    least ``min_cluster_size`` heads (``clustering.core_silhouette``: smaller clusters hold "unique" heads,
    listed, counting 0). The table says how clear the structure is (that silhouette against the same
    criterion on ``n_null`` matrices of the same distances shuffled over head pairs), how the clusters align
    with layers (adjusted Rand index with the heads' layers; share of within-cluster pairs in the same layer
    against all pairs) and with spectral clustering at the same number of groups (on the grouped heads).
    """
    d = mats.get(model, probe, cfg.cluster_metric)
    k_range = (cfg.k_min, cfg.k_max)
    cl = clustering.cluster_heads(d, k_range=k_range, min_size=cfg.min_cluster_size)
    null = clustering.silhouette_null(d, k_range, n_perm=cfg.n_null, min_size=cfg.min_cluster_size)
    n_layers, n_heads = mats.shape
    core = cl.core
    heads = np.flatnonzero(core)
    layer = np.repeat(np.arange(n_layers), n_heads)[heads]
    lab = cl.labels[heads]
    dc = d[np.ix_(heads, heads)]
    iu = np.triu_indices(len(heads), k=1)
    same_layer = (layer[:, None] == layer[None, :])[iu]
    within = (lab[:, None] == lab[None, :])[iu]
    spectral = clustering.spectral_heads(dc, cl.n_groups) if cl.n_groups >= 2 else lab
    unique = [f"{h // n_heads}.{h % n_heads}" for h in np.flatnonzero(~core)]
    null_ok = np.isfinite(null)
    sil = cl.silhouette
    info = {
        "metric": cfg.cluster_metric, "min_cluster_size": cfg.min_cluster_size, "k_cut": cl.k, "n_groups": cl.n_groups,
        "group_sizes": " ".join(str(int(s)) for s in sorted(cl.sizes()[cl.sizes() >= cl.min_size], reverse=True)),
        "n_unique_heads": len(unique), "unique_heads": " ".join(unique) or "none",
        "silhouette": sil, "silhouette_null_mean": float(np.nanmean(null)) if null_ok.any() else np.nan,
        # a shuffled matrix without two groups (NaN) counts as not reaching the observed value
        "silhouette_null_p": float((1 + np.sum(null[null_ok] >= sil - 1e-12)) / (1 + len(null))) if np.isfinite(sil) else np.nan,
        "ari_with_layer": clustering.adjusted_rand(lab, layer),
        "same_layer_share_within_clusters": float(same_layer[within].mean()) if within.any() else np.nan,
        "same_layer_share_all_pairs": float(same_layer.mean()),
        "ari_hierarchical_vs_spectral": clustering.adjusted_rand(lab, spectral),
        "mean_within_cluster_distance": float(dc[iu][within].mean()) if within.any() else np.nan,
        "mean_between_cluster_distance": float(dc[iu][~within].mean()) if (~within).any() else np.nan,
    }
    crit = pd.DataFrame({"k": list(cl.silhouette_by_k), "silhouette": list(cl.silhouette_by_k.values())})
    return cl, pd.DataFrame([info]), crit


def group_labels(cl: clustering.Clusters) -> np.ndarray:
    """``[N]`` cluster id per flat head id, renumbered 1.. over the groups; 0 for unique heads."""
    out = np.zeros(len(cl.labels), dtype=int)
    core = cl.core
    ids = {c: i + 1 for i, c in enumerate(np.unique(cl.labels[core]))}
    out[core] = [ids[c] for c in cl.labels[core]]
    return out


def _k(d: np.ndarray, cfg: RedundancyPatternsConfig) -> int:
    """The number of groups (clusters of >= ``min_cluster_size`` heads) chosen as in :func:`where`."""
    return clustering.cluster_heads(d, k_range=(cfg.k_min, cfg.k_max), order=False, min_size=cfg.min_cluster_size).n_groups


def when(mats: Matrices, cfg: RedundancyPatternsConfig, tasks: list[str] | None = None) -> pd.DataFrame:
    """Per fine-tuned model and distance: Mantel r (p) between the pre-trained and the fine-tuned matrix on the
    same task inputs, with the probe's split-half ceiling (pre-trained). ``tasks``: those of the fine-tuned
    models (None: the planned ones, :func:`finetuned_tasks`)."""
    rows = []
    for t in finetuned_tasks(cfg) if tasks is None else tasks:
        for s in cfg.seeds:
            ft = f"finetuned-{t}-s{s}"
            for m in cfg.metrics:
                r, p = clustering.mantel(mats.get("pretrained", f"task-{t}", m), mats.get(ft, f"task-{t}", m),
                                         cfg.n_permutations)
                rows.append({"task": t, "seed": s, "metric": m, "mantel_r": r, "mantel_p": p,
                             "split_half_r": mats.split_half("pretrained", f"task-{t}", m)})
    return pd.DataFrame(rows)


def who(mats: Matrices, cfg: RedundancyPatternsConfig, names: list[str] | None = None) -> pd.DataFrame:
    """Mantel r (p) between the pre-trained model's matrices on every two probes, per distance. ``names``: the
    probes compared (None: every planned one, :func:`probe_names`)."""
    names = probe_names(cfg) if names is None else names
    rows = []
    for m in cfg.metrics:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                r, p = clustering.mantel(mats.get("pretrained", a, m), mats.get("pretrained", b, m), cfg.n_permutations)
                rows.append({"metric": m, "probe_a": a, "probe_b": b, "mantel_r": r, "mantel_p": p})
    return pd.DataFrame(rows)


def why(mats: Matrices, cfg: RedundancyPatternsConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, tests). Per MLM run and distance: the mean off-diagonal distance (lower = more redundant),
    the Mantel r with the pre-trained model's matrix, the clusters' k. Tests per distance: the OLS slope of
    the mean distance on the dropout ratio (runs as points) and the mean |difference| of mean distance between
    runs of the same seed at different ratios against runs of different seeds at the same ratio. Both empty
    when no dropout ratio is run."""
    if not cfg.dropouts:
        return pd.DataFrame(), pd.DataFrame()
    runs = []
    for p in cfg.dropouts:
        for s in cfg.mlm_seeds:
            name = f"mlm-p{p:g}-s{s}"
            for m in cfg.metrics:
                d = mats.get(name, "generic", m)
                runs.append({"dropout": p, "seed": s, "metric": m, "mean_distance": float(clustering.upper(d).mean()),
                             "mantel_r_vs_pretrained": clustering.mantel(d, mats.get("pretrained", "generic", m), 0)[0],
                             "k": _k(d, cfg) if m == cfg.cluster_metric else np.nan,
                             "mlm_loss_last": float(mats.extra.loc[(name, "generic"), "loss_last"])})
    runs = pd.DataFrame(runs)
    base = {m: float(clustering.upper(mats.get("pretrained", "generic", m)).mean()) for m in cfg.metrics}
    runs["pretrained_mean_distance"] = runs["metric"].map(base)
    tests = []
    for m, g in runs.groupby("metric"):
        row = {"metric": m, "n_runs": len(g)}
        if g["dropout"].nunique() > 1:
            fit = sps.linregress(g["dropout"], g["mean_distance"])
            row.update({"slope_per_unit_dropout": fit.slope, "slope_p": fit.pvalue,
                        "slope_ci_low": fit.slope - 1.96 * fit.stderr, "slope_ci_high": fit.slope + 1.96 * fit.stderr})
            by = g.pivot(index="seed", columns="dropout", values="mean_distance")
            between_p = [abs(by[a] - by[b]).mean() for i, a in enumerate(by.columns) for b in by.columns[i + 1:]]
            between_s = ([abs(by.iloc[i] - by.iloc[j]).mean() for i in range(len(by)) for j in range(i + 1, len(by))]
                         if len(by) > 1 else [np.nan])
            row.update({"mean_abs_diff_between_dropouts": float(np.mean(between_p)),
                        "mean_abs_diff_between_seeds": float(np.mean(between_s)) if len(by) > 1 else np.nan})
        tests.append(row)
    return runs, pd.DataFrame(tests)


def verdicts(agree: pd.DataFrame, where_info: pd.DataFrame, when_t: pd.DataFrame, who_t: pd.DataFrame,
             why_tests: pd.DataFrame, cfg: RedundancyPatternsConfig, alpha: float = 0.05, strong: float = 0.8) -> pd.DataFrame:
    """"claim - our result - verdict" rows. "Alike" = Mantel p < alpha for every comparison; "the same" =
    also mean r >= ``strong`` (stated, and beside the split-half ceiling)."""
    rows = []

    def alike(t: pd.DataFrame) -> str:
        if t.empty:
            return "not run"
        sig = bool((t["mantel_p"] < alpha).all())
        if sig and t["mantel_r"].mean() >= strong:
            return "supported"
        return "partly supported (alike but not the same)" if sig else "not supported"

    pairs = agree[agree["what"] == "two distances"].rename(columns={"pearson_r": "mantel_r"})
    kind = {m: "token" if m in redundancy.TOKEN_METRICS else "sentence" for m in redundancy.METRICS}
    families = (("token-based distances agree with each other", "token", "token"),
                ("sentence-based distances agree with each other", "sentence", "sentence"),
                ("token-based and sentence-based distances agree", "token", "sentence"))
    for claim, ka, kb in families:
        t = pairs[[{kind[a], kind[b]} == {ka, kb} for a, b in zip(pairs["metric_a"], pairs["metric_b"])]]
        if t.empty:
            continue
        rows.append({"W": "What/How", "claim": f"{claim} (the same heads redundant; our check, the paper uses both kinds)",
                     "our result": "; ".join(f"{r.metric_a}~{r.metric_b} r={r.mantel_r:.2f} (p={r.mantel_p:.3g})"
                                             for r in t.itertuples()),
                     "verdict": alike(t)})
    w = where_info.iloc[0]
    beats_null = bool(w["silhouette_null_p"] < alpha) if np.isfinite(w["silhouette_null_p"]) else False
    sil = w["silhouette"]
    if beats_null and sil > 0.5:
        where_v = "supported (a reasonable structure: silhouette above 0.5)"
    elif beats_null and sil > 0.25:
        where_v = "partly supported (real but weak structure: silhouette 0.25-0.5)"
    elif beats_null:
        where_v = "partly supported (more structure than chance, but no substantial structure: silhouette below 0.25)"
    else:
        where_v = "not supported (no more structure than the shuffled distances)"
    rows.append({"W": "Where", "claim": "heads form clear clusters of mutually redundant heads",
                 "our result": (f"{w['metric']}: {w['n_groups']} groups of >= {w['min_cluster_size']} heads (sizes "
                                f"{w['group_sizes']}) and {w['n_unique_heads']} unique head(s) ({w['unique_heads']}); "
                                f"silhouette {w['silhouette']:.2f} (shuffled-distance null {w['silhouette_null_mean']:.2f}, "
                                f"p = {w['silhouette_null_p']:.3g}); within/between-group distance "
                                f"{w['mean_within_cluster_distance']:.3f}/{w['mean_between_cluster_distance']:.3f}; "
                                f"ARI with layers {w['ari_with_layer']:.2f}; hierarchical vs spectral ARI "
                                f"{w['ari_hierarchical_vs_spectral']:.2f}"),
                 "verdict": where_v + "; thresholds of Kaufman & Rousseeuw, null p < 0.05"})
    rows.append({"W": "When", "claim": "the patterns are the same before and after fine-tuning (phase-independent)",
                 "our result": "; ".join(f"{m}: r={g['mantel_r'].mean():.2f} (min {g['mantel_r'].min():.2f}, split-half "
                                         f"{g['split_half_r'].mean():.2f}), max p={g['mantel_p'].max():.3g}"
                                         for m, g in when_t.groupby("metric")),
                 "verdict": alike(when_t)})
    tasks_only = who_t[who_t["probe_a"].str.startswith("task-") & who_t["probe_b"].str.startswith("task-")]
    vs_random = who_t[(who_t["probe_a"].str.startswith("random-") ^ who_t["probe_b"].str.startswith("random-"))
                      & ~(who_t["probe_a"] == "generic") & ~(who_t["probe_b"] == "generic")]
    for name, t in (("across GLUE tasks (task-agnostic)", tasks_only), ("on random token sequences vs task inputs", vs_random)):
        rows.append({"W": "Who", "claim": f"the patterns are the same {name}",
                     "our result": "; ".join(f"{m}: mean r={g['mantel_r'].mean():.2f} (min {g['mantel_r'].min():.2f}), "
                                             f"max p={g['mantel_p'].max():.3g}" for m, g in t.groupby("metric")),
                     "verdict": alike(t)})
    if not why_tests.empty and "slope_p" in why_tests:
        res = "; ".join(f"{r.metric}: slope {r.slope_per_unit_dropout:+.4f} per unit p (p={r.slope_p:.3g}), |diff| between "
                        f"dropouts {r.mean_abs_diff_between_dropouts:.4f} vs between seeds {r.mean_abs_diff_between_seeds:.4f}"
                        for r in why_tests.itertuples())
        moved = why_tests[(why_tests["slope_p"] < alpha)
                          & (why_tests["mean_abs_diff_between_dropouts"] > why_tests["mean_abs_diff_between_seeds"])]
        v = (f"supported for {len(moved)}/{len(why_tests)} distances" if len(moved) else "not supported") + \
            " in continued MLM training (not pre-training)"
        rows.append({"W": "Why", "claim": "dropout changes redundancy (Bian et al.: pre-training dropout)",
                     "our result": res, "verdict": v})
    return pd.DataFrame(rows)
