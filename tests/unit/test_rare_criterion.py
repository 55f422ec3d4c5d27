"""The rare-word head criterion (thresholds are fixed from the papers, never from our data): a head is a rare-word head when
its maximum attention falls on the sentence's least frequent token in MORE than half of the queries (Voita et al.
2019, Sec. 5), with no ratio over chance and no threshold chosen from the data; one analysis-only parameter
(``rare_share``) in studies 6 and 7, outside the cells' fingerprint; the counts over 0.1-0.9 are a sensitivity (a
table and a figure), never a selection."""
from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
import torch

from headprune_utils import figures
from headprune_utils.studies import role_survival
from headprune_utils.measure import specialized
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.figures.layout import layout_problems
from headprune_utils.studies import nmt_heads, specialized_heads_l0


def roles_cell(kind: str, task: str, seed, share) -> dict:
    """A measurement row (study 6's layout) with only rare-word shares (every other role absent)."""
    share = np.asarray(share, dtype=float)
    syn = [{"layer": 0, "head": 0, "relation": "nsubj", "direction": "dep->head", "n": 0, "accuracy": 0.0,
            "baseline": 0.0, "baseline_offset": 1}]
    return {"kind": kind, "task": task, "seed": seed,
            "roles": {"prev": np.zeros_like(share).tolist(), "next": np.zeros_like(share).tolist(),
                      "rare_share": share.tolist(), "rare_p": np.full_like(share, 1e-9).tolist(),
                      "rare_chance": 0.05, "rare_n": 1000, "syntactic": syn}}


def test_the_criterion_is_more_than_half_of_the_queries_whatever_chance_says():
    assert specialized.RARE_SHARE == 0.5
    table = pd.DataFrame([roles_cell("roles", "pretrained", np.nan, [[0.5, 0.5001], [0.3, 0.9]])])
    roles = role_survival.role_table(table).set_index(["layer", "head"])
    # 0.5 is not MORE than half; 0.3 is 6 x chance with p = 1e-9 and still not a rare-word head
    assert roles["rare"].to_dict() == {(0, 0): False, (0, 1): True, (1, 0): False, (1, 1): True}
    assert role_survival.role_table(table, rare_share=0.2)["rare"].sum() == 4


def test_one_analysis_only_parameter_with_the_papers_value_in_both_studies():
    for module, cfg_cls in ((specialized_heads_l0, specialized_heads_l0.SpecializedHeadsL0Config),
                            (nmt_heads, nmt_heads.NMTHeadsConfig)):
        fields = {f.name: f.default for f in dataclasses.fields(cfg_cls)}
        assert fields["rare_share"] == 0.5 and not {"rare_ratio", "rare_alpha"} & set(fields)
        assert "rare_share" in module.ANALYSIS_ONLY  # never part of a cell's fingerprint or key
        assert module.role_thresholds.__doc__


def test_rare_share_changes_no_fingerprint_and_is_range_checked(tiny_model_dir, tiny_glue_root, tmp_path):
    ud = tmp_path / "ud_english_ewt"
    ud.mkdir()
    for split in ("train", "dev"):
        (ud / f"en_ewt-ud-{split}.conllu").write_text("# sent_id = s0\n1\tgood\tgood\tX\tX\t_\t0\troot\t_\t_\n\n")
    (tmp_path / "glue").symlink_to(tiny_glue_root / "glue")
    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], data_dir=str(tmp_path), allow_hub=False, device="cpu")
    cfg = validate(specialized_heads_l0.SpecializedHeadsL0Config, base)
    fp = specialized_heads_l0.study_fingerprint(cfg, torch.device("cpu"))
    other = validate(specialized_heads_l0.SpecializedHeadsL0Config, {**base, "rare_share": 0.3})
    assert specialized_heads_l0.study_fingerprint(other, torch.device("cpu")) == fp
    assert specialized_heads_l0.study_fingerprint(
        validate(specialized_heads_l0.SpecializedHeadsL0Config, {**base, "syntactic_margin": 0.2}),
        torch.device("cpu")) == fp
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ParameterError, match="rare_share"):
            validate(specialized_heads_l0.SpecializedHeadsL0Config, {**base, "rare_share": bad})


