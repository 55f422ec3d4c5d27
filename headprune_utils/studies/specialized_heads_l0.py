"""Study 6: head importance, specialized heads and L0-gate pruning (Voita et al. 2019) on BERT-family encoders.

Cells (keyed, resumable; :func:`plan_cells`):

- ``{"kind": "roles", "task": "pretrained"}``: the specialized-head measurements of the PRE-TRAINED encoder
  (the reference: are roles a property of the encoder, kept through fine-tuning?).
- ``{"kind": "scores", "task", "seed"}``: every head score of the fine-tuned full model of (task, seed)
  (``GlueContext.full_model``, shared with studies 1-5 through the fine-tuned model cache) on ``score_size``
  examples of the task's TRAINING subset (gradient importance, first-order relevance, ablation importance,
  confidence with every key and without the special-token keys, entropy: ``head_scores``, ``importance``), its
  dev score, and its specialized-head measurements on
  UD English-EWT. Roles are measured on each fine-tuned model because the question is whether the heads the L0
  gates of THAT model keep are the specialized ones; the pre-trained cell shows how much fine-tuning moved them.
- ``{"kind": "l0", "task", "seed", "lam"}``: Hard Concrete gates trained on the fine-tuned model (frozen by
  default) with ``task loss + lam * expected open gates``; the deterministic 0/1 mask, its dev score, the
  final ``log_alpha`` and open probabilities; and the baselines at the SAME head count on the same model
  without retraining: ``n_random_baselines`` random masks and the least-important heads by gradient importance
  (``strategies.importance_mask``), evaluated together (``mask_sweep``). An L0 cell REQUIRES the scores cell of
  its (task, seed) (the gradient importance and the full model's score come from it, through ``inputs``); the
  L0 cells of one (task, seed) form a group (one process: the model and the gates' batches made once).

Measurements are stored raw (shares, accuracies, p-values); the role thresholds are analysis parameters
(:mod:`headprune_utils.studies.role_survival`, applied in :mod:`.specialized_heads_l0_analysis`). The claims are data in
:mod:`.specialized_heads_l0_claims` (``CLAIMS``, this study's ``claims``).
"""
from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from headprune_utils.tasks import batching, data
from headprune_utils.measure import costs, head_scores, importance, mask_sweep, specialized
from headprune_utils.studies import glue_workbench
from headprune_utils.studies.role_survival import l0_cap
from headprune_utils.model import masks, models, strategies
from headprune_utils.train import training
from headprune_utils.model.attention import attention_maps
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.model.gates import Ablation, as_ablation
from headprune_utils.train.hard_concrete import HardConcreteGates, l0_train
from headprune_utils.analysis.preconditions import gates_settled
from headprune_utils.tasks.metrics import main_score
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import cell_key, fingerprint
from headprune_utils.studies.base import (CORRELATION, GLUE_METRIC_RANGES, NON_NEGATIVE, Cell, Cost, Study,
                                            mask_count_problem)
from headprune_utils.studies.specialized_heads_l0_analysis import ( # the analysis: pure functions over the table
    CONFIDENCES, MEASURES, PRETRAINED_TASK, RARE_SHARES, ROLE_NAMES, SCORES, VOITA_FRACTION, agreement_summary,
    curve_contrasts, full_scores, head_score_table, in_verdict_metric, l0_curve, paper_share_rows, pretrained_role_heads,
    rare_criterion_counts,
    rare_criterion_survival, role_counts, role_map_data, role_stability, role_table, roles_at_budget, scale,
    score_agreement, score_map_data, scores_recorded, survival_auc_per_model, survival_heads, survival_map_data,
    survival_tests, survival_with_roles, sweep_summary, verdicts,
)
from headprune_utils.studies.specialized_heads_l0_claims import CLAIMS, ROLE_CLAIMS  # the claims: data

