"""Caches shared between studies: a (task, seed, mask) fine-tuned by one study is read back by another."""
from __future__ import annotations

import pandas as pd
import pytest

from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import random_pruning as study


def config(model_dir, data_root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=None, seeds=[0, 1], train_size=None,
                dev_size=None, epochs=2, batch_size=8, lr=1e-3, device="cpu", data_dir=str(data_root),
                allow_hub=False, progress=False, ablations=["uniform"], finetune_ablations=["uniform"])
    return validate(study.RandomPruningConfig, {**base, **kw})


def test_random_masks_fine_tuned_once_across_studies(tiny_model_dir, tiny_glue_root, tmp_path, monkeypatch):
    """Study 1's mask-then-fine-tune cell and study 2's random strategy at the same budget and seed are the same
    mask: study 2 reads the fine-tuned scores back (no training) and reports the same numbers."""
    from headprune_utils.model.masks import mask_to_string
    from headprune_utils.studies import glue_workbench as common
    from headprune_utils.studies import layer_strategies as s2

    cfg = config(tiny_model_dir, tiny_glue_root, regimes=["mask_then_finetune"], epochs=1)
    t1 = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    trained = []
    real = common.GlueContext.finetune_masked

    def spy(self, task, seed, mask, desc, ablation, **kw):
        trained.append((task, seed, mask_to_string(mask), ablation))
        return real(self, task, seed, mask, desc, ablation, **kw)

    monkeypatch.setattr(common.GlueContext, "finetune_masked", spy)
    cfg2 = validate(s2.LayerStrategiesConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0, 1], budgets=[0.5], finetune_budgets=[0.5],
        strategies=["random", "top"], regimes=["mask_then_finetune"], train_size=None, dev_size=None, epochs=1,
        batch_size=8, lr=1e-3, device="cpu", data_dir=str(tiny_glue_root), allow_hub=False, progress=False))
    t2 = run_study(s2.STUDY, cfg2, "t", StudyPaths(s2.NAME, "t", root=tmp_path))
    # only the "top" masks were trained; the random ones came from study 1's runs (same mask AND semantics)
    assert len(trained) == 2 and all(m in set(t2[t2["strategy"] == "top"]["mask"]) for _, _, m, _ in trained)
    assert {a for *_, a in trained} == {"uniform"}
    a = t1[t1["fraction"] == 0.5].set_index("seed")[["mask", "score"]]
    b = t2[t2["strategy"] == "random"].set_index("seed")[["mask", "score"]]
    pd.testing.assert_frame_equal(a.sort_index(), b.sort_index(), check_dtype=False)


def test_zero_shot_finetune_fractions(tiny_model_dir, tiny_glue_root):
    from headprune_utils.studies import zero_shot_pruning as s5

    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0], fractions=[0.5, 0.75], methods=["random"],
                data_dir=str(tiny_glue_root), allow_hub=False, ablations=["zero"], finetune_ablations=["zero"])
    cells5 = s5.plan_cells(validate(s5.ZeroShotPruningConfig, {**base, "finetune_fractions": [0.5]}))
    assert sorted((c["regime"], c["budget"]) for c in cells5 if c["strategy"] != "none") == [
        ("finetune_then_mask", 0.5), ("finetune_then_mask", 0.75), ("mask_then_finetune", 0.5)]
    with pytest.raises(ParameterError, match="finetune_fractions"):
        validate(s5.ZeroShotPruningConfig, {**base, "finetune_fractions": [0.25]})
