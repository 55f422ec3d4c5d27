"""Study 7: the heads of a Transformer trained for translation (Budhraja et al. 2020; Voita et al. 2019).

Both papers prune the heads of an encoder-decoder Transformer trained for machine translation, with three
attention types (``architecture.SEQ2SEQ_KINDS``): encoder self-attention ``"enc"``, decoder self-attention
``"dec"`` and encoder-decoder attention ``"cross"``. Here a small Marian-style Transformer is trained from scratch
(``translation_model``, ``translation``) on a parallel corpus (default Multi30k en-de: train / val /
test_2016_flickr), cached once per training parameters (:func:`model_key`; the folder is
``StudyPaths.nmt_model``, filled through ``caches.cached``), and every cell reuses it.

Cells (keyed, resumable; :func:`plan_cells`; ``model_seed`` = the trained model):

- ``{"kind": "model"}``: the trained full model (trained now or read from the cache): BLEU, chrF and
  teacher-forced NLL on the test subset, training history. Every other cell REQUIRES the model cell of its
  model seed (so the model is trained once, first; a worker whose outputs root lacks the cached model -- a Ray
  node without shared storage -- trains the same model itself, deterministically).
- ``{"kind": "prune", "type", "fraction", "seed"}``: a random ``fraction`` of the heads of ``type`` (``enc``,
  ``dec``, ``cross``, or ``all``: uniformly over the union of the three grids) zeroed on the trained model, no
  retraining; BLEU/chrF (greedy) and NLL on the test subset. Masks of one seed are nested across fractions.
- ``{"kind": "retrain", "type", "fraction", "seed"}``: the same mask (mask seeds ``retrain_seeds``, default
  ``seeds``), the heads removed physically, then trained with the mask fixed (Budhraja et al. fine-tune pruned
  models): ``retrain_steps`` more steps (fixed regime), or, with ``retrain_patience``, until the dev loss has not
  improved for that many evaluations (one every ``retrain_eval_every`` steps, at most ``retrain_max_steps``; the best
  weights kept; the dev-loss curve and whether it reached the plateau stored; resumable); the reference cell
  (``type = "none"``) continues the UNPRUNED model the same way with the same data order.
- ``{"kind": "retrain_strategy", "type", "strategy", "budget", "seed"}``: a strategy cell's mask (at the
  ``retrain_strategy_budgets``, on ``retrain_strategy_types``, default ``strategy_types``), retrained as a
  ``retrain`` cell (Budhraja et al.'s claim 2 in their regime).
- ``{"kind": "strategy", "type", "strategy", "budget", "seed"}``: a layer-location strategy of
  ``strategies.py`` on one type's grid, at ``budget`` (share of that type's heads), evaluation only; ``random``
  is the reference of the paired contrasts (``paired_contrasts.contrast_table``).
- ``{"kind": "roles"}``: encoder self-attention maps (``attention.attention_maps(kind="enc")``) of the trained
  model: confidence, entropy, positional and rare-word measurements on dev source sentences (piece
  frequencies from the training source side), syntactic heads on UD English-EWT sentences (English source
  only; out of domain for Multi30k captions), and each head's ablation importance (increase of the dev NLL
  when it alone is zeroed) for all three types.
- ``{"kind": "l0", "setting", "lam"}``: Hard Concrete gates (``hard_concrete.HardConcreteGateDict``) on the
  frozen model, on ``enc`` alone or on ``all`` three types, ``loss = NLL + lam * expected open gates``; the
  deterministic masks, BLEU of them, and random masks with the same heads per type.

Groups (work best done in one process): the evaluation-only cells (``prune``, ``strategy``) of a model seed,
whose decodings share a cache (below); the L0 cells of a model seed, which share the gates' training batches.

Evaluations of a mask are cached beside the model (``<model folder>/evals/``), so a mask that two cells share
(e.g. the random strategy and the random-pruning cell of the same type, fraction and seed) is decoded once; so are
retrainings (``<model folder>/retrains/``, :func:`retrain_key`): strategies whose masks coincide are retrained once.
Ablation semantics: ``"zero"`` (a pruned head outputs nothing), as both papers' Transformer code.
"""
from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import torch

from headprune_utils.analysis import preconditions
from headprune_utils.analysis.preconditions import gates_settled
from headprune_utils.measure import costs, specialized
from headprune_utils.studies import glue_workbench
from headprune_utils.studies.role_survival import l0_cap
from headprune_utils.model import masks, models, strategies
from headprune_utils.model.architecture import SEQ2SEQ_KINDS, head_shape
from headprune_utils.tasks.batching import train_batches
from headprune_utils.store.caches import KEY_FIELD, cached, check_entry_key
from headprune_utils.studies.config import as_dict
from headprune_utils.train.hard_concrete import HardConcreteGateDict, l0_train
from headprune_utils.store.paths import StudyPaths, relative_to_project
from headprune_utils.model.pruning import prune_heads
from headprune_utils.model.precision import training_key
from headprune_utils.store.results import atomic_write_json, fingerprint, held_hint, machine_kind
from headprune_utils.tasks.subword import train_tokenizer
from headprune_utils.train.training import set_seed
from headprune_utils.train.translation import (
    collate_pairs, dev_loss, encode_pairs, evaluate_translation, label_smoothed_loss, train_translation,
)
from headprune_utils.tasks.translation_data import load_parallel, subset_pairs
from headprune_utils.studies.translation_heads import ablation_nll, encoder_roles, source_queries
from headprune_utils.model.translation_model import (
    build_translation_model, load_translation_model, save_translation_model,
)
from headprune_utils.studies.base import NON_NEGATIVE, PERCENT, UNIT, Cell, Cost, Study, mask_problem
from headprune_utils.studies.nmt_heads_config import TYPES, NMTHeadsConfig, data_source
from headprune_utils.studies.nmt_heads_analysis import ( # the analysis: pure functions over the table, re-exported for the notebook
    VOITA_ALL_TYPES, VOITA_BASELINE_BLEU, VOITA_FRACTION, TYPE_CONTRASTS, ROLE_NAMES, full_models, training_curves,
    random_rows, random_summary, random_drops, prunable, retrain_table, type_contrasts, strategy_rows,
    strategy_summary, strategy_contrasts, strategy_mask_rows, role_source, roles, role_counts, role_map,
    encoder_scores, importance_table, score_agreement, l0_curve, l0_by_type, l0_contrasts, type_prunability,
    l0_survival_source, survival, survival_tests, survival_map, survival_by_role, roles_at_budget,
    rare_criterion_counts, MEASURES, SEMANTICS, scale, verdicts, RETRAINED, retraining_convergence, retraining_curves,
)
from headprune_utils.studies.nmt_heads_claims import CLAIMS  # the claims: data

