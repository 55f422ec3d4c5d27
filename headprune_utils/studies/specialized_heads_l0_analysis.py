"""Study 6's analysis: pure functions over the tidy table of the ``specialized_heads_l0`` cells (one row per cell).

Head scores and their agreement, the L0 curve against its baselines, the rare-word threshold's effect on the
survival test, and the verdicts. The roles and the survival-by-role analysis, which study 7 shares, live in
:mod:`headprune_utils.role_survival` (re-exported here); the shared decision rules in
:mod:`headprune_utils.verdict_rules`.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .. import stats, survival
from ..head_scores import rank_agreement
from ..masks import mask_from_string
from ..role_survival import (  # noqa: F401 (re-exported: the notebook and the tests read them from this study)
    ROLE_NAMES, VOITA_FRACTION, role_counts, role_map_data, role_stability, role_table, roles_at_budget,
    survival_heads, survival_map_data, survival_tests, survival_with_roles,
)
from ..verdict_rules import budget_presence, greater_verdict

SCORES: tuple[str, ...] = ("gradient_importance", "relevance", "ablation", "confidence", "entropy")


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _kind(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    return table[table["kind"] == kind] if "kind" in table else table.iloc[0:0]


# ---------------------------------------------------------------------------------------------- scores
def head_score_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, seed, layer, head) with every score (``SCORES``) of the fine-tuned full model."""
    rows = []
    for r in _kind(table, "scores").itertuples():
        grids = {s: _arr(getattr(r, s)) for s in SCORES}
        n_layers, n_heads = grids[SCORES[0]].shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rows.append({"task": r.task, "seed": int(r.seed), "layer": layer, "head": head,
                             **{s: float(g[layer, head]) for s, g in grids.items()}})
    return pd.DataFrame(rows)



def score_map_data(scores: pd.DataFrame, task: str | None = None) -> pd.DataFrame:
    """Long rows (score, layer, head, value): each score's mean over the seeds of ``task`` (default: the first)."""
    task = scores["task"].iloc[0] if task is None else task
    m = scores[scores["task"] == task].groupby(["layer", "head"])[list(SCORES)].mean().reset_index()
    return m.melt(id_vars=["layer", "head"], value_vars=list(SCORES), var_name="score", value_name="value").assign(task=task)