__all__ = [
    "NAME", "STUDY", "SpecializedHeadsL0", "SpecializedHeadsL0Config", "Context", "plan_cells", "scores_axes",
    "study_fingerprint", "role_thresholds", "head_roles", "gate_batches", "run_roles_cell", "run_scores_cell",
    "run_l0_cell",
    # the claims (specialized_heads_l0_claims) and the analysis (specialized_heads_l0_analysis, role_survival),
    # re-exported so the notebook needs one module
    "CLAIMS", "ROLE_CLAIMS", "CONFIDENCES", "MEASURES", "PRETRAINED_TASK", "RARE_SHARES", "ROLE_NAMES", "SCORES",
    "VOITA_FRACTION", "agreement_summary", "curve_contrasts", "full_scores", "head_score_table", "l0_curve",
    "pretrained_role_heads", "rare_criterion_counts", "rare_criterion_survival", "role_counts", "role_map_data",
    "role_stability", "role_table", "roles_at_budget", "paper_share_rows", "scale", "score_agreement", "score_map_data",
    "scores_recorded", "survival_auc_per_model", "survival_heads", "survival_map_data", "survival_tests",
    "survival_with_roles", "sweep_summary", "verdicts",
]

NAME = "specialized_heads_l0"
# Bump when a code change alters this study's results: old cells then no longer match.
# 2: the scores cells also record confidence without the special-token keys (``confidence_no_special_keys``).
RESULTS_VERSION = 2
ANALYSIS_ONLY = ("positional_threshold", "syntactic_margin", "rare_share", "n_permutations")
# UD English-EWT (v2): sentences and mean words per sentence of each split, for the planned cost only
UD_SPLITS = {"train": (12543, 16.3), "dev": (2001, 12.6), "test": (2077, 12.1)}