NAME = "nmt_heads"
RESULTS_VERSION = 1
# Bump when a code change alters what training produces (the cached models then no longer match).
NMT_TRAINING_VERSION = 1
EVAL_VERSION = 1  # bump when decoding or scoring changes (the cached evaluations then no longer match)
REGIMES: tuple[str, ...] = ("prune", "prune_then_train")
ANALYSIS_ONLY = ("positional_threshold", "syntactic_margin", "rare_share", "tolerance", "n_permutations")
CELL_AXES = ("types", "fractions", "seeds", "model_seeds", "strategy_types", "strategies", "strategy_budgets",
             "l0_settings", "lambdas", "retrain_types", "retrain_fractions", "retrain_seeds",
             "retrain_strategy_budgets", "retrain_strategy_types",
             "l0_max_steps")  # the L0 cells' own axis when set (l0_cap): only they depend on it
# The plateau regime's parameters: in the fingerprint only when it is on (retrain_patience set), so that the cells of
# the fixed regime keep theirs, and cells retrained a fixed number of steps are never read as plateau retrainings
PLATEAU_RETRAINING = ("retrain_patience", "retrain_eval_every", "retrain_max_steps", "retrain_min_delta")
NOT_RESULTS = ("progress", "device", "data_dir", "allow_hub")
# For the planned cost only: pairs of the dev and test splits (used when dev_size / test_size is None) and the
# mean subword tokens of a sentence (one side: ~1.3 pieces per word, plus </s>) of each corpus.
CORPUS_PLANNING = {"multi30k": (1014, 1000, 17.0), "newstest-en-ru": (3000, 3000, 30.0),
                   "wmt14-en-de": (3000, 3003, 33.0), "wmt14-en-ru": (3000, 3003, 33.0)}


def model_key(cfg: NMTHeadsConfig, model_seed: int, device: torch.device) -> str:
    """What a trained model depends on: data, tokenizer, model and training settings, seed, device type."""
    return fingerprint({
        "corpus": cfg.corpus, "direction": cfg.direction, "train_size": cfg.train_size, "dev_size": cfg.dev_size,
        "subset_seed": cfg.subset_seed, "max_length": cfg.max_length, "vocab_size": cfg.vocab_size,
        "tokenizer_model": cfg.tokenizer_model, "model": cfg.model_config().as_dict(),
        "training": cfg.train_config().as_dict(), "model_seed": int(model_seed),
        "device_type": torch.device(device).type, "data_source": data_source(cfg), "version": NMT_TRAINING_VERSION,
        **training_key(device),  # bf16 training on CUDA; nothing on the CPU
    })


def model_folder(paths: StudyPaths, cfg: NMTHeadsConfig, model_seed: int, device: torch.device) -> Path:
    """``<nmt cache>/<corpus>__seed=<s>__<key>/`` (``StudyPaths.nmt_model``): model, tokenizer,
    ``headprune_nmt.json`` (meta), ``evals/``."""
    return paths.nmt_model(cfg.corpus, int(model_seed), model_key(cfg, model_seed, device))


def study_fingerprint(cfg: NMTHeadsConfig, device: torch.device) -> str:
    d = as_dict(cfg)
    for k in (*NOT_RESULTS, *CELL_AXES, *ANALYSIS_ONLY, *(() if cfg.plateau_retraining() else PLATEAU_RETRAINING)):
        d.pop(k, None)
    if cfg.plateau_retraining():
        d.pop("retrain_steps", None)  # unused in that regime
    for k in ("min_delta", "retrain_min_delta", "fused_loss"):  # in the fingerprint only when set: cells made
        if not d.get(k):                                         # before they existed keep theirs
            d.pop(k, None)
    d.update(device_type=torch.device(device).type, data_source=data_source(cfg), results_version=RESULTS_VERSION,
             training_version=NMT_TRAINING_VERSION, eval_version=EVAL_VERSION, **training_key(device))
    return fingerprint(d)


def role_thresholds(cfg: NMTHeadsConfig) -> dict:
    """The keyword arguments of :func:`roles` (``role_survival.role_table``) from the parameters."""
    return {"positional_threshold": cfg.positional_threshold, "syntactic_margin": cfg.syntactic_margin,
            "rare_share": cfg.rare_share}


def l0_kinds(setting: str) -> tuple[str, ...]:
    return SEQ2SEQ_KINDS if setting == "all" else (setting,)


def model_cell_axes(model_seed: int) -> dict:
    """The key of the model cell of ``model_seed``, which every other cell of that model requires."""
    return {"kind": "model", "model_seed": int(model_seed)}


