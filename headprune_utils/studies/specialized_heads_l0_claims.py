"""Study 6's claims as data (:data:`CLAIMS`, ``claims.Claim``): each with its decision rule and margin, its gates
(preconditions as objects), the figure that shows it and the analysis's key of what it measures (``measure``,
:data:`.specialized_heads_l0_analysis.MEASURES`). The analysis decides them with ``claims.evaluate``.

Which model the role claims are about. Every fine-tuned model here starts from ONE pre-trained encoder, which
already has (or lacks) the positional, syntactic and rare-word heads; its fine-tuned copies are pseudo-replicates for
"a model trained this way has such heads", so Voita et al.'s existence claims are about THE pre-trained model (n =
1): described (the count of its heads, and which when few), never tested (:func:`one_pretrained_model`, a gate that
always fails naming the count). What the copies do test is a claim of our own: the role survives fine-tuning
(``ours.*_survive*``; :func:`pretrained_has_role`: nothing can survive when the pre-trained model has no such head).

The rare-word head: a head whose maximum attention falls on the sentence's least frequent token in MORE than half of
the queries (``rare_share`` > :data:`headprune_utils.measure.specialized.RARE_SHARE` = 0.5), fixed from the paper before the
data (:data:`RARE_NOTE` says where ours differs from the paper and why).

Evidence the gates read (``claims.evaluate(..., evidence=...)``): ``full`` ((task, seed) -> full-model score) and
``chance`` (task -> chance score) for :data:`TRAINED`; ``convergence`` (one row per full model:
``studies.convergence``) for :data:`CONVERGED`; ``pretrained_heads`` (role -> the pre-trained model's
(layer, head) list of that role) for the role claims; ``role_counts`` (task -> count of specialized heads, for
``voita.specialized_last_pruned``; role -> task -> count, for ``voita.functions_at_17_of_48``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.analysis.claims import Claim
from headprune_utils.studies.role_survival import BUDGET_TOLERANCE, AtBudget, RoomAboveChance, setting_role_found
from headprune_utils.studies.specialized_heads_l0_analysis import (MOST_BELOW_HALF, PAPER_SHARE_READING,
                                                                  PAPER_SHARE_TEXT)
from headprune_utils.measure.specialized import RARE_SHARE

__all__ = ["CLAIMS", "CLAIM", "ROLE_CLAIMS", "TRAINED", "TRAINED_SHARE", "CONVERGED", "FINE_TUNED_GATES", "PRETRAINED_TASK", "PRETRAINED_UNIT", "UNIT",
           "RARE_NOTE", "heads_text", "one_pretrained_model", "pretrained_has_role"]

VOITA = "Voita et al. 2019"
UNIT = claims.DEFAULT_UNIT  # a fine-tuned model (task x seed)
PRETRAINED_TASK = "pre-trained model"  # the task column of the rows about the one pre-trained model
PRETRAINED_UNIT = "pre-trained model"
TRAINED_SHARE = 0.1  # a trained model: above chance by a tenth of the chance-to-perfect range
TRAINED = preconditions.TrainedAboveChance(TRAINED_SHARE)
# every fine-tuned model behind a row reached the plateau of its held-out score (the rule of studies 1, 2, 3 and 5:
# a claim about a fine-tuned model's heads assumes a model trained enough; evidence ``convergence``, from the curve
# each scores cell records of its full model; cells of before the curve was recorded cannot be judged)
CONVERGED = preconditions.Converged(no_curve="no validation split, or cells computed before the curve was recorded")
FINE_TUNED_GATES = (TRAINED, CONVERGED)  # the gates of every claim about the fine-tuned models
# ... and of every claim read off the L0 gates: they settled before their steps ran out
GATES_SETTLED = preconditions.GatesSettled()
L0_GATES = (*FINE_TUNED_GATES, GATES_SETTLED)
_LIST_AT_MOST = 8  # a role's heads are listed (layer-head) when there are at most this many

FINE_TUNED = "fine-tuned (the full model of each task x seed)"
GATED = "fine-tuned, then L0-gated (the model frozen; masks evaluated without retraining)"


@dataclass(frozen=True)
class NearPaperShare(claims.Gate):
    """The paper-share reading of ``voita.most_prunable`` (:data:`PAPER_SHARE_READING`) only: every model's L0 mask
    nearest :data:`PAPER_SHARE` of the heads keeps within ``BUDGET_TOLERANCE`` x the heads of it (else no mask of
    that size was trained; evidence ``paper_share_misses``: ``{(task, seed): text}``). Other readings pass."""

    def text(self) -> str:
        return (f"every model's L0 mask read at {PAPER_SHARE_TEXT} of the heads keeps within {BUDGET_TOLERANCE:g} x the "
                "heads of that size")

    def check(self, m: claims.Measurement, evidence: Mapping) -> str | None:
        if m.regime != PAPER_SHARE_READING:
            return None
        misses = evidence.get("paper_share_misses")
        if misses is None:
            return f"the sizes of the masks read at {PAPER_SHARE_TEXT} of the heads are not measured"
        bad = [misses[u] for u in dict.fromkeys(m.units) if u in misses]
        return f"no L0 mask near {PAPER_SHARE_TEXT} of the heads: " + "; ".join(bad) if bad else None
PRETRAINED = "the pre-trained model (one model)"
N1 = ("the paper's claim is about models trained this way; here every model starts from one pre-trained encoder, so "
      "n = 1 model: described (the count and the heads), never tested over its fine-tuned copies (pseudo-replicates)")
ENCODERS = "BERT-family encoders fine-tuned on GLUE, not the paper's NMT encoders"
RARE_NOTE = (
    f"rare-word head: its maximum attention falls on the sentence's least frequent token in more than half of the "
    f"queries (rare_share > {RARE_SHARE:g}), fixed from the paper's definition before the data: Voita et al. report "
    "that their head points to the rarest token in 66% of cases (OpenSubtitles) and, for WMT, to one of the two least "
    "frequent tokens in more than 50% of cases; more than half is the majority reading of 'points to the least "
    "frequent token' and the paper's weakest reported level (no ratio over chance, no threshold chosen from our data; "
    "the counts over 0.1-0.9 are a sensitivity, figure rare_criterion_sensitivity). Where ours differs: the tokens are "
    "word pieces (the model's units: a rare word is split into pieces, and its rarest piece is the target), "
    "frequencies are counted over our frequency corpus (rare_corpus: UD English-EWT train or the task's training "
    "subset), not the model's pre-training text, which we do not have; no top-500 filter (the paper's WMT figure "
    "counts only sentences whose rarest token is not among the 500 most frequent): every sentence counts, since a "
    "second threshold on our corpus's frequencies would be one more choice the paper's definition does not make; a "
    "least frequent token tied with others counts (any of them is a hit)")


def heads_text(role: str, heads: list[tuple[int, int]]) -> str:
    """``"<n> <role> head(s)[ in the first layer][ (l-h, ...; layer-head)]"``: the heads listed when few."""
    word = f"{role} head" + ("" if len(heads) == 1 else "s") + (" in the first layer" if role == "rare-word" else "")
    listed = f" ({', '.join(f'{a}-{b}' for a, b in heads)}; layer-head)" if 0 < len(heads) <= _LIST_AT_MOST else ""
    return f"{len(heads)} {word}{listed}"


def one_pretrained_model(role: str) -> preconditions.Check:
    """Gate of an existence claim about the pre-trained model: it always fails (one model, n = 1: described, never
    tested), its reason naming the count of the role's heads (``evidence["pretrained_heads"][role]``)."""

    def check(m: claims.Measurement, evidence: Mapping) -> str:
        return ("a claim about one pre-trained model (n = 1 model): described, not tested: the pre-trained MiniLM has "
                + heads_text(role, evidence["pretrained_heads"][role]))

    return preconditions.Check("a claim about one pre-trained model (n = 1 model) is never tested (described only)",
                               check)


