"""Study 3's analysis: pure functions over the tidy table of the ``compensation`` cells (one row per cell).

Each kept head's change in a pruned run is compared with the same head's change in an unpruned run of ANOTHER
seed and the SAME ablation semantics (the cells' ``ablation``: every table here is per semantics, and runs of
different semantics are never paired), and, as the noise baseline, the unpruned run of this seed with that same other run (so both sides carry
seed-to-seed noise): the EXTRA change of head h is ``x_h = log(c_pruned(h) / c_other(h))`` (a difference of
per-layer-normalised scores for importance), the noise ``x'_h = log(c_full(h) / c_other(h))`` (:func:`per_head`).

- Equal spread: Gini coefficient of the ratios ``c_pruned / c_other`` (importance: standard deviation of the
  differences) against the noise baseline's, with a permutation baseline per run that swaps, head by head, the
  pruned and the unpruned run (:func:`spread_tests`); described over runs by :func:`pooled` (no test there).
- Locality: Spearman correlation of ``x_h`` with the number of pruned heads in the head's own layer and in
  the adjacent layers, with a permutation null (``x`` shuffled over the kept heads). Both counts are properties
  of the head's LAYER, so within one run they cannot be told from a layer effect; the layer-controlled
  correlation (``rho_lc_*``) compares each run with a layer-only model fitted on the other seeds' runs of the
  same task and setting (:func:`spread_tests`).
- The mean shift of the kept heads (``mean(x) - mean(x_noise)``: for the positive measures, the mean log ratio of
  a kept head's change in the pruned run to the same head's change in the unpruned run of the same seed) and the
  split of the dispersion of ``x`` into between-layer and within-layer parts.

Verdicts (:func:`claim_verdicts`). The claims are declared as data in :mod:`.compensation_claims` (rule, margin,
gates, figure) and passed in; each claim's ``measure`` names its measurements here (:data:`MEASUREMENTS`:
``excess_dispersion``, ``mean_shift``, ``locality``), built from the :func:`spread_tests` rows, and
:func:`headprune_utils.analysis.claims.evaluate` decides them: the unit is the fine-tuned model (task x seed), per task first,
then pooled over tasks; every claim is decided under each semantics measured
(:func:`headprune_utils.studies.semantics.verdicts_by_semantics`): Budhraja et al.'s ``uniform`` is the primary analysis
(Holm over the study's primary rows), the others are sensitivity analyses (each semantics its own Holm family).
What cannot be measured (no run of a semantics; a rho undefined in every run) is an absent measurement
(:meth:`claims.Measurement.absent`: ``not testable`` with the reason). Every claim is about models masked, then
fine-tuned: the convergence gate reads :func:`convergence_evidence` (evidence ``convergence``: the fine-tuned models,
masked and unpruned, each measurement is computed from, with their stored held-out curves).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from headprune_utils.analysis import claims, preconditions, stats
from headprune_utils.model import masks
from headprune_utils.studies import convergence, glue_workbench, semantics

__all__ = ["MEASURES", "MEASURE_NAMES", "MEASUREMENTS", "next_seeds", "shared_runs", "per_head", "spread_tests",
           "pooled",
           "spread_measurements", "shift_measurements", "locality_measurements", "layer_confounded",
           "convergence_evidence", "claim_verdicts", "heatmap_data", "scale_text"]

MEASURES: tuple[str, ...] = ("weight_change", "importance", "attention_change")
RUN_KEYS: list[str] = ["task", "ablation", "seed", "strategy", "budget"]  # one pruned run


def _grid(value) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in value], dtype=float)


def _normalise_rows(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per-layer L2 normalisation over the heads in ``keep`` (Michel et al.); others NaN."""
    y = np.where(keep, x, np.nan)
    norm = np.sqrt(np.nansum(y ** 2, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, y / norm, np.nan)


def next_seeds(table: pd.DataFrame, cfg=None) -> dict:
    """The pairing of the comparison runs: seed -> the seed whose unpruned run every run of it is compared with.

    With ``cfg.baseline_seeds`` (the config's: one unpruned fine-tuning per seed used only for comparison), seed
    ``cfg.seeds[i]`` is paired with ``cfg.baseline_seeds[i]``, by position: no run is read by two units. Without (no
    ``cfg``, or ``baseline_seeds`` None), each seed of ``table`` with the next one (the last one's the first): a
    ring, in which a seed's unpruned run is the comparison run of the seed before it, so neighbouring units share a
    run (:func:`shared_runs`)."""
    baseline = getattr(cfg, "baseline_seeds", None)
    if baseline is not None:
        return dict(zip(cfg.seeds, baseline))
    seeds = sorted(table["seed"].unique())
    return {s: seeds[(i + 1) % len(seeds)] for i, s in enumerate(seeds)}


def shared_runs(cfg) -> str | None:
    """Why the units of the measures that read the comparison run (the excess dispersion, locality) are not
    independent, or None: without ``baseline_seeds`` (the ring pairing of :func:`next_seeds`) unit s's comparison
    run is unit s+1's own unpruned run."""
    if getattr(cfg, "baseline_seeds", None) is not None:
        return None
    return (f"each seed's runs are compared with the next seed's unpruned run (a ring over {len(cfg.seeds)} seeds): "
            "neighbouring units share a fine-tuned model, so they are not independent (baseline_seeds gives each "
            "seed a comparison run of its own)")


def per_head(table: pd.DataFrame, cfg=None) -> pd.DataFrame:
    """One row per (task, ablation, seed, strategy, budget, measure, kept head): the head's change in the pruned
    run (``pruned``), in the unpruned run of the same seed (``full``) and of the next seed (``other``), both of
    the pruned run's semantics (``ablation``), the extra change ``x = log(pruned / other)`` and the noise
    ``x_noise = log(full / other)`` (importance: differences of per-layer-normalised scores), and where the
    pruned heads are. The comparison run of each seed: :func:`next_seeds` (``cfg``: the study's config, whose
    ``baseline_seeds`` give each seed its own; a run whose comparison run has no cell is then an error naming it,
    never a unit left out in silence)."""
    if "ablation" not in table.columns:
        raise ValueError("the cells' table has no 'ablation' column (each cell's semantics)")
    nxt = next_seeds(table, cfg)
    own = getattr(cfg, "baseline_seeds", None) is not None
    seeds = sorted(table["seed"].unique())
    if not own and len(seeds) < 2:
        raise ValueError(
            f"the compensation measures compare each seed's runs with the next seed's unpruned run (a ring), and the "
            f"cells hold only seed {', '.join(map(str, seeds)) or '(none)'}: select at least two seeds (e.g. "
            "--from-cells --where seed=0 seed=1) or give the study baseline_seeds (a comparison run per seed)")
    full = {(r.task, r.ablation, r.seed): r for r in table[table["strategy"] == "none"].itertuples()}
    rows = []
    for r in table[table["strategy"] != "none"].itertuples():
        if own and (r.task, r.ablation, nxt.get(r.seed)) not in full:
            raise ValueError(f"the comparison run of seed {r.seed} (unpruned, seed {nxt.get(r.seed)}, {r.ablation}) of "
                             f"{r.task} has no cell: compute it (baseline_seeds) before the analysis")
        f, o = full.get((r.task, r.ablation, r.seed)), full.get((r.task, r.ablation, nxt.get(r.seed)))
        if f is None or o is None or nxt[r.seed] == r.seed:
            continue
        m = masks.mask_from_string(r.mask).numpy().astype(bool)
        n_layers, n_heads = m.shape
        pruned_in_layer = (~m).sum(axis=1)
        adjacent = np.array([pruned_in_layer[max(0, l - 1)] * (l > 0) + (pruned_in_layer[l + 1] if l + 1 < n_layers else 0)
                             for l in range(n_layers)])
        for measure in MEASURES:
            p, fu, ot = _grid(getattr(r, measure)), _grid(getattr(f, measure)), _grid(getattr(o, measure))
            if measure == "importance":
                p, fu, ot = (_normalise_rows(a, m) for a in (p, fu, ot))
                x, x0 = p - ot, fu - ot
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    x, x0 = np.log(p / ot), np.log(fu / ot)
            for l in range(n_layers):
                for h in range(n_heads):
                    if m[l, h] and np.isfinite(x[l, h]) and np.isfinite(x0[l, h]):
                        rows.append({"task": r.task, "ablation": r.ablation, "seed": r.seed, "strategy": r.strategy,
                                     "budget": r.budget,
                                     "measure": measure, "layer": l, "head": h, "pruned": p[l, h], "full": fu[l, h],
                                     "other": ot[l, h], "x": x[l, h], "x_noise": x0[l, h],
                                     "pruned_in_layer": int(pruned_in_layer[l]), "pruned_adjacent": int(adjacent[l])})
    return pd.DataFrame(rows)


def _dispersion(measure: str, x: np.ndarray) -> float:
    """How unequal the extra changes ``x`` of one run's kept heads are: the Gini coefficient of the ratios
    ``exp(x)`` (positive measures; scale-free) or the standard deviation of ``x`` (importance differences)."""
    return float(np.std(x)) if measure == "importance" else stats.gini(np.exp(x))


def spread_tests(heads: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per pruned run (task, ablation, seed, strategy, budget) and measure:

    - ``dispersion`` of the kept heads' extra change ``x`` and ``dispersion_noise`` of the same heads' noise
      ``x_noise``; ``excess_p``: one-sided permutation p of ``dispersion - dispersion_noise``, swapping the
      pruned and the unpruned run head by head (``n_boot`` swaps; exchangeable when pruning changes nothing
      about how the change is spread). Exact and calibrated, but weak against a change concentrated on ONE
      head (a swap moves it to the other side): the pooled CI of the excess covers that case.
    - ``rho_*``: Spearman correlation of ``x`` with the number of pruned heads in the head's own layer and
      in the adjacent layers; ``p_*``: two-sided permutation p (``x`` shuffled over the kept heads).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for (task, ablation, s, strategy, budget, measure), g in heads.groupby(RUN_KEYS + ["measure"]):
        x, x0 = g["x"].to_numpy(dtype=float), g["x_noise"].to_numpy(dtype=float)
        d_obs, d_noise = _dispersion(measure, x), _dispersion(measure, x0)
        excess = d_obs - d_noise
        swaps = rng.random((n_boot, len(x))) < 0.5
        null = np.array([_dispersion(measure, np.where(w, x0, x)) - _dispersion(measure, np.where(w, x, x0)) for w in swaps])
        layer = g["layer"].to_numpy()
        (b_obs, w_obs), (b_noise, w_noise) = _layer_split(x, layer), _layer_split(x0, layer)
        row = {"task": task, "ablation": ablation, "seed": s, "strategy": strategy, "budget": budget, "measure": measure,
               "n_heads": len(g),
               "dispersion_kind": "sd of differences" if measure == "importance" else "Gini of ratios",
               "dispersion": d_obs, "dispersion_noise": d_noise, "excess_dispersion": excess,
               "excess_p": float((1 + np.sum(null >= excess - 1e-12)) / (1 + n_boot)),
               "mean_shift": float(x.mean() - x0.mean()),
               "var_between_layers": b_obs, "var_within_layers": w_obs,
               "var_between_layers_noise": b_noise, "var_within_layers_noise": w_noise}
        for feat in ("pruned_in_layer", "pruned_adjacent"):
            z = g[feat].to_numpy(dtype=float)
            if np.ptp(z) == 0 or np.ptp(x) == 0:
                row[f"rho_{feat}"], row[f"p_{feat}"] = np.nan, np.nan
                continue
            rho = float(sps.spearmanr(x, z).statistic)
            perm = np.array([sps.spearmanr(rng.permutation(x), z).statistic for _ in range(min(n_boot, 1000))])
            row[f"rho_{feat}"] = rho
            row[f"p_{feat}"] = float((1 + np.sum(np.abs(perm) >= abs(rho) - 1e-12)) / (len(perm) + 1))
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.merge(_layer_controlled(heads), on=RUN_KEYS + ["measure"], how="left")


def _layer_split(x: np.ndarray, layer: np.ndarray) -> tuple[float, float]:
    """``(between, within)``: the variance of ``x`` (ddof=0) split into the variance of the layer means (weighted
    by the layer's kept heads) and the mean variance within layers; they add up to ``np.var(x)``."""
    total = float(np.var(x))
    means = pd.Series(x).groupby(layer).transform("mean").to_numpy()
    between = float(np.mean((means - x.mean()) ** 2))
    return between, total - between


def _layer_controlled(heads: pd.DataFrame) -> pd.DataFrame:
    """Per run: Spearman rho of ``x - (layer-only model)`` with ``count - (its layer-only model)``, per count
    (``rho_lc_pruned_in_layer``, ``rho_lc_pruned_adjacent``). The layer-only model of a run is the mean over the
    OTHER seeds' runs of the same task x ablation x strategy x budget x measure, per layer (their kept heads of that layer):
    what the head's layer alone predicts. NaN where the count does not vary beyond that (e.g. the ``middle``
    strategy prunes the same layers in every run: the count is a pure layer effect) or no other run has kept
    heads in the layer."""
    rows = []
    feats = ("pruned_in_layer", "pruned_adjacent")
    for (task, ablation, strategy, budget, measure), g in heads.groupby(["task", "ablation", "strategy", "budget", "measure"]):
        per_run = g.groupby(["seed", "layer"])[list(feats)].first()
        for s, run in g.groupby("seed"):
            other = g[g["seed"] != s]
            row = {"task": task, "ablation": ablation, "seed": s, "strategy": strategy, "budget": budget,
                   "measure": measure}
            x_layer = other.groupby("layer")["x"].mean()
            counts = per_run.drop(index=s, level="seed").groupby(level="layer").mean()
            for feat in feats:
                rx = run["x"].to_numpy() - run["layer"].map(x_layer).to_numpy(dtype=float)
                rz = run[feat].to_numpy(dtype=float) - run["layer"].map(counts[feat]).to_numpy(dtype=float)
                ok = np.isfinite(rx) & np.isfinite(rz)
                if ok.sum() < 3 or np.ptp(rz[ok]) == 0 or np.ptp(rx[ok]) == 0:
                    row[f"rho_lc_{feat}"] = np.nan
                else:
                    row[f"rho_lc_{feat}"] = float(sps.spearmanr(rx[ok], rz[ok]).statistic)
            rows.append(row)
    cols = [*RUN_KEYS, "measure", *(f"rho_lc_{f}" for f in feats)]
    return pd.DataFrame(rows, columns=cols)


def pooled(tests: pd.DataFrame) -> pd.DataFrame:
    """Descriptive only, per ablation x strategy x budget x measure over tasks and seeds (the runs): the mean and SD
    over runs of the excess dispersion, the mean shift, the between/within-layer variance parts and the
    correlations (raw and layer-controlled). No interval or p here: the runs of one task share their reference
    (unpruned) models, so they are not independent replicates, and tasks are not pooled raw. The tests are
    :func:`claim_verdicts` (per task first, unit = model, t-intervals)."""
    rows = []
    for (ablation, strategy, budget, measure), g in tests.groupby(["ablation", "strategy", "budget", "measure"]):
        row = {"ablation": ablation, "strategy": strategy, "budget": budget, "measure": measure, "n_runs": len(g),
               "dispersion_kind": g["dispersion_kind"].iloc[0], "mean_dispersion": float(g["dispersion"].mean()),
               "mean_dispersion_noise": float(g["dispersion_noise"].mean())}
        for col in ("var_between_layers", "var_within_layers", "var_between_layers_noise", "var_within_layers_noise"):
            row[f"mean_{col}"] = float(g[col].mean())
        for col in ("excess_dispersion", "mean_shift", "rho_pruned_in_layer", "rho_pruned_adjacent",
                    "rho_lc_pruned_in_layer", "rho_lc_pruned_adjacent"):
            v = g[col].dropna().to_numpy(dtype=float)
            row.update({col: float(v.mean()) if len(v) else np.nan,
                        f"{col}_sd": float(v.std(ddof=1)) if len(v) > 1 else np.nan})
        rows.append(row)
    return pd.DataFrame(rows)


MEASURE_NAMES = {"weight_change": "weight change", "importance": "gradient importance",
                 "attention_change": "attention-pattern change (JS)"}


# ---------------------------------------------------------------------------------------------- verdicts

def scale_text(cfg) -> str:
    """What the run is, from ``cfg``: model, heads, training examples x epochs, seeds; whether it is the paper's
    set-up (Budhraja et al.: bert-base-uncased, full training sets, 3 epochs)."""
    n_layers, n_heads = cfg.head_shape()
    train = "full training sets" if cfg.train_size is None else f"{cfg.train_size} training examples"
    text = (f"{cfg.model} ({n_layers} x {n_heads} = {n_layers * n_heads} heads), {train} x {glue_workbench.epochs_text(cfg)}, "
            f"seeds {', '.join(str(s) for s in cfg.seeds)}")
    return glue_workbench.scale_note(text, glue_workbench.is_paper_setup(cfg))


def _setting(strategy: str, budget: float, measure: str, extra: str = "") -> str:
    return f"{strategy} {100 * budget:.0f}%, {MEASURE_NAMES[measure]}" + (f", {extra}" if extra else "")


_LOCALITY = {"pruned_in_layer": "pruned heads in the same layer", "pruned_adjacent": "pruned heads in adjacent layers"}


def _nothing(sem: str) -> list[claims.Measurement]:
    """One absent measurement: no pruned run of the semantics ``sem`` (the row is ``not testable`` saying so)."""
    return [claims.Measurement.absent("all", f"no pruned run measured under the {sem} semantics in this run",
                                      semantics=sem)]


def spread_measurements(tests: pd.DataFrame, sem: str) -> list[claims.Measurement]:
    """Per strategy x budget x measure x task, units = seeds: the excess dispersion (``excess_dispersion``); the
    dispersion's kind goes into the ``effect`` (the spread claim's margin is that kind's)."""
    out = []
    for (strategy, budget, measure, task), g in tests.groupby(["strategy", "budget", "measure", "task"]):
        g = g.dropna(subset=["excess_dispersion"])
        if g.empty:
            continue
        kind = g["dispersion_kind"].iloc[0]
        out.append(claims.Measurement(task, g["excess_dispersion"].tolist(), g["seed"].tolist(),
                                      _setting(strategy, budget, measure), sem,
                                      effect=f"excess {kind} (pruned run - noise baseline)"))
    return out or _nothing(sem)


def shift_measurements(tests: pd.DataFrame, sem: str) -> list[claims.Measurement]:
    """Per strategy x budget x measure x task (weight and attention change), units = seeds: the mean shift."""
    out = []
    positive = tests[tests["measure"] != "importance"]  # per-layer normalised importance has no level to shift
    for (strategy, budget, measure, task), g in positive.groupby(["strategy", "budget", "measure", "task"]):
        out.append(claims.Measurement(task, g["mean_shift"].tolist(), g["seed"].tolist(),
                                      _setting(strategy, budget, measure), sem,
                                      effect=_SHIFT))
    return out or _nothing(sem)


_BEYOND = "Spearman rho beyond a layer-only model"
_SHIFT = "mean log(change pruned run / change unpruned run) of the kept heads"


def _locality_groups(tests: pd.DataFrame):
    """``(task, setting, lc, raw, why)`` per strategy x budget x measure x task x count: the runs with a
    layer-controlled rho (``lc``), those with a raw rho (``raw``), and why locality cannot be told from a layer
    effect where no run has a layer-controlled rho (else "")."""
    for (strategy, budget, measure, task), g in tests.groupby(["strategy", "budget", "measure", "task"]):
        for feat, name in _LOCALITY.items():
            lc = g.dropna(subset=[f"rho_lc_{feat}"])
            why = "" if not lc.empty else (
                f"the number of {name} does not vary beyond the kept head's layer across the {strategy} runs (every "
                "run has the same count in a given layer): a layer-only model explains it fully, so locality cannot "
                "be told from a layer effect")
            yield (task, _setting(strategy, budget, measure, name), lc, g.dropna(subset=[f"rho_{feat}"]), feat, why)


def locality_measurements(tests: pd.DataFrame, sem: str) -> list[claims.Measurement]:
    """Per strategy x budget x measure x task and count (same layer, adjacent layers), units = seeds: the
    layer-controlled rho; where it is undefined in every unit, the raw (layer-confounded) rho, measured
    descriptively (the claim's gate, evidence :func:`layer_confounded`, says why it is not testable); where even that
    is undefined, an absent measurement."""
    out = []
    for task, setting, lc, raw, feat, why in _locality_groups(tests):
        if not lc.empty:
            out.append(claims.Measurement(task, lc[f"rho_lc_{feat}"].tolist(), lc["seed"].tolist(), setting, sem,
                                          effect=_BEYOND))
        elif not raw.empty:
            out.append(claims.Measurement(task, raw[f"rho_{feat}"].tolist(), raw["seed"].tolist(), setting, sem,
                                          effect="Spearman rho (raw, layer-confounded)"))
        else:
            why += "; nor does it vary over one run's kept heads (the raw rho is undefined too)"
            out.append(claims.Measurement.absent(task, why, setting=setting, semantics=sem, effect=_BEYOND))
    return out or _nothing(sem)


def layer_confounded(tests: pd.DataFrame) -> dict[tuple[str, str], str]:
    """``{(task, setting): reason}`` of the locality measurements that are the raw rho (no run has a layer-controlled
    one): the evidence ``layer_confounded`` of the locality claim's gate (``compensation_claims.BEYOND_LAYER``)."""
    return {(task, setting): why + " (the effect shown is the raw, layer-confounded rho)"
            for task, setting, lc, raw, _, why in _locality_groups(tests) if lc.empty and not raw.empty}


def _settings(tests: pd.DataFrame) -> dict[tuple[str, str], tuple[str, float, bool, list]]:
    """``{(task, setting): (strategy, budget, locality, seeds)}`` of every measurement setting the per-run rows
    ``tests`` (one semantics) give: the pruned runs' strategy and budget, whether it is a locality setting, and the
    seeds of the runs of its group (task x strategy x budget x measure: the runs a layer-only model is fitted on)."""
    out = {}
    for (strategy, budget, measure, task), g in tests.groupby(["strategy", "budget", "measure", "task"]):
        seeds = sorted(g["seed"].unique())
        out[(task, _setting(strategy, budget, measure))] = (strategy, budget, False, seeds)
        for name in _LOCALITY.values():
            out[(task, _setting(strategy, budget, measure, name))] = (strategy, budget, True, seeds)
    return out


def _full_models(cells: pd.DataFrame) -> dict:
    """``{(task, seed): cell}``: the unpruned reference of each (task, seed), from any semantics (no head masked:
    the same fine-tuned model under each), the first one that stored a held-out curve."""
    out = {}
    for (task, seed), g in cells[cells["strategy"] == "none"].groupby(["task", "seed"], sort=True):
        stored = [r for _, r in g.iterrows() if isinstance(r["history"], (list, tuple)) and len(r["history"])]
        out[(task, seed)] = stored[0] if stored else g.iloc[0]
    return out


def convergence_evidence(cells: pd.DataFrame, tests: pd.DataFrame, measurements: Sequence[claims.Measurement],
                         sem: str, cfg=None) -> pd.DataFrame:
    """The convergence gate's evidence (:mod:`.convergence`): per measurement of ``measurements`` (one claim under
    the semantics ``sem``, built from ``tests``, its :func:`spread_tests` rows), one row per fine-tuned model its
    values are computed from, with the held-out curve its cell stored (``cells``: the study's cells, every
    semantics, with their ``history``). The value of a run (unit: its seed ``s``) compares the model fine-tuned with
    the run's mask (``sem``, its strategy and budget) with the unpruned fine-tuning of its comparison seed
    (:func:`next_seeds`, from ``cfg``; not for the mean shift, in which the comparison run cancels), and, for the
    excess dispersion and the mean shift, with the unpruned fine-tuning of ``s`` (the noise baseline); a
    layer-controlled locality rho also reads every run of its task and setting (the layer-only model: their masked
    models and the unpruned runs they are compared with). Each model stands once,
    under its own seed when that is a unit of the measurement, else under the first unit that reads it; every row
    carries the measurement's setting. Absent measurements have no models behind them."""
    measurements = [m for m in measurements if not m.missing]
    if not measurements:
        return convergence.table([])
    missing = [c for c in ("task", "ablation", "seed", "strategy", "budget", "history") if c not in cells.columns]
    if missing:
        raise ValueError(f"the cells' table has no {missing} column(s) (each fine-tuning's cell and held-out curve, "
                         "'history'): the convergence gate cannot be checked")
    nxt = next_seeds(cells, cfg)
    full = _full_models(cells)
    pruned = cells[(cells["strategy"] != "none") & (cells["ablation"] == sem)]
    index = _settings(tests)
    rows = []
    for m in measurements:
        if (m.task, m.setting) not in index:
            raise ValueError(f"measurement of {m.task}, {m.setting!r} ({sem}) matches no run of the per-run table")
        strategy, budget, locality, group = index[(m.task, m.setting)]
        units = list(dict.fromkeys(m.units))
        behind: dict[tuple[str, object], object] = {}  # (kind, seed) -> the unit it stands under
        for u in units:
            runs = group if locality and m.effect == _BEYOND else [u]
            strays = [r for r in runs if r not in nxt]
            if strays:
                raise ValueError(f"the runs of seeds {strays} of {m.task} ({m.setting!r}, {sem}) have no cell in the "
                                 "cells' table")
            # the mean shift, log(pruned / full) over the kept heads, reads no comparison run (it cancels)
            need = [(k, s) for r in runs for k, s in (("masked", r), ("full", nxt[r]))
                    if k == "masked" or m.effect != _SHIFT]
            if not locality:
                need.append(("full", u))
            for k, s in need:
                behind.setdefault((k, s), s if s in units else u)
        for (kind, seed), unit in sorted(behind.items(), key=lambda kv: (kv[0][0] != "full", kv[0][1])):
            if kind == "full":
                cell, name = full.get((m.task, seed)), f"full model seed {seed}"
            else:
                hit = pruned[(pruned["task"] == m.task) & (pruned["seed"] == seed) & (pruned["strategy"] == strategy)
                             & (pruned["budget"] == budget)]
                cell = hit.iloc[0] if len(hit) == 1 else None
                name = f"{strategy} {100 * budget:g}% mask seed {seed}"
            if cell is None:
                raise ValueError(f"no single cell of the {name} of {m.task} ({sem}) in the cells' table: the "
                                 f"measurement {m.setting!r} was computed from it")
            history = cell["history"] if isinstance(cell["history"], (list, tuple)) else None
            rows.append(preconditions.convergence_row(m.task, unit, name, history, m.setting))
    return convergence.table(rows)


# a claim's ``measure`` -> its measurements (the spread_tests rows of one semantics, that semantics)
MEASUREMENTS = {
    "excess_dispersion": spread_measurements,
    "mean_shift": shift_measurements,
    "locality": locality_measurements,
}


def claim_verdicts(tests: pd.DataFrame, cells: pd.DataFrame, cfg, declared: Sequence[claims.Claim],
                   study: str = "compensation") -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`) from :func:`spread_tests` (``tests``) and the cells they
    were computed from (``cells``, with each fine-tuning's ``history``): every declared claim
    (``declared``: the study's ``claims``, ``compensation_claims.CLAIMS``) measured by its ``measure``
    (:data:`MEASUREMENTS`) and decided by :func:`claims.evaluate` (its rule, margin and gates; evidence
    ``layer_confounded``: :func:`layer_confounded`; ``convergence``: :func:`convergence_evidence`, the fine-tuned
    models behind each of the claim's measurements; ``shared_runs``: :func:`shared_runs`) under every semantics of
    the runs (their ``ablation``;
    :func:`semantics.verdicts_by_semantics`), one row per claim x task x setting, then the pooled rows; the rows
    under the claim's own semantics (``uniform``) are the primary analysis, Holm over the study's primary family,
    the others sensitivity rows, each semantics its own family. An absent measurement (nothing to measure: no run
    of a semantics, or a rho undefined in every run) is evaluated on its own (``not testable``, never pooled)."""
    unknown = sorted(c.measure for c in declared if c.measure not in MEASUREMENTS)
    if unknown:
        raise ValueError(f"claims with a measure this analysis does not know: {unknown} "
                         f"(known: {sorted(MEASUREMENTS)})")
    scale = scale_text(cfg)
    if "ablation" not in tests.columns:
        if not tests.empty:
            raise ValueError("the spread_tests table has no 'ablation' column (each run's semantics)")
        tests = tests.assign(ablation=pd.Series(dtype=object))

    shared = shared_runs(cfg)

    def decide(sub: pd.DataFrame, sem: str) -> pd.DataFrame:
        confounded = layer_confounded(sub) if len(sub) else {}
        parts = []
        for claim in declared:
            ms = MEASUREMENTS[claim.measure](sub, sem) if len(sub) else _nothing(sem)
            evidence = {"layer_confounded": confounded, "convergence": convergence_evidence(cells, sub, ms, sem, cfg),
                        "shared_runs": shared}
            present = [m for m in ms if not m.missing]
            groups = ([present] if present else []) + [[m] for m in ms if m.missing]
            parts += [claims.evaluate(claim, g, evidence=evidence, scale=scale, study=study) for g in groups]
        return pd.concat(parts, ignore_index=True)

    order = semantics.order(declared[0].semantics, [*(c.semantics for c in declared),
                                                    *getattr(cfg, "finetune_ablations", [])])
    return semantics.verdicts_by_semantics(tests, declared, decide, order)


def heatmap_data(heads: pd.DataFrame) -> pd.DataFrame:
    """Mean extra change per (ablation, strategy, budget, measure, layer, head) over tasks and seeds (draw one
    semantics at a time: ``grid[grid["ablation"] == s]``)."""
    keys = ["ablation", "strategy", "budget", "measure", "layer", "head"]
    return heads.groupby(keys, as_index=False).agg(x=("x", "mean"), x_noise=("x_noise", "mean"), n=("x", "size"))