def sensitivity_table() -> pd.DataFrame:
    """The pre-trained model (one head at 0.35 in the first layer, one at 0.65 in the second) and two fine-tuned
    models (first-layer heads at 0.25 and 0.55; second-layer heads at 0.15 and 0.15)."""
    return pd.DataFrame([roles_cell("roles", "pretrained", np.nan, [[0.35, 0.0], [0.65, 0.0]]),
                         roles_cell("scores", "A", 0.0, [[0.25, 0.0], [0.15, 0.0]]),
                         roles_cell("scores", "A", 1.0, [[0.55, 0.0], [0.15, 0.0]])])


def test_the_counts_over_the_thresholds_by_hand():
    c = role_survival.rare_criterion_counts(sensitivity_table(), shares=(0.1, 0.3, 0.5, 0.7))
    assert list(dict.fromkeys(c["model"])) == ["pre-trained model", "fine-tuned models (mean)"]
    got = c.set_index(["model", "layers", "rare_share"])["n_rare_heads"]
    assert got[("pre-trained model", "all layers", 0.1)] == 2 and got[("pre-trained model", "all layers", 0.5)] == 1
    assert got[("pre-trained model", "first layer", 0.3)] == 1 and got[("pre-trained model", "first layer", 0.5)] == 0
    # the fine-tuned models: (2 + 2) / 2 heads at 0.1; at 0.3, (0 + 1) / 2; at 0.5, (0 + 1) / 2; at 0.7, 0
    assert [got[("fine-tuned models (mean)", "all layers", s)] for s in (0.1, 0.3, 0.5, 0.7)] == [2.0, 0.5, 0.5, 0.0]
    assert (c.loc[c["model"] != "pre-trained model", "n_models"] == 2).all()
    assert c.loc[c["fixed"], "rare_share"].unique().tolist() == [0.5]  # the criterion, marked
    assert c[c["layers"] == "all layers"].groupby("model")["n_rare_heads"].apply(
        lambda x: x.is_monotonic_decreasing).all()
    # the default thresholds: 0.1, 0.2, ..., 0.9 exactly
    assert role_survival.RARE_SHARES == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    assert sorted(role_survival.rare_criterion_counts(sensitivity_table())["rare_share"].unique()) == list(
        role_survival.RARE_SHARES)


def test_study_7s_counts_are_of_the_trained_models():
    cells = pd.DataFrame([{"kind": "roles", "model_seed": s, "roles": roles_cell("roles", "x", 0, share)["roles"]}
                          for s, share in ((0, [[0.6, 0.1]]), (1, [[0.4, 0.1]]))])
    c = nmt_heads.rare_criterion_counts(cells, shares=(0.3, 0.5))
    assert set(c["model"]) == {"trained models (mean)"}
    got = c.set_index(["layers", "rare_share"])["n_rare_heads"]
    assert got[("first layer", 0.3)] == 1.0 and got[("first layer", 0.5)] == 0.5
    assert nmt_heads.rare_criterion_counts(cells.iloc[0:0]).empty


def test_the_sensitivity_figure_marks_the_criterion_and_is_laid_out():
    counts = role_survival.rare_criterion_counts(sensitivity_table())
    fig = figures.curves.rare_criterion_sensitivity(counts, 0.5)
    ax = fig.axes[0]
    assert any(line.get_xdata()[0] == 0.5 == line.get_xdata()[-1] for line in ax.get_lines()), "criterion line"
    assert len(ax.get_lines()) == 4 + 1  # two groups x two layer sets, and the criterion
    assert "fixed criterion" in " ".join(t.get_text() for t in ax.texts)
    assert not layout_problems(fig)