def plan_cells(cfg: NMTHeadsConfig) -> list[Cell]:
    """Every cell, per model seed: the model, the encoder roles, random pruning, strategies, L0, retraining."""
    c = plan_costs(cfg)
    cells = []
    for ms in cfg.model_seeds:
        ms = int(ms)
        model = Cell(model_cell_axes(ms), cost=Cost(c["model"]))
        need = (model.key,)
        evaluate = (ms, "evaluate")  # the evaluation-only cells share decodings (the evals cache)
        cells += [model, Cell({"kind": "roles", "model_seed": ms}, requires=need, cost=Cost(c["roles"]))]
        cells += [Cell({"kind": "prune", "type": t, "fraction": float(f), "seed": int(s), "model_seed": ms},
                       requires=need, group=evaluate, cost=Cost(c["evaluate"]))
                  for t in cfg.types for f in sorted(cfg.fractions) for s in cfg.seeds]
        cells += [Cell({"kind": "strategy", "type": t, "strategy": st, "budget": float(b), "seed": int(s),
                        "model_seed": ms}, requires=need, group=evaluate, cost=Cost(c["evaluate"]))
                  for t in cfg.strategy_types for b in sorted(cfg.strategy_budgets) for st in cfg.strategies
                  for s in cfg.seeds]
        cells += [Cell({"kind": "l0", "setting": st, "lam": float(lam), "model_seed": ms, **l0_cap(cfg)}, requires=need,
                       group=(ms, "l0"), cost=Cost(c["l0"]))
                  for st in cfg.l0_settings for lam in sorted(cfg.lambdas)]
        retrained = cfg.mask_seeds_retrained()
        if (cfg.retrain_types and cfg.retrain_fractions) or cfg.retrain_strategy_budgets:
            cells.append(Cell({"kind": "retrain", "type": "none", "fraction": 0.0, "seed": -1, "model_seed": ms},
                              requires=need, cost=Cost(retrain_cost(cfg, "none", 0.0))))
        if cfg.retrain_types and cfg.retrain_fractions:
            cells += [Cell({"kind": "retrain", "type": t, "fraction": float(f), "seed": int(s), "model_seed": ms},
                           requires=need, cost=Cost(retrain_cost(cfg, t, float(f))))
                      for t in cfg.retrain_types for f in sorted(cfg.retrain_fractions) for s in retrained]
        seen: set[str] = set()  # a mask retrained already costs a cache read (run_retrain_cell)
        for t in cfg.strategy_types_retrained():
            for b in sorted(cfg.retrain_strategy_budgets):
                for st in cfg.strategies:
                    for s in retrained:
                        axes = {"kind": "retrain_strategy", "type": t, "strategy": st, "budget": float(b),
                                "seed": int(s), "model_seed": ms}
                        mask = json.dumps(masks_to_strings(cell_masks(cfg, axes)), sort_keys=True)
                        cells.append(Cell(axes, requires=need, cost=Cost(1.0 if mask in seen else
                                                                         retrain_cost(cfg, t, float(b)))))
                        seen.add(mask)
    return cells


# ---------------------------------------------------------------------------------------------- planned cost
def _sentence_tokens(cfg: NMTHeadsConfig) -> float:
    return min(float(cfg.max_length), CORPUS_PLANNING.get(cfg.corpus, (3000, 3000, 30.0))[2])


def forward_cost(cfg: NMTHeadsConfig, n_pairs: float, kept_share: float = 1.0) -> float:
    """FLOPs of one teacher-forced forward pass over ``n_pairs`` sentence pairs: the encoder layers, the decoder
    layers (with encoder-decoder attention) and the output projection (``2 d_model vocab`` per target token)."""
    shape = costs.Shape(max(cfg.encoder_layers, cfg.decoder_layers), cfg.heads, cfg.d_model, cfg.ffn_dim)
    length = _sentence_tokens(cfg)
    tokens = n_pairs * length
    enc = cfg.encoder_layers * costs.layer_forward_flops(shape, tokens, length, kept_share)
    dec = cfg.decoder_layers * costs.layer_forward_flops(shape, tokens, length, kept_share, cross_len=length)
    return enc + dec + 2.0 * cfg.d_model * cfg.vocab_size * tokens


def _split_pairs(cfg: NMTHeadsConfig, split: str, size: int | None) -> float:
    dev, test, _ = CORPUS_PLANNING.get(cfg.corpus, (3000, 3000, 30.0))
    n = dev if split == "dev" else test
    return float(n if size is None else min(size, n))


def _pairs_per_step(cfg: NMTHeadsConfig) -> float:
    """Sentence pairs of a training batch: ``max_tokens`` / the sentence length (capped at ``batch_size``)."""
    if cfg.max_tokens is None:
        return float(cfg.batch_size)
    return min(float(cfg.batch_size), cfg.max_tokens / _sentence_tokens(cfg))


def eval_cost(cfg: NMTHeadsConfig, kept_share: float = 1.0) -> float:
    """Scoring on the test subset: greedy or beam decoding (about one forward per beam: incremental decoding
    costs what teacher forcing does) and the teacher-forced NLL (one forward)."""
    return (cfg.num_beams + 1) * forward_cost(cfg, _split_pairs(cfg, "test", cfg.test_size), kept_share)


