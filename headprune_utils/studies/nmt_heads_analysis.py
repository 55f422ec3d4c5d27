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

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .. import pruning_curves, role_survival, stats, strategy_sweep
from ..head_scores import rank_agreement
from ..masks import mask_from_string
from ..paired_contrasts import LOCATION_CONTRASTS, Contrast, contrast_table, paired_by_strategy
from ..verdict_rules import budget_presence, greater_verdict, most_prunable_verdict

__all__ = [
    "VOITA_ALL_TYPES", "VOITA_BASELINE_BLEU", "VOITA_FRACTION", "TYPE_CONTRASTS", "ROLE_NAMES",
    "full_models", "random_rows", "random_summary", "random_drops", "prunable", "retrain_table", "type_contrasts",
    "strategy_rows", "strategy_summary", "strategy_contrasts", "strategy_mask_rows", "role_source", "roles",
    "role_counts", "role_map", "encoder_scores", "importance_table", "score_agreement", "l0_curve", "l0_by_type",
    "l0_contrasts", "type_prunability", "l0_survival_source", "survival", "survival_tests", "survival_map",
    "survival_by_role", "roles_at_budget", "verdicts",
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
    return 1000 * int(model_seed) + int(seed)


# ---------------------------------------------------------------------------------------------- full model
def full_models(table: pd.DataFrame) -> pd.DataFrame:
    """One row per trained model: test BLEU/chrF/NLL of the full model, training steps, time, best dev NLL."""
    cols = ["model_seed", "bleu", "chrf", "nll", "steps", "stopped", "best_step", "best_dev_loss", "train_seconds",
            "vocab_size", "n_parameters", "trained_now"]
    t = _kind(table, "model")
    return t[[c for c in cols if c in t]].sort_values("model_seed").reset_index(drop=True)


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


def random_drops(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """BLEU drop from the unpruned model paired by (model seed, mask seed), bootstrap CI (``pruning_curves.paired_drop``)."""
    return pruning_curves.paired_drop(random_rows(table), confidence, n_boot, seed).rename(columns={"task": "type"})


def prunable(drops: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per type x regime: the largest fraction whose mean BLEU drop (and every smaller one's) is <= ``tolerance``."""
    return pruning_curves.prunable_fraction(drops.rename(columns={"type": "task"}), tolerance).rename(columns={"task": "type"})


def retrain_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per retrain cell: BLEU without retraining (same mask), with retraining, the two references (full model,
    unpruned model continued for the same steps), and the recovery = drop without - drop with retraining."""
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


TYPE_CONTRASTS = (
    Contrast("enc vs cross", "Voita et al.: encoder self-attention is more prunable than "
                              "encoder-decoder attention (BLEU after pruning the same share of each)", "enc", "cross", "greater"),
    Contrast("enc vs dec", "Voita et al.: encoder self-attention is the most prunable type",
                              "enc", "dec", "greater"),
    Contrast("dec vs cross", "Voita et al.: encoder-decoder attention is the least prunable type",
                              "dec", "cross", "greater"),
)


def type_contrasts(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """BLEU(type a pruned) - BLEU(type b pruned) at the same fraction and mask seed (``paired_contrasts.contrast_table``;
    ``task`` = "random pruning", ``budget`` = fraction; pooled over fractions in ``budget = "all"``). With grids of
    equal size (same depth of encoder and decoder) the same fraction is the same number of heads."""
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

    return contrast_table(TYPE_CONTRASTS, pair, confidence, n_boot, seed)


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


def strategy_contrasts(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Each location strategy - random (paired by type, budget, model seed and mask seed), per type x budget, per
    budget over types (``task = "all"``) and pooled (``task = "all", budget = "all"``); the statistics of
    ``paired_contrasts`` (bootstrap CI, t-test, sign-flip test). Also the "avoid the middle" / "avoid consecutive
    layers" contrasts (exploratory: Budhraja et al.'s BERT claims)."""
    rows = strategy_rows(table)
    if rows.empty:
        return pd.DataFrame()
    names = list(dict.fromkeys(rows["strategy"]))
    pair = lambda a, b: paired_by_strategy(rows, a, b)  # noqa: E731
    return contrast_table(_strategy_contrast_list(names), pair, confidence, n_boot, seed,
                                           pool_per_budget=True).rename(columns={"task": "type"})


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


def l0_contrasts(curve: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Paired BLEU differences ``L0 - random`` (masks that prune something and keep something) and ``L0 - full``
    (every cell), per (setting, lambda), per setting (``lam = "all"``) and pooled (``setting = "pooled"``)."""
    rows = []
    for name, a, b in (("L0 - random", "bleu_l0", "bleu_random_mean"), ("L0 - full", "bleu_l0", "bleu_full")):
        c = curve if name == "L0 - full" else curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
        d = c.assign(diff=c[a] - c[b])
        groups = [((s, l), g) for (s, l), g in d.groupby(["setting", "lam"])]
        groups += [((s, "all"), g) for s, g in d.groupby("setting")] + [(("pooled", "all"), d)]
        for (setting, lam), g in groups:
            x = g["diff"].to_numpy(dtype=float)
            if len(x) == 0:
                continue
            lo, hi = stats.bootstrap_ci(x, confidence, n_boot, seed) if len(x) > 1 else (np.nan, np.nan)
            rows.append({"contrast": name, "setting": setting, "lam": lam, "n_pairs": len(x),
                         "mean_kept": float(g["n_kept"].mean()), "n_heads_total": int(g["n_heads_total"].max()),
                         "mean_diff": float(x.mean()), "boot_ci_low": lo, "boot_ci_high": hi,
                         "sign_flip_p": stats.sign_flip_test(x, seed=seed)})
    return pd.DataFrame(rows)


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


# ---------------------------------------------------------------------------------------------- verdicts
def _ci(mean, lo, hi, digits: int = 2) -> str:
    if lo != lo or hi != hi:  # one pair: no interval
        return f"{mean:+.{digits}f} (one pair, no interval)"
    return f"{mean:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def verdicts(full: pd.DataFrame, drops: pd.DataFrame, retrain: pd.DataFrame, type_contr: pd.DataFrame,
             strat_contr: pd.DataFrame, counts: pd.DataFrame, agreement: pd.DataFrame, l0_contr: pd.DataFrame,
             prunability: pd.DataFrame, by_type: pd.DataFrame, surv_tests: pd.DataFrame, budget: pd.DataFrame,
             relations: list[str], tolerance: float = 1.0, margin: float = 1.0, alpha: float = 0.05) -> pd.DataFrame:
    """The table "claim - our result - verdict", every number from this run (BLEU points unless said)."""
    rows = []

    def add(paper, claim, result, verdict):
        rows.append({"paper": paper, "claim": claim, "our result": result, "verdict": verdict + " at this scale"})

    base = (f"full model BLEU {full['bleu'].mean():.2f}" + (f" (mean of {len(full)} models)" if len(full) > 1 else "")
            if len(full) else "no full model")

    # Budhraja 1: random pruning
    if len(drops):
        pr = prunable(drops, tolerance)
        parts = []
        pr = pr.assign(_o=pr["type"].map(lambda v: KIND_ORDER.index(v) if v in KIND_ORDER else len(KIND_ORDER)))
        for r in pr.sort_values(["regime", "_o"]).itertuples():
            d = drops[(drops["type"] == r.type) & (drops["regime"] == r.regime)].sort_values("fraction")
            detail = ", ".join(f"{100 * x.fraction:.0f}%: {_ci(x.mean_drop, x.boot_ci_low, x.boot_ci_high)}" for x in d.itertuples())
            parts.append(f"{r.type} ({r.regime}): largest share within -{tolerance:g} BLEU = {100 * r.max_fraction_within_tolerance:.0f}% "
                         f"(mean BLEU drop, paired: {detail})")
        joint = pr[pr["type"] == "all"]
        best = joint["max_fraction_within_tolerance"].max() if len(joint) else pr["max_fraction_within_tolerance"].max()
        v = "supported" if best >= 0.5 else "partly supported" if (pr["max_fraction_within_tolerance"] >= 0.5).any() else "not supported"
        add("Budhraja et al. (claim 1)", "A large fraction (>= 50%) of the heads can be pruned at random with limited "
            f"effect on BLEU (here: mean drop <= {tolerance:g} BLEU)", f"{base}; " + "; ".join(parts), v)
    if len(retrain):
        g = retrain.groupby(["type", "fraction"])
        parts = []
        for (t, f), x in g:
            rec = x["recovery"].to_numpy(dtype=float)
            lo, hi = stats.bootstrap_ci(rec, 0.95, 2000, 0) if len(rec) > 1 else (np.nan, np.nan)
            parts.append(f"{t} {100 * f:.0f}%: drop without retraining {x['drop_without_retraining'].mean():.2f}, after "
                         f"{int(x['retrain_steps'].iloc[0])} training steps "
                         f"{x['drop_with_retraining'].mean():.2f} (vs the unpruned model continued as long); recovery "
                         f"{_ci(rec.mean(), lo, hi)}")
        rec_all = retrain["recovery"].to_numpy(dtype=float)
        p = stats.sign_flip_test(rec_all) if len(rec_all) else np.nan
        n = len(rec_all)
        smallest = stats.smallest_sign_flip_p(n) if n else np.nan
        v = (greater_verdict(float(rec_all.mean()), p, alpha) if smallest <= alpha else
             f"not testable with {n} masks (the smallest possible sign-flip p is {smallest:.3g}); recovery > 0 for "
             f"{int((rec_all > 0).sum())} of {n}")
        add("Budhraja et al. (set-up)", "Training with the mask fixed recovers BLEU lost by pruning (they fine-tune "
            "25 epochs; here a few dozen steps)", "; ".join(parts) + f"; sign-flip p = {p:.3g} over {n} masks", v)

    # Budhraja 2: location strategies vs random
    if len(strat_contr):
        pooled = strat_contr[(strat_contr["type"] == "all") & (strat_contr["budget"] == "all")
                             & strat_contr["contrast"].str.endswith("vs random")]
        parts, better, worse = [], [], []
        for r in pooled.itertuples():
            parts.append(f"{r.a}: {_ci(r.mean_diff, r.boot_ci_low, r.boot_ci_high)}, p = {r.sign_flip_p:.3g}")
            if r.sign_flip_p < alpha:
                (better if r.mean_diff > 0 else worse).append(r.a)
        per_type = strat_contr[(strat_contr["type"] != "all") & strat_contr["contrast"].str.endswith("vs random")]
        sig = per_type[per_type["sign_flip_p"] < alpha]
        within = bool(len(pooled)) and bool(((pooled["boot_ci_low"] >= -margin) & (pooled["boot_ci_high"] <= margin)).all())
        if better:
            v = f"contradicted ({', '.join(better)} significantly better than random)"
        elif within:
            v = f"supported (no strategy better than random; every pooled CI within +-{margin:g} BLEU)"
        else:
            v = "supported (no strategy significantly better than random)" + (
                f"; {', '.join(worse)} significantly WORSE" if worse else "; CIs wider than the margin")
        n_pairs = int(pooled["n_pairs"].max()) if len(pooled) else 0
        add("Budhraja et al. (claim 2)", "On the Transformer, choosing heads to prune by their location (layer) brings "
            "no advantage over random pruning at the same budget",
            f"strategy - random, BLEU, pooled over types, budgets and seeds ({n_pairs} pairs): " + "; ".join(parts)
            + f". Per type and budget, {len(sig)} of {len(per_type)} contrasts have p < {alpha:g}", v)

    # Voita: type prunability (random pruning)
    if len(type_contr):
        pooled = type_contr[(type_contr["task"] == "all") & (type_contr["budget"] == "all")].set_index("contrast")
        parts = [f"{c}: {_ci(r.mean_diff, r.boot_ci_low, r.boot_ci_high)}, p = {r.sign_flip_p:.3g}"
                 for c, r in pooled.iterrows()]
        ok = [c for c, r in pooled.iterrows() if r.mean_diff > 0 and r.sign_flip_p < alpha]
        bad = [c for c, r in pooled.iterrows() if r.mean_diff < 0 and r.sign_flip_p < alpha]
        v = ("supported" if len(ok) == len(pooled) else "contradicted (" + ", ".join(bad) + " reversed)" if bad
             else f"partly supported ({len(ok)} of {len(pooled)} orderings significant)" if ok
             else "not supported (no significant difference)")
        add("Voita et al. (Sec. 6, Table 2)", "Encoder self-attention is the most prunable type and encoder-decoder "
            "attention the least: random pruning test (BLEU with type a pruned - with type b pruned, same share)",
            "; ".join(parts) + " (pooled over fractions and seeds)", v)
    if len(prunability):
        n = len(prunability)
        fr = by_type[by_type["setting"] == "all"].groupby("type")["frac_kept"].mean()
        res = (f"over {n} lambda(s) that prune some heads: encoder keeps the smallest share in {int(prunability['enc_fewest'].sum())}, "
               f"encoder-decoder the largest in {int(prunability['cross_most'].sum())}; mean share kept enc "
               f"{fr.get('enc', np.nan):.2f}, dec {fr.get('dec', np.nan):.2f}, cross {fr.get('cross', np.nan):.2f}. Per lambda: "
               + "; ".join(f"lambda {r.lam:g}: {r.kept_enc}/{r.kept_dec}/{r.kept_cross} kept, BLEU {r.bleu_l0:.2f}"
                           for r in prunability.itertuples())
               + ". Voita et al. Table 2 (of 48 each): " + "; ".join(f"{a}/{b}/{c} -> {d}" for a, b, c, d in VOITA_ALL_TYPES))
        both = prunability["enc_fewest"] & prunability["cross_most"]
        v = ("supported" if both.all() else "partly supported" if (prunability["enc_fewest"] | prunability["cross_most"]).any()
             else "not supported")
        add("Voita et al. (Sec. 6, Table 2)", "L0 gates on all three types keep the fewest encoder self-attention heads "
            "and the most encoder-decoder heads", res, v)

    # Voita: encoder heads prunable with little loss
    if len(l0_contr):
        enc = l0_contr[(l0_contr["contrast"] == "L0 - full") & (l0_contr["setting"] == "enc") & (l0_contr["lam"] != "all")]
        if len(enc):
            total = int(enc["n_heads_total"].max())
            ok = enc[enc["mean_diff"] >= -margin]
            parts = [f"lambda {float(r.lam):g}: {r.mean_kept:.1f} of {total} kept, BLEU {r.mean_diff:+.2f}" for r in enc.itertuples()]
            v = most_prunable_verdict(ok["mean_kept"].tolist(), total)
            add("Voita et al. (Sec. 6.2)", "Most encoder heads can be pruned with little BLEU loss (38 of 48: -0.15 BLEU); "
                f"here: at least half of them within -{margin:g} BLEU (L0 gates on the encoder, frozen model)",
                "; ".join(parts), v)
        pooled = l0_contr[(l0_contr["contrast"] == "L0 - random") & (l0_contr["setting"] == "pooled")]
        if len(pooled):
            r = pooled.iloc[0]
            per = l0_contr[(l0_contr["contrast"] == "L0 - random") & (l0_contr["setting"] != "pooled") & (l0_contr["lam"] == "all")]
            detail = "; ".join(f"{p.setting}: {_ci(p.mean_diff, p.boot_ci_low, p.boot_ci_high)}" for p in per.itertuples())
            add("Voita et al. (Sec. 6)", "L0 gates choose heads that matter: better than random heads at the same counts "
                "per type (no retraining)", f"L0 - random = {_ci(r.mean_diff, r.boot_ci_low, r.boot_ci_high)}, sign-flip "
                f"p = {r.sign_flip_p:.3g} over {int(r.n_pairs)} masks. Per setting: {detail}",
                greater_verdict(r.mean_diff, r.sign_flip_p, alpha))

    # Voita: roles
    if len(counts):
        n_models = len(counts)
        for role, claim in (("positional", "Positional heads exist in the encoder (max attention on the previous or next "
                             "token >= 90% of the time)"),
                            ("syntactic", "Syntactic heads exist (beat the best fixed-offset baseline by >= 10 points on "
                             + ", ".join(relations) + "; UD English-EWT)"),
                            ("rare-word", "A rare-word head exists (attends to the least frequent token; the paper: one, "
                             "in the first layer)")):
            n = counts[f"n_{role}"].to_numpy(dtype=int)
            col = {"positional": "positional_layers", "rare-word": "rare_layers"}.get(role)
            layers = sorted(set(x for v in counts[col] for x in str(v).split(",") if x and x != "nan")) if col else []
            where = f"; in layers {', '.join(layers)} (0-based)" if layers else ""
            if role == "syntactic":
                rel = "; ".join(f"{r}: {counts[f'n_syntactic_{r}'].mean():.1f}" for r in relations if f"n_syntactic_{r}" in counts)
                where = f". Per relation: {rel}" if rel else ""
            res = f"{n.mean():.1f} head(s) per model (range {n.min()}-{n.max()}, {n_models} model(s)){where}"
            v = "supported" if (n > 0).all() else "partly supported" if (n > 0).any() else "not supported (none found)"
            add("Voita et al. (Sec. 5)", claim, res, v)
    if len(agreement):
        g = agreement[(agreement["a"] == "importance") & (agreement["b"] == "confidence")]
        if len(g):
            rho = g["spearman"].to_numpy(dtype=float)
            res = "; ".join(f"model {int(r.model_seed)}: Spearman {r.spearman:+.2f} (p = {r.spearman_p:.3g}, {int(r.n)} heads)"
                            for r in g.itertuples())
            sig_pos = int(((g["spearman"] > 0) & (g["spearman_p"] < alpha)).sum())
            v = ("supported" if sig_pos == len(g) else "partly supported" if sig_pos
                 else "contradicted (significantly negative)" if ((g["spearman"] < 0) & (g["spearman_p"] < alpha)).any()
                 else "not supported (no significant correlation)")
            add("Voita et al. (Sec. 4)", "The most important encoder heads are the most confident (importance here: dev "
                "NLL increase when the head alone is zeroed, not LRP)", res, v + f" ({np.nanmean(rho):+.2f} mean)")

    # Voita: survival
    if len(surv_tests):
        st = surv_tests.set_index("group")
        if "specialized" in st.index:
            r = st.loc["specialized"]
            detail = "; ".join(f"{g}: AUC {st.loc[g, 'mean_auc']:.2f}, p = {st.loc[g, 'p_greater']:.3g} ({int(st.loc[g, 'n_group_heads'])} heads)"
                               for g in ROLE_NAMES if g in st.index and st.loc[g, "n_group_heads"] > 0)
            res = (f"specialized encoder heads: mean survival level {r.mean_survival_group:.2f} vs {r.mean_survival_other:.2f}; "
                   f"mean AUC {r.mean_auc:.2f} (0.5 = no difference), stratified permutation p = {r.p_greater:.3g} "
                   f"(one-sided; strata = L0 setting x model: {int(r.n_models)}). By role: {detail or 'none'}")
            v = ("not testable (no specialized heads)" if r.n_models == 0 else "supported" if r.p_greater < alpha
                 else "contradicted (specialized heads go earlier)" if r.p_less < alpha else "not supported (no significant difference)")
            add("Voita et al. (Sec. 6.2)", "Specialized heads are the last to be pruned", res, v)
    if len(budget):
        res, v = budget_presence(budget, heads="the encoder heads", kept="", per="")
        add("Voita et al. (Sec. 6.2)", "With 17 of 48 encoder heads kept, every identified head function is still present",
            res, v)
    return pd.DataFrame(rows)
