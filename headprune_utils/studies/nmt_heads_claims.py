"""Study 7's claims as data (:data:`CLAIMS`, ``claims.Claim``): each with its decision rule and margin, its gates
(preconditions as objects), the figure that shows it and the analysis's key of what it measures (``measure``,
:data:`.nmt_heads_analysis.MEASURES`). The analysis decides them with ``claims.evaluate``.

Unit of replication: the trained model (model seed); mask seeds, lambdas and fractions of one model are averaged
within it, never treated as replicates, so with one model every claim is ``not testable`` (the rule's power gate).

Evidence the gates read (``claims.evaluate(..., evidence=...)``): ``histories`` (model seed -> the training history
stored in its model cell) and ``patience`` (evaluations without improvement that make a plateau: the training's
early-stopping patience) for :data:`PLATEAU`; ``retraining`` (``nmt_heads_analysis.retraining_convergence``: one
row per model behind a retrained row, its dev-loss curve's length, best step and whether it reached the plateau)
for :data:`RETRAINED_CONVERGED`; ``role_counts`` (the count of specialized encoder heads, for
``voita.specialized_last_pruned``; role -> count, for ``voita.functions_at_17_of_48``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.analysis.claims import Claim, Gate
from headprune_utils.studies.role_survival import AtBudget, RoomAboveChance, setting_role_found
from headprune_utils.measure.specialized import RARE_SHARE

__all__ = ["CLAIMS", "CLAIM", "ENOUGH_MODELS", "MIN_MODELS", "PLATEAU", "RETRAINED_CONVERGED", "RetrainedConverged", "UNIT", "RARE_NOTE"]

BUDHRAJA, VOITA = "Budhraja et al. 2020", "Voita et al. 2019"
UNIT = "model (model seed)"


def _plateau(m: claims.Measurement, evidence: Mapping) -> str | None:
    return preconditions.Plateau(int(evidence["patience"]), float(evidence.get("min_delta", 0.0))).check(m, evidence)


PLATEAU = preconditions.Check("every trained model's dev loss reached a plateau (no improvement by more than "
                              "`min_delta` over the last `patience` evaluations of its training history)", _plateau)


@dataclass(frozen=True)
class RetrainedConverged(Gate):
    """The convergence gate of the rows on models retrained with the mask fixed (those whose setting has ``only`` as
    one of its ``;``-separated parts, ``preconditions.applies``): every model behind the row -- each retrained model
    and the full model of each unit -- reached the plateau of its dev loss (``preconditions.plateau``: the patience it
    trained with, evaluations after its best without a better one). ``evidence["retraining"]``: the rows of
    ``nmt_heads_analysis.retraining_convergence`` (unit, model, setting, evaluations, steps, best_evaluation,
    best_step, cap, stopped, reached), those of the measurement's units whose setting is "" (full models) or the measurement's. A
    model stopped at its cap still improving is named in the reason; a retrained model without a dev-loss curve (a
    fixed number of steps) leaves nothing to judge, and the row is not testable either.

    The translation models are judged per dev-loss evaluation (steps), not per epoch: the rows are
    ``preconditions.Converged``'s in spirit, with the curve's unit in the reason."""

    only: str = ""

    def text(self) -> str:
        where = f"rows {self.only}: " if self.only else ""
        return (f"{where}every model behind the row (each model retrained with its mask fixed, the unpruned model "
                "retrained alike where it is the reference, and its full model) reached the plateau of its dev loss "
                "(its patience in evaluations after its last improvement by more than its min_delta, without another)")

    def check(self, m: claims.Measurement, evidence: Mapping) -> str | None:
        if not preconditions.applies(self.only, m):
            return None
        conv: pd.DataFrame = evidence["retraining"]
        units = set(m.units)
        rows = conv[conv["unit"].isin(units) & ((conv["setting"] == "") | (conv["setting"] == m.setting))]
        retrained = rows[rows["setting"] != ""]
        if retrained.empty:
            return ("no model retrained with the mask fixed behind this row has a dev-loss record: whether it was "
                    "trained to the plateau cannot be judged")
        no_curve = rows[rows["evaluations"] == 0]
        if len(no_curve):
            steps = sorted({int(x) for x in no_curve["steps"].dropna()})
            fixed = f" (retrained a fixed {', '.join(map(str, steps))} steps)" if steps else ""
            return (f"{len(no_curve)} of {len(rows)} models behind this row have no dev-loss curve{fixed}: whether they "
                    "were trained to the plateau cannot be judged")
        bad = rows[~rows["reached"].astype(bool)]
        if bad.empty:
            return None

        def name(r) -> str:
            at = (f"stopped at the cap of {int(r['cap'])} steps" if pd.notna(r["cap"]) and pd.notna(r["steps"])
                  and int(r["steps"]) >= int(r["cap"]) else f"stopped after {int(r['steps'])} steps"
                  if pd.notna(r["steps"]) else "stopped")
            best = (f"step {int(r['best_step'])}" if pd.notna(r["best_step"])
                    else f"evaluation {int(r['best_evaluation'])} of {int(r['evaluations'])}")
            return f"{r['model']} of model {r['unit']} ({at}, best dev loss at {best})"

        named = "; ".join(name(r) for r in bad.head(4).to_dict("records"))
        more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
        return (f"not trained to the plateau: {len(bad)} of {len(rows)} models behind this row were still improving "
                f"when training stopped: {named}{more}")


RETRAINED_CONVERGED = RetrainedConverged(only="retrained with the mask fixed")
# every claim read off the L0 gates: they settled before their steps ran out (l0_steps)
GATES_SETTLED = preconditions.GatesSettled()
ROLE_FOUND = preconditions.Check("at least one encoder head of the row's role (its setting) was found",
                                 setting_role_found)

TRAINED = "trained from scratch (translation)"
SMALL = ("the scale column gives the model and corpus (quick and standard: a small Transformer on Multi30k, not "
         "Transformer-base on WMT); BLEU of greedy translations of the test subset")
MODELS = "independently trained models (model seeds) are the units: mask seeds of one model are not replicates"
# Declared with the decision to train 5 translation models (before their data): a t-interval over 2 models rests on
# one degree of freedom, so its width says nothing about model-to-model spread; no word is decided on fewer.
MIN_MODELS = 5


def _enough_models(m: claims.Measurement, evidence: Mapping) -> str | None:
    if m.n_units == 0 or m.n_units >= MIN_MODELS:
        return None  # nothing measured: the row's own reason says why
    return (f"{m.n_units} independently trained model(s) behind the row; a decision needs at least {MIN_MODELS} "
            "(with 2, the interval rests on one degree of freedom)")


ENOUGH_MODELS = preconditions.Check(f"at least {MIN_MODELS} independently trained models (model seeds) behind the row",
                                    _enough_models)
RARE_NOTE = (
    f"rare-word head: its maximum attention falls on the sentence's least frequent token in more than half of the "
    f"queries (rare_share > {RARE_SHARE:g}), fixed from the paper's definition before the data: Voita et al. report "
    "that their head points to the rarest token in 66% of cases (OpenSubtitles) and, for WMT, to one of the two least "
    "frequent tokens in more than 50% of cases; more than half is the majority reading of 'points to the least "
    "frequent token' and the paper's weakest reported level (no ratio over chance, no threshold chosen from our data; "
    "the counts over 0.1-0.9 are a sensitivity, figure rare_criterion_sensitivity). Where ours differs: the tokens are "
    "the pieces of our own subword vocabulary, with their frequencies over our training source side (the model's own "
    "training data, as in the paper, but a much smaller corpus); the queries are dev source sentences; no top-500 "
    "filter (the paper's WMT figure counts only sentences whose rarest token is not among the 500 most frequent): "
    "every sentence counts, since a second frequency threshold would be one more choice the paper's definition does "
    "not make; a least frequent token tied with others counts (any of them is a hit)")

# a unit's key in the budget table's evidence (budget_misses, role_chances): the L0 setting of the row ("enc" of
# "enc: syntactic") and the model seed
_BUDGET_KEY = lambda m, unit: (m.setting.rsplit(": ", 1)[0], int(unit))  # noqa: E731

CLAIMS: tuple[Claim, ...] = (
    Claim("budhraja.random_prunable", f"{BUDHRAJA} (claim 1)",
          "A large fraction (>= 50%) of the heads can be pruned at random with limited effect on BLEU, the pruned "
          "model retrained with its mask fixed.",
          claims.NonInferiority(margins.TASK_SCORE),
          metric="per model and attention type (setting): BLEU(random 50% of the type's heads removed, the model "
                 "retrained with the mask fixed to its dev-loss plateau, mean over mask seeds) - BLEU(the same model "
                 "unpruned, retrained alike: to its own plateau, or the same fixed steps); without retraining: "
                 "BLEU(pruned) - BLEU(full)",
          regime=f"{TRAINED}, random heads removed, then retrained with the mask fixed until the dev loss stops "
                 "improving (the paper's regime: the primary rows); without retraining (random heads zeroed): the "
                 "sensitivity rows", gates=(PLATEAU, ENOUGH_MODELS, RETRAINED_CONVERGED), figure="bleu_vs_fraction",
          measure="random_pruned - full", unit=UNIT,
          note=f"the paper fine-tunes pruned models 25 epochs and compares them with its full model, trained to "
               f"convergence; here each to its dev-loss plateau (retrain_patience evaluations without improvement), "
               f"against the unpruned model retrained alike, so that the extra training is in both; rows 'not "
               f"testable' where a model behind them (the reference included) stopped at the cap "
               f"still improving or has no dev-loss curve (a fixed number of retraining steps); the rows without "
               f"retraining are a sensitivity analysis, not the paper's claim; {SMALL}; {MODELS}"),
    Claim("ours.nmt_retraining_recovers", "ours (exploratory)",
          "Training with the mask fixed recovers BLEU lost by pruning.",
          claims.Superiority("greater", margin=margins.TASK_SCORE),
          metric="per model: recovery = BLEU drop without retraining (against the full model) - drop after "
                 "retraining to the dev-loss plateau (against the unpruned model retrained alike), mean over mask seeds",
          regime=f"{TRAINED}, pruned, then trained further with the mask fixed",
          gates=(PLATEAU, ENOUGH_MODELS, RETRAINED_CONVERGED), figure="bleu_vs_fraction", measure="retraining_recovery",
          unit=UNIT,
          note=f"our own claim; decided on models retrained to the dev-loss plateau (retrain_patience), not the "
               f"paper's 25 epochs; rows of the fixed regime (retrain_steps, no dev-loss curve) are 'not testable': "
               f"their recovery measures the step budget; {SMALL}; {MODELS}"),
    Claim("budhraja.location_no_better", f"{BUDHRAJA} (claim 2)",
          "On the Transformer, choosing heads to prune by their layer brings no advantage over random pruning "
          "at the same budget, the pruned models retrained with their masks fixed.",
          claims.Equivalence(margins.TASK_SCORE),
          metric="per model and strategy (setting): BLEU(strategy) - BLEU(random), each mask's model retrained with "
                 "the mask fixed to its dev-loss plateau, paired by type, budget and mask seed, mean within the model",
          regime=f"{TRAINED}, heads removed by location, then retrained with the mask fixed until the dev loss stops "
                 "improving (the paper's regime: the primary rows); without retraining (heads zeroed): the "
                 "sensitivity rows", gates=(PLATEAU, ENOUGH_MODELS, RETRAINED_CONVERGED),
          figure="strategy_contrasts", measure="strategy - random", unit=UNIT,
          note=f"the paper fine-tunes after pruning (25 epochs); here each pruned model to its dev-loss plateau, rows "
               f"'not testable' where a model behind them stopped at the cap still improving or has no dev-loss "
               f"curve; the rows without retraining are a sensitivity analysis; {SMALL}; {MODELS}"),
    Claim("ours.type_prunability_random", "ours (exploratory)",
          "Encoder self-attention is the most prunable attention type and encoder-decoder attention the least, "
          "under random pruning without retraining.",
          claims.Superiority("greater", margin=margins.TASK_SCORE),
          metric="per model and ordered pair of types (setting): BLEU with a share of type a pruned - with the same "
                 "share of type b pruned, paired by fraction and mask seed, mean within the model",
          regime=f"{TRAINED}, then random heads zeroed (no retraining)", gates=(PLATEAU, ENOUGH_MODELS), figure="bleu_vs_fraction",
          measure="type a - type b (random)", unit=UNIT,
          note=f"the paper reads it off L0 pruning (voita.type_prunability_l0, Voita et al.'s protocol); random pruning "
               f"of each type, without retraining, is our check of it in another protocol (exploratory; until "
               f"2026-12-06 under the id voita.type_prunability_random); {SMALL}; {MODELS}"),
    Claim("voita.type_prunability_l0", f"{VOITA} (Sec. 6, Table 2)",
          "L0 gates on all three types keep the fewest encoder self-attention heads and the most "
          "encoder-decoder heads.",
          claims.Superiority("greater", margin=margins.SHARE_OF_HEADS),
          metric="per model and ordered pair of types (setting): share of type b's heads kept - share of type a's, "
                 "mean over the lambdas that prune some heads and keep some (gates on all three types)",
          regime=f"{TRAINED}, then L0-gated (the model frozen)", gates=(PLATEAU, ENOUGH_MODELS, GATES_SETTLED), figure="l0_heads_kept",
          measure="kept b - kept a (L0)", unit=UNIT,
          note=f"the gates train on a frozen model for l0_steps steps; {SMALL}; {MODELS}"),
    Claim("voita.enc_most_prunable", f"{VOITA} (Sec. 6.2)",
          "Most encoder heads can be pruned with little BLEU loss (the paper: 38 of 48 pruned, -0.15 BLEU).",
          claims.NonInferiority(margins.TASK_SCORE),
          metric="per model: BLEU(encoder L0 mask keeping the most heads among those keeping fewer than half: 'most' "
                 "pruned) - "
                 "BLEU(full)",
          regime=f"{TRAINED}, then L0-gated on the encoder (the model frozen)", gates=(PLATEAU, ENOUGH_MODELS, GATES_SETTLED),
          figure="l0_heads_kept", measure="enc L0 under half - full", unit=UNIT,
          note=f"fewer than half of this encoder's heads kept (the most-kept such mask), not the paper's 10 of 48; "
               f"{SMALL}; {MODELS}"),
    Claim("voita.l0_beats_random", f"{VOITA} (Sec. 6)",
          "L0 gates choose heads that matter: better than random heads at the same counts per type.",
          claims.Superiority("greater", margin=margins.TASK_SCORE),
          metric="per model and L0 setting: BLEU(L0 masks) - BLEU(random masks with the same heads per type), mean "
                 "over the lambdas that prune something and keep something",
          regime=f"{TRAINED}, then L0-gated (the model frozen)", gates=(PLATEAU, ENOUGH_MODELS, GATES_SETTLED), figure="l0_bleu",
          measure="L0 - random", unit=UNIT,
          note=f"the paper compares with the same architectures trained from scratch; random masks at the same "
               f"counts are our test of 'heads that matter'; {SMALL}; {MODELS}"),
    Claim("voita.positional_heads", f"{VOITA} (Sec. 5)",
          "Positional heads exist in the encoder (max attention on the previous or next token >= 90% of the time).",
          claims.Presence(),
          metric="positional encoder heads per model (max attention on the previous, or on the next, token for >= "
                 "positional_threshold of the queries, dev source sentences); presence: the share of models with "
                 "one, exact binomial against 1/2",
          regime=TRAINED, gates=(PLATEAU, ENOUGH_MODELS), figure="role_map", measure="encoder_heads:positional", unit=UNIT,
          note=f"the paper also finds these heads among the confident ones, our criterion asks no confidence; "
               f"{MODELS}"),
    Claim("voita.syntactic_heads", f"{VOITA} (Sec. 5)",
          "Syntactic heads exist: they beat the best fixed-offset baseline by >= 10 points on UD relations.",
          claims.Presence(),
          metric="syntactic encoder heads per model on UD English-EWT (nsubj, obj, amod, advmod, both directions); "
                 "presence: the share of models with one, exact binomial against 1/2",
          regime=TRAINED, gates=(PLATEAU, ENOUGH_MODELS), figure="role_map", measure="encoder_heads:syntactic", unit=UNIT,
          note="needs an English source (UD English-EWT, out of domain for Multi30k captions), not the paper's "
               f"parses of its own data; {MODELS}"),
    Claim("voita.rare_word_head", f"{VOITA} (Sec. 5)",
          "A rare-word head exists (attends to the least frequent token; one, in the first layer).",
          claims.Presence(),
          metric="rare-word encoder heads IN THE FIRST LAYER per model (its maximum attention on the sentence's least "
                 "frequent token in more than half of the queries); presence: the share of models with one, exact "
                 "binomial against 1/2",
          regime=TRAINED, gates=(PLATEAU, ENOUGH_MODELS), figure="role_map", measure="encoder_heads:rare-word", unit=UNIT,
          note=f"{RARE_NOTE}; {MODELS}"),
    Claim("voita.important_are_confident", f"{VOITA} (Sec. 4)",
          "The most important encoder heads are the most confident.",
          claims.Superiority("greater", margin=margins.CORRELATION),
          metric="per model: Spearman(ablation importance = dev NLL increase when the head alone is zeroed, "
                 "confidence) over its encoder heads",
          regime=TRAINED, gates=(PLATEAU, ENOUGH_MODELS), figure="encoder_scores", measure="importance_confidence_spearman",
          unit=UNIT, note=f"importance here is the NLL increase when the head alone is zeroed, not LRP; {MODELS}"),
    Claim("voita.specialized_last_pruned", f"{VOITA} (Sec. 6.2)",
          "Specialized heads are the last to be pruned.",
          claims.Superiority("greater", margin=margins.AUC),
          metric="per model and L0 setting: AUC of the survival level, specialized vs the other encoder heads of the "
                 "same layer, mean over the layers with both, minus 0.5",
          regime=f"{TRAINED}, then L0-gated (the model frozen)", gates=(PLATEAU, ENOUGH_MODELS, GATES_SETTLED, preconditions.RoleFound("specialized")),
          figure="survival_by_role", measure="specialized_survival_auc", unit=UNIT,
          note=f"within layers (survival depends on the layer); {RARE_NOTE}; {MODELS}"),
    Claim("voita.functions_at_17_of_48", f"{VOITA} (Sec. 6.2)",
          "With 17 of 48 encoder heads kept, every identified head function is still present.",
          claims.Superiority("greater", margin=margins.SHARE_OF_HEADS),
          metric="per model, L0 setting and role (setting): 1 if the mask nearest 17/48 of the encoder heads keeps "
                 "one of the role's heads, minus the chance that a random mask of that size would",
          regime=f"{TRAINED}, then L0-gated (the model frozen)",
          gates=(PLATEAU, ENOUGH_MODELS, GATES_SETTLED, ROLE_FOUND,
                 AtBudget(key=_BUDGET_KEY), RoomAboveChance(margins.SHARE_OF_HEADS, key=_BUDGET_KEY)),
          figure="survival_map", measure="roles_kept_at_17_of_48", unit=UNIT,
          note=f"17/48 of this encoder's heads, not 17 heads; presence beyond chance, since a mask of that size keeps "
               f"a role's head by chance alone; {MODELS}"),
)
CLAIM: dict[str, Claim] = {c.id: c for c in CLAIMS}