def retrain_cost(cfg: NMTHeadsConfig, kind: str, fraction: float) -> float:
    """The training steps (a forward and a backward: three forwards each) of the physically pruned model, then its
    scores; pruning ``fraction`` of one type's heads saves about a third of that share. Fixed regime:
    ``retrain_steps`` steps. Plateau regime: planned at the cap ``retrain_max_steps`` (the most it may take; the
    plateau usually comes sooner) with a dev-loss forward every ``retrain_eval_every`` steps."""
    kept = 1.0 - (fraction if kind == "all" else fraction / 3.0)
    if not cfg.plateau_retraining():
        return 3.0 * forward_cost(cfg, cfg.retrain_steps * _pairs_per_step(cfg), kept) + eval_cost(cfg, kept)
    steps = int(cfg.retrain_max_steps)
    dev = forward_cost(cfg, _split_pairs(cfg, "dev", cfg.dev_size), kept)
    return (3.0 * forward_cost(cfg, steps * _pairs_per_step(cfg), kept) + (steps // cfg.retrain_eval_every) * dev
            + eval_cost(cfg, kept))


def plan_costs(cfg: NMTHeadsConfig) -> dict[str, float]:
    """Estimated FLOPs of each kind of cell (rough: from the model's shape and a corpus's sentence length).

    model: ``max_steps`` training steps (three forwards each; early stopping may end sooner), a dev-loss forward
    every ``eval_every`` steps, the test scores. roles: forwards over the role and UD sentences, and the
    ablation sweep (one dev-NLL forward per head of the three types, and one of the full model). evaluate: one
    mask's test scores (a mask two cells share is decoded once). l0: ``l0_steps`` gate steps of
    ``l0_batch_size`` pairs (three forwards: gradients flow through the frozen model), the L0 masks' and their
    random baselines' test scores.
    """
    dev = _split_pairs(cfg, "dev", cfg.dev_size)
    n_heads = cfg.heads * (cfg.encoder_layers + 2 * cfg.decoder_layers)
    train = 3.0 * forward_cost(cfg, cfg.max_steps * _pairs_per_step(cfg))
    role_sentences = dev if cfg.role_sentences is None else min(dev, cfg.role_sentences)
    ud_all = {"train": 12543, "dev": 2001, "test": 2077}[cfg.ud_split]  # sentences of UD English-EWT's splits
    ud = (ud_all if cfg.ud_sentences is None else min(ud_all, cfg.ud_sentences)) if cfg.syntactic else 0
    importance = dev if cfg.importance_size is None else min(dev, cfg.importance_size)
    return {
        "model": train + (cfg.max_steps // cfg.eval_every) * forward_cost(cfg, dev) + eval_cost(cfg),
        "roles": forward_cost(cfg, role_sentences + ud) + (1 + n_heads) * forward_cost(cfg, importance),
        "evaluate": eval_cost(cfg),
        "l0": 3.0 * forward_cost(cfg, (cfg.l0_max_steps or cfg.l0_steps) * cfg.l0_batch_size) + (1 + cfg.n_random_baselines) * eval_cost(cfg),
    }


def cell_masks(cfg: NMTHeadsConfig, cell: dict) -> dict[str, torch.Tensor]:
    """The cell's masks by attention type (1 = kept; every type present, unpruned ones all ones)."""
    shapes = cfg.shapes()
    out = {k: torch.ones(*s) for k, s in shapes.items()}
    t = cell["type"]
    if t == "none":
        return out
    if cell["kind"] in ("strategy", "retrain_strategy"):
        n_layers, n_heads = shapes[t]
        n = masks.n_pruned_for_fraction(cell["budget"], n_layers, n_heads)
        out[t] = strategies.strategy_mask(cell["strategy"], n_layers, n_heads, n, cell["seed"])
    elif t == "all":
        total = sum(l * h for l, h in shapes.values())
        out.update(masks.random_masks(shapes, int(round(cell["fraction"] * total)), cell["seed"]))
    else:
        n_layers, n_heads = shapes[t]
        out[t] = masks.random_mask(n_layers, n_heads, masks.n_pruned_for_fraction(cell["fraction"], n_layers, n_heads),
                                   cell["seed"])
    return out


def masks_to_strings(ms: dict[str, torch.Tensor]) -> dict[str, str]:
    return {k: masks.mask_to_string(m) for k, m in ms.items()}


def random_seed(model_seed: int, r: int, kind: str) -> int:
    """Seed of random baseline ``r`` of an L0 mask (the same at every lambda: nested masks)."""
    return 1000 * (model_seed + 1) + 10 * r + SEQ2SEQ_KINDS.index(kind)


# ---------------------------------------------------------------------------------------------- the workbench
class OtherMachineModelError(RuntimeError):
    """A cached translation model (e.g. an outputs folder copied from another machine) was trained on another kind of
    machine than this one."""


def check_trained_here(meta: Mapping, device, model_seed: int, folder: Path, profile: str | None = None) -> None:
    """Refuse a cached model that another kind of machine trained (``meta["machine"]``, ``results.machine_kind``):
    every cell of one model -- its evaluations, its retrainings and their reference -- is computed on the kind
    that trained it, never mixed (numbers differ across CPUs in their rounding; a retrained pruned model is compared
    with the reference retrained on the same machine kind). A model folder written before the kind was recorded
    is read as it is."""
    trained_on, here = meta.get("machine"), machine_kind(device)
    if trained_on and trained_on != here:
        raise OtherMachineModelError(
            f"translation model seed {model_seed} ({relative_to_project(folder)}) was trained on {trained_on}; "
            f"this machine is {here}: the cells of one model are computed on the kind of machine that trained it. "
            f"Compute them on such a machine, or train that model again here: move that folder away, then compute its "
            f"cells anew with python -m headprune_utils.run"
            f"{f' --profile {profile}' if profile else ''} --only {NAME} --cells-only --fresh "
            f"--where model_seed={model_seed}." + held_hint(trained_on, here))


class Context:
    """Data, the trained models (trained once per model seed, cached on disk) and cached evaluations.

    A model missing from the cache (``StudyPaths.nmt_model``) is trained here, under the cache's lock
    (``caches.cached``): the same parameters, seed and device type give the same model on any worker."""

    def __init__(self, cfg: NMTHeadsConfig, device: torch.device, paths: StudyPaths):
        self.cfg, self.device, self.paths = cfg, torch.device(device), paths
        self._data = None
        self._models: dict[int, tuple] = {}
        self._encoded: dict[int, tuple] = {}
        self.model_sha: dict[int, str] = {}  # model seed -> hash of the trained weights used here (provenance)

    def data(self):
        """``(train, dev, test)`` ParallelData subsets."""
        if self._data is None:
            c = self.cfg
            kw = dict(data_dir=c.data_dir, direction=c.direction, allow_hub=c.allow_hub)
            self._data = tuple(subset_pairs(load_parallel(c.corpus, split, **kw), size, c.subset_seed)
                               for split, size in (("train", c.train_size), ("dev", c.dev_size), ("test", c.test_size)))
        return self._data

    def folder(self, model_seed: int) -> Path:
        return model_folder(self.paths, self.cfg, model_seed, self.device)

    def checkpoint(self, model_seed: int) -> Path:
        """Where the training of ``model_seed``'s model keeps its resumable state (beside its cache folder)."""
        folder = self.folder(model_seed)
        return folder.with_name(folder.name + ".training-checkpoint.pt")

    def model(self, model_seed: int):
        """``(model, tokenizer, meta, trained_now)``: from memory, the disk cache, or trained now and cached."""
        if model_seed in self._models:
            m, tok, meta = self._models[model_seed]
            return m, tok, meta, False
        trained: list[bool] = []

        def build(tmp: Path) -> None:
            self._train(model_seed, tmp)
            (tmp / f"{KEY_FIELD}.txt").write_text(where.name + "\n", encoding="utf-8")
            trained.append(True)

        def load(path: Path):
            key = path / f"{KEY_FIELD}.txt"
            check_entry_key(path, key.read_text(encoding="utf-8").strip() if key.exists() else None)
            return load_translation_model(path, self.device)

        where = self.folder(model_seed)
        model, tok, meta = cached(where, build, load)
        if trained:  # the model is stored (caches.cached renamed it into place): its resumable state is not needed
            self.checkpoint(model_seed).unlink(missing_ok=True)
        else:
            check_trained_here(meta, self.device, model_seed, where, self.paths.profile)
        self.model_sha[model_seed] = models.weights_sha(model)
        self._models = {model_seed: (model, tok, meta)}  # one model in memory at a time
        self._encoded = {k: v for k, v in self._encoded.items() if k == model_seed}
        return model, tok, meta, bool(trained)

    def _train(self, model_seed: int, folder: Path) -> None:
        """Train the model of ``model_seed`` (tokenizer, model, training, full-model scores) and write it to
        ``folder`` (``caches.cached``'s temporary folder, renamed to the model folder when complete)."""
        c = self.cfg
        train, dev, test = self.data()
        t0 = time.perf_counter()
        tok = train_tokenizer(train.src + train.tgt, vocab_size=c.vocab_size, model=c.tokenizer_model)
        tr = encode_pairs(tok, train, c.max_length, drop_longer=True)
        dv = encode_pairs(tok, dev, c.max_length)
        model = build_translation_model(c.model_config(), tok, seed=model_seed).to(self.device)
        # training may outlive this process (hours on a CPU): it resumes from its checkpoint beside the cache
        # folder (deterministic runs only), removed once the model is stored
        checkpoint = None if c.train_max_seconds is not None else self.checkpoint(model_seed)
        res = train_translation(model, tr, dv, c.train_config(), seed=model_seed, progress=c.progress,
                                checkpoint=checkpoint, machine=machine_kind(self.device))
        scores = evaluate_translation(model, tok, test, batch_size=c.eval_batch_size, num_beams=c.num_beams,
                                      max_source_length=c.max_length)
        meta = {
            "corpus": c.corpus, "direction": f"{train.src_lang}-{train.tgt_lang}",
            "sources": {s.split: s.source for s in (train, dev, test)},
            "n_pairs": {"train": len(tr), "train_dropped_for_length": tr.n_dropped, "dev": len(dv), "test": len(test)},
            "subset_seed": c.subset_seed, "vocab_size": len(tok), "tokenizer_model": c.tokenizer_model,
            "model_config": c.model_config().as_dict(), "train_config": c.train_config().as_dict(),
            "model_seed": model_seed, "n_parameters": sum(p.numel() for p in model.parameters()),
            "steps": res.steps, "stopped": res.stopped, "best_step": res.best_step, "best_dev_loss": res.best_dev_loss,
            "train_seconds": res.seconds, "history": res.history, "test_bleu": scores["bleu"], "test_chrf": scores["chrf"],
            "bleu_signature": scores["bleu_signature"], "seconds_total": time.perf_counter() - t0,
            "device_type": self.device.type, "machine": machine_kind(self.device),
            "training_version": NMT_TRAINING_VERSION,
            "examples": [{"source": s, "reference": r, "hypothesis": h}
                         for s, r, h in list(zip(test.src, test.tgt, scores["hypotheses"]))[:5]],
        }
        save_translation_model(model.cpu(), tok, folder, meta=meta)  # its checkpoint goes once it is in place (model)

    def encoded(self, model_seed: int):
        """``(train, dev, test)`` EncodedPairs with the model's tokenizer (training pairs over max_length dropped)."""
        if model_seed not in self._encoded:
            tok = self.model(model_seed)[1]
            train, dev, test = self.data()
            self._encoded[model_seed] = (encode_pairs(tok, train, self.cfg.max_length, drop_longer=True),
                                         encode_pairs(tok, dev, self.cfg.max_length),
                                         encode_pairs(tok, test, self.cfg.max_length))
        return self._encoded[model_seed]

    def l0_batches(self, model_seed: int) -> list[dict]:
        """The gates' training batches of a model (the same at every lambda and setting), made once."""
        key = ("l0_batches", model_seed)
        if getattr(self, "_l0_key", None) != key:
            self._l0 = l0_batches(self.encoded(model_seed)[0], self.cfg.l0_batch_size,
                                  self.cfg.l0_max_steps or self.cfg.l0_steps, model_seed,
                                  self.device)
            self._l0_key = key
        return self._l0

    def score(self, model, tok, ms: dict[str, torch.Tensor] | None, physically_pruned: bool = False) -> dict:
        """BLEU/chrF (decoding per the parameters) and teacher-forced NLL on the test subset, with ``ms`` zeroed."""
        c = self.cfg
        test = self.data()[2]
        test_enc = encode_pairs(tok, test, c.max_length)
        gates = None
        if ms is not None and not physically_pruned:
            gates = {k: m.to(self.device) for k, m in ms.items() if bool((m < 1).any())} or None
        t0 = time.perf_counter()
        s = evaluate_translation(model, tok, test, batch_size=c.eval_batch_size, num_beams=c.num_beams,
                                 max_source_length=c.max_length, gates=gates)
        nll = dev_loss(model, test_enc, gates=gates)
        hyps = s.pop("hypotheses")
        return {**s, "nll": nll, "mean_hyp_words": float(np.mean([len(h.split()) for h in hyps])),
                "eval_seconds": time.perf_counter() - t0}

    def evaluate(self, model_seed: int, ms: dict[str, torch.Tensor] | None) -> dict:
        """:meth:`score` of the trained model under ``ms``, cached in ``<model folder>/evals/`` by mask and settings."""
        c = self.cfg
        model, tok, _, _ = self.model(model_seed)
        strings = masks_to_strings(ms) if ms is not None else None
        if strings is not None and all("0" not in s for s in strings.values()):
            strings = None  # the full model
        key = fingerprint({"masks": strings, "test_size": c.test_size, "subset_seed": c.subset_seed,
                           "num_beams": c.num_beams, "eval_batch_size": c.eval_batch_size, "max_length": c.max_length,
                           "eval_version": EVAL_VERSION})
        path = self.folder(model_seed) / "evals" / f"{key}.json"
        if path.is_file():
            return {**json.loads(path.read_text()), "eval_cached": True}
        out = self.score(model, tok, ms)
        atomic_write_json(path, {**out, "masks": strings})
        return {**out, "masks": strings, "eval_cached": False}


# ---------------------------------------------------------------------------------------------- cells
def _grid_row(cfg: NMTHeadsConfig, ms: dict[str, torch.Tensor], t: str) -> dict:
    pruned = {k: int((m == 0).sum()) for k, m in ms.items()}
    total = {k: int(m.numel()) for k, m in ms.items()}
    if t in ("all", "none"):
        return {"n_heads_pruned": sum(pruned.values()), "n_heads_total": sum(total.values()), "pruned_by_type": pruned}
    return {"n_heads_pruned": pruned[t], "n_heads_total": total[t], "pruned_by_type": pruned}


def _metrics(m: dict) -> dict:
    keep = ("bleu", "chrf", "nll", "n", "bleu_signature", "chrf_signature", "mean_hyp_words", "eval_seconds", "eval_cached")
    return {k: m[k] for k in keep if k in m}


def run_model_cell(ctx: Context, cell: dict) -> dict:
    t0 = time.perf_counter()
    _, _, meta, trained_now = ctx.model(cell["model_seed"])
    full = ctx.evaluate(cell["model_seed"], None)
    keep = ("n_pairs", "vocab_size", "n_parameters", "steps", "stopped", "best_step", "best_dev_loss", "train_seconds",
            "history", "test_bleu", "examples", "sources", "direction")
    return {**_metrics(full), **{k: meta.get(k) for k in keep}, "trained_now": trained_now,
            "seconds": time.perf_counter() - t0}


def run_mask_cell(ctx: Context, cell: dict) -> dict:
    """A ``prune`` or ``strategy`` cell: the trained model with the cell's masks, no retraining."""
    t0 = time.perf_counter()
    ms = cell_masks(ctx.cfg, cell)
    m = ctx.evaluate(cell["model_seed"], ms)
    return {**_metrics(m), **_grid_row(ctx.cfg, ms, cell["type"]), "masks": masks_to_strings(ms),
            "seconds": time.perf_counter() - t0}


def retrain_checkpoint(ctx: Context, cell: dict, ms: dict[str, torch.Tensor]) -> Path:
    """Where a plateau retraining keeps its resumable state: beside the model's cache folder, one file per
    retraining (:func:`retrain_key`: the masks and the retraining's settings are in its name, so a state is never
    resumed under another mask of the same shape)."""
    folder = ctx.folder(cell["model_seed"])
    return folder.with_name(f"{folder.name}.retrain-{retrain_key(ctx.cfg, cell['model_seed'], ms)}.checkpoint.pt")


def retrain_plateau(history: list[dict], patience: int, min_delta: float = 0.0) -> bool:
    """Whether a retraining's dev-loss curve (``history``: one record per evaluation, ``dev_loss``) reached the
    plateau (``preconditions.plateau``): its last improvement by more than ``min_delta`` is followed by at least
    ``patience`` evaluations without one (the rule that stopped it; a retraining stopped at the cap before that is
    still improving)."""
    return preconditions.plateau(history, patience, min_delta) is None


def retrain_key(cfg: NMTHeadsConfig, model_seed: int, ms: dict[str, torch.Tensor]) -> str:
    """What a retraining's result depends on besides the trained model (whose folder holds the cache): the masks,
    the retraining's settings and data order, and the scoring settings. Two cells with the same key (strategies
    whose masks coincide: at one layer of three, ``top_bottom`` is ``top`` and ``spread`` is ``bottom``) are the same
    deterministic retraining, done once."""
    return fingerprint({"masks": masks_to_strings(ms), "retrain": cfg.retrain_config().as_dict(),
                        "plateau": cfg.plateau_retraining(), "seed": 10_000 + int(model_seed),
                        "dev_size": cfg.dev_size, "test_size": cfg.test_size, "subset_seed": cfg.subset_seed,
                        "num_beams": cfg.num_beams, "eval_batch_size": cfg.eval_batch_size,
                        "max_length": cfg.max_length, "eval_version": EVAL_VERSION})


def run_retrain_cell(ctx: Context, cell: dict) -> dict:
    """A retraining of the cell's mask (:func:`retrain`), cached beside the model (``<model folder>/retrains/``, by
    :func:`retrain_key`): cells whose masks coincide share one retraining."""
    t0 = time.perf_counter()
    ms = cell_masks(ctx.cfg, cell)
    path = ctx.folder(cell["model_seed"]) / "retrains" / f"{retrain_key(ctx.cfg, cell['model_seed'], ms)}.json"
    if path.is_file():
        out = {**json.loads(path.read_text()), "retrain_cached": True}
    else:
        out = retrain(ctx, cell, ms)
        atomic_write_json(path, out)
        out = {**out, "retrain_cached": False}
    if ctx.cfg.plateau_retraining():  # the result is stored (now, or by a process stopped before it removed its
        retrain_checkpoint(ctx, cell, ms).unlink(missing_ok=True)  # resumable state): that state is not needed
    return {**out, **_grid_row(ctx.cfg, ms, cell["type"]), "seconds": time.perf_counter() - t0}


def retrain(ctx: Context, cell: dict, ms: dict[str, torch.Tensor]) -> dict:
    """Remove the heads of ``ms`` physically, train with the mask fixed, evaluate.

    Fixed regime: ``retrain_steps`` steps, the last weights. Plateau regime (``retrain_patience``): the full models'
    trainer with the dev pairs (those that chose the full model's weights; never the test set), a dev-loss
    evaluation every ``retrain_eval_every`` steps, stopped after ``retrain_patience`` evaluations without one better
    by more than ``retrain_min_delta`` or at ``retrain_max_steps``, the best weights kept; resumable from a
    checkpoint beside the model's cache folder (removed by :func:`run_retrain_cell` once the result is stored). The
    cell stores the dev-loss curve (``retrain_curve``: step, dev loss), where and why it stopped, and whether it
    reached the plateau.

    The data order and dropout noise depend on the model seed only, so every retrain cell of a model (and its
    unpruned reference) sees the same batches: the differences are the masks'."""
    cfg = ctx.cfg
    base, tok, _, _ = ctx.model(cell["model_seed"])
    train_enc, dev_enc, _ = ctx.encoded(cell["model_seed"])
    model = copy.deepcopy(base)
    if any(bool((m < 1).any()) for m in ms.values()):
        prune_heads(model, ms)
    plateau = cfg.plateau_retraining()
    checkpoint = retrain_checkpoint(ctx, cell, ms) if plateau else None
    res = train_translation(model, train_enc, dev_enc if plateau else None, cfg.retrain_config(),
                            seed=10_000 + cell["model_seed"], progress=False, checkpoint=checkpoint,
                            machine=machine_kind(ctx.device))
    m = ctx.score(model, tok, ms, physically_pruned=True)
    del model
    out = {**_metrics(m), "masks": masks_to_strings(ms),
           "train_loss_last": res.history[-1]["train_loss"] if res.history else math.nan, "retrain_steps": res.steps}
    if plateau:
        curve = [{"step": int(h["step"]), "dev_loss": float(h["dev_loss"]), "train_loss": float(h["train_loss"])}
                 for h in res.history]
        out.update(retrain_regime="plateau", retrain_curve=curve, retrain_stopped=res.stopped,
                   retrain_best_step=int(res.best_step), retrain_best_dev_loss=float(res.best_dev_loss),
                   retrain_patience=int(cfg.retrain_patience), retrain_max_steps=int(cfg.retrain_max_steps),
                   retrain_min_delta=float(cfg.retrain_min_delta),
                   reached_plateau=retrain_plateau(curve, int(cfg.retrain_patience), float(cfg.retrain_min_delta)))
    return out


def run_roles_cell(ctx: Context, cell: dict) -> dict:
    cfg = ctx.cfg
    t0 = time.perf_counter()
    model, tok, _, _ = ctx.model(cell["model_seed"])
    train, dev, _ = ctx.data()
    ud = (specialized.load_ud_ewt(cfg.ud_split, cfg.data_dir, max_sentences=cfg.ud_sentences) if cfg.syntactic else [])
    n_roles = cfg.role_sentences or len(dev)
    measured = encoder_roles(model, tok, dev.src[:n_roles], train.src, ud, cfg.max_length, cfg.relations,
                             cfg.syntactic_margin, glue_workbench.EVAL_BATCH)
    dev_enc = ctx.encoded(cell["model_seed"])[1]
    n_imp = cfg.importance_size or len(dev_enc)
    sub = type(dev_enc)(dev_enc.src_ids[:n_imp], dev_enc.tgt_ids[:n_imp], dev_enc.pad_id, dev_enc.decoder_start_id)
    importance, nll_full = ablation_nll(model, sub, head_shape(model))
    return {"roles": measured, "importance": importance, "dev_nll_full": nll_full, "n_role_sentences": n_roles,
            "n_ud_sentences": len(ud), "n_importance_pairs": len(sub), "seconds": time.perf_counter() - t0}


def l0_batches(enc, batch_size: int, steps: int, seed: int, device) -> list[dict]:
    """``steps`` shuffled, length-grouped training batches of ``batch_size`` pairs (the same at every lambda)."""
    out: list[dict] = []
    epoch = 0
    while len(out) < steps:
        for idx in train_batches(enc.lengths, batch_size, seed=1000 * seed + epoch):
            out.append(collate_pairs(enc, idx, device))
            if len(out) >= steps:
                break
        epoch += 1
    return out


def nmt_loss(model, batch: dict) -> torch.Tensor:
    """Mean per-token NLL of the targets (no label smoothing): the gates' task loss."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return label_smoothed_loss(model(**inputs).logits, batch["labels"], nll=False)[0]


def run_l0_cell(ctx: Context, cell: dict, batches: list[dict]) -> dict:
    cfg = ctx.cfg
    ms = cell["model_seed"]
    t0 = time.perf_counter()
    model, _, _, _ = ctx.model(ms)
    kinds = l0_kinds(cell["setting"])
    set_seed(ms)  # the gate noise: the same at every lambda
    gates = HardConcreteGateDict.for_model(model, kinds=kinds, beta=cfg.temperature, gamma=cfg.stretch_low,
                                           zeta=cfg.stretch_high)
    settle = ({"until": lambda h: bool(gates_settled(h)[0]), "min_steps": cfg.l0_steps}
              if cfg.l0_max_steps is not None else {})
    res = l0_train(model, gates, batches, cell["lam"], steps=len(batches), lr=cfg.l0_lr, loss_fn=nmt_loss, **settle)
    seconds_train = time.perf_counter() - t0
    shapes = cfg.shapes()
    full = {k: torch.ones(*s) for k, s in shapes.items()}
    l0_masks = {**full, **res.mask}
    l0 = ctx.evaluate(ms, l0_masks)
    randoms = []
    for r in range(cfg.n_random_baselines):
        rm = dict(full)
        for k in kinds:
            n_layers, n_heads = shapes[k]
            rm[k] = masks.random_mask(n_layers, n_heads, int((res.mask[k] == 0).sum()), random_seed(ms, r, k))
        randoms.append((rm, ctx.evaluate(ms, rm)))
    step = max(1, len(res.history) // 100)
    return {
        **{f"{k}_l0": v for k, v in _metrics(l0).items()},
        "bleu_random": [m["bleu"] for _, m in randoms], "chrf_random": [m["chrf"] for _, m in randoms],
        "nll_random": [m["nll"] for _, m in randoms],
        "bleu_random_mean": float(np.mean([m["bleu"] for _, m in randoms])),
        "kept_by_type": {k: int(res.mask[k].sum()) for k in kinds},
        "heads_by_type": {k: int(res.mask[k].numel()) for k in kinds},
        "n_kept": sum(int(res.mask[k].sum()) for k in kinds), "n_heads_total": sum(int(res.mask[k].numel()) for k in kinds),
        "masks": masks_to_strings({k: res.mask[k] for k in kinds}),
        "random_masks": [masks_to_strings({k: rm[k] for k in kinds}) for rm, _ in randoms],
        "log_alpha": {k: v.detach().cpu().tolist() for k, v in gates.log_alpha.items()},
        "open_prob": {k: v.detach().cpu().tolist() for k, v in gates.open_prob().items()},
        "history": res.history[::step] + ([res.history[-1]] if (len(res.history) - 1) % step else []),
        "seconds_train": seconds_train, "seconds": time.perf_counter() - t0,
        **({"l0_steps_trained": len(res.history)} if cfg.l0_max_steps is not None else {}),
    }


def run_cell(ctx: Context, cell: dict) -> dict:
    """One cell's result (pure of the store: the driver saves it), given its model (trained by the context
    when the cache lacks it)."""
    kind = cell["kind"]
    if kind == "model":
        return run_model_cell(ctx, cell)
    if kind == "roles":
        return run_roles_cell(ctx, cell)
    if kind in ("prune", "strategy"):
        return run_mask_cell(ctx, cell)
    if kind == "l0":
        return run_l0_cell(ctx, cell, ctx.l0_batches(cell["model_seed"]))
    if kind in ("retrain", "retrain_strategy"):
        return run_retrain_cell(ctx, cell)
    raise ValueError(f"unknown cell kind {kind!r}")


class NMTHeads(Study):
    """Study 7 (see the module docstring)."""

    name = NAME
    notebook = "07_nmt_heads.ipynb"
    Config = NMTHeadsConfig
    claims = CLAIMS  # data, with their rules and gates (nmt_heads_claims); decided by verdicts
    model_axes = ("model_seed",)  # one trained translation model per model seed (a cell's ``seed`` draws its mask)
    # a stored result: BLEU and chrF in [0, 100] (also each random mask's), the losses (NLL, nats per token) not
    # negative, the gates' open probabilities in [0, 1], the masks agreeing with the counts of heads pruned, kept
    # and in all (checked on every read of a cell)
    metric_ranges = {**Study.metric_ranges,
                     **dict.fromkeys(("bleu", "bleu_l0", "bleu_random", "bleu_random_mean", "test_bleu", "chrf",
                                      "chrf_l0", "chrf_random"), PERCENT),
                     **dict.fromkeys(("nll", "nll_l0", "nll_random", "best_dev_loss", "dev_nll_full",
                                      "train_loss_last", "eval_seconds", "eval_seconds_l0", "seconds_train",
                                      "train_seconds", "retrain_best_dev_loss"), NON_NEGATIVE),
                     "open_prob": UNIT}

    def consistency_problem(self, cell, result):
        masks = result.get("masks")
        if not isinstance(masks, dict):
            return None
        for t, m in masks.items():
            if (why := mask_problem(m, f"masks[{t!r}]")):
                return why
        zeros = {t: m.count("0") for t, m in masks.items()}
        ones = {t: m.count("1") for t, m in masks.items()}
        heads = masks[cell["type"]] if cell.get("type") in masks else "".join(masks.values())
        expected = {"n_heads_pruned": sum(zeros.values()), "n_kept": sum(ones.values()),
                    "pruned_by_type": zeros, "kept_by_type": ones,
                    "n_heads_total": heads.count("0") + heads.count("1")}
        for name, value in expected.items():
            if name in result and result[name] != value:
                return (f"the masks prune {sum(zeros.values())} and keep {sum(ones.values())} heads "
                        f"({', '.join(f'{t}: {ones[t]} of {ones[t] + zeros[t]} kept' for t in masks)}), but {name} = "
                        f"{result[name]!r} (it should be {value!r}): the masks and their counts disagree")
        return None

    def plan(self, cfg: NMTHeadsConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: NMTHeadsConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def context(self, cfg: NMTHeadsConfig, device, paths: StudyPaths) -> Context:
        return Context(cfg, device, paths)

    def run(self, ctx: Context, cells: list[Cell], inputs: Mapping[str, dict]) -> Iterator[tuple[Cell, dict]]:
        for cell in cells:  # the model cell's result is not read: the context loads (or trains) the model
            yield cell, run_cell(ctx, dict(cell.axes))

    def data_fingerprints(self, cfg: NMTHeadsConfig) -> dict:
        return {cfg.corpus: data_source(cfg)}

    def provenance(self, ctx: Context, cell: Cell) -> dict:
        """``{"full_model_sha": ...}``: the hash of the trained model every cell of a model seed starts from, so that
        cells of two trainings of one model (a resumed run that retrained it elsewhere) are never mixed
        (``execution.check_one_model``)."""
        sha = ctx.model_sha.get(int(cell.axes["model_seed"])) if "model_seed" in cell.axes else None
        return {"full_model_sha": sha} if sha else {}

    def run_params(self, cfg: NMTHeadsConfig) -> dict:
        return {"data_source": data_source(cfg), "model_cache": "<outputs root>/_nmt/<profile>/ (StudyPaths.nmt_cache)"}


STUDY = NMTHeads()

__all__ = [
    "NAME", "STUDY", "NMTHeads", "NMTHeadsConfig", "Context", "TYPES", "REGIMES", "plan_cells", "model_cell_axes",
    "plan_costs", "cell_masks", "run_cell", "model_folder", "model_key", "study_fingerprint", "source_queries",
    "role_thresholds",
    # the claims (nmt_heads_claims) and the analysis (nmt_heads_analysis), re-exported so the notebook needs one module
    "VOITA_ALL_TYPES", "VOITA_BASELINE_BLEU", "VOITA_FRACTION", "TYPE_CONTRASTS", "ROLE_NAMES", "full_models",
    "random_rows", "random_summary", "random_drops", "prunable", "retrain_table", "type_contrasts",
    "strategy_rows", "strategy_summary", "strategy_contrasts", "strategy_mask_rows", "role_source", "roles",
    "role_counts", "role_map", "encoder_scores", "importance_table", "score_agreement", "l0_curve",
    "l0_by_type", "l0_contrasts", "type_prunability", "l0_survival_source", "survival", "survival_tests",
    "survival_map", "survival_by_role", "roles_at_budget", "rare_criterion_counts", "CLAIMS", "MEASURES", "SEMANTICS",
    "scale", "verdicts", "RETRAINED", "retraining_convergence", "retraining_curves", "retrain_cost", "retrain_plateau",
    "retrain_key", "retrain",
]
