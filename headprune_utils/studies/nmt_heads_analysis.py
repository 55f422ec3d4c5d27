"""Study 7's analysis: pure functions over the tidy table of the ``nmt_heads`` cells (one row per cell).

The library analysis the GLUE studies use is reused through small adapters that name the translation cells as
those studies name theirs: an attention type plays a GLUE task (``task``), BLEU the score, and a (model seed, mask
seed) pair a seed (``pair = 1000 * model_seed + seed``); so ``pruning_curves``' ``summarise``/``paired_drop``/
``prunable_fraction``, ``paired_contrasts.contrast_table``, ``strategy_sweep.summarise``, and ``role_survival``'s
``role_table``/``survival_heads``/``survival_tests``/``roles_at_budget`` run unchanged. Every BLEU here is corpus
BLEU (sacrebleu, 0-100) of greedy translations of the test subset.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from headprune_utils.analysis import preconditions, pruning_curves
from headprune_utils.analysis.claims import Claim, Measurement, adjust, empty_table, evaluate, validate
from headprune_utils.analysis.paired_contrasts import (
    LOCATION_CONTRASTS,
    Contrast,
    contrast_table,
    paired_by_strategy,
    unit_summary,
)
from headprune_utils.measure.head_scores import rank_agreement
from headprune_utils.measure.specialized import RARE_SHARE
from headprune_utils.model.masks import mask_from_string
from headprune_utils.studies import role_survival, strategy_sweep
from headprune_utils.studies.role_survival import presence_effect

__all__ = [
    "VOITA_ALL_TYPES", "VOITA_BASELINE_BLEU", "VOITA_FRACTION", "TYPE_CONTRASTS", "ROLE_NAMES",
    "full_models", "random_rows", "random_summary", "random_drops", "prunable", "retrain_table", "type_contrasts",
    "strategy_rows", "strategy_summary", "strategy_contrasts", "strategy_mask_rows", "role_source", "roles",
    "role_counts", "role_map", "encoder_scores", "importance_table", "score_agreement", "l0_curve", "l0_by_type",
    "l0_contrasts", "type_prunability", "l0_survival_source", "survival", "survival_tests", "survival_map",
    "survival_by_role", "roles_at_budget", "rare_criterion_counts", "MEASURES", "SEMANTICS", "scale", "verdicts",
    "RETRAINED", "NOT_RETRAINED_SENSITIVITY", "RETRAINING_COLUMNS", "retraining_convergence", "retraining_curves",
]

ROLE_NAMES = role_survival.ROLE_NAMES
VOITA_FRACTION = role_survival.VOITA_FRACTION
VOITA_BASELINE_BLEU = 29.6
# Voita et al. (2019) Table 2, WMT EN-RU, all attention types pruned: heads kept (enc, dec, cross) -> BLEU
VOITA_ALL_TYPES = ((14, 31, 30, 29.62), (12, 21, 25, 29.36), (8, 13, 15, 29.06), (5, 9, 12, 28.90))
KIND_ORDER = ("enc", "dec", "cross", "all")


def _kind(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    return table[table["kind"] == kind] if "kind" in table else table.iloc[0:0]


def _pair(model_seed, seed) -> int:
    """One number for a (model seed, mask seed) pair; :func:`_model_seed` reads the model seed back."""
    if not 0 <= int(seed) < 1000:
        raise ValueError(f"a mask seed must be in [0, 1000) to pair it with its model seed, got {seed}")
    return 1000 * int(model_seed) + int(seed)


# ---------------------------------------------------------------------------------------------- full model
def full_models(table: pd.DataFrame) -> pd.DataFrame:
    """One row per trained model: test BLEU/chrF/NLL of the full model, training steps, time, best dev NLL."""
    cols = ["model_seed", "bleu", "chrf", "nll", "steps", "stopped", "best_step", "best_dev_loss", "train_seconds",
            "vocab_size", "n_parameters", "trained_now"]
    t = _kind(table, "model")
    return t[[c for c in cols if c in t]].sort_values("model_seed").reset_index(drop=True)


def training_curves(table: pd.DataFrame) -> pd.DataFrame:
    """One row per dev evaluation of every trained model (the model cells' histories): ``model_seed, step, epoch,
    train_loss`` (mean since the previous evaluation), ``dev_loss`` (per-token NLL on the dev pairs), ``seconds``,
    ``best`` (the evaluation whose weights were restored: the model every other cell uses)."""
    rows = []
    for r in _kind(table, "model").to_dict("records"):
        hist = r.get("history")
        if not isinstance(hist, list):
            continue
        for h in hist:
            rows.append({"model_seed": int(r["model_seed"]), "step": int(h["step"]), "epoch": h.get("epoch"),
                         "train_loss": h.get("train_loss"), "dev_loss": h.get("dev_loss"), "seconds": h.get("seconds"),
                         "best": int(h["step"]) == int(r["best_step"])})
    cols = ["model_seed", "step", "epoch", "train_loss", "dev_loss", "seconds", "best"]
    return pd.DataFrame(rows, columns=cols).sort_values(["model_seed", "step"]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- random pruning
def random_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Study 1's layout: (task = attention type, regime, fraction, seed = pair, score = BLEU, ...).

    ``prune``: fraction 0 is the full model of the same model seed. ``prune_then_train``: fraction 0 is the
    unpruned model continued for the same steps (the reference cell), repeated for every type and mask seed.
    """
    full = _kind(table, "model").set_index("model_seed")
    rows = []
    prune = _kind(table, "prune")
    for r in prune.itertuples():
        rows.append({"task": r.type, "regime": "prune", "fraction": float(r.fraction), "seed": _pair(r.model_seed, r.seed),
                     "model_seed": int(r.model_seed), "score": float(r.bleu), "chrf": float(r.chrf), "nll": float(r.nll),
                     "n_heads_pruned": int(r.n_heads_pruned), "n_heads_total": int(r.n_heads_total)})
    for (t, ms, s), g in prune.groupby(["type", "model_seed", "seed"]):
        if ms in full.index:
            f = full.loc[ms]
            rows.append({"task": t, "regime": "prune", "fraction": 0.0, "seed": _pair(ms, s), "model_seed": int(ms),
                         "score": float(f["bleu"]), "chrf": float(f["chrf"]), "nll": float(f["nll"]),
                         "n_heads_pruned": 0, "n_heads_total": int(g["n_heads_total"].iloc[0])})
    re = _kind(table, "retrain")
    ref = re[re["type"] == "none"].set_index("model_seed")
    for r in re[re["type"] != "none"].itertuples():
        rows.append({"task": r.type, "regime": "prune_then_train", "fraction": float(r.fraction),
                     "seed": _pair(r.model_seed, r.seed), "model_seed": int(r.model_seed), "score": float(r.bleu),
                     "chrf": float(r.chrf), "nll": float(r.nll), "n_heads_pruned": int(r.n_heads_pruned),
                     "n_heads_total": int(r.n_heads_total)})
    for (t, ms, s), g in re[re["type"] != "none"].groupby(["type", "model_seed", "seed"]):
        if ms in ref.index:
            f = ref.loc[ms]
            rows.append({"task": t, "regime": "prune_then_train", "fraction": 0.0, "seed": _pair(ms, s),
                         "model_seed": int(ms), "score": float(f["bleu"]), "chrf": float(f["chrf"]),
                         "nll": float(f["nll"]), "n_heads_pruned": 0, "n_heads_total": int(g["n_heads_total"].iloc[0])})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.assign(metric="BLEU", chance=0.0)


def random_summary(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean BLEU per type x regime x fraction with a t-interval over (model seed, mask seed) pairs, and the drop
    from the unpruned model (``pruning_curves.summarise``)."""
    s = pruning_curves.summarise(random_rows(table), confidence)
    return s.rename(columns={"task": "type"})


def random_drops(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """BLEU drop from the unpruned model paired by (model seed, mask seed), with a t-interval over those pairs
    (``pruning_curves.paired_drop``; descriptive: the mask seeds of one model are not independent models)."""
    return pruning_curves.paired_drop(random_rows(table), confidence).rename(columns={"task": "type"})


def prunable(drops: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per type x regime: the largest fraction whose mean BLEU drop (and every smaller one's) is <= ``tolerance``."""
    return pruning_curves.prunable_fraction(drops.rename(columns={"type": "task"}), tolerance).rename(columns={"task": "type"})


def retrain_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per retrain cell: BLEU without retraining (same mask), with retraining, the two references (full model,
    unpruned model retrained alike: the same fixed steps, or to its own dev-loss plateau), and the recovery = drop
    without retraining (against the full model) - drop with retraining (against the reference)."""
    re = _kind(table, "retrain")
    if re.empty:
        return pd.DataFrame()
    full = _kind(table, "model").set_index("model_seed")["bleu"]
    ref = re[re["type"] == "none"].set_index("model_seed")["bleu"]
    prune = _kind(table, "prune").set_index(["type", "fraction", "seed", "model_seed"])["bleu"]
    rows = []
    for r in re[re["type"] != "none"].itertuples():
        key = (r.type, r.fraction, r.seed, r.model_seed)
        b_prune = float(prune.get(key, np.nan))
        rows.append({"type": r.type, "fraction": float(r.fraction), "seed": int(r.seed), "model_seed": int(r.model_seed),
                     "bleu_full": float(full.get(r.model_seed, np.nan)), "bleu_pruned": b_prune,
                     "bleu_reference_continued": float(ref.get(r.model_seed, np.nan)), "bleu_pruned_retrained": float(r.bleu),
                     "drop_without_retraining": float(full.get(r.model_seed, np.nan)) - b_prune,
                     "drop_with_retraining": float(ref.get(r.model_seed, np.nan)) - float(r.bleu),
                     "retrain_steps": int(r.retrain_steps)})
    out = pd.DataFrame(rows)
    return out.assign(recovery=out["drop_without_retraining"] - out["drop_with_retraining"])


# ---------------------------------------------------------------------------------------------- retraining to the plateau
# The part of a setting that marks a measurement on models retrained with the mask fixed (Budhraja et al.'s regime):
# the gate of their claims (nmt_heads_claims.RETRAINED_CONVERGED) applies to those rows alone
RETRAINED = "retrained with the mask fixed"
# claims decided after retraining; their rows without retraining stay as a sensitivity analysis
NOT_RETRAINED_SENSITIVITY = ("budhraja.random_prunable", "budhraja.location_no_better")
RETRAINING_COLUMNS = ["unit", "model", "setting", "evaluations", "steps", "best_evaluation", "best_step", "cap",
                      "stopped", "reached"]


def _random_setting(t: str, f: float, retrained: bool = False) -> str:
    return f"{t}, {100 * f:.0f}% pruned" + (f"; {RETRAINED}" if retrained else "")


def _strategy_setting(strategy: str, retrained: bool = False) -> str:
    return strategy + (f"; {RETRAINED}" if retrained else "")


def _int_or_none(x):
    return None if x is None or pd.isna(x) else int(x)


def _min_delta(cell: Mapping) -> float:
    """The ``retrain_min_delta`` a retraining ran with (0 for cells made before it existed: strict improvement)."""
    x = cell.get("retrain_min_delta")
    return 0.0 if x is None or pd.isna(x) else float(x)


def _convergence_record(unit: int, model: str, setting: str, curve, patience: int, steps, cap,
                        min_delta: float = 0.0) -> dict:
    """One model behind a row: its dev-loss curve's length, the step of its best evaluation, where it stopped, and
    whether it reached the plateau (``preconditions.plateau``: ``patience`` evaluations after its last improvement by
    more than ``min_delta`` nats without another). No curve: ``evaluations`` 0, not reached (nothing to judge)."""
    curve = [h for h in (curve if isinstance(curve, list) else []) if h.get("dev_loss") is not None]
    losses = np.array([float(h["dev_loss"]) for h in curve], dtype=float)
    # the best evaluation among the finite losses (as the plateau rule reads them); none finite: no best
    at = int(np.nanargmin(np.where(np.isfinite(losses), losses, np.nan))) if np.isfinite(losses).any() else None
    best = _int_or_none(curve[at].get("step")) if at is not None else None
    reached = bool(curve) and preconditions.plateau(curve, patience, min_delta) is None
    stopped = "at the plateau" if reached else ("still improving" if curve else "no dev-loss curve")
    return {"unit": int(unit), "model": model, "setting": setting, "evaluations": len(curve),
            "steps": _int_or_none(steps), "best_evaluation": None if at is None else at + 1, "best_step": best,
            "cap": _int_or_none(cap), "stopped": stopped,
            "reached": reached}


def retraining_convergence(table: pd.DataFrame, patience: int, min_delta: float = 0.0) -> pd.DataFrame:
    """The evidence of the convergence gate of the retrained rows (:data:`RETRAINING_COLUMNS`), one row per model
    behind them: every full model (``setting`` "": behind every row of its model seed; judged by its training's
    ``patience``) and every model retrained with a mask fixed (``retrain`` cells: behind the random-pruning (and
    recovery) row of its type and fraction, and the unpruned model retrained alike, of type ``none``, behind
    each of those rows of its model seed, being their reference; ``retrain_strategy`` cells: behind the row of their
    strategy, the random ones behind every strategy's row, being its reference), judged by the patience (and
    ``min_delta``) its retraining ran with, the full models by ``patience`` and ``min_delta``. A retraining of the fixed regime (no
    dev-loss curve) has ``evaluations`` 0: whether it reached the plateau cannot be judged."""
    rows = [_convergence_record(r["model_seed"], "full model", "", r.get("history"), patience, r.get("steps"), None,
                                min_delta) for r in _kind(table, "model").to_dict("records")]
    every = _kind(table, "retrain")
    re = every[every["type"] != "none"] if len(every) else every
    for r in re.to_dict("records"):
        rows.append(_convergence_record(
            r["model_seed"], f"retrained {_random_setting(r['type'], r['fraction'])} mask {int(r['seed'])}",
            _random_setting(r["type"], r["fraction"], True), r.get("retrain_curve"),
            _int_or_none(r.get("retrain_patience")) or 1, r.get("retrain_steps"), r.get("retrain_max_steps"),
            _min_delta(r)))
    # the unpruned model retrained alike: the reference of every retrained random row of its model seed
    behind = {ms: list(dict.fromkeys(_random_setting(t, f, True) for t, f in zip(g["type"], g["fraction"])))
              for ms, g in re.groupby("model_seed")} if len(re) else {}
    for r in (every[every["type"] == "none"].to_dict("records") if len(every) else []):
        for setting in behind.get(r["model_seed"], []):
            rows.append(_convergence_record(
                r["model_seed"], "unpruned model retrained alike (the reference)", setting, r.get("retrain_curve"),
                _int_or_none(r.get("retrain_patience")) or 1, r.get("retrain_steps"), r.get("retrain_max_steps"),
                _min_delta(r)))
    rs = _kind(table, "retrain_strategy")
    names = [st for st in dict.fromkeys(rs["strategy"]) if st != "random"] if len(rs) else []
    for r in rs.to_dict("records"):
        name = f"retrained {r['strategy']} mask {int(r['seed'])} ({r['type']}, {100 * r['budget']:.0f}% pruned)"
        for st in (names if r["strategy"] == "random" else [r["strategy"]]):
            rows.append(_convergence_record(r["model_seed"], name, _strategy_setting(st, True), r.get("retrain_curve"),
                                            _int_or_none(r.get("retrain_patience")) or 1, r.get("retrain_steps"),
                                            r.get("retrain_max_steps"), _min_delta(r)))
    return pd.DataFrame(rows, columns=RETRAINING_COLUMNS)


def retraining_curves(table: pd.DataFrame) -> pd.DataFrame:
    """The dev-loss curve of every retraining to the plateau, one row per evaluation: ``model_seed, kind, type,
    strategy, share, seed, step, dev_loss, best`` (the evaluation whose weights were kept) and ``reached``."""
    rows = []
    for kind in ("retrain", "retrain_strategy"):
        for r in _kind(table, kind).to_dict("records"):
            curve = r.get("retrain_curve")
            if not isinstance(curve, list) or not curve:
                continue
            for h in curve:
                rows.append({"model_seed": int(r["model_seed"]), "kind": kind, "type": r["type"],
                             "strategy": r["strategy"] if kind == "retrain_strategy" else "random",
                             "share": float(r["budget"] if kind == "retrain_strategy" else r["fraction"]),
                             "seed": int(r["seed"]), "step": int(h["step"]), "dev_loss": float(h["dev_loss"]),
                             "best": int(h["step"]) == int(r["retrain_best_step"]),
                             "reached": bool(r.get("reached_plateau"))})
    cols = ["model_seed", "kind", "type", "strategy", "share", "seed", "step", "dev_loss", "best", "reached"]
    return pd.DataFrame(rows, columns=cols)


TYPE_CONTRASTS = (
    Contrast("enc vs cross", "Voita et al.: encoder self-attention is more prunable than "
                              "encoder-decoder attention (BLEU after pruning the same share of each)", "enc", "cross", "greater"),
    Contrast("enc vs dec", "Voita et al.: encoder self-attention is the most prunable type",
                              "enc", "dec", "greater"),
    Contrast("dec vs cross", "Voita et al.: encoder-decoder attention is the least prunable type",
                              "dec", "cross", "greater"),
)


def _model_seed(d: pd.DataFrame) -> pd.Series:
    """The unit of a study 7 contrast row: its trained model (model seed; ``seed`` = :func:`_pair`), whose mask seeds
    are no replicates."""
    return d["seed"].astype(int) // 1000


def type_contrasts(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """BLEU(type a pruned) - BLEU(type b pruned) at the same fraction and mask seed (``paired_contrasts.contrast_table``;
    ``task`` = "random pruning", ``budget`` = fraction; pooled over fractions in ``budget = "all"``): each trained
    model's mask seeds averaged within it, then a t-interval over the model seeds. With grids of equal size (same
    depth of encoder and decoder) the same fraction is the same number of heads."""
    p = _kind(table, "prune")

    def pair(a: str, b: str) -> pd.DataFrame:
        t = p[p["type"].isin([a, b])]
        if t.empty:
            return pd.DataFrame(columns=["task", "regime", "budget", "seed", "diff"])
        w = t.pivot_table(index=["fraction", "model_seed", "seed"], columns="type", values="bleu")
        if a not in w or b not in w:
            return pd.DataFrame(columns=["task", "regime", "budget", "seed", "diff"])
        w = w.dropna(subset=[a, b])
        d = (w[a] - w[b]).rename("diff").reset_index()
        return pd.DataFrame({"task": "random pruning", "regime": "prune", "budget": d["fraction"],
                             "seed": [_pair(m, s) for m, s in zip(d["model_seed"], d["seed"])], "diff": d["diff"]})

    return contrast_table(TYPE_CONTRASTS, pair, confidence, unit=_model_seed)


# ---------------------------------------------------------------------------------------------- strategies
def strategy_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Study 2's layout: (task = type, regime = "prune", strategy, budget, seed = pair, score = BLEU, ...), plus the
    full model of each model seed as strategy ``none`` at budget 0."""
    t = _kind(table, "strategy")
    if t.empty:
        return pd.DataFrame()
    rows = [{"task": r.type, "regime": "prune", "strategy": r.strategy, "budget": float(r.budget),
             "seed": _pair(r.model_seed, r.seed), "model_seed": int(r.model_seed), "score": float(r.bleu),
             "chrf": float(r.chrf), "nll": float(r.nll), "n_heads_pruned": int(r.n_heads_pruned),
             "mask": r.masks[r.type]} for r in t.itertuples()]
    return pd.DataFrame(rows).assign(metric="BLEU", chance=0.0)


def strategy_summary(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean BLEU per type x strategy x budget with a t-interval over (model seed, mask seed) pairs."""
    rows = strategy_rows(table)
    if rows.empty:
        return rows
    return strategy_sweep.summarise(rows, confidence).rename(columns={"task": "type"})


def _strategy_contrast_list(strategy_names) -> list:
    out = [Contrast(f"{s} vs random", "Budhraja et al. claim 2: pruning by location is no better "
                                     "(and no worse) than random at the same budget", s, "random", "equal")
           for s in strategy_names if s != "random"]
    # BERT claims 3b/3c, exploratory here (not claimed for the Transformer)
    out += [c for c in LOCATION_CONTRASTS if c.name in ("avoid the middle", "avoid consecutive layers")
            and {c.a, c.b} <= set(strategy_names)]
    return out


def strategy_contrasts(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Each location strategy - random (paired by type, budget, model seed and mask seed), per type x budget, per
    budget over types (``task = "all"``) and pooled (``task = "all", budget = "all"``): each trained model's pairs
    averaged within it, then the mean and a t-interval over the model seeds (``paired_contrasts.contrast_table``;
    descriptive, no p-value: mask seeds are no replicates, and the tests are the verdicts). Also the "avoid the
    middle" / "avoid consecutive layers" contrasts (exploratory: Budhraja et al.'s BERT claims)."""
    rows = strategy_rows(table)
    if rows.empty:
        return pd.DataFrame()
    names = list(dict.fromkeys(rows["strategy"]))
    pair = lambda a, b: paired_by_strategy(rows, a, b)  # noqa: E731
    return contrast_table(_strategy_contrast_list(names), pair, confidence, pool_per_budget=True,
                          unit=_model_seed).rename(columns={"task": "type"})


def strategy_mask_rows(table: pd.DataFrame, seed: int | None = None) -> pd.DataFrame:
    """One mask per type x strategy x budget (mask seed ``seed``, default the smallest; first model seed) as rows
    (strategy = "<type>: <strategy>", budget, layer, head, kept) for ``figures.masks.mask_grid``."""
    t = _kind(table, "strategy")
    if t.empty:
        return pd.DataFrame(columns=["strategy", "budget", "layer", "head", "kept"])
    seed = int(t["seed"].min()) if seed is None else seed
    t = t[(t["seed"] == seed) & (t["model_seed"] == t["model_seed"].min())]
    rows = []
    for r in t.itertuples():
        m = mask_from_string(r.masks[r.type])
        for layer in range(m.shape[0]):
            for head in range(m.shape[1]):
                rows.append({"strategy": f"{r.type}: {r.strategy}", "budget": float(r.budget), "layer": layer,
                             "head": head, "kept": int(m[layer, head])})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- encoder heads
def role_source(table: pd.DataFrame, task: str = "encoder") -> pd.DataFrame:
    """The roles cells in the layout of ``role_survival.role_table`` (kind "scores", task, seed = model seed, roles)."""
    t = _kind(table, "roles")
    return pd.DataFrame([{"kind": "scores", "task": task, "seed": int(r.model_seed), "roles": r.roles}
                         for r in t.itertuples()])


def roles(table: pd.DataFrame, **thresholds) -> pd.DataFrame:
    """``role_survival.role_table`` of the encoder heads (``source = task = "encoder"``, ``seed`` = model seed)."""
    src = role_source(table)
    return role_survival.role_table(src, **thresholds) if len(src) else pd.DataFrame()


def role_counts(role_tab: pd.DataFrame, relations: list[str]) -> pd.DataFrame:
    return role_survival.role_counts(role_tab, relations)


def role_map(role_tab: pd.DataFrame) -> pd.DataFrame:
    """Per head the role most model seeds give (``role_survival.role_map_data``; panel "encoder")."""
    return role_survival.role_map_data(role_tab)


def encoder_scores(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model seed, layer, head) of the encoder: confidence, entropy (nats), ablation importance (dev
    NLL increase in nats per target token when the head alone is zeroed)."""
    rows = []
    for r in _kind(table, "roles").itertuples():
        conf, ent = np.asarray(r.roles["confidence"]), np.asarray(r.roles["entropy"])
        imp = np.asarray(r.importance["enc"])
        for (layer, head), c in np.ndenumerate(conf):
            rows.append({"model_seed": int(r.model_seed), "layer": layer, "head": head, "confidence": float(c),
                         "entropy": float(ent[layer, head]), "importance": float(imp[layer, head])})
    return pd.DataFrame(rows)


def importance_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model seed, type, layer, head): ablation importance (dev NLL increase, nats per token)."""
    rows = []
    for r in _kind(table, "roles").itertuples():
        for kind, grid in r.importance.items():
            for (layer, head), v in np.ndenumerate(np.asarray(grid)):
                rows.append({"model_seed": int(r.model_seed), "type": kind, "layer": layer, "head": head,
                             "importance": float(v)})
    return pd.DataFrame(rows)


def score_agreement(scores: pd.DataFrame) -> pd.DataFrame:
    """Rank agreement (Spearman, Kendall) of importance, confidence and entropy over the encoder heads, per model."""
    out = []
    for ms, g in scores.groupby("model_seed"):
        grids = {k: torch.tensor(g[k].to_numpy(dtype=float)) for k in ("importance", "confidence", "entropy")}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sps.ConstantInputWarning)
            a = rank_agreement(grids)
        out.append(a.assign(model_seed=int(ms)))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


# ---------------------------------------------------------------------------------------------- L0 gates
def l0_curve(table: pd.DataFrame) -> pd.DataFrame:
    """One row per L0 cell: setting, lambda, heads kept (total and per type), BLEU of the L0 masks, of the random
    masks with the same heads per type, and of the full model."""
    t = _kind(table, "l0")
    if t.empty:
        return pd.DataFrame()
    full = _kind(table, "model").set_index("model_seed")["bleu"]
    rows = []
    for r in t.itertuples():
        row = {"setting": r.setting, "model_seed": int(r.model_seed), "lam": float(r.lam), "n_kept": int(r.n_kept),
               "n_heads_total": int(r.n_heads_total), "bleu_l0": float(r.bleu_l0), "chrf_l0": float(r.chrf_l0),
               "nll_l0": float(r.nll_l0), "bleu_random_mean": float(r.bleu_random_mean),
               "bleu_full": float(full.get(r.model_seed, np.nan)), "seconds": float(r.seconds)}
        for k in ("enc", "dec", "cross"):
            row[f"kept_{k}"] = r.kept_by_type.get(k, np.nan)
        rows.append(row)
    c = pd.DataFrame(rows)
    c["frac_kept"] = c["n_kept"] / c["n_heads_total"]
    return c.sort_values(["setting", "model_seed", "lam"]).reset_index(drop=True)


def l0_by_type(curve: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Long rows (setting, model seed, lambda, type, kept, heads, frac_kept, bleu_l0) of the gated types."""
    heads = {}
    for r in _kind(table, "l0").itertuples():
        heads.update({(r.setting, k): v for k, v in r.heads_by_type.items()})
    rows = []
    for r in curve.itertuples():
        for k in ("enc", "dec", "cross"):
            kept = getattr(r, f"kept_{k}")
            if kept == kept:  # gated in this setting
                n = heads[(r.setting, k)]
                rows.append({"setting": r.setting, "model_seed": r.model_seed, "lam": r.lam, "type": k, "kept": int(kept),
                             "heads": n, "frac_kept": kept / n, "bleu_l0": r.bleu_l0, "bleu_full": r.bleu_full})
    return pd.DataFrame(rows)


def l0_contrasts(curve: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Paired BLEU differences ``L0 - random`` (masks that prune something and keep something) and ``L0 - full``
    (every cell), per (setting, lambda), per setting over lambdas (``lam = "all"``) and over settings
    (``setting = "pooled"``), each with a t-interval over the trained models (model seeds, the unit; several
    lambdas or settings of one model are averaged within it first; one model: no interval, ``ci_low``/``ci_high``
    read ``"n/a (one model seed)"``, never NaN). Descriptive: the tests are the verdicts."""
    parts = []
    for name, a, b in (("L0 - random", "bleu_l0", "bleu_random_mean"), ("L0 - full", "bleu_l0", "bleu_full")):
        c = curve if name == "L0 - full" else curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
        d = c.assign(diff=c[a] - c[b], lam_all="all", pooled="pooled")
        if d.empty:
            continue
        per = unit_summary(d, ["setting", "lam"], ["model_seed"], confidence=confidence)
        over = unit_summary(d, ["setting", "lam_all"], ["model_seed"], confidence=confidence).rename(columns={"lam_all": "lam"})
        pool = unit_summary(d, ["pooled", "lam_all"], ["model_seed"], confidence=confidence).rename(
            columns={"pooled": "setting", "lam_all": "lam"})
        kept = {**{(s, l): g["n_kept"].mean() for (s, l), g in d.groupby(["setting", "lam"])},
                **{(s, "all"): g["n_kept"].mean() for s, g in d.groupby("setting")}, ("pooled", "all"): d["n_kept"].mean()}
        total = {**{s: int(g["n_heads_total"].max()) for s, g in d.groupby("setting")}, "pooled": int(d["n_heads_total"].max())}
        both = pd.concat([per, over, pool], ignore_index=True)
        both["mean_kept"] = [float(kept[(s, l)]) for s, l in zip(both["setting"], both["lam"])]
        both["n_heads_total"] = [total[s] for s in both["setting"]]
        parts.append(both.assign(contrast=name))
    cols = ["contrast", "setting", "lam", "n_pairs", "n_units", "mean_kept", "n_heads_total", "mean_diff", "ci_low", "ci_high"]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)[cols]
    one = out["n_units"] < 2
    if one.any():
        for c in ("ci_low", "ci_high"):
            out[c] = out[c].astype(object).where(~one, "n/a (one model seed)")
    return out


def type_prunability(by_type: pd.DataFrame) -> pd.DataFrame:
    """Setting ``all`` (one lambda for all types): per (model seed, lambda) the share of each type's heads kept
    and whether encoder self-attention keeps the smallest share and encoder-decoder attention the largest
    (strictly); only lambdas that prune some heads and keep some. Voita et al. Table 2: enc < dec <= cross."""
    t = by_type[by_type["setting"] == "all"]
    rows = []
    for (ms, lam), g in t.groupby(["model_seed", "lam"]):
        f = g.set_index("type")["frac_kept"]
        k = g.set_index("type")["kept"]
        total_kept, total = int(k.sum()), int(g["heads"].sum())
        if not 0 < total_kept < total or not {"enc", "dec", "cross"} <= set(f.index):
            continue
        rows.append({"model_seed": ms, "lam": lam, "kept_enc": int(k["enc"]), "kept_dec": int(k["dec"]),
                     "kept_cross": int(k["cross"]), "frac_enc": f["enc"], "frac_dec": f["dec"], "frac_cross": f["cross"],
                     "enc_fewest": bool(f["enc"] < f["dec"] and f["enc"] < f["cross"]),
                     "cross_most": bool(f["cross"] > f["enc"] and f["cross"] > f["dec"]),
                     "bleu_l0": float(g["bleu_l0"].iloc[0])})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- survival
def l0_survival_source(table: pd.DataFrame) -> pd.DataFrame:
    """The L0 cells that gate the encoder, in ``role_survival``'s layout: kind "l0", task = setting, seed = model seed, lam,
    mask / log_alpha / n_kept / n_heads_total of the ENCODER grid."""
    rows = []
    for r in _kind(table, "l0").itertuples():
        if "enc" not in r.masks:
            continue
        m = r.masks["enc"]
        rows.append({"kind": "l0", "task": r.setting, "seed": int(r.model_seed), "lam": float(r.lam), "mask": m,
                     "log_alpha": r.log_alpha["enc"], "n_kept": int(r.kept_by_type["enc"]),
                     "n_heads_total": int(r.heads_by_type["enc"])})
    return pd.DataFrame(rows)


def _roles_per_setting(role_tab: pd.DataFrame, settings) -> pd.DataFrame:
    """The encoder roles repeated per L0 setting (``task = source = setting``) so ``role_survival``'s joins match."""
    return pd.concat([role_tab.assign(task=s, source=s) for s in settings], ignore_index=True) if len(role_tab) else role_tab


def survival(table: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, model seed, encoder layer, head): survival level over the lambdas (``role_survival.survival_heads``)."""
    src = l0_survival_source(table)
    return role_survival.survival_heads(src) if len(src) else pd.DataFrame()


def survival_tests(surv: pd.DataFrame, role_tab: pd.DataFrame, n_perm: int = 10000, seed: int = 0) -> pd.DataFrame:
    """Do specialized encoder heads survive longer? Strata = (setting, model seed) (``role_survival.survival_tests``)."""
    if surv.empty or role_tab.empty:
        return pd.DataFrame()
    return role_survival.survival_tests(surv, _roles_per_setting(role_tab, surv["task"].unique()), n_perm, seed)


def survival_map(surv: pd.DataFrame, role_tab: pd.DataFrame) -> pd.DataFrame:
    return role_survival.survival_map_data(surv, _roles_per_setting(role_tab, surv["task"].unique()))


def survival_by_role(surv: pd.DataFrame, role_tab: pd.DataFrame) -> pd.DataFrame:
    return role_survival.survival_with_roles(surv, _roles_per_setting(role_tab, surv["task"].unique()))


def roles_at_budget(table: pd.DataFrame, role_tab: pd.DataFrame, fraction: float = VOITA_FRACTION) -> pd.DataFrame:
    """Per (setting, model seed): the L0 mask whose encoder heads kept are nearest ``fraction`` of them, and
    whether each role keeps a head there (``role_survival.roles_at_budget``)."""
    src = l0_survival_source(table)
    if src.empty or role_tab.empty:
        return pd.DataFrame()
    return role_survival.roles_at_budget(src, _roles_per_setting(role_tab, src["task"].unique()), fraction).rename(
        columns={"task": "setting", "seed": "model_seed"})


# ---------------------------------------------------------------------------------------------- the rare-word criterion
def rare_criterion_counts(table: pd.DataFrame, shares=role_survival.RARE_SHARES, rare_share: float = RARE_SHARE,
                          **thresholds) -> pd.DataFrame:
    """Rare-word encoder heads per threshold on ``rare_share`` (mean over the trained models; all layers and the first
    layer): ``role_survival.rare_criterion_counts`` of the roles cells. A sensitivity of the fixed criterion
    (``rare_share``: the run's, default ``specialized.RARE_SHARE``), never a selection. ``thresholds``: the other
    arguments of ``role_table`` (:func:`roles`' keyword arguments can be handed over as they are)."""
    src = role_source(table)
    if src.empty:
        return pd.DataFrame(columns=["rare_share", "model", "layers", "n_rare_heads", "n_models", "fixed"])
    return role_survival.rare_criterion_counts(src, shares, rare_share=rare_share, others="trained models", **thresholds)


# ---------------------------------------------------------------------------------------------- verdicts
# The claims are data (``nmt_heads_claims.CLAIMS``, handed to :func:`verdicts`): each names its rule, gates and
# ``measure``, the key of :data:`MEASURES` that makes its measurements from the run's tables.
NAME = "nmt_heads"
SEMANTICS = "zero"  # a pruned head's output is zeroed (both papers' Transformer code; the study's only ablation)
NOT_MEASURED = "no cell of this run measures it"


def scale(cfg) -> str:
    """The ``scale`` column from the parameters (model, heads, training pairs x steps, seeds)."""
    per = cfg.encoder_layers * cfg.heads, cfg.decoder_layers * cfg.heads
    small = cfg.encoder_layers < 6 or cfg.decoder_layers < 6 or cfg.heads < 8 or not cfg.corpus.startswith("wmt")
    pairs = "all" if cfg.train_size is None else str(cfg.train_size)
    return (f"{cfg.encoder_layers}+{cfg.decoder_layers} layers x {cfg.heads} heads per type ({per[0]} enc, {per[1]} "
            f"dec, {per[1]} cross), d_model {cfg.d_model}; {cfg.corpus} {pairs} training pairs x at most "
            f"{cfg.max_steps} steps; model seeds {list(cfg.model_seeds)}, mask seeds {list(cfg.seeds)}"
            + ("; a small-scale test, not the paper's set-up" if small else ""))


def gates_evidence(table: pd.DataFrame) -> pd.DataFrame:
    """The L0 gates' evidence (:class:`preconditions.GatesSettled`): one row per L0 cell, its model (model seed), its
    setting and lambda, and whether its gates settled (:func:`preconditions.gates_settled` on the cell's
    ``history``). A model's L0 rows stand on all its gate trainings, every setting and lambda."""
    l0 = _kind(table, "l0")
    rows = [preconditions.gates_row(int(r["model_seed"]), f"{r['setting']} lambda {float(r['lam']):g}",
                                    r.get("history") if isinstance(r.get("history"), list) else None)
            for r in l0.to_dict("records")]
    return pd.DataFrame(rows, columns=["unit", "gates", "settled", "moved"])


def _histories(table: pd.DataFrame) -> dict:
    m = _kind(table, "model")
    return {int(r["model_seed"]): (r["history"] if isinstance(r.get("history"), list) else None)
            for r in m.to_dict("records")}


def _mean_by(d: pd.DataFrame, keys: list[str], value: str = "diff") -> pd.DataFrame:
    return d.groupby(keys, as_index=False, sort=False)[value].mean() if len(d) else d


@dataclass(frozen=True)
class Run:
    """What the measurements of the claims are made from: the cells (``table``), the analysis tables of a run
    (:func:`verdicts`' arguments), the ``task`` column (corpus and direction), ``full`` (model seed -> BLEU of the
    full model), the ``semantics`` and the random-pruning ``fractions`` of the claim about random pruning."""

    table: pd.DataFrame
    role_tab: pd.DataFrame
    surv: pd.DataFrame
    budget: pd.DataFrame
    agreement: pd.DataFrame
    by_type: pd.DataFrame
    task: str
    full: dict
    semantics: str
    fractions: tuple


Group = tuple[list[Measurement], dict]  # measurements evaluated together, and the evidence their gates read


def per_setting(claim: Claim, run: Run, data: pd.DataFrame, settings: Sequence[str], effect: str, *,
                bleu: bool = True, empty: str = "no measurement", name_setting: bool = True) -> list[Measurement]:
    """One measurement per setting of ``data`` rows (setting, model_seed, diff), unit = the model seed; ``bleu``:
    the effect is in BLEU, so each carries BLEU(full) per model and chance 0 (margins). A setting without a row is
    ``Measurement.absent`` for ``empty`` ("``empty`` (<setting>)" when ``name_setting``)."""
    out = []
    for setting in settings:
        d = data[data["setting"] == setting] if len(data) else data
        if d.empty:
            why = f"{empty} ({setting})" if name_setting else empty
            out.append(Measurement.absent(run.task, why, setting=setting, semantics=run.semantics, unit=claim.unit,
                                          effect=effect))
            continue
        units = [int(u) for u in d["model_seed"]]
        kw = {"full": [run.full[u] for u in dict.fromkeys(units)], "chance": 0.0} if bleu else {}
        out.append(Measurement(run.task, d["diff"].to_numpy(dtype=float), units, setting, run.semantics, effect,
                               claim.unit, **kw))
    return out


def _not_measured(claim: Claim, run: Run) -> list[Group]:
    return [([Measurement.absent(run.task, NOT_MEASURED, semantics=run.semantics, unit=claim.unit)], {})]


def _random_pruned(claim: Claim, run: Run) -> list[Group]:
    """Claim 1 in the paper's regime (primary): BLEU of each model retrained with its random mask fixed (``retrain``
    cells at the claim's fractions) - BLEU of the same model unpruned and retrained alike (its ``retrain`` cell of
    type ``none``: to its own dev-loss plateau, or the same fixed steps), so that the effect is the pruning's, not
    the extra training's; and without retraining (``prune`` cells: the sensitivity analysis), against the full
    model. Every type pruned without retraining has its retrained row, ``not testable`` where no cell retrains it
    (or no unpruned reference was retrained)."""
    prune, re = _kind(run.table, "prune"), _kind(run.table, "retrain")
    p = prune[prune["fraction"].isin(list(run.fractions))] if len(prune) else prune
    r = re[(re["type"] != "none") & re["fraction"].isin(list(run.fractions))] if len(re) else re
    if p.empty and r.empty:
        return _not_measured(claim, run)
    reference = (re[re["type"] == "none"].set_index("model_seed")["bleu"].astype(float) if len(re)
                 else pd.Series(dtype=float))  # the unpruned model retrained alike, per model seed
    keys = list(dict.fromkeys([*zip(p["type"], p["fraction"])] if len(p) else []))
    keys += [k for k in dict.fromkeys(zip(r["type"], r["fraction"]) if len(r) else []) if k not in keys]
    # a model retrained with masks but not unpruned has nothing to compare them with: its rows are not decided on
    # the other models alone (that would drop it silently), they are not testable, naming it
    unmatched = sorted({int(u) for u in r["model_seed"]} - {int(u) for u in reference.index}) if len(r) else []
    out = []
    for t, retrained in ((r, True), (p, False)):
        against = t["model_seed"].map(reference) if retrained and len(t) else t["model_seed"].map(run.full)
        d = (t.assign(setting=[_random_setting(a, f, retrained) for a, f in zip(t["type"], t["fraction"])],
                      diff=t["bleu"].astype(float) - against.astype(float)) if len(t) and not (retrained and unmatched)
             else pd.DataFrame(columns=["setting", "model_seed", "diff"]))
        empty = "no cell of this run prunes such a mask"
        if retrained:
            empty = (f"no unpruned reference retrained alike for model(s) {', '.join(map(str, unmatched))}: their "
                     "retrained masks have nothing to compare with" if unmatched
                     else "no cell of this run retrains such a mask")
        effect = ("BLEU(pruned, retrained) - BLEU(unpruned, retrained alike)" if retrained
                  else "BLEU(pruned) - BLEU(full)")
        out.append((per_setting(claim, run, _mean_by(d, ["setting", "model_seed"]),
                                [_random_setting(a, f, retrained) for a, f in keys], effect, empty=empty), {}))
    return out


def _recovery(claim: Claim, run: Run) -> list[Group]:
    re = retrain_table(run.table)
    if re.empty:
        return _not_measured(claim, run)
    d = re.assign(setting=[_random_setting(t, f, True) for t, f in zip(re["type"], re["fraction"])],
                  diff=re["recovery"])
    # a retrained mask without its pruned-only cell or its unpruned reference has no recovery to measure
    return [(per_setting(claim, run, _mean_by(d.dropna(subset=["diff"]), ["setting", "model_seed"]),
                         list(dict.fromkeys(d["setting"])), "recovery (BLEU)",
                         empty="no pruned-only cell or unpruned reference to measure the recovery against"), {})]


def _strategy_diffs(t: pd.DataFrame, retrained: bool) -> pd.DataFrame:
    """(setting, model_seed, diff): BLEU(strategy) - BLEU(random), paired by type, budget, model and mask seed."""
    if t.empty:
        return pd.DataFrame(columns=["setting", "model_seed", "diff"])
    ref = t[t["strategy"] == "random"].set_index(["type", "budget", "model_seed", "seed"])["bleu"]
    other = t[t["strategy"] != "random"]
    key = zip(other["type"], other["budget"], other["model_seed"], other["seed"])  # seed: (model, mask) pair
    return other.assign(setting=[_strategy_setting(s, retrained) for s in other["strategy"]],
                        diff=other["bleu"].to_numpy(dtype=float) - np.array([ref.get(k, np.nan) for k in key],
                                                                            dtype=float)).dropna(subset=["diff"])


def repeated_strategies(t: pd.DataFrame) -> dict[str, str]:
    """strategy -> the earlier strategy (in the order of ``t``, ``random`` aside) whose masks it repeats in every
    cell it has (the same type, budget, model and mask seed): on a few layers strategies coincide (at one layer of
    three ``top_bottom`` and ``consecutive`` prune the top layer, as ``top`` does; at two of three ``consecutive``
    prunes ``top``'s layers again), and such a strategy's paired differences are the other's, to the bit."""
    if t.empty or "masks" not in t:
        return {}
    keys = ["type", "budget", "model_seed", "seed"]
    cells = {st: {tuple(r[k] for k in keys): tuple(sorted(r["masks"].items())) for r in g.to_dict("records")
                  if isinstance(r["masks"], Mapping)}
             for st, g in t.groupby("strategy", sort=False) if st != "random"}
    out: dict[str, str] = {}
    order = list(cells)
    for i, st in enumerate(order):
        for prev in order[:i]:
            if prev not in out and cells[st] and cells[st].keys() <= cells[prev].keys() and all(
                    cells[prev][k] == m for k, m in cells[st].items()):
                out[st] = prev
                break
    return out


def _strategies(claim: Claim, run: Run) -> list[Group]:
    """Claim 2 in the paper's regime (primary): each strategy's mask retrained (``retrain_strategy`` cells) against
    the random mask retrained at the same type, budget and mask seed; and without retraining (``strategy`` cells:
    the sensitivity analysis). Every strategy has its retrained row, ``not testable`` where no cell retrains it. A
    strategy whose masks repeat an earlier strategy's in every cell (:func:`repeated_strategies`) is ``not testable``
    naming it: its test is that strategy's, and counting it twice would only enlarge the Holm family."""
    s, rs = _kind(run.table, "strategy"), _kind(run.table, "retrain_strategy")
    if s.empty and rs.empty:
        return _not_measured(claim, run)
    names = [x for x in dict.fromkeys([*(s["strategy"] if len(s) else []), *(rs["strategy"] if len(rs) else [])])
             if x != "random"]
    out = []
    for t, retrained in ((rs, True), (s, False)):
        empty = ("no cell of this run retrains the masks of this strategy and of random" if retrained
                 else "no random mask to pair with")
        effect = ("BLEU(strategy, retrained) - BLEU(random, retrained)" if retrained
                  else "BLEU(strategy) - BLEU(random)")
        rows = per_setting(claim, run, _mean_by(_strategy_diffs(t, retrained), ["setting", "model_seed"]),
                           [_strategy_setting(n, retrained) for n in names], effect, empty=empty)
        same = repeated_strategies(t)
        rows = [Measurement.absent(run.task, f"its masks are {same[n]}'s in every cell ({_budgets(t, n)} of the "
                                   f"heads of a type pruned): {same[n]}'s row decides it",
                                   setting=m.setting, semantics=run.semantics, unit=claim.unit, effect=effect)
                if n in same else m for n, m in zip(names, rows)]
        out.append((rows, {}))
    return out


def _budgets(t: pd.DataFrame, strategy: str) -> str:
    """The budgets ``strategy`` has cells at, as percentages ("33% and 67%")."""
    b = sorted({float(x) for x in t.loc[t["strategy"] == strategy, "budget"]})
    pct = [f"{100 * x:.0f}%" for x in b]
    return " and ".join([", ".join(pct[:-1]), pct[-1]] if len(pct) > 1 else pct)


def _types_random(claim: Claim, run: Run) -> list[Group]:
    prune = _kind(run.table, "prune")
    if prune.empty:
        return _not_measured(claim, run)
    w = prune.pivot_table(index=["fraction", "model_seed", "seed"], columns="type", values="bleu")
    parts = [(w[c.a] - w[c.b]).dropna().rename("diff").reset_index().assign(setting=f"{c.a} - {c.b}")
             for c in TYPE_CONTRASTS if c.a in w and c.b in w]
    d = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["setting", "model_seed", "diff"])
    return [(per_setting(claim, run, _mean_by(d, ["setting", "model_seed"]), [f"{c.a} - {c.b}" for c in TYPE_CONTRASTS],
                         "BLEU(a pruned) - BLEU(b pruned)", empty="random pruning of both types missing"), {})]


def _types_l0(claim: Claim, run: Run) -> list[Group]:
    prun = type_prunability(run.by_type) if len(run.by_type) else pd.DataFrame()
    pairs = (("dec", "enc"), ("cross", "enc"), ("cross", "dec"))
    d = (pd.concat([prun.assign(setting=f"kept {b} - kept {a}", diff=prun[f"frac_{b}"] - prun[f"frac_{a}"])
                    for b, a in pairs], ignore_index=True) if len(prun)
         else pd.DataFrame(columns=["setting", "model_seed", "diff"]))
    return [(per_setting(claim, run, _mean_by(d, ["setting", "model_seed"]), [f"kept {b} - kept {a}" for b, a in pairs],
                         "share kept (b - a)", bleu=False,
                         empty="no L0 mask on all three types that prunes some heads and keeps some"), {})]


def _enc_most_prunable(claim: Claim, run: Run) -> list[Group]:
    curve = l0_curve(run.table)
    if curve.empty:
        return _not_measured(claim, run)
    enc = curve[(curve["setting"] == "enc") & (curve["n_kept"] < 0.5 * curve["n_heads_total"])]  # most: > half pruned
    pick = enc.sort_values(["n_kept", "lam"]).groupby("model_seed", as_index=False).tail(1)
    d = pick.assign(setting="enc, < half kept", diff=pick["bleu_l0"] - pick["bleu_full"])
    return [(per_setting(claim, run, d, ["enc, < half kept"], "BLEU(L0) - BLEU(full)",
                         empty="no encoder L0 mask keeps fewer than half of the heads"), {})]


def _l0_random(claim: Claim, run: Run) -> list[Group]:
    curve = l0_curve(run.table)
    if curve.empty:
        return _not_measured(claim, run)
    c = curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
    d = c.assign(diff=c["bleu_l0"] - c["bleu_random_mean"])
    return [(per_setting(claim, run, _mean_by(d, ["setting", "model_seed"]), list(dict.fromkeys(curve["setting"])),
                         "BLEU(L0) - BLEU(random), mean over lambdas",
                         empty="no mask that prunes something and keeps something"), {})]


def _encoder_roles(run: Run) -> pd.DataFrame:
    return run.role_tab if len(run.role_tab) else pd.DataFrame(
        columns=["seed", "positional", "syntactic", "rare", "layer", "specialized"])


def _role_heads(claim: Claim, run: Run) -> list[Group]:
    """Heads of the role per trained model (rare-word: in the first layer); presence: the models with one."""
    role = claim.measure.split(":", 1)[1]
    rows = [{"setting": "encoder", "model_seed": int(ms),
             "diff": int((g["rare"] & (g["layer"] == 0)).sum()) if role == "rare-word" else int(g[role].sum())}
            for ms, g in _encoder_roles(run).groupby("seed")]
    return [(per_setting(claim, run, pd.DataFrame(rows, columns=["setting", "model_seed", "diff"]), ["encoder"],
                         f"{role} heads per model" + (" (first layer)" if role == "rare-word" else ""), bleu=False,
                         empty="no roles measured"), {})]


def _confidence(claim: Claim, run: Run) -> list[Group]:
    a = run.agreement
    g = (a[a[["a", "b"]].apply(frozenset, axis=1) == frozenset({"importance", "confidence"})] if len(a)
         else pd.DataFrame(columns=["model_seed", "spearman"]))
    d = g.dropna(subset=["spearman"]).assign(setting="encoder").rename(columns={"spearman": "diff"})
    return [(per_setting(claim, run, d, ["encoder"], "Spearman(importance, confidence) per model", bleu=False,
                         empty="no defined Spearman"), {})]


def _no_role(role: str, run: Run) -> str:
    return f"no head of role '{role}' found on {run.task}"


def _specialized_auc(claim: Claim, run: Run) -> list[Group]:
    ft = _encoder_roles(run)
    n_spec = int(ft["specialized"].sum()) if len(ft) else 0
    settings = list(dict.fromkeys(run.surv["task"])) if len(run.surv) else []
    if not settings:
        return _not_measured(claim, run)
    auc = (role_survival.survival_auc_per_model(run.surv, _roles_per_setting(run.role_tab, settings))
           if len(run.role_tab) else pd.DataFrame(columns=["task", "seed", "auc"]))
    d = pd.DataFrame({"setting": auc["task"], "model_seed": auc["seed"], "diff": auc["auc"] - 0.5})
    empty = ("no layer with specialized and other heads", True) if n_spec else (_no_role("specialized", run), False)
    return [(per_setting(claim, run, d, settings, "within-layer AUC - 0.5 per model", bleu=False, empty=empty[0],
                         name_setting=empty[1]), {"role_counts": n_spec})]


def _roles_kept(claim: Claim, run: Run) -> list[Group]:
    """Per role and L0 setting: kept - P(random mask keeps one) at the mask nearest 17/48 of the encoder heads."""
    if run.budget.empty:
        return _not_measured(claim, run)
    ft = _encoder_roles(run)
    found = {r: int(role_survival.role_mask(ft, r).sum()) if len(ft) else 0 for r in ROLE_NAMES}
    rows = [{"setting": f"{r['setting']}: {role}", "model_seed": int(r["model_seed"]),
             "diff": presence_effect(r[f"present_{role}"], r[f"random_{role}"])}
            for r in run.budget.to_dict("records") for role in ROLE_NAMES if r[f"n_{role}"] > 0]
    d = pd.DataFrame(rows, columns=["setting", "model_seed", "diff"])
    misses = role_survival.budget_misses(run.budget, lambda r: (r["setting"], int(r["model_seed"])),
                                         lambda r: f"{r['setting']} model seed {int(r['model_seed'])}")
    chances = role_survival.role_chances(run.budget, lambda r: (r["setting"], int(r["model_seed"])))
    out = []
    for role in ROLE_NAMES:
        settings = [f"{s}: {role}" for s in dict.fromkeys(run.budget["setting"])]
        empty = ("no measurement", True) if found[role] else (_no_role(role, run), False)
        out.append((per_setting(claim, run, d, settings, "kept - P(random mask keeps one)", bleu=False,
                                empty=empty[0], name_setting=empty[1]),
                    {"role_counts": found, "budget_misses": misses, "role_chances": chances}))
    return out


MEASURES: dict[str, Callable[[Claim, Run], list[Group]]] = {
    "random_pruned - full": _random_pruned,
    "retraining_recovery": _recovery,
    "strategy - random": _strategies,
    "type a - type b (random)": _types_random,
    "kept b - kept a (L0)": _types_l0,
    "enc L0 under half - full": _enc_most_prunable,
    "L0 - random": _l0_random,
    **{f"encoder_heads:{r}": _role_heads for r in ROLE_NAMES},
    "importance_confidence_spearman": _confidence,
    "specialized_survival_auc": _specialized_auc,
    "roles_kept_at_17_of_48": _roles_kept,
}


def evaluate_group(claim: Claim, ms: Sequence[Measurement], evidence: Mapping, scale_: str) -> pd.DataFrame:
    """``claims.evaluate`` of one group: the measured settings together, then each absent one alone (``not
    testable`` for its reason)."""
    measured = [m for m in ms if not m.missing]
    parts = [evaluate(claim, measured, evidence=evidence, scale=scale_, study=NAME)] if measured else []
    parts += [evaluate(claim, [m], evidence=evidence, scale=scale_, study=NAME) for m in ms if m.missing]
    return pd.concat(parts, ignore_index=True) if parts else empty_table()


def verdicts(table: pd.DataFrame, role_tab: pd.DataFrame, surv: pd.DataFrame, budget: pd.DataFrame,
             agreement: pd.DataFrame, by_type: pd.DataFrame, *, claims_: Sequence[Claim], corpus: str, semantics: str,
             scale_: str, patience: int | None, fractions=(0.5,), min_delta: float = 0.0) -> pd.DataFrame:
    """The verdict table (``claims.COLUMNS``) of ``claims_`` (the study's ``CLAIMS``), every number from this run
    (BLEU points).

    Each claim's measurements come from :data:`MEASURES` (its ``measure``; a claim no cell of this run measures is
    ``not testable`` for that reason), its word from its rule and gates (``claims.evaluate``; evidence: the models'
    training histories and ``patience``, 3 when None, and ``min_delta`` (the rule the full models were trained by)
    for the dev-loss plateau; the role counts). Unit of replication
    = the trained model (model seed): values of one model (mask seeds, lambdas, fractions) are averaged first, never
    treated as replicates; with one model every claim is ``not testable`` (the rule's power gate). ``corpus``: with
    the models' direction, the ``task`` column; ``semantics``: the ablation; ``fractions``: the random-pruning
    shares of ``budhraja.random_prunable``."""
    directions = sorted(set(_kind(table, "model").get("direction", pd.Series(dtype=str)).dropna()))
    task = f"{corpus} {', '.join(directions)}".strip()
    full = {int(r.model_seed): float(r.bleu) for r in _kind(table, "model").itertuples()}
    run = Run(table, role_tab, surv, budget, agreement, by_type, task, full, semantics, tuple(fractions))
    trained = {"histories": _histories(table), "patience": patience or 3, "min_delta": float(min_delta),
               "retraining": retraining_convergence(table, patience or 3, min_delta), "gates": gates_evidence(table)}
    parts = [evaluate_group(claim, ms, {**trained, **evidence}, scale_)
             for claim in claims_ for ms, evidence in MEASURES[claim.measure](claim, run)]
    out = pd.concat(parts, ignore_index=True)
    # the claims decided after retraining: their rows without it are a sensitivity analysis (a Holm family of its own)
    without = out["claim_id"].isin(NOT_RETRAINED_SENSITIVITY) & ~out["setting"].astype(str).str.contains(
        RETRAINED, regex=False)
    out.loc[without, "analysis"] = "sensitivity"
    out = adjust(out)
    validate(out)
    return out