@dataclass(frozen=True)
class SpecializedHeadsL0Config(glue_workbench.GlueStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.GlueStudyConfig``); defaults = the quick profile."""

    ablation: Ablation = "zero"                 # what a gated-off head outputs in the scores and the L0 gates: zero, Voita et al.'s (see semantics.py)
    score_size: int | None = 128                # training examples for gradient importance, relevance, confidence, entropy (None: all)
    ablation_size: int | None = 24              # training examples for the ablation importance (one evaluation per head; None: all)
    ablation_measure: Literal["loss", "score"] = "loss"  # ablation importance as the increase of the task loss, or the drop of the task score
    relevance_target: Literal["loss", "top_logit"] = "top_logit"  # what first-order relevance differentiates (Voita et al.: the top-1 logit)
    ud_split: Literal["train", "dev", "test"] = "dev"  # UD English-EWT split the roles are measured on
    ud_sentences: int | None = 200              # its first sentences (None: all)
    relations: list[str] = field(default_factory=lambda: ["nsubj", "obj", "amod", "advmod"])  # UD relations of the syntactic heads
    rare_corpus: Literal["ud_train", "task_train"] = "ud_train"  # word-piece frequencies: UD EWT train, or the task's training subset
    lambdas: list[float] = field(default_factory=lambda: [0.003, 0.01, 0.03, 0.08])  # L0 penalty per open gate (loss units); larger: fewer heads
    l0_steps: int | None = 20                   # optimiser steps of the gates (None: l0_epochs passes over the training subset)
    l0_epochs: int = 1                          # passes over the training subset when l0_steps is None
    l0_max_steps: int | None = None             # set: train the gates past l0_steps until they settled (the rule the
                                                # claims' gate reads: analysis.preconditions.gates_settled), at most this
                                                # many steps; None: exactly l0_steps
    l0_batch_size: int = 8                      # examples per gate step
    l0_lr: float = 0.15                         # Adam on log_alpha
    temperature: float = 0.33                   # Hard Concrete beta (Voita et al.)
    stretch_low: float = -0.1                   # stretch interval (gamma, zeta) = (stretch_low, stretch_high)
    stretch_high: float = 1.1
    l0_train_model: bool = False                # False: only the gates train (the model frozen, cheap); True: the model too
    l0_model_lr: float = 2e-5                   # the model's learning rate when l0_train_model
    n_random_baselines: int = 1                 # random masks per L0 mask, at its head count
    positional_threshold: float = 0.9           # analysis: positional if max attention on prev/next for at least this share of tokens
    syntactic_margin: float = 0.10              # analysis: syntactic if accuracy beats the best fixed-offset baseline by at least this
    rare_share: float = specialized.RARE_SHARE  # analysis: rare-word if its max attention is on the sentence's least frequent token in MORE than this share of queries (0.5: Voita et al.'s definition, fixed from the paper)
    n_permutations: int = 10000                 # analysis: permutations of the survival test

    def check(self) -> None:
        check_fields(self)
        for name in ("score_size", "ablation_size", "ud_sentences", "l0_steps"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParameterError(f"{name} must be a positive integer or None, got {v}")
        for name in ("l0_epochs", "l0_batch_size", "n_random_baselines", "n_permutations"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.l0_max_steps is not None and (self.l0_steps is None or self.l0_max_steps < self.l0_steps):
            raise ParameterError(f"l0_max_steps ({self.l0_max_steps}) needs l0_steps (the fewest steps the gates "
                                 f"train, {self.l0_steps}) and must be >= it")
        if not self.lambdas or len(set(self.lambdas)) != len(self.lambdas) or any(not l >= 0 for l in self.lambdas):
            raise ParameterError(f"lambdas must be distinct numbers >= 0, got {self.lambdas}")
        if not self.relations or len(set(self.relations)) != len(self.relations) or not all(self.relations):
            raise ParameterError(f"relations must be distinct non-empty UD relation names, got {self.relations}")
        for name in ("l0_lr", "l0_model_lr", "temperature"):
            if not getattr(self, name) > 0:
                raise ParameterError(f"{name} must be > 0, got {getattr(self, name)}")
        if not (self.stretch_low < 0 and self.stretch_high > 1):
            raise ParameterError(f"need stretch_low < 0 < 1 < stretch_high, got ({self.stretch_low}, {self.stretch_high})")
        if not 0 < self.positional_threshold <= 1:
            raise ParameterError(f"positional_threshold must be in (0, 1], got {self.positional_threshold}")
        if not 0 < self.rare_share < 1:
            raise ParameterError(f"rare_share must be in (0, 1), got {self.rare_share}")
        if not self.syntactic_margin >= 0:
            raise ParameterError("syntactic_margin must be >= 0")
        super().check()
        # the UD files, now: a missing treebank must stop the run before any model is loaded
        for split in {self.ud_split, *(["train"] if self.rare_corpus == "ud_train" else [])}:
            path = ud_path(self.data_dir, split)
            if path is None or not path.is_file():
                where = "no data root is set" if path is None else f"{path} is missing"
                raise ParameterError(f"UD English-EWT {split} split needed (ud_split / rare_corpus), but {where}: set "
                                     "HEADPRUNE_DATA_DIR (or data_dir) to a folder holding "
                                     "ud_english_ewt/en_ewt-ud-{train,dev,test}.conllu")


def ud_path(data_dir, split: str):
    """``<data root>/ud_english_ewt/en_ewt-ud-<split>.conllu`` (None without a data root)."""
    root = data.resolve_data_dir(data_dir)
    return None if root is None else root / "ud_english_ewt" / f"en_ewt-ud-{split}.conllu"


def role_thresholds(cfg: SpecializedHeadsL0Config) -> dict:
    """The keyword arguments of :func:`role_table` from the parameters."""
    return {"positional_threshold": cfg.positional_threshold, "syntactic_margin": cfg.syntactic_margin,
            "rare_share": cfg.rare_share}


def scores_axes(task: str, seed: int) -> dict:
    """The key of the scores cell of (task, seed), which the L0 cells of that model require."""
    return {"kind": "scores", "task": task, "seed": int(seed)}


def plan_cells(cfg: SpecializedHeadsL0Config) -> list[Cell]:
    """The pre-trained roles cell, then per (task, seed) its scores cell and one L0 cell per lambda (ascending)."""
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    shape = costs.Shape.of(cfg.model)
    cells = [Cell({"kind": "roles", "task": "pretrained"}, cost=Cost(roles_cost(cfg, shape)))]
    for task in tasks:
        cost_scores, cost_l0 = Cost(scores_cost(cfg, task, shape)), Cost(l0_cost(cfg, task, shape))
        for seed in cfg.seeds:
            scores = Cell(scores_axes(task, seed), cost=cost_scores)
            cells.append(scores)
            for lam in sorted(cfg.lambdas):
                cells.append(Cell({"kind": "l0", "task": task, "seed": int(seed), "lam": float(lam), **l0_cap(cfg)},
                                  requires=(scores.key,), group=(task, int(seed), "l0"), cost=cost_l0))
    return cells


def study_fingerprint(cfg: SpecializedHeadsL0Config, device: torch.device) -> str:
    d = glue_workbench.result_params(cfg, device, RESULTS_VERSION, drop=("lambdas", "l0_max_steps", *ANALYSIS_ONLY))
    splits = {cfg.ud_split, *(["train"] if cfg.rare_corpus == "ud_train" else [])}
    d["ud_data"] = {s: (data.file_fingerprint(p) if p is not None and p.is_file() else "absent")
                    for s in sorted(splits) for p in [ud_path(cfg.data_dir, s)]}
    return fingerprint(d)


# ---------------------------------------------------------------------------------------------- planned cost
def _at_most(a: int | None, b: int | None) -> int | None:
    """The smaller of two sizes where None means "all"."""
    return b if a is None else a if b is None else min(a, b)


def roles_cost(cfg: SpecializedHeadsL0Config, shape: costs.Shape) -> float:
    """One forward pass over the UD sentences the roles are measured on (word pieces: 1.3 per word + 2 specials)."""
    n, words = UD_SPLITS[cfg.ud_split]
    n = n if cfg.ud_sentences is None else min(n, cfg.ud_sentences)
    length = words * costs.PIECES_PER_WORD + 2
    return costs.forward_flops(shape, n * length, length)


def scores_cost(cfg: SpecializedHeadsL0Config, task: str, shape: costs.Shape) -> float:
    """Fine-tuning the full model (free when another study filled the shared cache), gradient importance and
    relevance (a forward and a backward each), confidence and entropy (a forward) on ``score_size`` training
    examples, the ablation sweep (1 + n_heads forwards on ``ablation_size``; the shared sweep does less), the dev
    score, and the roles on UD."""
    n, length = costs.split_tokens(task, "train", _at_most(cfg.train_size, cfg.score_size), cfg.data_dir)
    n_abl, len_abl = costs.split_tokens(task, "train", _at_most(cfg.train_size, cfg.ablation_size), cfg.data_dir)
    return (glue_workbench.finetune_cost(cfg, task)
            + 2 * costs.train_flops(shape, n * length, length) + costs.forward_flops(shape, n * length, length)
            + (1 + shape.n_layers * shape.n_heads) * costs.forward_flops(shape, n_abl * len_abl, len_abl)
            + glue_workbench.eval_cost(cfg, task) + roles_cost(cfg, shape))


def l0_cost(cfg: SpecializedHeadsL0Config, task: str, shape: costs.Shape) -> float:
    """The gates' training (a forward and a backward through the whole model per step, ``l0_batch_size``
    examples) and the dev scores of the L0 mask and its baselines (gated, so no cheaper than the full model)."""
    n_tr, length = costs.split_tokens(task, "train", cfg.train_size, cfg.data_dir)
    steps = cfg.l0_steps if cfg.l0_steps is not None else cfg.l0_epochs * -(-int(n_tr) // cfg.l0_batch_size)
    steps = cfg.l0_max_steps or steps  # the cap: the planned cost is the most it can take
    tokens = steps * cfg.l0_batch_size * length
    return costs.train_flops(shape, tokens, length) + (cfg.n_random_baselines + 2) * glue_workbench.eval_cost(cfg, task)


# ---------------------------------------------------------------------------------------------- computing
def _first(enc: batching.Encoded, n: int | None) -> batching.Encoded:
    if n is None or n >= len(enc):
        return enc
    return batching.Encoded(enc.input_ids[:n], enc.token_type_ids[:n] if enc.token_type_ids else None,
                            enc.labels[:n], enc.pad_id)


def _score(task: str, metrics: dict) -> float:
    """The main score; an undefined correlation (a constant prediction, e.g. every head pruned) counts 0, the
    score of a constant predictor (``glue_workbench.chance_score``)."""
    s = main_score(task, metrics)
    return 0.0 if s != s else float(s)


class Context(glue_workbench.GlueContext):
    """The shared workbench plus the UD sentences and the word-piece frequencies of the rare-word heads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ud: list | None = None
        self._counts: dict = {}
        self._tasks: list[str] | None = None

    def tasks(self) -> list[str]:
        """The tasks of the run (``glue_workbench.resolve_tasks``): the roles cell's ``task_train`` corpus."""
        if self._tasks is None:
            self._tasks = glue_workbench.resolve_tasks(self.cfg)[0]
        return self._tasks

    def ud(self) -> list[specialized.Sentence]:
        if self._ud is None:
            self._ud = specialized.load_ud_ewt(self.cfg.ud_split, self.cfg.data_dir, max_sentences=self.cfg.ud_sentences)
        return self._ud

    def encode_words(self, sentences) -> batching.Encoded:
        words = [s.forms for s in sentences]
        enc = self.tokenizer(words, is_split_into_words=True, truncation=True, max_length=self.cfg.max_length)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return batching.Encoded(list(enc["input_ids"]), None, np.zeros(len(words), dtype=np.int64), pad)

    def token_counts(self, tasks: list[str]) -> Counter:
        """Word-piece counts (specials excluded) of the stated corpus: UD EWT train, or the tasks' training subsets."""
        key = "ud_train" if self.cfg.rare_corpus == "ud_train" else tuple(tasks)
        if key not in self._counts:
            if key == "ud_train":
                seqs = self.encode_words(specialized.load_ud_ewt("train", self.cfg.data_dir))
                self._counts[key] = specialized.token_frequencies(seqs, self.tokenizer.all_special_ids)
            else:
                c: Counter = Counter()
                for t in tasks:
                    c.update(specialized.token_frequencies(self.task_data(t)[1], self.tokenizer.all_special_ids))
                self._counts[key] = c
        return self._counts[key]