def pretrained_has_role(role: str) -> preconditions.Check:
    """Gate of a survival claim: the pre-trained model has a head of ``role`` (``evidence["pretrained_heads"]``: role ->
    its heads, None when its roles were not measured; the first layer for the rare-word head), else nothing can
    survive fine-tuning."""
    where = " in the first layer" if role == "rare-word" else ""

    def check(m: claims.Measurement, evidence: Mapping) -> str | None:
        heads = (evidence["pretrained_heads"] or {}).get(role)
        if heads is None:
            return "the pre-trained model's roles are not measured: nothing to say survives fine-tuning"
        return None if heads else f"the pre-trained model has no {role} head{where}: nothing to survive fine-tuning"

    return preconditions.Check(f"the pre-trained model has a {role} head{where} (else nothing can survive "
                               "fine-tuning)", check)


ROLE_FOUND = preconditions.Check("at least one head of the row's role (its setting) was found", setting_role_found)

_SURVIVE = "presence: the share of fine-tuned models with one, exact binomial against 1/2, per task and pooled"
CLAIMS: tuple[Claim, ...] = (
    Claim("voita.important_are_confident", f"{VOITA} (Sec. 4)",
          "The most important heads (LRP relevance) are also the most confident.",
          claims.Superiority("greater", margin=margins.CORRELATION),
          metric="per fine-tuned model: Spearman(first-order relevance, confidence) over its heads, one row per "
                 "definition of confidence (setting): special-token keys excluded (the max over the non-special keys, "
                 "not renormalised: Voita et al. exclude EOS; the primary reading, in the study's Holm family) and every "
                 "key (a sensitivity analysis, its own family: a head parking its attention on [CLS]/[SEP] counts as "
                 "confident)",
          regime=FINE_TUNED, gates=FINE_TUNED_GATES, figure="score_agreement", measure="relevance_confidence_spearman",
          decided_in="confidence_no_special_keys",
          note="relevance here is first-order (gradient x activation), not LRP (no LRP implementation for these "
               "encoders); the special-key-free reading was named the primary one on 2026-12-03, after the standard "
               "run's rows under both readings existed (every key: contradicted on 3 tasks and pooled; without the "
               "special keys: supported on SST-2 and CoLA): it is the paper's own definition (confidence without the end-of-sentence token; [CLS] and "
               "[SEP] its analogues here), and the every-key row stays beside it; "
               "the special-key-free confidence needs scores cells of RESULTS_VERSION >= 2 (older cells "
               f"do not record it: those rows are not testable); {ENCODERS}"),
    Claim("voita.positional_heads", f"{VOITA} (Sec. 5)",
          "Positional heads exist: the maximum attention falls on the previous or next token >= 90% of the time.",
          claims.Presence(),
          metric="positional heads of THE pre-trained model on UD English-EWT sentences (max attention on the "
                 "previous, or on the next, token for >= positional_threshold of the queries)",
          regime=PRETRAINED, gates=(one_pretrained_model("positional"),), figure="role_map",
          measure="pretrained_heads:positional", unit=PRETRAINED_UNIT,
          note=f"{N1}; the fine-tuned copies test ours.positional_heads_survive; the paper also finds these heads "
               "among the confident ones, our criterion asks no confidence"),
    Claim("ours.positional_heads_survive", "ours (exploratory)",
          "Fine-tuning keeps the pre-trained model's positional heads: most fine-tuned models still have one.",
          claims.Presence(),
          metric=f"positional heads per fine-tuned model (UD English-EWT); {_SURVIVE}",
          regime=FINE_TUNED, gates=(*FINE_TUNED_GATES, pretrained_has_role("positional")), figure="role_map",
          measure="finetuned_heads:positional",
          note="our own claim: what the fine-tuned copies of the one pre-trained model can test"),
    Claim("voita.syntactic_heads", f"{VOITA} (Sec. 5)",
          "Syntactic heads exist: they point to a word's dependency relative more often than the best "
          "fixed-offset baseline (by >= 10 points).",
          claims.Presence(),
          metric="syntactic heads of THE pre-trained model on UD English-EWT (word pieces aggregated; nsubj, obj, "
                 "amod, advmod, both directions)",
          regime=PRETRAINED, gates=(one_pretrained_model("syntactic"),), figure="role_map",
          measure="pretrained_heads:syntactic", unit=PRETRAINED_UNIT,
          note=f"{N1}; the fine-tuned copies test ours.syntactic_heads_survive; UD English-EWT trees, not the "
               "paper's parses of its NMT data; word pieces aggregated to words as Clark et al. 2019"),
    Claim("ours.syntactic_heads_survive", "ours (exploratory)",
          "Fine-tuning keeps the pre-trained model's syntactic heads: most fine-tuned models still have one.",
          claims.Presence(),
          metric=f"syntactic heads per fine-tuned model (word pieces aggregated); {_SURVIVE}",
          regime=FINE_TUNED, gates=(*FINE_TUNED_GATES, pretrained_has_role("syntactic")), figure="role_map",
          measure="finetuned_heads:syntactic",
          note="our own claim: what the fine-tuned copies of the one pre-trained model can test"),
    Claim("voita.rare_word_head", f"{VOITA} (Sec. 5)",
          "A rare-word head exists: it attends to the least frequent token of the sentence, in the first layer.",
          claims.Presence(),
          metric="rare-word heads IN THE FIRST LAYER of THE pre-trained model (its maximum attention on the "
                 "sentence's least frequent token in more than half of the queries)",
          regime=PRETRAINED, gates=(one_pretrained_model("rare-word"),), figure="role_map",
          measure="pretrained_heads:rare-word", unit=PRETRAINED_UNIT,
          note=f"{N1}; the fine-tuned copies test ours.rare_word_head_survives; {RARE_NOTE}"),
    Claim("ours.rare_word_head_survives", "ours (exploratory)",
          "Fine-tuning keeps the pre-trained model's rare-word head: most fine-tuned models still have one "
          "(in the first layer).",
          claims.Presence(),
          metric=f"rare-word heads IN THE FIRST LAYER per fine-tuned model; {_SURVIVE}",
          regime=FINE_TUNED, gates=(*FINE_TUNED_GATES, pretrained_has_role("rare-word")), figure="role_map",
          measure="finetuned_heads:rare-word",
          note=f"our own claim: what the fine-tuned copies of the one pre-trained model can test; {RARE_NOTE}"),
    Claim("voita.most_prunable", f"{VOITA} (Sec. 6)",
          "Most encoder heads can be pruned with little loss (the paper: 38 of 48 pruned for -0.15 BLEU).",
          claims.NonInferiority(margins.TASK_SCORE),
          metric="per model: score(L0 mask) - score(full) at the L0 mask keeping the most heads among those keeping "
                 "fewer than half: 'most' pruned (chosen by its head count, never by its score)",
          regime=GATED, gates=(*L0_GATES, NearPaperShare()), figure="l0_curve", measure="most_prunable",
          decided_in=MOST_BELOW_HALF,
          note=f"GLUE scores, not BLEU; the gates train for l0_steps steps on the fine-tuned model, frozen unless "
               f"l0_train_model; {ENCODERS}; sensitivity (since 2026-12-06): the paper's own share, the L0 mask "
               f"nearest {PAPER_SHARE_TEXT} of the heads kept (a tie: the smaller lambda; within "
               f"{BUDGET_TOLERANCE:g} x the heads of it, else not testable), a harder reading than 'most'"),
    Claim("voita.l0_beats_random", f"{VOITA} (Sec. 6)",
          "L0 gates choose heads that matter: better than random heads at the same count (no retraining).",
          claims.Superiority("greater", margin=margins.TASK_SCORE),
          metric="per model: score(L0 mask) - score(random mask at its head count), mean over its lambdas (masks "
                 "that prune something and keep something); per task, pooled on (full - chance)",
          regime=GATED, gates=L0_GATES, figure="l0_curve", measure="L0 - random", pool_by=claims.SEED_SHARED_MASKS,
          note="the paper compares with the same architectures trained from scratch; random masks at the same "
               "count are our test of 'heads that matter'; seed s's random masks are prefixes of one permutation "
               "(specialized_heads_l0.random_seed: the same on every task and lambda), so the pooled row averages "
               f"each seed's models first (since 2026-12-06); {ENCODERS}"),
    Claim("ours.l0_vs_importance", "ours (exploratory)",
          "L0 gates and gradient importance choose equally good heads at the same head count.",
          claims.Equivalence(margins.TASK_SCORE),
          metric="per model: score(L0 mask) - score(least-important heads at its head count, gradient importance), "
                 "mean over its lambdas (masks that prune something and keep something)",
          regime=GATED, gates=L0_GATES, figure="l0_curve", measure="L0 - importance",
          note="our own claim (Michel et al.'s gradient importance as the reference)"),
    Claim("voita.specialized_last_pruned", f"{VOITA} (Sec. 6.2)",
          "Specialized heads are the last to be pruned.",
          claims.Superiority("greater", margin=margins.AUC),
          metric="per model: AUC of the survival level (the largest lambda a head is kept at), specialized vs the "
                 "other heads OF THE SAME LAYER, mean over the layers with both, minus 0.5",
          regime=GATED, gates=(*L0_GATES, preconditions.RoleFound("specialized")), figure="survival_by_role",
          measure="specialized_survival_auc",
          note="the paper reads it off one sweep of one model; here per fine-tuned model and within layers (survival "
               f"depends on the layer); the roles are those of each fine-tuned model; {RARE_NOTE}"),
    Claim("voita.functions_at_17_of_48", f"{VOITA} (Sec. 6.2)",
          "With 17 of 48 heads kept, every identified head function is still present.",
          claims.Superiority("greater", margin=margins.SHARE_OF_HEADS),
          metric="per model and role (setting): 1 if the L0 mask nearest 17/48 of the heads keeps one of the role's "
                 "heads, minus the chance that a random mask of that size would",
          regime=GATED, gates=(*L0_GATES, ROLE_FOUND, AtBudget(), RoomAboveChance(margins.SHARE_OF_HEADS)),
          figure="survival_map",
          measure="roles_kept_at_17_of_48",
          note="17/48 of this encoder's heads, not 17 heads; presence beyond chance, since a mask of that size keeps "
               "a role's head by chance alone"),
)
CLAIM: dict[str, Claim] = {c.id: c for c in CLAIMS}
# (the existence claim about the pre-trained model, the survival claim over its fine-tuned copies, the role)
ROLE_CLAIMS: tuple[tuple[str, str, str], ...] = (
    ("voita.positional_heads", "ours.positional_heads_survive", "positional"),
    ("voita.syntactic_heads", "ours.syntactic_heads_survive", "syntactic"),
    ("voita.rare_word_head", "ours.rare_word_head_survives", "rare-word"),
)
