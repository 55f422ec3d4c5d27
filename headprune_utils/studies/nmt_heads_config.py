"""The parameters of study 7 (``nmt_heads``): one frozen dataclass, defaults = the quick CPU profile, checked at once.

``NMTHeadsConfig.check`` refuses, before any training: an unknown attention type, an impossible budget, a strategy
list without ``random``, an unknown corpus or direction, and data that cannot be reached (no local split and no
usable hub; UD English-EWT missing while syntactic heads are asked for) -- each with a message saying what to fix.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from headprune_utils.model import masks, strategies
from headprune_utils.model.architecture import SEQ2SEQ_KINDS
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.tasks.data import DataUnavailableError, hub_blocked, resolve_data_dir
from headprune_utils.train.translation import NMTTrainConfig
from headprune_utils.tasks.translation_data import CORPORA, corpus_fingerprint, local_available
from headprune_utils.model.models import is_planning
from headprune_utils.measure.specialized import RARE_SHARE
from headprune_utils.model.translation_model import NMTModelConfig
from headprune_utils.studies.glue_workbench import check_device

__all__ = ["NMTHeadsConfig", "TYPES", "data_source"]

TYPES: tuple[str, ...] = (*SEQ2SEQ_KINDS, "all")  # attention types a random mask may prune ("all": the three jointly)


@dataclass(frozen=True)
class NMTHeadsConfig:
    """Parameters of the translation study; the defaults are the quick CPU profile."""

    # data
    corpus: str = "multi30k"                    # translation_data.CORPORA: multi30k | newstest-en-ru | wmt14-en-de | wmt14-en-ru
    direction: str | None = None                # "en-de"-style; None: English -> the other language
    data_dir: str | None = None                 # local data root; None: $HEADPRUNE_DATA_DIR, else ../shared/data beside the checkout, else the hub
    allow_hub: bool = True                      # fall back to the Hugging Face hub for splits missing locally
    train_size: int | None = None               # training pairs (None: all; Multi30k has 29,000)
    dev_size: int | None = 500                  # dev pairs (early stopping, roles, importance, L0 gates never see test)
    test_size: int | None = 200                 # test pairs every BLEU is measured on (None: all)
    subset_seed: int = 0                        # which pairs form the subsets
    max_length: int = 128                       # tokens; longer training pairs are left out, test sources truncated
    # tokenizer and model (Marian-style Transformer from scratch)
    vocab_size: int = 6000                      # joint subword vocabulary of source and target
    tokenizer_model: Literal["bpe", "unigram"] = "bpe"
    encoder_layers: int = 3
    decoder_layers: int = 3
    heads: int = 4                              # per layer and attention type
    d_model: int = 256
    ffn_dim: int = 512
    dropout: float = 0.0                        # residual and embedding dropout (0: a few hundred steps learn faster; paper: 0.1)
    model_seeds: list[int] = field(default_factory=lambda: [0])  # one trained model per seed (init and data order)
    # training
    max_steps: int = 500                        # optimiser steps (the budget; ~7 min on 2 CPU cores)
    max_tokens: int | None = 1500               # token-based batches: sentences x longest <= max_tokens (None: batch_size sentences)
    batch_size: int = 128                       # sentences per batch (with max_tokens: the cap)
    lr: float = 1e-3                            # peak learning rate after the warm-up (then inverse square root)
    warmup_steps: int = 200
    label_smoothing: float = 0.1
    eval_every: int = 100                       # steps between dev-loss evaluations (early stopping, best weights kept)
    patience: int | None = 3                    # evaluations without a better dev loss before stopping (None: never)
    min_delta: float = 0.0                      # nats: a lower dev loss counts as better (for patience) only by more than this
    train_max_seconds: float | None = None      # wall-clock cap on training (None: none; then training is deterministic)
    fused_loss: bool = False                    # the loss with the output projection a block of tokens at a time
                                                # (fused_vocab_loss; full models and retrainings): ~1.4x a step here,
                                                # equal to float rounding, not bit for bit (so in the models' keys)
    # decoding and evaluation
    num_beams: int = 1                          # 1: greedy decoding
    eval_batch_size: int = 100                  # sentences per decoding batch
    # random pruning
    types: list[str] = field(default_factory=lambda: list(TYPES))  # attention types pruned: enc | dec | cross | all (jointly)
    fractions: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])  # share of that type's heads pruned, in (0, 1]
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # mask seeds (random pruning, strategies)
    retrain_types: list[str] = field(default_factory=lambda: ["all"])  # prune_then_train cells: these types ...
    retrain_fractions: list[float] = field(default_factory=lambda: [0.5])  # ... at these fractions ([]: no such cells)
    retrain_seeds: list[int] | None = None      # mask seeds of the retraining cells (None: seeds)
    retrain_strategy_budgets: list[float] = field(default_factory=list)  # strategies retrained with the mask fixed,
                                                # per retrain_strategy_types x strategies x retrain_seeds at these budgets ([]: none)
    retrain_strategy_types: list[str] | None = None  # the types whose strategy masks are retrained (None: strategy_types)
    retrain_steps: int = 30                     # fixed regime: training steps after pruning (and for the unpruned reference)
    # plateau regime (retrain_patience set): each pruned model trains with its mask fixed until its dev loss (the dev
    # pairs that chose the full model's weights; never the test set) has not improved for retrain_patience
    # evaluations, one every retrain_eval_every steps, at most retrain_max_steps steps; the best weights are kept
    retrain_patience: int | None = None         # None: the fixed regime (retrain_steps steps, no dev evaluation)
    retrain_eval_every: int = 250               # steps between dev-loss evaluations of a retraining (plateau regime)
    retrain_max_steps: int | None = None        # the cap of a retraining (plateau regime; required there)
    retrain_min_delta: float = 0.0              # as min_delta, for the retrainings (plateau regime)
    retrain_lr: float = 3e-4                    # peak learning rate of that continued training
    retrain_warmup: int = 10
    # location strategies (strategies.py) per attention type, evaluation only
    strategy_types: list[str] = field(default_factory=lambda: ["enc", "dec", "cross"])
    strategies: list[str] = field(default_factory=lambda: list(strategies.STRATEGIES))  # must include "random"
    strategy_budgets: list[float] = field(default_factory=lambda: [0.33])  # share of the type's heads pruned (3 layers: 0.33 = one layer)
    # encoder heads
    role_sentences: int | None = 300            # dev source sentences for confidence, positional and rare-word heads
    importance_size: int | None = 200           # dev pairs for each head's ablation importance (dev NLL increase)
    syntactic: bool = True                      # syntactic heads on UD English-EWT (needs an English source)
    ud_split: Literal["train", "dev", "test"] = "dev"
    ud_sentences: int | None = 200              # first UD sentences (None: all)
    relations: list[str] = field(default_factory=lambda: ["nsubj", "obj", "amod", "advmod"])
    # L0 gates (Hard Concrete), frozen model
    l0_settings: list[str] = field(default_factory=lambda: ["enc", "all"])  # gated types: enc | dec | cross | all
    lambdas: list[float] = field(default_factory=lambda: [0.02, 0.04, 0.05, 0.06, 0.08, 0.16])  # penalty per open gate (nats)
    l0_steps: int = 30                          # gate optimiser steps (batches of the training set)
    l0_max_steps: int | None = None             # set: train the gates past l0_steps until they settled (the rule the
                                                # claims' gate reads: analysis.preconditions.gates_settled), at most this
                                                # many steps; None: exactly l0_steps
    l0_batch_size: int = 32                     # sentence pairs per gate step
    l0_lr: float = 0.15                         # Adam on log_alpha
    temperature: float = 0.33                   # Hard Concrete beta (Voita et al.)
    stretch_low: float = -0.1                   # stretch interval (gamma, zeta)
    stretch_high: float = 1.1
    n_random_baselines: int = 1                 # random masks per L0 mask, with its heads per type
    # analysis only
    positional_threshold: float = 0.9           # positional if max attention on prev/next for at least this share of tokens
    syntactic_margin: float = 0.1               # syntactic if accuracy beats the best fixed-offset baseline by this
    rare_share: float = RARE_SHARE              # rare-word if its max attention is on the sentence's least frequent token in MORE than this share of queries (0.5: Voita et al.'s definition, fixed from the paper)
    tolerance: float = 1.0                      # BLEU points: a drop up to this counts as "limited"
    n_permutations: int = 10000                 # permutations of the survival test
    device: str = "auto"                        # "auto" (CUDA when present) | "cpu" | "cuda"
    progress: bool = True

    # ------------------------------------------------------------------ checks
    def shapes(self) -> dict[str, tuple[int, int]]:
        """``{"enc": (L_enc, H), "dec": (L_dec, H), "cross": (L_dec, H)}`` of the configured model."""
        return {"enc": (self.encoder_layers, self.heads), "dec": (self.decoder_layers, self.heads),
                "cross": (self.decoder_layers, self.heads)}

    def source_lang(self) -> str:
        spec = CORPORA[self.corpus]
        return (self.direction or f"{spec.langs[0]}-{spec.langs[1]}").split("-")[0]

    def check(self) -> None:
        check_fields(self)
        if self.corpus not in CORPORA:
            raise ParameterError(f"corpus: unknown parallel corpus {self.corpus!r}; choose one of {sorted(CORPORA)}")
        spec = CORPORA[self.corpus]
        if self.direction is not None:
            allowed = {f"{a}-{b}" for a, b in (spec.langs, spec.langs[::-1])}
            if self.direction not in allowed:
                raise ParameterError(f"direction must be one of {sorted(allowed)} for {self.corpus}, got {self.direction!r}")
        for name in ("train_size", "dev_size", "test_size", "role_sentences", "importance_size", "ud_sentences"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParameterError(f"{name} must be a positive integer or None, got {v}")
        for name in ("max_length", "encoder_layers", "decoder_layers", "heads", "d_model", "ffn_dim", "max_steps",
                     "batch_size", "eval_every", "num_beams", "eval_batch_size", "retrain_steps", "l0_steps",
                     "l0_batch_size", "n_random_baselines", "n_permutations"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.l0_max_steps is not None and self.l0_max_steps < self.l0_steps:
            raise ParameterError(f"l0_max_steps ({self.l0_max_steps}) must be >= l0_steps (the fewest steps the gates "
                                 f"train, {self.l0_steps})")
        if self.vocab_size <= 4:
            raise ParameterError(f"vocab_size must exceed the 4 special tokens, got {self.vocab_size}")
        if self.d_model % self.heads:
            raise ParameterError(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        if self.max_tokens is not None and self.max_tokens < self.max_length:
            raise ParameterError(f"max_tokens={self.max_tokens} is below max_length={self.max_length}: the longest "
                                 "training pairs would not fit a batch")
        for name in ("lr", "retrain_lr", "l0_lr", "temperature"):
            if not getattr(self, name) > 0:
                raise ParameterError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("dropout", "label_smoothing"):
            if not 0 <= getattr(self, name) < 1:
                raise ParameterError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("warmup_steps", "retrain_warmup"):
            if getattr(self, name) < 0:
                raise ParameterError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("min_delta", "retrain_min_delta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ParameterError(f"{name} must be a finite number >= 0 (nats of dev loss), got {v!r}")
        if self.min_delta > 0 and self.patience is None:
            raise ParameterError(f"min_delta={self.min_delta:g} is a rule of early stopping: set patience too")
        if self.retrain_min_delta > 0 and self.retrain_patience is None:
            raise ParameterError(f"retrain_min_delta={self.retrain_min_delta:g} is a rule of retraining to the plateau: "
                                 "set retrain_patience too")
        if not isinstance(self.fused_loss, bool):
            raise ParameterError(f"fused_loss must be true or false, got {self.fused_loss!r}")
        if self.patience is not None and self.patience < 1:
            raise ParameterError(f"patience must be >= 1 or None, got {self.patience}")
        self._check_retraining()
        if self.train_max_seconds is not None and not self.train_max_seconds > 0:
            raise ParameterError(f"train_max_seconds must be > 0 or None, got {self.train_max_seconds}")
        for name in ("seeds", "model_seeds"):
            v = getattr(self, name)
            if not v or len(set(v)) != len(v):
                raise ParameterError(f"{name} must be a non-empty list without repeats, got {v}")
            if any(x < 0 for x in v):
                raise ParameterError(f"{name} must be >= 0 (numpy seeds are unsigned), got {v}")
        if self.subset_seed < 0:
            raise ParameterError(f"subset_seed must be >= 0, got {self.subset_seed}")
        self._check_types("types", self.types, TYPES, empty_ok=False)
        self._check_types("retrain_types", self.retrain_types, TYPES, empty_ok=True)
        self._check_types("strategy_types", self.strategy_types, SEQ2SEQ_KINDS, empty_ok=True)
        self._check_types("l0_settings", self.l0_settings, TYPES, empty_ok=True)
        bad = [s for s in self.strategies if s not in strategies.STRATEGIES]
        if bad:
            raise ParameterError(f"strategies: unknown {bad}; choose from {strategies.STRATEGIES} (importance "
                                 "strategies are not part of this study)")
        if self.strategy_types and "random" not in self.strategies:
            raise ParameterError("strategies must include 'random': every strategy is compared with it")
        if len(set(self.strategies)) != len(self.strategies):
            raise ParameterError(f"strategies must not repeat, got {self.strategies}")
        shapes = self.shapes()
        self._check_fractions("fractions", self.fractions, self.types, shapes, empty_ok=False)
        self._check_fractions("retrain_fractions", self.retrain_fractions, self.retrain_types, shapes, empty_ok=True)
        if self.retrain_strategy_types is not None:
            self._check_types("retrain_strategy_types", self.retrain_strategy_types, SEQ2SEQ_KINDS, empty_ok=False)
        self._check_fractions("retrain_strategy_budgets", self.retrain_strategy_budgets,
                              self.strategy_types_retrained(), shapes, empty_ok=True)
        if self.retrain_strategy_budgets and not self.strategy_types_retrained():
            raise ParameterError("retrain_strategy_budgets needs strategy_types (the grids whose strategies are "
                                 "retrained); set strategy_types or retrain_strategy_budgets: []")
        self._check_fractions("strategy_budgets", self.strategy_budgets, self.strategy_types, shapes,
                              empty_ok=not self.strategy_types)
        if len(set(self.lambdas)) != len(self.lambdas) or any(not l >= 0 for l in self.lambdas) or (
                self.l0_settings and not self.lambdas):
            raise ParameterError(f"lambdas must be distinct numbers >= 0 (at least one with l0_settings), got {self.lambdas}")
        if not (self.stretch_low < 0 and self.stretch_high > 1):
            raise ParameterError(f"need stretch_low < 0 < 1 < stretch_high, got ({self.stretch_low}, {self.stretch_high})")
        if not self.relations or len(set(self.relations)) != len(self.relations):
            raise ParameterError(f"relations must be distinct UD relation names, got {self.relations}")
        if not 0 < self.positional_threshold <= 1 or not 0 < self.rare_share < 1:
            raise ParameterError(f"need 0 < positional_threshold <= 1 and 0 < rare_share < 1, got "
                                 f"{self.positional_threshold} and {self.rare_share}")
        if self.tolerance < 0 or self.syntactic_margin < 0:
            raise ParameterError("tolerance and syntactic_margin must be >= 0")
        check_device(self.device)
        self._check_data()

    def plateau_retraining(self) -> bool:
        """Whether pruned models are retrained to their dev-loss plateau (``retrain_patience`` set) rather than a
        fixed ``retrain_steps``."""
        return self.retrain_patience is not None

    def mask_seeds_retrained(self) -> list[int]:
        """The mask seeds of the retraining cells: ``retrain_seeds``, else ``seeds``."""
        return list(self.seeds if self.retrain_seeds is None else self.retrain_seeds)

    def strategy_types_retrained(self) -> list[str]:
        """The types whose strategy masks are retrained: ``retrain_strategy_types``, else ``strategy_types``."""
        return list(self.strategy_types if self.retrain_strategy_types is None else self.retrain_strategy_types)

    def _check_retraining(self) -> None:
        if self.retrain_seeds is not None:
            v = self.retrain_seeds
            if not v or len(set(v)) != len(v) or any(x < 0 for x in v):
                raise ParameterError(f"retrain_seeds must be None or a non-empty list of distinct seeds >= 0, got {v}")
        if self.retrain_patience is None:
            return
        if isinstance(self.retrain_patience, bool) or self.retrain_patience < 1:
            raise ParameterError(f"retrain_patience must be >= 1 (evaluations without a better dev loss) or None "
                                 f"(the fixed regime), got {self.retrain_patience}")
        if self.retrain_eval_every < 1:
            raise ParameterError(f"retrain_eval_every must be >= 1 (steps between dev-loss evaluations), got "
                                 f"{self.retrain_eval_every}")
        if self.retrain_max_steps is None:
            raise ParameterError("retrain_max_steps must be set with retrain_patience: the cap of a retraining that "
                                 "never reaches its dev-loss plateau")
        need = (self.retrain_patience + 1) * self.retrain_eval_every
        if self.retrain_max_steps < need:
            raise ParameterError(f"retrain_max_steps={self.retrain_max_steps} cannot show a plateau: it needs at least "
                                 f"(retrain_patience + 1) x retrain_eval_every = {need} steps")
        if self.train_max_seconds is not None:
            raise ParameterError("retrain_patience needs deterministic training (resumable retrainings): set "
                                 "train_max_seconds: null")

    @staticmethod
    def _check_types(name: str, values: list[str], allowed: tuple[str, ...], empty_ok: bool) -> None:
        if not values and not empty_ok:
            raise ParameterError(f"{name} must not be empty")
        bad = [v for v in values if v not in allowed]
        if bad:
            raise ParameterError(f"{name}: unknown attention type(s) {bad}; choose from {allowed}")
        if len(set(values)) != len(values):
            raise ParameterError(f"{name} must not repeat, got {values}")

    @staticmethod
    def _check_fractions(name: str, fractions: list[float], types: list[str], shapes: dict, empty_ok: bool) -> None:
        if not fractions:
            if empty_ok:
                return
            raise ParameterError(f"{name} must not be empty")
        if len(set(fractions)) != len(fractions):
            raise ParameterError(f"{name} must not repeat, got {fractions}")
        for t in types:
            n_layers, n_heads = (sum(s[0] for s in shapes.values()), shapes["enc"][1]) if t == "all" else shapes[t]
            counts: dict[int, float] = {}
            for f in fractions:
                try:
                    n = masks.n_pruned_for_fraction(f, n_layers, n_heads)
                except masks.BudgetError as exc:
                    raise ParameterError(f"{name} ({t}): {exc}") from None
                if n in counts:
                    raise ParameterError(f"{name} ({t}): {counts[n]:g} and {f:g} both prune {n} of "
                                         f"{n_layers * n_heads} heads once rounded (one mask under two labels)")
                counts[n] = f
                if n == 0:
                    raise ParameterError(f"{name} ({t}): fraction {f} prunes no head of {n_layers * n_heads} "
                                         "(the unpruned model is the 'model' cell)")

    def _check_data(self) -> None:
        """Every split of the corpus must be reachable now: a missing folder stops the run before any training."""
        try:
            resolve_data_dir(self.data_dir)
        except DataUnavailableError as exc:
            raise ParameterError(f"data_dir: {exc}") from None
        spec = CORPORA[self.corpus]
        missing = [s for s in ("train", "dev", "test") if not local_available(self.corpus, s, self.data_dir)]
        if missing and not is_planning():  # planning (run --plan) sizes the job without the data
            blocked = hub_blocked() if spec.hub is not None and self.allow_hub else None
            if spec.hub is None or not self.allow_hub or blocked:
                why = ("no hub copy" if spec.hub is None else "allow_hub is false" if not self.allow_hub
                       else blocked)
                local = [f"{folder}/{stem}.{{{a},{b}}}[.gz]" for s in missing for folder, stem, (a, b) in spec.local.get(s, [])]
                fixes = [f"set HEADPRUNE_DATA_DIR (or data_dir) to a folder holding {', '.join(local)}"] if local else []
                if spec.hub is not None:
                    fixes.append(f"go online (allow_hub: true, no HF_*_OFFLINE) to download {spec.hub[0]}")
                where = "no local data for split(s) " + str(missing) if spec.local else "the corpus is on the hub only"
                raise ParameterError(f"corpus {self.corpus!r}: {where} and the hub cannot be used ({why}). To fix: "
                                     + " or ".join(fixes) + ".")
        if self.syntactic:
            if self.source_lang() != "en":
                raise ParameterError(f"syntactic heads are measured on UD English-EWT, but the source language is "
                                     f"{self.source_lang()!r}: set syntactic: false")
            root = resolve_data_dir(self.data_dir)
            path = None if root is None else root / "ud_english_ewt" / f"en_ewt-ud-{self.ud_split}.conllu"
            if path is None or not path.is_file():
                where = "no data root is set" if path is None else f"{path} is missing"
                raise ParameterError(f"syntactic heads need UD English-EWT ({self.ud_split} split), but {where}: set "
                                     "HEADPRUNE_DATA_DIR (or data_dir) to a folder holding ud_english_ewt/, or "
                                     "syntactic: false")

    # ------------------------------------------------------------------ derived settings
    def model_config(self) -> NMTModelConfig:
        return NMTModelConfig(encoder_layers=self.encoder_layers, decoder_layers=self.decoder_layers, heads=self.heads,
                              d_model=self.d_model, ffn_dim=self.ffn_dim, dropout=self.dropout,
                              max_positions=max(256, math.ceil(1.5 * self.max_length) + 16))

    def train_config(self) -> NMTTrainConfig:
        return NMTTrainConfig(max_steps=self.max_steps, batch_size=self.batch_size, max_tokens=self.max_tokens,
                              lr=self.lr, warmup_steps=self.warmup_steps, label_smoothing=self.label_smoothing,
                              eval_every=self.eval_every, patience=self.patience, max_seconds=self.train_max_seconds,
                              min_delta=self.min_delta, fused_loss=self.fused_loss)

    def retrain_config(self) -> NMTTrainConfig:
        """The training of a pruned model (mask fixed): the full models' trainer with the retraining's learning rate
        and warm-up; ``retrain_steps`` steps (fixed regime), or until ``retrain_patience`` dev-loss evaluations
        without improvement, at most ``retrain_max_steps`` (plateau regime)."""
        if self.plateau_retraining():
            return NMTTrainConfig(max_steps=int(self.retrain_max_steps), batch_size=self.batch_size,
                                  max_tokens=self.max_tokens, lr=self.retrain_lr, warmup_steps=self.retrain_warmup,
                                  label_smoothing=self.label_smoothing, eval_every=self.retrain_eval_every,
                                  patience=self.retrain_patience, min_delta=self.retrain_min_delta,
                                  fused_loss=self.fused_loss)
        return NMTTrainConfig(max_steps=self.retrain_steps, batch_size=self.batch_size, max_tokens=self.max_tokens,
                              lr=self.retrain_lr, warmup_steps=self.retrain_warmup,
                              label_smoothing=self.label_smoothing, eval_every=self.retrain_steps,
                              fused_loss=self.fused_loss)


def data_source(cfg: NMTHeadsConfig) -> str:
    """``"local:<content hash of every file of the corpus>"`` when every split is on disk, else ``"hub"`` (part of
    what the trained model and the results depend on: changed files never reuse models or cells)."""
    if all(local_available(cfg.corpus, s, cfg.data_dir) for s in ("train", "dev", "test")):
        return "local:" + corpus_fingerprint(cfg.corpus, cfg.data_dir)
    return "hub"