def head_roles(ctx: Context, model, tasks: list[str]) -> dict:
    """Raw specialized-head measurements of ``model`` on the UD sentences (``[L][H]`` lists, syntactic rows).

    One forward per batch of sentences feeds all three measurements; the numbers are those of
    ``specialized.positional_heads``, ``rare_word_heads`` and ``syntactic_heads`` run one by one (a unit test
    checks it), at a third of the cost.
    """
    cfg, tok = ctx.cfg, ctx.tokenizer
    special = tok.all_special_ids
    counts = ctx.token_counts(tasks)
    sentences = ctx.ud()
    prev = nxt = hits = None
    n_q = trials = 0
    chance_sum = 0.0
    argmaxes, complete = [], []
    for start in range(0, len(sentences), glue_workbench.EVAL_BATCH):
        chunk = sentences[start : start + glue_workbench.EVAL_BATCH]
        words = [s.forms for s in chunk]
        whole = tok(words, is_split_into_words=True, truncation=False)
        enc = tok(words, is_split_into_words=True, truncation=True, max_length=cfg.max_length, padding=True,
                  return_tensors="pt")
        batch = {k: v.to(ctx.device) for k, v in enc.items()}
        maps = attention_maps(model, batch)
        q = head_scores.query_mask(batch["attention_mask"], batch["input_ids"], True, special)
        n = int(q.sum())
        if n:
            pos = specialized.positional_from_maps(maps, q)
            p, x = pos["prev"].double() * n, pos["next"].double() * n
            prev, nxt, n_q = (p, x, n) if prev is None else (prev + p, nxt + x, n_q + n)
        r = specialized.rare_counts_from_maps(maps, batch["input_ids"], q, counts)
        hits = r["hits"] if hits is None else hits + r["hits"]
        trials, chance_sum = trials + r["trials"], chance_sum + r["chance_sum"]
        for b, sent in enumerate(chunk):  # as specialized.syntactic_heads: words cut by truncation are skipped
            wids = enc.word_ids(b)
            cut, full = Counter(w for w in wids if w is not None), Counter(w for w in whole.word_ids(b) if w is not None)
            complete.append({w for w in range(len(sent)) if full[w] > 0 and cut[w] == full[w]})
            per = torch.stack([m[b] for m in maps])  # [L, H, seq, seq]
            argmaxes.append(specialized.word_argmax(specialized.word_attention(per, wids, len(sent))).cpu())
    if not n_q:
        raise ValueError("the UD sentences have no query tokens")
    rare = specialized.rare_table(hits, trials, chance_sum)
    syn = specialized.syntactic_scores(argmaxes, sentences, tuple(cfg.relations), cfg.syntactic_margin, complete)
    shape = ctx.shape
    return {
        "prev": (prev / n_q).to(torch.float32).tolist(), "next": (nxt / n_q).to(torch.float32).tolist(),
        "rare_share": rare["share"].to_numpy().reshape(shape).tolist(),
        "rare_p": rare["p_value"].to_numpy().reshape(shape).tolist(),
        "rare_chance": float(rare["chance"].iloc[0]), "rare_n": int(rare["n"].iloc[0]),
        "syntactic": specialized.syntactic_records(syn),
    }


