"""Specialized heads and how long they survive L0 pruning: pure functions over tidy tables of head measurements
and L0 masks (Voita et al. 2019). Studies 6 (GLUE encoders) and 7 (the encoder of a translation model) use them.

Roles (thresholds are arguments; the cells hold the raw measurements, ``specialized`` and ``translation_heads``):

- positional: ``max(prev, next) >= positional_threshold`` (share of tokens whose max attention is on the
  previous / next token);
- syntactic: for at least one relation and direction, ``accuracy >= baseline + syntactic_margin`` (best
  fixed-offset baseline over the same instances; relations with no instance never count);
- rare-word: the head's ``rare_share`` (the share of queries whose maximum attention falls on the sentence's least
  frequent token) is above ``rare_share`` (default ``specialized.RARE_SHARE``, 0.5: MORE than half of the queries,
  Voita et al.'s definition, fixed from the paper; no ratio over chance); :func:`rare_criterion_counts` gives the
  counts over other thresholds (a sensitivity, never a selection);
- specialized: any of the three.

Claims (studies 6 and 7): :func:`presence_effect` (a role kept beyond what a random mask of the same size keeps) and
:func:`setting_role_found` (the precondition "a head of the row's role was found", for ``preconditions.Check``).

Survival: per model (``task``, ``seed``) the L0 masks ordered by ``lam`` ascending; a head's survival level is the
1-based index of the LARGEST lambda at which it is still kept (0: kept at none) -- ``survival.survival_levels``.
Heads of a role are compared with the other heads of the same layer (survival depends on the layer).

Input layouts. Measurements: rows with ``kind`` ("roles": the pre-trained model, ``source = "pretrained"``, seed
-1; "scores": a fine-tuned model, ``source = task``), ``task``, ``seed`` and ``roles`` (the dict of
``[n_layers][n_heads]`` lists ``prev``, ``next``, ``rare_share``, ``rare_p``, scalars ``rare_chance``, ``rare_n``, and
the ``syntactic`` rows). L0 cells: rows with ``kind = "l0"``, ``task``, ``seed``, ``lam``, ``mask``
(``masks.mask_to_string``), ``log_alpha`` (``[n_layers][n_heads]``), ``n_kept``, ``n_heads_total``.
"""
from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from math import comb

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from headprune_utils.analysis import survival
from headprune_utils.analysis.claims import Gate, Measurement
from headprune_utils.analysis.preconditions import RoleFound
from headprune_utils.measure.specialized import RARE_SHARE
from headprune_utils.model.masks import mask_from_string


__all__ = [
    "nearest_mask",
    "l0_cap", "ROLE_NAMES", "VOITA_FRACTION", "NOT_POSITIONAL", "NOT_SYNTACTIC", "role_table", "role_mask",
    "role_counts",
    "role_stability", "majority_role",
    "role_map_data", "survival_heads", "survival_with_roles", "survival_tests", "survival_auc_per_model",
    "survival_map_data", "random_keeps", "presence_effect", "roles_at_budget", "rare_criterion_counts",
    "RARE_SHARES", "role_of_setting", "setting_role_found", "BUDGET_TOLERANCE", "budget_misses", "AtBudget",
    "role_chances", "RoomAboveChance",
]

ROLE_NAMES: tuple[str, ...] = ("positional", "syntactic", "rare-word")
NOT_POSITIONAL, NOT_SYNTACTIC = "n/a (not positional)", "n/a (not syntactic)"  # role_table's text for "none"
VOITA_FRACTION = 17 / 48  # Voita et al.: "with 17 (of 48 encoder) heads kept, every head function is present"
# the L0 mask read at VOITA_FRACTION must keep within a tenth of the heads of it (the project's margin policy: a tenth
# of the range); else no mask of that size was trained and the claim is not testable there (declared 2026-12-06,
# before any standard-next row of voita.functions_at_17_of_48 was computed)
BUDGET_TOLERANCE = 0.1
RARE_SHARES: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(1, 10))  # the sensitivity's thresholds


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _l0_cells(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["kind"] == "l0"] if "kind" in table else table.iloc[0:0]


