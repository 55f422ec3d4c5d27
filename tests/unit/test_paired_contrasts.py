"""Paired contrasts on hand-made tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import stats
from headprune_utils.analysis.paired_contrasts import (
    LOCATION_CONTRASTS, Contrast, contrast_table, identical_masks, paired_by_strategy, per_ablation,
    unit_contrast_table,
)


def table(offsets: dict[str, list[float]]) -> pd.DataFrame:
    """2 tasks x 2 budgets x len(offsets) seeds; score = 0.8 + offset of the seed."""
    rows = []
    for task in ("A", "B"):
        for budget in (0.25, 0.5):
            for strategy, offs in offsets.items():
                for seed, o in enumerate(offs):
                    rows.append({"task": task, "regime": "finetune_then_mask", "strategy": strategy, "budget": budget,
                                 "seed": seed, "score": 0.8 + o})
    return pd.DataFrame(rows)


def test_paired_by_strategy_pairs_same_setting_and_seed():
    t = table({"a": [0.1, 0.2, 0.3], "b": [0.0, 0.0, 0.1]})
    d = paired_by_strategy(t, "a", "b")
    assert list(d.columns) == ["task", "regime", "budget", "seed", "diff"] and len(d) == 12
    np.testing.assert_allclose(d.sort_values(["task", "budget", "seed"])["diff"], [0.1, 0.2, 0.2] * 4)
    # a seed missing for one strategy is dropped, not paired with another seed
    d = paired_by_strategy(t.drop(t.index[(t["strategy"] == "b") & (t["seed"] == 2)]), "a", "b")
    assert len(d) == 8 and set(d["seed"]) == {0, 1}
    assert paired_by_strategy(t, "a", "missing").empty


def test_contrast_table_per_setting_and_pooled_over_its_units():
    t = table({"a": [0.1, 0.12, 0.11], "b": [0.0, 0.0, 0.0]})
    c = Contrast("a vs b", "a beats b", "a", "b", "greater")
    out = contrast_table([c, Contrast("x", "not run", "a", "zz", "equal")], lambda a, b: paired_by_strategy(t, a, b))
    assert set(out["contrast"]) == {"a vs b"}, "a contrast whose strategies did not run is left out"
    assert not {"t_test_p", "sign_flip_p", "boot_ci_low"} & set(out.columns)  # descriptive: no p-value
    per = out[out["task"] != "all"]
    assert len(per) == 4 and (per["n_pairs"] == 3).all() and (per["n_units"] == 3).all()
    pooled = out[out["task"] == "all"].iloc[0]
    # 12 pairs, but 3 units (seeds): each seed's 4 pairs (2 tasks x 2 budgets) averaged first
    assert pooled["budget"] == "all" and pooled["n_pairs"] == 12 and pooled["n_units"] == 3
    _, lo, hi = stats.t_interval(np.array([0.1, 0.12, 0.11]), 0.95)
    assert pooled["mean_diff"] == pytest.approx(0.11) and (pooled["ci_low"], pooled["ci_high"]) == pytest.approx((lo, hi))
    by_budget = contrast_table([c], lambda a, b: paired_by_strategy(t, a, b), pool_per_budget=True)
    pooled = by_budget[by_budget["task"] == "all"]
    assert sorted(map(str, pooled["budget"])) == ["0.25", "0.5", "all"]
    assert (pooled[pooled["budget"] != "all"]["n_pairs"] == 6).all()
    # another unit: every row of one unit (here: all of them) is one value, no interval
    one = contrast_table([c], lambda a, b: paired_by_strategy(t, a, b), unit=lambda d: d["seed"] * 0)
    assert (one["n_units"] == 1).all() and one["ci_low"].isna().all()


def test_location_contrasts_name_known_strategies():
    from headprune_utils.studies.strategy_sweep import ALL_STRATEGIES

    assert len({c.name for c in LOCATION_CONTRASTS}) == len(LOCATION_CONTRASTS)
    assert all(c.a in ALL_STRATEGIES and c.b in ALL_STRATEGIES for c in LOCATION_CONTRASTS)
    assert {c.expect for c in LOCATION_CONTRASTS} <= {"equal", "greater", "not_worse"}


def with_masks(t: pd.DataFrame, same: set[tuple]) -> pd.DataFrame:
    """Masks: the strategy's own, except (task, budget, seed) in ``same`` where b prunes a's mask."""
    t = t.copy()
    t["mask"] = [("a" if s == "b" and (k, b, d) in same else s) + f"-{b}-{d}"
                 for s, k, b, d in zip(t["strategy"], t["task"], t["budget"], t["seed"])]
    return t


def test_pairs_with_identical_masks_are_flagged_and_reported():
    t = with_masks(table({"a": [0.1, 0.2, 0.3], "b": [0.0, 0.0, 0.1]}), {("A", 0.25, 0), ("B", 0.25, 0)})
    d = paired_by_strategy(t, "a", "b", same_mask=True)
    assert list(d.columns) == ["task", "regime", "budget", "seed", "diff", "same_mask"]
    assert sorted(map(tuple, d.loc[d["same_mask"], ["task", "budget", "seed"]].values.tolist())) == \
        [("A", 0.25, 0), ("B", 0.25, 0)]
    assert list(paired_by_strategy(t, "a", "b").columns) == ["task", "regime", "budget", "seed", "diff"]
    same = identical_masks(t)
    assert len(same) == 2 and set(same["strategies"]) == {"a = b"}
    assert identical_masks(with_masks(t, set())).empty


def test_unit_contrast_table_averages_within_the_model_and_leaves_identical_masks_out():
    t = table({"a": [0.1, 0.2, 0.3], "b": [0.0, 0.0, 0.1]})
    t.loc[(t["strategy"] == "a") & (t["budget"] == 0.5), "score"] += 0.1  # a - b: 0.1, 0.2, 0.2 at 25%; +0.1 at 50%
    c = Contrast("a vs b", "a beats b", "a", "b", "greater")
    out = unit_contrast_table([c], lambda a, b: paired_by_strategy(t, a, b))
    over = out[(out["task"] == "A") & (out["budget"] == "all")].iloc[0]
    assert over["n_units"] == 3 and over["mean_diff"] == pytest.approx(np.mean([0.15, 0.25, 0.25]))
    per = out[(out["task"] == "A") & (out["budget"] == 0.5)].iloc[0]
    assert per["n_units"] == 3 and per["ci_low"] < per["mean_diff"] < per["ci_high"]
    assert "all" not in set(out["task"]) and (out["n_same_mask"] == 0).all()
    tm = with_masks(t, {("A", 0.5, 0), ("A", 0.5, 1), ("A", 0.5, 2)})
    out = unit_contrast_table([c], lambda a, b: paired_by_strategy(tm, a, b, same_mask=True))
    a_rows = out[out["task"] == "A"]
    assert list(a_rows["budget"]) == [0.25, "all"], "a setting whose every pair is identical has no row"
    over = a_rows[a_rows["budget"] == "all"].iloc[0]
    assert over["mean_diff"] == pytest.approx(np.mean([0.1, 0.2, 0.2])) and over["n_same_mask"] == 3
    assert "3 pair(s) left out: a and b pruned identical masks (budgets 50%; seeds 0, 1, 2)" == over["note"]


def test_per_ablation_never_pairs_cells_of_two_semantics():
    zero = table({"a": [0.1, 0.12, 0.11], "b": [0.0, 0.0, 0.0]}).assign(ablation="zero")
    uniform = table({"a": [0.0, 0.0, 0.0], "b": [0.2, 0.2, 0.2]}).assign(ablation="uniform")
    t = pd.concat([zero, uniform], ignore_index=True)
    c = Contrast("a vs b", "a beats b", "a", "b", "greater")
    out = per_ablation(t, lambda sub: unit_contrast_table([c], lambda a, b: paired_by_strategy(sub, a, b)))
    assert list(out.columns[:7]) == ["contrast", "a", "b", "expect", "task", "regime", "ablation"]
    assert list(dict.fromkeys(out["ablation"])) == ["zero", "uniform"]
    assert out.groupby("ablation")["n_units"].max().to_dict() == {"zero": 3, "uniform": 3}  # seeds, not 6
    assert out[out["ablation"] == "zero"]["mean_diff"].gt(0.09).all()
    np.testing.assert_allclose(out[out["ablation"] == "uniform"]["mean_diff"], -0.2)
    # without the column: the table whole; an empty table keeps the columns
    assert "ablation" not in per_ablation(zero.drop(columns="ablation"), lambda sub: sub.head(1)).columns
    assert "ablation" in per_ablation(t.iloc[:0], lambda sub: unit_contrast_table([c], lambda a, b: paired_by_strategy(sub, a, b))).columns