def run_roles_cell(ctx: Context, cell: dict, tasks: list[str]) -> dict:
    t0 = time.perf_counter()
    model = models.load_classifier(ctx.cfg.model, 2, device=ctx.device, seed=0)  # the classifier is not used
    return {"roles": head_roles(ctx, model, tasks), "seconds": time.perf_counter() - t0}


def run_scores_cell(ctx: Context, cell: dict) -> dict:
    """Every head score of the fine-tuned full model of (task, seed), its dev score and its roles."""
    cfg = ctx.cfg
    task, seed = cell["task"], cell["seed"]
    model, full_history, _ = ctx.full_model(task, seed)
    spec, tr, dv, *_ = ctx.task_data(task)
    t0 = time.perf_counter()
    means = ctx.full_means(task, seed) if as_ablation(cfg.ablation).needs_means else None
    batches = glue_workbench.batches(tr, ctx.device, cfg.score_size)
    special = ctx.tokenizer.all_special_ids
    attn = head_scores.attention_scores(model, batches, special)  # one forward per batch for the three
    abl = _first(tr, cfg.ablation_size)
    scores = {
        # Michel et al., normalised per layer: the ranking the importance baseline prunes by (as studies 2 and 5)
        "gradient_importance": importance.head_importance(model, batches, ablation=cfg.ablation, means=means),
        "relevance": head_scores.relevance(model, batches, target=cfg.relevance_target),
        "ablation": (head_scores.ablation_loss(model, abl, task, cfg.ablation, means, batch_size=glue_workbench.EVAL_BATCH)
                     if cfg.ablation_measure == "loss" else
                     head_scores.ablation_importance(model, abl, task, ablation=cfg.ablation, means=means,
                                                     batch_size=glue_workbench.EVAL_BATCH)),
        "confidence": attn["confidence"],
        "confidence_no_special_keys": attn["confidence_no_special_keys"],
        "entropy": attn["entropy"],
    }
    dev = training.evaluate(model, dv, task, glue_workbench.EVAL_BATCH)
    row = {k: v.tolist() for k, v in scores.items()}
    row.update({"roles": head_roles(ctx, model, [task]), "score_full": _score(task, dev), "metrics_full": dev,
                "metric": spec.main_metric, "chance": glue_workbench.chance_score(task, tr, dv),
                # the model's held-out curve (one record per epoch, the kept one "selected"): whether it reached the
                # plateau is judged from the cells alone (studies.convergence)
                "full_model_history": glue_workbench.recorded_curve(full_history), "seconds": time.perf_counter() - t0})
    return row