# ---------------------------------------------------------------------------------------------- roles
def role_table(table: pd.DataFrame, positional_threshold: float = 0.9, syntactic_margin: float = 0.10,
               rare_share: float = RARE_SHARE) -> pd.DataFrame:
    """One row per (source, seed, layer, head): the raw measurements and the roles they give.

    ``source`` is ``"pretrained"`` (seed -1) or the task of a fine-tuned model. Columns: prev, next, positional,
    positional_dir ("prev"/"next"; ``NOT_POSITIONAL`` for other heads); syn_gain (best accuracy - baseline over
    relations and directions with instances), syn_relations (relations it qualifies for, comma-separated;
    ``NOT_SYNTACTIC`` for none), syntactic; rare_share (queries whose max attention is on the sentence's least
    frequent token), rare_chance and rare_p (that share against a random candidate: descriptive), rare
    (``rare_share`` above the ``rare_share`` argument); n_roles, specialized, role (the single role, "several", or
    "other"). No text column is ever empty (an empty CSV cell reads back as NaN).
    """
    rows = []
    for r in table[table["kind"].isin(["roles", "scores"])].itertuples():
        roles = r.roles
        source = "pretrained" if r.kind == "roles" else r.task
        seed = -1 if r.kind == "roles" else int(r.seed)
        prev, nxt = _arr(roles["prev"]), _arr(roles["next"])
        share, p = _arr(roles["rare_share"]), _arr(roles["rare_p"])
        syn = pd.DataFrame(roles["syntactic"])
        syn = syn[syn["n"] > 0]
        syn = syn.assign(gain=syn["accuracy"] - syn["baseline"])
        best = syn.groupby(["layer", "head"])["gain"].max()
        ok = syn[syn["gain"] >= syntactic_margin - 1e-12]
        rels = ok.groupby(["layer", "head"])["relation"].agg(lambda x: ",".join(sorted(set(x))))
        n_layers, n_heads = prev.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                pos = bool(max(prev[layer, head], nxt[layer, head]) >= positional_threshold)
                syn_rel = rels.get((layer, head), "")
                rare = bool(share[layer, head] > rare_share)
                flags = {"positional": pos, "syntactic": bool(syn_rel), "rare-word": rare}
                n = sum(flags.values())
                role = "other" if n == 0 else ("several" if n > 1 else next(k for k, v in flags.items() if v))
                rows.append({"source": source, "task": source, "seed": seed, "layer": layer, "head": head,
                             "prev": prev[layer, head], "next": nxt[layer, head], "positional": pos,
                             "positional_dir": ("prev" if prev[layer, head] >= nxt[layer, head] else "next") if pos
                             else NOT_POSITIONAL,
                             "syn_gain": float(best.get((layer, head), np.nan)), "syn_relations": syn_rel or NOT_SYNTACTIC,
                             "syntactic": flags["syntactic"], "rare_share": share[layer, head],
                             "rare_chance": roles["rare_chance"], "rare_p": p[layer, head], "rare": rare,
                             "n_roles": n, "specialized": n > 0, "role": role})
    return pd.DataFrame(rows)


def role_mask(roles: pd.DataFrame, role: str) -> pd.Series:
    """Which rows of :func:`role_table` have ``role`` (one of ``ROLE_NAMES``, or "specialized")."""
    return roles["specialized"] if role == "specialized" else roles["rare" if role == "rare-word" else role]


def role_counts(roles: pd.DataFrame, relations: list[str] | None = None) -> pd.DataFrame:
    """Per model (source, seed): heads per role, per syntactic relation, and the layers of the rare-word and the
    positional heads (comma-separated; ``"n/a (no rare-word head)"`` etc. when there is none, never empty)."""
    rows = []
    for (source, seed), g in roles.groupby(["source", "seed"], sort=False):
        row = {"source": source, "seed": seed, "n_heads": len(g)}
        for role in (*ROLE_NAMES, "specialized"):
            row[f"n_{role}"] = int(role_mask(g, role).sum())
        rel_count: Counter = Counter(x for s in g["syn_relations"] if s != NOT_SYNTACTIC for x in s.split(",") if x)
        for rel in relations or sorted(rel_count):
            row[f"n_syntactic_{rel}"] = int(rel_count.get(rel, 0))
        for col, role in (("rare_layers", "rare-word"), ("positional_layers", "positional")):
            layers = sorted(set(g.loc[role_mask(g, role), "layer"]))
            row[col] = ",".join(str(l) for l in layers) if layers else f"n/a (no {role} head)"
        rows.append(row)
    return pd.DataFrame(rows)


