"""One training under all cells of a model: each GLUE cell records the hash of the fine-tuned full model it used,
and a study whose cells of one (task, seed) come from two trainings is refused (a resumed run on another machine)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from headprune_utils.studies import glue_workbench
from headprune_utils.model import models
from headprune_utils.studies.config import validate
from headprune_utils.run.execution import MixedModelsError, check_one_model, run_study
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import ResultStore
from headprune_utils.studies import random_pruning as study


def test_check_one_model_by_hand():
    glue, translation = ("task", "seed"), ("model_seed",)  # the studies' model_axes
    ok = pd.DataFrame({"task": ["A", "A", "B"], "seed": [0, 0, 0], "full_model_sha": ["x", None, "y"]})
    check_one_model(ok, "s", glue)
    check_one_model(pd.DataFrame({"task": ["A"], "seed": [0]}), "s", glue)  # older cells: no hash, nothing to check
    bad = pd.DataFrame({"task": ["A", "A"], "seed": [1, 1], "full_model_sha": ["x", "z"]})
    with pytest.raises(MixedModelsError, match="A seed 1.*2 different trainings"):
        check_one_model(bad, "s", glue)
    check_one_model(bad, "s", ())  # a study not split by model: nothing to check
    # the translation study's models are its model seeds (a cell's own ``seed`` does not split them)
    check_one_model(pd.DataFrame({"model_seed": [0, 0, 1], "seed": [0, 1, 0], "full_model_sha": ["x", "x", "y"]}),
                    "s", translation)
    with pytest.raises(MixedModelsError, match="model seed 1.*2 different trainings.*weights x, y"):
        check_one_model(pd.DataFrame({"model_seed": [0, 1, 1], "full_model_sha": ["x", "y", "x"]}), "s", translation)


def test_cells_carry_the_weights_hash_and_a_mix_is_refused(tiny_model_dir, tiny_glue_root, tmp_path):
    cfg = validate(study.RandomPruningConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=[0.5], seeds=[0],
        train_size=None, dev_size=None, epochs=1, batch_size=8, lr=1e-3, device="cpu", data_dir=str(tiny_glue_root),
        allow_hub=False, progress=False, ablations=["zero"], finetune_ablations=["zero"]))
    paths = StudyPaths(study.NAME, "t", root=tmp_path)
    table = run_study(study.STUDY, cfg, "t", paths)
    uses = table[(table["regime"] == "finetune_then_mask") | (table["fraction"] == 0)]
    assert uses["full_model_sha"].notna().all() and uses["full_model_sha"].nunique() == 1
    trained = table[(table["regime"] == "mask_then_finetune") & (table["fraction"] > 0)]
    assert trained["full_model_sha"].isna().all(), "a masked model fine-tuned from scratch did not use the full model"
    # the hash is the weights' (an independent recomputation from the cached checkpoint)
    wb = glue_workbench.GlueContext(cfg, __import__("torch").device("cpu"), paths.finetuned_cache)
    assert models.weights_sha(wb.full_model("SST-2", 0)[0]) == uses["full_model_sha"].iloc[0]
    # a cell from "another training" of the same model: the study refuses to mix them
    f = sorted(paths.cells.glob("*finetune_then_mask*.json"))[0]
    rec = json.loads(f.read_text())
    rec["result"]["full_model_sha"] = "0" * 16
    ResultStore(paths.cells, rec["fingerprint"]).put(rec["cell"], rec["result"])  # stored as a run would (not a hand edit)
    with pytest.raises(MixedModelsError, match="SST-2 seed 0"):
        run_study(study.STUDY, cfg, "t", paths)


def test_one_machine_kind_per_model_by_hand():
    """A slice is finished on machines of the kind that began it: cells of one model that record their machine
    must name one kind; cells stored before the field existed record none and are not checked."""
    glue = ("task", "seed")
    ok = pd.DataFrame({"task": ["A", "A", "B", "B"], "seed": [0, 0, 0, 0],
                       "machine": ["cpu: X [avx2]", None, "cpu: Y [avx2]", "cpu: Y [avx2]"]})
    check_one_model(ok, "s", glue)  # two models, each of one kind (an older cell without a record among them)
    bad = pd.DataFrame({"task": ["A", "A", "A"], "seed": [1, 1, 1],
                        "machine": ["cpu: X [avx2]", "cpu: Y [amx_bf16]", "cpu: X [avx2]"],
                        "full_model_sha": [None, None, None]})
    with pytest.raises(MixedModelsError, match=r"A seed 1 were computed on 2 kinds of machine \(2 cell\(s\) on "
                                               r"cpu: X \[avx2\]; 1 cell\(s\) on cpu: Y \[amx_bf16\]\)"):
        check_one_model(bad, "s", glue)
    check_one_model(bad, "s", ())  # a study not split by model: nothing to check
    # a seed column with a gap reads as floats: the model is still named "A seed 1"
    with pytest.raises(MixedModelsError, match=r"the cells of A seed 1 were"):
        check_one_model(bad.astype({"seed": float}), "s", glue)


@pytest.mark.parametrize("executor", ["local", "local object", "process"])
def test_cells_record_their_machine_and_another_kind_is_refused_before_computing(tiny_model_dir, tiny_glue_root,
                                                                                  tmp_path, monkeypatch, executor):
    """Every computed cell records this machine's kind (the CPU's model and its float-relevant extensions); a run
    on a machine of another kind that would add cells to a model's slice begun elsewhere stops before any work,
    naming the model and both kinds, and writes nothing: with the executor named or given as an object (the batch
    runner's ``--cells-only`` passes one), and with worker processes on this machine."""
    from headprune_utils.run import execution
    from headprune_utils.store.results import cpu_description

    cfg = validate(study.RandomPruningConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=[0.5], seeds=[0],
        train_size=None, dev_size=None, epochs=1, batch_size=8, lr=1e-3, device="cpu", data_dir=str(tiny_glue_root),
        allow_hub=False, progress=False, ablations=["zero"], finetune_ablations=["zero"]))
    paths = StudyPaths(study.NAME, "t", root=tmp_path)
    table = run_study(study.STUDY, cfg, "t", paths, select=lambda a: a["regime"] == "finetune_then_mask")
    here = table["machine"].unique()
    assert len(here) == 1 and here[0].startswith("cpu: ") and cpu_description()["cpu_model"] in here[0]
    before = sorted(p.name for p in paths.cells.glob("*.json"))
    monkeypatch.setattr(execution, "machine_kind", lambda device: "cpu: Another CPU [avx512f]")
    ex = execution.LocalExecutor() if executor == "local object" else executor
    with pytest.raises(MixedModelsError, match=r"this machine \(cpu: Another CPU \[avx512f\]\) would add cells to "
                                               r"the slice of SST-2 seed 0, whose stored cells were computed on "
                                               r"another kind \(\d+ cell\(s\) on cpu: .*\(python -m headprune_utils.run "
                                               r"--profile t --only random_pruning --cells-only --fresh --where "
                                               r"task=SST-2 seed=0 moves .*Nothing was computed"):
        run_study(study.STUDY, cfg, "t", paths, executor=ex)
    assert sorted(p.name for p in paths.cells.glob("*.json")) == before, "nothing was computed"
    if executor == "local":  # the way out the message names: the slice's cells moved aside, the slice recomputed
        store = ResultStore(paths.cells, json.loads(paths.cells.joinpath(before[0]).read_text())["fingerprint"])
        cells = [dict(c.axes) for c in study.STUDY.plan(cfg)]
        assert len(store.move_out(cells, tmp_path / "bak" / "cells")) == len(before)
        kinds = run_study(study.STUDY, cfg, "t", paths, executor=ex)["machine"].unique().tolist()
        assert kinds == ["cpu: Another CPU [avx512f]"], "one kind in the slice"
    if executor == "local":  # an AVX-512 machine of the model that began the slice: the message names the way to hold
        assert len(store.move_out(cells, tmp_path / "bak2" / "cells")) == len(cells)  # the whole slice now
        monkeypatch.setattr(execution, "machine_kind", lambda device: "cpu: Another CPU [avx2]")
        run_study(study.STUDY, cfg, "t", paths, executor=ex, select=lambda a: a["regime"] == "finetune_then_mask")
        monkeypatch.setattr(execution, "machine_kind", lambda device: "cpu: Another CPU [avx2 avx512f avx512_bf16]")
        with pytest.raises(MixedModelsError, match=r"Nothing was computed\. Or resume it here held to AVX2: start the "
                                                   r"command with ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                                                   r"ONEDNN_MAX_CPU_ISA=AVX2"):
            run_study(study.STUDY, cfg, "t", paths, executor=ex)
        return
    # and the stored cells' own record, after the fact: cells of one slice from two kinds are refused
    f = sorted(paths.cells.glob("*.json"))[0]
    rec = json.loads(f.read_text())
    rec["result"]["machine"] = "cpu: Another CPU [avx512f]"
    store = ResultStore(paths.cells, rec["fingerprint"])
    store.put(rec["cell"], rec["result"])
    with pytest.raises(MixedModelsError, match=r"SST-2 seed 0 were computed on 2 kinds of machine"):
        check_one_model(store.table(), "s", study.STUDY.model_axes)