def l0_batches(enc: batching.Encoded, batch_size: int, seed: int, steps: int | None, epochs: int, device) -> list[dict]:
    """The gates' training batches: shuffled, length-grouped epochs of ``enc`` (epoch ``e`` seeded ``1000 seed + e``),
    ``steps`` batches in all (else ``epochs`` epochs)."""
    out: list[dict] = []
    e = 0
    while True:
        for idx in batching.train_batches(enc.lengths, batch_size, seed=1000 * seed + e):
            if steps is not None and len(out) >= steps:
                return out
            out.append(batching.collate(enc, idx, device))
        e += 1
        if steps is None and e >= epochs:
            return out


def gate_batches(ctx: Context, task: str, seed: int) -> list[dict]:
    """The gates' training batches of (task, seed) on the context's device (:func:`l0_batches` of its training
    subset; the same at every lambda)."""
    cfg = ctx.cfg
    return l0_batches(ctx.task_data(task)[1], cfg.l0_batch_size, seed, cfg.l0_max_steps or cfg.l0_steps, cfg.l0_epochs,
                      ctx.device)


def random_seed(seed: int, r: int) -> int:
    """Seed of random baseline ``r`` of model seed ``seed`` (the same at every lambda: the masks are nested)."""
    return 1000 * (seed + 1) + r