def role_stability(roles: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tuned model and role: Jaccard index of its heads of that role with the pre-trained model's."""
    pre = roles[roles["source"] == "pretrained"]
    rows = []
    for (task, seed), g in roles[roles["source"] != "pretrained"].groupby(["source", "seed"], sort=False):
        for role in (*ROLE_NAMES, "specialized"):
            a = set(map(tuple, g.loc[role_mask(g, role), ["layer", "head"]].to_numpy().tolist()))
            b = set(map(tuple, pre.loc[role_mask(pre, role), ["layer", "head"]].to_numpy().tolist()))
            rows.append({"task": task, "seed": seed, "role": role, "n_finetuned": len(a), "n_pretrained": len(b),
                         "jaccard": len(a & b) / len(a | b) if a | b else np.nan})
    return pd.DataFrame(rows)


def majority_role(values: Iterable[str]) -> str:
    """The most frequent role; ties go to a named role over "other", then to the alphabetically last."""
    c = Counter(values)
    return max(c, key=lambda k: (c[k], k != "other", k))


def role_map_data(roles: pd.DataFrame) -> pd.DataFrame:
    """Per panel (the pre-trained model, then each task: the role most of its seeds give) and head: the role."""
    rows = []
    for source, g in roles.groupby("source", sort=False):
        for (layer, head), h in g.groupby(["layer", "head"]):
            rows.append({"panel": source, "layer": layer, "head": head, "role": majority_role(h["role"]),
                         "share_specialized": float(h["specialized"].mean()), "n_models": len(h)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- survival
def survival_heads(table: pd.DataFrame) -> pd.DataFrame:
    """Per (task, seed, layer, head): survival level (1..K, 0 = never kept), lambdas kept at, mean final log_alpha."""
    rows = []
    for (task, seed), g in _l0_cells(table).groupby(["task", "seed"]):
        g = g.sort_values("lam")
        ms = torch.stack([mask_from_string(m) for m in g["mask"]])
        lev = survival.survival_levels(ms)
        la = np.mean([_arr(x) for x in g["log_alpha"]], axis=0)
        lams = g["lam"].to_numpy(dtype=float)
        for layer in range(ms.shape[1]):
            for head in range(ms.shape[2]):
                k = int(lev[layer, head])
                rows.append({"task": task, "seed": int(seed), "layer": layer, "head": head, "survival": k, "n_lambdas": len(g),
                             "last_lambda_kept": float(lams[k - 1]) if k else np.nan,
                             "n_lambdas_kept": int(ms[:, layer, head].sum()), "mean_log_alpha": float(la[layer, head])})
    return pd.DataFrame(rows)


def survival_with_roles(surv: pd.DataFrame, roles: pd.DataFrame) -> pd.DataFrame:
    """:func:`survival_heads` rows joined with the roles of the same fine-tuned model."""
    ft = roles[roles["source"] != "pretrained"][["task", "seed", "layer", "head", "positional", "syntactic", "rare",
                                                  "specialized", "role"]]
    return surv.merge(ft, on=["task", "seed", "layer", "head"], how="inner")


def _layer_strata(m: pd.DataFrame, col: str) -> list[tuple[tuple, np.ndarray, np.ndarray, np.ndarray]]:
    """``[(task, seed, layer), survival, mean_log_alpha, in_group]`` per layer of each model."""
    return [(k, g["survival"].to_numpy(dtype=float), g["mean_log_alpha"].to_numpy(dtype=float),
             g[col].to_numpy(dtype=bool)) for k, g in m.groupby(["task", "seed", "layer"], sort=True)]


def survival_tests(surv: pd.DataFrame, roles: pd.DataFrame, n_perm: int = 10000, seed: int = 0,
                   alpha: float = 0.05) -> pd.DataFrame:
    """Do the heads of a role survive longer than the other heads OF THE SAME LAYER of the same model?

    Strata = (task, seed, layer): survival depends strongly on the layer (one layer's heads can dominate a pooled
    comparison), so heads are compared only within their layer. Per role group (specialized, positional,
    syntactic, rare-word) against the other heads: the mean over strata of the AUC of the survival level, with
    stratified permutation p-values (labels permuted within each stratum; ``survival.stratified_auc_test``)
    one-sided both ways; the same for the mean final log_alpha (finer: no ties); mean survival of the group and of
    the rest; per-model one-sided Mann-Whitney U tests (heads of all layers; how many models reach
    ``p < alpha``). Descriptive: the strata share models, so these p-values are not the claims' test (which
    averages within each model first, :func:`survival_auc_per_model`). A group without heads gets ``"n/a (...)"``
    in place of its numbers, never NaN.
    """
    m = survival_with_roles(surv, roles)
    rows = []
    for group in ("specialized", *ROLE_NAMES):
        col = "rare" if group == "rare-word" else group
        strata = _layer_strata(m, col)
        n_sig, n_models = 0, 0
        for _, g in m.groupby(["task", "seed"]):
            lab = g[col].to_numpy(dtype=bool)
            vals = g["survival"].to_numpy(dtype=float)
            if lab.any() and (~lab).any():
                with warnings.catch_warnings():  # all values tied (nothing pruned): p is NaN, not a warning
                    warnings.simplefilter("ignore", RuntimeWarning)
                    p = sps.mannwhitneyu(vals[lab], vals[~lab], alternative="greater").pvalue
                n_sig += int(p < alpha)
        models = {k[:2] for k, _, _, lab in strata if lab.any() and (~lab).any()}
        n_models = len(models)
        vals, las, labs = [s[1] for s in strata], [s[2] for s in strata], [s[3] for s in strata]
        greater = survival.stratified_auc_test(vals, labs, n_perm, seed, "greater")
        less = survival.stratified_auc_test(vals, labs, n_perm, seed, "less")
        la = survival.stratified_auc_test(las, labs, n_perm, seed, "greater")
        sel = m[col].to_numpy(dtype=bool) if len(m) else np.zeros(0, dtype=bool)
        row = {"group": group, "n_models": n_models, "n_strata": greater["n_strata"],
               "n_group_heads": int(sel.sum()), "n_other_heads": int((~sel).sum()),
               "mean_survival_group": float(m.loc[sel, "survival"].mean()) if sel.any() else np.nan,
               "mean_survival_other": float(m.loc[~sel, "survival"].mean()) if (~sel).any() else np.nan,
               "mean_auc": greater["mean_auc"], "p_greater": greater["p_value"], "p_less": less["p_value"],
               "mean_auc_log_alpha": la["mean_auc"], "p_greater_log_alpha": la["p_value"],
               "n_models_mwu_sig": n_sig}
        why = (f"n/a (no {group} heads)" if not sel.any() else "n/a (no other heads)" if not (~sel).any()
               else f"n/a (no layer with both {group} and other heads)")
        rows.append({k: (why if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()})
    return pd.DataFrame(rows)


def survival_auc_per_model(surv: pd.DataFrame, roles: pd.DataFrame, group: str = "specialized") -> pd.DataFrame:
    """Per model (task, seed): the AUC of the survival level of ``group``'s heads against the other heads of the
    SAME layer, averaged over the layers that have both (``auc``; 0.5 = no difference), and how many layers
    count (``n_layers``). Models without such a layer are left out (no value). The unit-level measurement of the
    claim "specialized heads are the last to be pruned"."""
    m = survival_with_roles(surv, roles)
    col = "rare" if group == "rare-word" else group
    per: dict[tuple, list[float]] = {}
    for (task, seed, _), v, _, lab in _layer_strata(m, col):
        if lab.any() and (~lab).any():
            per.setdefault((task, int(seed)), []).append(survival.auc(v, lab))
    return pd.DataFrame([{"task": t, "seed": s, "auc": float(np.mean(a)), "n_layers": len(a)}
                         for (t, s), a in per.items()], columns=["task", "seed", "auc", "n_layers"])


def survival_map_data(surv: pd.DataFrame, roles: pd.DataFrame) -> pd.DataFrame:
    """Per (task, layer, head): mean survival level over seeds and the role most seeds give."""
    m = survival_with_roles(surv, roles)
    rows = []
    for (task, layer, head), g in m.groupby(["task", "layer", "head"]):
        rows.append({"task": task, "layer": layer, "head": head, "mean_survival": float(g["survival"].mean()),
                     "mean_log_alpha": float(g["mean_log_alpha"].mean()), "role": majority_role(g["role"]),
                     "n_lambdas": int(g["n_lambdas"].max())})
    return pd.DataFrame(rows)


def presence_effect(present: bool, random_keeps: float) -> float:
    """1 if the role keeps a head in the mask (else 0), minus the probability that a random mask of the same size
    keeps one (:func:`random_keeps`): > 0 when the mask keeps the role's heads more often than chance would."""
    return float(bool(present)) - float(random_keeps)


def random_keeps(n_total: int, n_kept: int, n_role: int) -> float:
    """Probability that a uniformly random mask keeping ``n_kept`` of ``n_total`` heads keeps at least one of the
    ``n_role`` heads of a role (hypergeometric): ``1 - C(n_total - n_role, n_kept) / C(n_total, n_kept)``."""
    if n_role <= 0:
        return 0.0
    return 1.0 - comb(n_total - n_role, n_kept) / comb(n_total, n_kept)


def nearest_mask(masks: pd.DataFrame, target: float) -> pd.Series:
    """The row of ``masks`` (one model's L0 masks: ``n_kept``, ``lam``) whose heads kept are nearest ``target``; a
    tie goes to the smaller lambda (whatever the rows' order)."""
    g = masks.sort_values("lam", kind="stable") if "lam" in masks else masks
    return g.iloc[int(np.argmin(np.abs(g["n_kept"].to_numpy(dtype=float) - target)))]


def roles_at_budget(table: pd.DataFrame, roles: pd.DataFrame, fraction: float = VOITA_FRACTION) -> pd.DataFrame:
    """Per (task, seed): the L0 mask whose heads kept are closest to ``fraction`` of all heads (a tie: the smaller
    lambda), and for each role of that model how many of its heads are kept, whether at least one is
    (``present_<role>``), and the chance
    that a random mask of the same size would keep one (``random_<role>``, :func:`random_keeps`). A role with no
    head in the model reads ``"n/a (no <role> head in this model)"``, never NaN."""
    rows = []
    ft = roles[roles["source"] != "pretrained"]
    for (task, seed), g in _l0_cells(table).groupby(["task", "seed"]):
        total = int(g["n_heads_total"].iloc[0])
        target = fraction * total
        r = nearest_mask(g, target)
        kept = mask_from_string(r["mask"]).numpy() > 0
        rr = ft[(ft["task"] == task) & (ft["seed"] == seed)]
        row = {"task": task, "seed": int(seed), "lam": float(r["lam"]), "n_kept": int(r["n_kept"]), "target": target,
               "n_heads_total": total}
        for role in ROLE_NAMES:
            h = rr[role_mask(rr, role)]
            k = int(kept[h["layer"].to_numpy(), h["head"].to_numpy()].sum()) if len(h) else 0
            row[f"n_{role}"], row[f"kept_{role}"] = len(h), k
            na = f"n/a (no {role} head in this model)"
            row[f"present_{role}"] = (k > 0) if len(h) else na
            row[f"random_{role}"] = random_keeps(total, int(r["n_kept"]), len(h)) if len(h) else na
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- the rare-word criterion
def rare_criterion_counts(table: pd.DataFrame, shares: Iterable[float] = RARE_SHARES, *, rare_share: float = RARE_SHARE,
                          others: str = "fine-tuned models", **thresholds) -> pd.DataFrame:
    """How many rare-word heads each threshold on ``rare_share`` gives (a sensitivity of the fixed criterion,
    ``specialized.RARE_SHARE``; never used to choose it). ``table``: the measurement rows of :func:`role_table`
    (kinds "roles" / "scores"); ``rare_share``: the criterion (the run's); ``thresholds``: the other arguments of
    :func:`role_table` (so ``role_table``'s keyword arguments can be handed over as they are).

    Long rows per threshold, model group and layers: ``rare_share`` (the threshold), ``model`` ("pre-trained model",
    or ``others`` + " (mean)": the mean over those models), ``layers`` ("all layers" | "first layer": the claim's),
    ``n_rare_heads`` (the count; the mean over the models of the group), ``n_models``, ``fixed`` (whether the
    threshold is ``rare_share``, the criterion: ``specialized.RARE_SHARE`` unless the parameters change it)."""
    rows = []
    for share in shares:
        roles = role_table(table, rare_share=share, **thresholds)
        if roles.empty:
            continue
        for pre in (True, False):  # the pre-trained model first
            g = roles[(roles["source"] == "pretrained") == pre]
            if g.empty:
                continue
            per = g.assign(first=g["rare"] & (g["layer"] == 0)).groupby(["source", "seed"], sort=False)
            for layers, n in (("all layers", per["rare"].sum()), ("first layer", per["first"].sum())):
                rows.append({"rare_share": float(share), "model": "pre-trained model" if pre else f"{others} (mean)",
                             "layers": layers, "n_rare_heads": float(n.mean()), "n_models": int(len(n)),
                             "fixed": bool(np.isclose(share, rare_share))})
    out = pd.DataFrame(rows, columns=["rare_share", "model", "layers", "n_rare_heads", "n_models", "fixed"])
    return out.sort_values(["model", "layers"], key=lambda c: c.map({v: i for i, v in enumerate(dict.fromkeys(c))}),
                           kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- a role claim's gate
def role_of_setting(setting: str) -> str:
    """The role a verdict row is about, from its setting (``"positional"``, or ``"<L0 setting>: positional"``)."""
    return str(setting).rsplit(": ", 1)[-1]


def setting_role_found(m: Measurement, evidence) -> str | None:
    """The precondition "at least one head of the row's role was found" (``preconditions.RoleFound`` of the role
    named by the measurement's setting, :func:`role_of_setting`). ``evidence["role_counts"]``: role -> (task ->
    count, or one count). For ``preconditions.Check``."""
    role = role_of_setting(m.setting)
    return RoleFound(role).check(m, {"role_counts": evidence["role_counts"].get(role, 0)})


def budget_misses(budget: pd.DataFrame, key: Callable[[Mapping], Hashable], name: Callable[[Mapping], str],
                  tolerance: float = BUDGET_TOLERANCE) -> dict:
    """``{key(row): text}`` for the rows of :func:`roles_at_budget` whose mask nearest the target keeps more than
    ``tolerance`` x the heads away from it (the evidence ``budget_misses`` of :class:`AtBudget`); ``name(row)`` names
    the model in the text."""
    out = {}
    for r in budget.to_dict("records"):
        total = int(r["n_heads_total"])
        if abs(int(r["n_kept"]) - float(r["target"])) > tolerance * total:
            out[key(r)] = (f"{name(r)}: the L0 mask nearest {float(r['target']):.3g} heads keeps {int(r['n_kept'])} of "
                           f"{total} (tolerance +-{tolerance * total:.3g}, {tolerance:g} of the heads)")
    return out


@dataclass(frozen=True)
class AtBudget(Gate):
    """Every model's L0 mask read at :data:`VOITA_FRACTION` keeps within :data:`BUDGET_TOLERANCE` x the heads of it
    (else no mask of that size was trained, and a mask of another size answers another question). ``key(m, unit)``:
    the key of :func:`budget_misses` of a measurement's unit (studies 6 and 7 key their masks differently); evidence
    ``budget_misses``."""

    key: Callable = lambda m, unit: unit

    def text(self) -> str:
        return (f"every model's L0 mask read at 17/48 of the heads keeps within {BUDGET_TOLERANCE:g} x the heads of "
                "that size (a mask of that size was trained)")

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        misses = evidence.get("budget_misses")
        if misses is None:
            return "the sizes of the masks read at 17/48 of the heads are not measured"
        bad = [misses[k] for k in dict.fromkeys(self.key(m, u) for u in m.units) if k in misses]
        return "no L0 mask near 17/48 of the heads: " + "; ".join(bad) if bad else None


def role_chances(budget: pd.DataFrame, key: Callable[[Mapping], Hashable]) -> dict:
    """``{(key(row), role): P(a random mask of the row's size keeps one of the role's heads)}`` for the rows of
    :func:`roles_at_budget` and the roles found in each model (the evidence ``role_chances`` of
    :class:`RoomAboveChance`)."""
    return {(key(r), role): float(r[f"random_{role}"]) for r in budget.to_dict("records") for role in ROLE_NAMES
            if r[f"n_{role}"] > 0}


@dataclass(frozen=True)
class RoomAboveChance(Gate):
    """"Kept beyond chance" can exceed the claim's margin on this row: the largest effect any mask could show, the
    mean over the row's models of 1 - P(a random mask of that size keeps one of the role's heads) (every model's
    mask keeping one), is above ``margin`` (the claim's own, e.g. ``margins.SHARE_OF_HEADS``). A role with so many
    heads that a random mask of that size keeps one almost surely leaves no room: "supported" and "not supported"
    would follow from the design (its heads' count and the mask's size), never from the masks. Only "contradicted"
    (masks keeping the role less often than chance) could still come from them, and the gate withholds that word
    too (the row is not testable; its unit values stay in the table): a known cost, until a rule can restrict a
    row to the words its design leaves open. The gate reads no outcome (whether a
    mask kept the role), only the design, as the attainable p of an exact test does; it was added on 2026-12-06,
    after an independent check of study 6's standard-next rows found its syntactic rows' "not supported" forced this
    way (a random mask of their size keeps one of 7 to 13 syntactic heads with probability 0.985 or more).
    ``key(m, unit)``: a unit's key in the evidence ``role_chances`` (:func:`role_chances`); ``role(m)``: the row's
    role. The margin is the claim's as declared: margin sensitivity (``claims.retest``) does not re-judge this gate."""

    margin: Callable[[Measurement], float]
    key: Callable = lambda m, unit: unit
    role: Callable = lambda m: role_of_setting(m.setting)

    def text(self) -> str:
        return ("a mask can keep the role beyond chance by more than the margin (the mean over the models of 1 - the "
                "chance that a random mask of that size keeps one of its heads is above the margin)")

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        chances = evidence.get("role_chances")
        if chances is None:
            return "the chance that a random mask keeps the role is not measured"
        role = self.role(m)
        keys = [(self.key(m, u), role) for u in m.units]
        missing = [k for k in keys if k not in chances]
        if missing:  # every unit of a row has the role (its units are the models with one): a key not found is a fault
            return (f"the chance that a random mask keeps a {role} head is not recorded for {len(missing)} of the "
                    f"{len(keys)} models behind this row on {m.task} (e.g. {missing[0][0]})")
        ps = [chances[k] for k in keys]
        if not ps:
            return None  # no model behind the row: the other gates say so
        room, margin = float(np.mean([1.0 - p for p in ps])), float(self.margin(m))
        if room > margin:
            return None
        return (f"a random mask of the size read keeps a {role} head with probability {min(ps):.3g} to {max(ps):.3g} "
                f"on {m.task}: the largest effect any mask could show, {room:.3g}, is not above the margin {margin:g}, "
                "so supported or not supported would come from the design (a contradiction, masks keeping the role "
                "less often than chance, is not tested here)")


def l0_cap(cfg) -> dict:
    """``{"l0_max_steps": N}`` when the L0 gates train until they settle (``cfg.l0_max_steps``: at most N steps; the
    rule: ``analysis.preconditions.gates_settled``), else ``{}``: an axis of the L0 cells only, since no other cell
    depends on it (it stays out of the study's fingerprint, and cells planned without it keep their keys). Studies 6
    and 7 alike."""
    cap = getattr(cfg, "l0_max_steps", None)
    return {"l0_max_steps": int(cap)} if cap is not None else {}