def score_agreement(table: pd.DataFrame, surv: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rank agreement (Spearman, Kendall) of every pair of scores, per fine-tuned model (task, seed).

    surv: optional :func:`survival_heads` rows; then ``l0_survival`` (the survival level) joins as a score.
    """
    out = []
    for r in _kind(table, "scores").itertuples():
        scores = {s: torch.tensor(getattr(r, s)) for s in SCORES}
        if surv is not None:
            g = surv[(surv["task"] == r.task) & (surv["seed"] == r.seed)]
            if len(g):
                grid = np.zeros(tuple(scores[SCORES[0]].shape))
                grid[g["layer"].to_numpy(), g["head"].to_numpy()] = g["survival"].to_numpy(dtype=float)
                scores["l0_survival"] = torch.from_numpy(grid)
        with warnings.catch_warnings():  # a constant score (e.g. nothing pruned) has no rank correlation: NaN
            warnings.simplefilter("ignore", sps.ConstantInputWarning)
            agr = rank_agreement(scores)
        agr.insert(0, "seed", int(r.seed))
        agr.insert(0, "task", r.task)
        out.append(agr)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()



def agreement_summary(agr: pd.DataFrame, confidence: float = 0.95, alpha: float = 0.05) -> pd.DataFrame:
    """Per score pair: mean Spearman over the models with a t-interval, and how many models show a significant
    positive / negative correlation (``spearman_p < alpha``)."""
    rows = []
    for (a, b), g in agr.groupby(["a", "b"], sort=False):
        rho = g["spearman"].dropna().to_numpy(dtype=float)
        mean, lo, hi = stats.t_interval(rho, confidence) if len(rho) else (np.nan, np.nan, np.nan)
        sig = g["spearman_p"] < alpha
        rows.append({"a": a, "b": b, "n_models": len(rho), "mean_spearman": mean, "ci_low": lo, "ci_high": hi,
                     "mean_kendall": float(g["kendall"].mean()), "n_sig_positive": int((sig & (g["spearman"] > 0)).sum()),
                     "n_sig_negative": int((sig & (g["spearman"] < 0)).sum())})
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------------- L0 curve
def l0_curve(table: pd.DataFrame) -> pd.DataFrame:
    """One row per L0 cell: heads kept and the dev scores of L0, the baselines and the full model."""
    t = _kind(table, "l0")
    cols = ["task", "seed", "lam", "n_kept", "n_heads_total", "score_l0", "score_random_mean", "score_importance",
            "score_full", "chance", "metric", "seconds"]
    c = t[cols].copy()
    c["seed"] = c["seed"].astype(int)
    c["frac_kept"] = c["n_kept"] / c["n_heads_total"]
    return c.sort_values(["task", "seed", "lam"]).reset_index(drop=True)



CONTRASTS = (("L0 - random", "score_l0", "score_random_mean"), ("L0 - importance", "score_l0", "score_importance"),
             ("importance - random", "score_importance", "score_random_mean"), ("L0 - full", "score_l0", "score_full"))


def curve_contrasts(curve: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Paired differences per (task, lambda), per task over lambdas (``lam="all"``) and pooled (``task="all"``).

    Against the baselines only masks that prune something and keep something count (else every mask is the
    same); ``L0 - full`` uses every cell. Mean difference, percentile-bootstrap CI, exact/random sign-flip p.
    """
    rows = []
    for name, a, b in CONTRASTS:
        c = curve if name == "L0 - full" else curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
        d = c.assign(diff=c[a] - c[b])
        groups = [((t, l), g) for (t, l), g in d.groupby(["task", "lam"])]
        groups += [((t, "all"), g) for t, g in d.groupby("task")] + [(("all", "all"), d)]
        for (task, lam), g in groups:
            x = g["diff"].to_numpy(dtype=float)
            if len(x) == 0:
                continue
            lo, hi = stats.bootstrap_ci(x, confidence, n_boot, seed) if len(x) > 1 else (np.nan, np.nan)
            rows.append({"contrast": name, "task": task, "lam": lam, "n_pairs": len(x), "mean_kept": float(g["n_kept"].mean()),
                         "n_heads_total": int(g["n_heads_total"].max()),
                         "mean_diff": float(x.mean()), "boot_ci_low": lo, "boot_ci_high": hi,
                         "sign_flip_p": stats.sign_flip_test(x, seed=seed)})
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------------- survival
def sweep_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (task, seed): heads kept at each lambda and the share of heads whose masks are nested across lambdas."""
    rows = []
    for (task, seed), g in _kind(table, "l0").groupby(["task", "seed"]):
        g = g.sort_values("lam")
        ms = torch.stack([mask_from_string(m) for m in g["mask"]])
        rows.append({"task": task, "seed": int(seed), "lambdas": " ".join(f"{l:g}" for l in g["lam"]),
                     "heads_kept": " ".join(str(int(n)) for n in g["n_kept"]), "monotone_share": survival.monotone_share(ms)})
    return pd.DataFrame(rows)



def rare_ratio_sensitivity(table: pd.DataFrame, surv: pd.DataFrame, ratios=(2.0, 3.0, 4.0, 5.0), n_perm: int = 10000,
                           seed: int = 0, **thresholds) -> pd.DataFrame:
    """How the rare-word threshold (share >= ratio x chance) changes the roles and the survival test.

    Per ratio: rare-word heads of the pre-trained model and (mean) of the fine-tuned ones, specialized heads per
    fine-tuned model, and the mean AUC / one-sided p of specialized vs other heads and of rare-word vs other heads.
    ``thresholds``: the other keyword arguments of :func:`role_table`.
    """
    rows = []
    for ratio in ratios:
        roles = role_table(table, rare_ratio=ratio, **thresholds)
        t = survival_tests(surv, roles, n_perm, seed).set_index("group")
        pre, ft = roles[roles["source"] == "pretrained"], roles[roles["source"] != "pretrained"]
        rows.append({"rare_ratio": ratio, "n_rare_pretrained": int(pre["rare"].sum()),
                     "mean_n_rare_finetuned": float(ft.groupby(["source", "seed"])["rare"].sum().mean()),
                     "mean_n_specialized_finetuned": float(ft.groupby(["source", "seed"])["specialized"].sum().mean()),
                     "auc_specialized": t.loc["specialized", "mean_auc"], "p_specialized": t.loc["specialized", "p_greater"],
                     "auc_rare": t.loc["rare-word", "mean_auc"], "p_rare": t.loc["rare-word", "p_greater"]})
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------------- verdicts
def _ci(r) -> str:
    return f"{r.mean_diff:+.3f} [{r.boot_ci_low:+.3f}, {r.boot_ci_high:+.3f}]"



def verdicts(agree: pd.DataFrame, counts: pd.DataFrame, contr: pd.DataFrame, surv_tests: pd.DataFrame,
             budget: pd.DataFrame, relations: list[str], margin: float = 0.02, alpha: float = 0.05,
             curve: pd.DataFrame | None = None, sensitivity: pd.DataFrame | None = None) -> pd.DataFrame:
    """"claim - our result - verdict", every number from this run (``agreement_summary``, ``role_counts``,
    ``curve_contrasts``, ``survival_tests``, ``roles_at_budget``; ``curve``: :func:`l0_curve`, to leave out tasks
    whose full model is within ``margin`` of a constant predictor: nothing to lose there; ``sensitivity``:
    :func:`rare_ratio_sensitivity`, whose survival p-values join the survival row, and when the verdict at
    ``alpha`` changes with the rare-word threshold the row says so instead of a single verdict)."""
    rows = []

    def add(claim, result, verdict):
        rows.append({"claim": claim, "our result": result, "verdict": verdict + " at this scale"})

    # 1. importance vs confidence
    a = agree.set_index(["a", "b"])
    parts, main = [], None
    for x, label in (("relevance", "first-order relevance"), ("gradient_importance", "gradient importance"),
                     ("ablation", "ablation importance")):
        if (x, "confidence") in a.index:
            r = a.loc[(x, "confidence")]
            if not r.n_models:
                parts.append(f"Spearman({label}, confidence) undefined (a constant score)")
                continue
            parts.append(f"Spearman({label}, confidence) = {r.mean_spearman:+.2f} [{r.ci_low:+.2f}, {r.ci_high:+.2f}] over "
                         f"{int(r.n_models)} models ({int(r.n_sig_positive)} significantly positive, {int(r.n_sig_negative)} negative)")
            main = r if main is None else main
    if main is not None:
        if main.n_models < 2:
            v = "not testable (fewer than two models)"
        elif main.ci_low > 0:
            v = "supported"
        elif main.ci_high < 0:
            v = "contradicted (negative)"
        else:
            v = "not supported (interval includes 0)"
        v += " for first-order relevance (not LRP)"
        add("Voita et al. (Sec. 4): the most important heads (LRP relevance) are also the most confident", "; ".join(parts), v)

    # 2. roles exist
    pre = counts[counts["source"] == "pretrained"] if len(counts) else counts
    ft = counts[counts["source"] != "pretrained"] if len(counts) else counts

    def role_row(role, claim, extra=""):
        n_pre = int(pre[f"n_{role}"].iloc[0]) if len(pre) else 0
        n_ft = ft[f"n_{role}"].to_numpy(dtype=int)
        have = int((n_ft > 0).sum())
        res = f"pre-trained model: {n_pre} head(s)"
        if len(n_ft):
            res += (f"; fine-tuned models: {n_ft.mean():.1f} on average (range {n_ft.min()}-{n_ft.max()}; {have} of "
                    f"{len(n_ft)} models have one)")
        res += extra
        v = ("supported" if n_pre > 0 and have == len(n_ft) else "partly supported" if n_pre > 0 or have > 0
             else "not supported (none found)")
        add(claim, res, v)

    if len(counts):
        layers = pre["positional_layers"].iloc[0] if len(pre) else ""
        role_row("positional", "Voita et al.: positional heads exist (max attention on the previous or next token "
                 ">= 90% of the time)", f"; pre-trained positional heads in layers {layers or '-'} (0-based)")
        def n_rel(t, r, how):
            col = f"n_syntactic_{r}"
            return float(getattr(t[col], how)()) if len(t) and col in t else 0.0

        rel = "; ".join(f"{r}: {n_rel(pre, r, 'max'):.0f} pre-trained, {n_rel(ft, r, 'mean'):.1f} fine-tuned"
                        for r in relations)
        role_row("syntactic", "Voita et al.: syntactic heads beat the best fixed-offset baseline by >= 10 points on "
                 f"{', '.join(relations)}", f". Per relation: {rel}")
        rl = pre["rare_layers"].iloc[0] if len(pre) else ""
        role_row("rare-word", "Voita et al.: a rare-word head (attends to the least frequent token; one head, in the "
                 "first layer)", f"; pre-trained rare-word heads in layers {rl or '-'} (0-based; the paper: layer 1 = our 0)")

    # 3. most heads prunable with little loss
    full = contr[(contr["contrast"] == "L0 - full") & (contr["task"] != "all") & (contr["lam"] != "all")]
    if len(full):
        parts, good = [], 0
        tasks = list(dict.fromkeys(full["task"]))
        for t in list(tasks):
            g = full[full["task"] == t]
            if curve is not None:
                c = curve[curve["task"] == t]
                gap = float(c["score_full"].mean() - c["chance"].iloc[0])
                if gap <= margin:
                    parts.append(f"{t}: left out, the full model is {gap:+.3f} from a constant predictor")
                    tasks.remove(t)
                    continue
            total = None  # heads kept at the strongest pruning within the margin
            ok = g[g["boot_ci_low"] >= -margin]
            strong = g.loc[g["mean_kept"].idxmin()]
            if len(ok):
                b = ok.loc[ok["mean_kept"].idxmin()]
                parts.append(f"{t}: fewest heads within -{margin:g} of the full model: lambda {float(b.lam):g} keeps "
                             f"{b.mean_kept:.1f} heads, L0 - full = {_ci(b)}; strongest lambda {float(strong.lam):g} keeps "
                             f"{strong.mean_kept:.1f} heads, L0 - full = {_ci(strong)}")
                total = b.mean_kept
            else:
                parts.append(f"{t}: no lambda within -{margin:g} (weakest keeps {g['mean_kept'].max():.1f} heads)")
            good += int(total is not None and total <= 0.5 * float(g["n_heads_total"].max()))
        v = ("not testable (every full model is at chance)" if not tasks else "supported" if good == len(tasks)
             else f"partly supported ({good} of {len(tasks)} tasks)" if good else "not supported")
        add("Voita et al.: most encoder heads can be pruned with little loss (38 of 48 pruned: -0.15 BLEU); here: "
            "at least half the heads pruned with the L0 - full interval above -margin", "; ".join(parts), v)

    # 4/5. against the baselines (pooled)
    pooled = contr[(contr["task"] == "all") & (contr["lam"] == "all")].set_index("contrast")
    for name, claim, neutral in (
        ("L0 - random", "Voita et al.'s L0 gates choose heads that matter: better than random heads at the same count "
         "(fine-tuned model, no retraining)", False),
        ("L0 - importance", "L0 gates vs Michel et al.'s gradient importance at the same head count (no claim in the paper)", True),
    ):
        if name in pooled.index:
            r = pooled.loc[name]
            per = contr[(contr["contrast"] == name) & (contr["task"] != "all") & (contr["lam"] == "all")]
            detail = "; ".join(f"{p.task}: {_ci(p)}" for p in per.itertuples())
            res = (f"{name} = {_ci(r)}, sign-flip p = {r.sign_flip_p:.3g} over {int(r.n_pairs)} masks (task x seed x lambda, "
                   f"pruning something). Per task: {detail}")
            if neutral:
                v = ("L0 better" if r.mean_diff > 0 and r.sign_flip_p < alpha else "importance better"
                     if r.mean_diff < 0 and r.sign_flip_p < alpha else "no significant difference")
            else:
                v = greater_verdict(r.mean_diff, r.sign_flip_p, alpha)
            add(claim, res, v)

    # 6. survival
    st = surv_tests.set_index("group")
    if "specialized" in st.index:
        r = st.loc["specialized"]
        detail = "; ".join(f"{g}: AUC {st.loc[g, 'mean_auc']:.2f}, p = {st.loc[g, 'p_greater']:.3g} "
                           f"({int(st.loc[g, 'n_group_heads'])} heads)" for g in ROLE_NAMES
                           if g in st.index and st.loc[g, "n_group_heads"] > 0)
        res = (f"specialized heads: mean survival level {r.mean_survival_group:.2f} vs {r.mean_survival_other:.2f} for the "
               f"others; mean AUC {r.mean_auc:.2f} (0.5 = no difference), stratified permutation p = {r.p_greater:.3g} "
               f"(one-sided) over {int(r.n_models)} models; AUC of the final log_alpha {r.mean_auc_log_alpha:.2f} "
               f"(p = {r.p_greater_log_alpha:.3g}); Mann-Whitney p < {alpha:g} in {int(r.n_models_mwu_sig)} models. "
               f"By role: {detail or 'none'}")
        if r.n_models == 0:
            v = "not testable (no specialized heads)"
        elif r.p_greater < alpha:
            v = "supported"
        elif r.p_less < alpha:
            v = "contradicted (specialized heads are pruned earlier)"
        else:
            v = "not supported (no significant difference)"
        if sensitivity is not None and len(sensitivity):
            sens = sensitivity.sort_values("rare_ratio")
            res += (". Rare-word threshold (share >= ratio x chance) vs the specialized-heads test: " + "; ".join(
                f"{x.rare_ratio:g}x: {x.n_rare_pretrained} rare-word heads pre-trained, AUC {x.auc_specialized:.2f}, "
                f"p = {x.p_specialized:.3g}" for x in sens.itertuples()))
            sig = sens["p_specialized"].to_numpy(dtype=float) < alpha
            if sig.any() and not sig.all():
                yes = ", ".join(f"{x:g}x" for x in sens["rare_ratio"][sig])
                no = ", ".join(f"{x:g}x" for x in sens["rare_ratio"][~sig])
                v = (f"depends on the rare-word threshold: supported at {yes}, not at {no} (this run's threshold: "
                     f"{v})")
        add("Voita et al.: specialized heads are the last to be pruned", res, v)

    # 7. roles present at ~17/48 heads
    if len(budget):
        res, v = budget_presence(budget)
        add("Voita et al.: with 17 of 48 heads kept, every identified head function is still present", res, v)
    return pd.DataFrame(rows)