def run_l0_cell(ctx: Context, cell: dict, importance_scores: torch.Tensor, score_full: float,
                batches: list[dict] | None = None) -> dict:
    """Train the gates at ``cell["lam"]``, evaluate the deterministic mask and the baselines at its head count.

    ``importance_scores`` ``[L, H]`` and ``score_full``: from the scores cell of (task, seed); ``batches``: the
    gates' training batches (:func:`gate_batches`, the same at every lambda), made here when None."""
    cfg = ctx.cfg
    task, seed, lam = cell["task"], cell["seed"], cell["lam"]
    spec, tr, dv, *_ = ctx.task_data(task)
    base = ctx.full_model(task, seed)[0]
    model = copy.deepcopy(base) if cfg.l0_train_model else base  # the cached model's weights are never changed
    means = ctx.full_means(task, seed) if as_ablation(cfg.ablation).needs_means else None
    n_layers, n_heads = ctx.shape
    t0 = time.perf_counter()
    if batches is None:
        batches = gate_batches(ctx, task, seed)
    training.set_seed(seed)  # the gate samples: the same noise at every lambda
    gates = HardConcreteGates.for_model(model, beta=cfg.temperature, gamma=cfg.stretch_low, zeta=cfg.stretch_high)
    settle = ({"until": lambda h: bool(gates_settled(h)[0]), "min_steps": cfg.l0_steps}
              if cfg.l0_max_steps is not None else {})
    res = l0_train(model, gates, batches, lam, steps=len(batches), lr=cfg.l0_lr, train_model=cfg.l0_train_model,
                   model_lr=cfg.l0_model_lr, ablation=cfg.ablation, means=means, progress=False, **settle)
    seconds_train = time.perf_counter() - t0
    mask = res.mask
    n_prune = n_layers * n_heads - int(mask.sum())
    sweep = {("random", r): masks.random_mask(n_layers, n_heads, n_prune, random_seed(seed, r))
             for r in range(cfg.n_random_baselines)}
    sweep["importance"] = strategies.importance_mask(importance_scores, n_prune, "least_important")
    if cfg.l0_train_model:
        l0_metrics = training.evaluate(model, dv, task, glue_workbench.EVAL_BATCH, gates=mask.to(ctx.device),
                                       ablation=cfg.ablation, means=means)
        del model
    else:
        sweep["l0"] = mask
    metrics = mask_sweep.evaluate_masks(base, dv, task, sweep, glue_workbench.EVAL_BATCH, ablation=cfg.ablation, means=means)
    if not cfg.l0_train_model:
        l0_metrics = metrics["l0"]
    random_scores = [_score(task, metrics[("random", r)]) for r in range(cfg.n_random_baselines)]
    step = max(1, len(res.history) // 200)  # at most ~200 records of the gates' training
    return {
        "score_l0": _score(task, l0_metrics), "metrics_l0": l0_metrics, "score_full": score_full,
        "score_random": random_scores, "score_random_mean": float(np.mean(random_scores)),
        "score_importance": _score(task, metrics["importance"]),
        # every mask's metrics, so that a task decided by another metric than its main one (MRPC: accuracy) is
        # scored by it (specialized_heads_l0_analysis.in_verdict_metric)
        "metrics_random": [metrics[("random", r)] for r in range(cfg.n_random_baselines)],
        "metrics_importance": metrics["importance"],
        "n_kept": int(mask.sum()), "n_heads_total": n_layers * n_heads, "mask": masks.mask_to_string(mask),
        "random_masks": [masks.mask_to_string(sweep[("random", r)]) for r in range(cfg.n_random_baselines)],
        "importance_mask": masks.mask_to_string(sweep["importance"]),
        "log_alpha": gates.log_alpha.detach().cpu().tolist(), "open_prob": gates.open_prob().detach().cpu().tolist(),
        "history": res.history[::step] + ([res.history[-1]] if (len(res.history) - 1) % step else []),
        "metric": spec.main_metric, "chance": glue_workbench.chance_score(task, tr, dv),
        "seconds_train": seconds_train, "seconds": time.perf_counter() - t0,
        **({"l0_steps_trained": len(res.history)} if cfg.l0_max_steps is not None else {}),
    }



class SpecializedHeadsL0(glue_workbench.GlueStudy):
    """Study 6 (see the module docstring)."""

    name = NAME
    notebook = "06_specialized_heads_l0.ipynb"
    Config = SpecializedHeadsL0Config
    claims = CLAIMS  # data, with their rules and gates (specialized_heads_l0_claims); decided by verdicts
    # a stored result: every GLUE score in its metric's range (also each random mask's and inside metrics_full /
    # metrics_l0), the L0 mask, the importance mask and every random mask keeping ``n_kept`` heads (checked on
    # every read of a cell)
    metric_ranges = {**Study.metric_ranges, **GLUE_METRIC_RANGES, "score_full": CORRELATION,
                     "score_l0": CORRELATION, "score_importance": CORRELATION, "score_random": CORRELATION,
                     "score_random_mean": CORRELATION, "seconds_train": NON_NEGATIVE}

    def consistency_problem(self, cell, result):
        why = mask_count_problem(result) or mask_count_problem(result, "importance_mask", None, "n_heads_total")
        for i, m in enumerate(result.get("random_masks", [])):
            kept = {"n_kept": result["n_kept"]} if "n_kept" in result else {}
            why = why or mask_count_problem({**kept, f"random_masks[{i}]": m}, f"random_masks[{i}]", None, None)
        for scores, score in (("metrics_full", "score_full"), ("metrics_l0", "score_l0")):
            if not why and scores in result and score in result and "metric" in result \
                    and result[scores].get(result["metric"]) != result[score]:
                why = (f"{score} = {result[score]!r} but {scores}[{result['metric']!r}] = "
                       f"{result[scores].get(result['metric'])!r}: the score is its metric's value")
        return why

    def plan(self, cfg: SpecializedHeadsL0Config) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: SpecializedHeadsL0Config, device) -> str:
        return study_fingerprint(cfg, device)

    def provenance(self, ctx, cell) -> dict:
        return glue_workbench.provenance(ctx, cell)

    def scored(self, table):
        return in_verdict_metric(table)

    def context(self, cfg: SpecializedHeadsL0Config, device, paths: StudyPaths) -> Context:
        return Context(cfg, device, paths.finetuned_cache)

    def run(self, ctx: Context, cells: list[Cell], inputs: Mapping[str, dict]) -> Iterator[tuple[Cell, dict]]:
        batches: dict[tuple, list[dict]] = {}  # the gates' batches of one (task, seed), made once for its lambdas
        for cell in cells:
            axes = dict(cell.axes)
            if axes["kind"] == "roles":
                yield cell, run_roles_cell(ctx, axes, ctx.tasks())
            elif axes["kind"] == "scores":
                yield cell, run_scores_cell(ctx, axes)
            else:
                task, seed = axes["task"], axes["seed"]
                scores = inputs[cell_key(scores_axes(task, seed))]
                if (task, seed) not in batches:
                    batches = {(task, seed): gate_batches(ctx, task, seed)}
                yield cell, run_l0_cell(ctx, axes, torch.tensor(scores["gradient_importance"]), scores["score_full"],
                                        batches[(task, seed)])


STUDY = SpecializedHeadsL0()
