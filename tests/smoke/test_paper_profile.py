"""Every study notebook executed under the paper profile's parameters before anyone spends GPU hours on them.

papermill gets ``params/paper.yaml`` as a user gives it (``-f params/paper.yaml -p profile paper``) and explicit
parameters that shrink the run (they win over the file's section): a handful of examples, one or two seeds, one task,
few steps. Everything else is the paper profile's: the parameter names and values, the optimiser settings, the
evaluation every epoch, the unfrozen embeddings, the budgets' shapes. The model is a randomly initialised model of
bert-base-uncased's shape (12 layers x 12 heads, hidden 768) saved into a local folder with a BERT uncased tokenizer:
offline, no hub. The translation study keeps the paper's Transformer-base shape (6 + 6 layers, 8 heads, d_model 512,
FFN 2048) with the local multi30k corpus as a stand-in for WMT'14 (a hub data set), trained for a few steps.

The outputs go where custom parameters go (``custom-<hash>/``, never ``paper/``), in a temporary outputs root.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml

from headprune_utils.model.models import embedded_model_path
from headprune_utils.run import notebooks
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import STUDIES

# opt-in (``make test-paper``): a study under the paper parameters takes minutes even shrunk, which the 30-minute
# budget of ``make test`` on 2 cores does not hold for seven of them
pytestmark = [pytest.mark.smoke,
              pytest.mark.skipif(not os.environ.get("HEADPRUNE_PAPER_TEST"),
                                 reason="the paper profile's plumbing test is opt-in: make test-paper")]
REPO = Path(__file__).resolve().parents[2]
PAPER = yaml.safe_load((REPO / "params" / "paper.yaml").read_text())

GLUE = {"tasks": ["SST-2"], "seeds": [0, 1], "train_size": 8, "dev_size": 8, "epochs": 1, "max_length": 32,
        "progress": False}
# explicit parameters that make each study small; the paper section gives every other value
SHRINK = {
    "random_pruning": {**GLUE, "fractions": [0.0, 0.5], "finetune_ablations": ["uniform"]},
    "layer_strategies": {**GLUE, "finetune_ablations": ["uniform"], "strategies": ["random", "top", "least_important"],
                         "budgets": [0.5], "finetune_budgets": [0.5], "finetune_strategies": ["random", "least_important"],
                         "importance_size": 8},
    "compensation": {**GLUE, "finetune_ablations": ["uniform"], "strategies": ["random", "middle"], "probe_size": 8,
                     "n_resamples": 200, "importance_size": 8},
    "redundancy_patterns": {**GLUE, "probe_tasks": ["SST-2"], "probe_size": 8, "probe_max_length": 32,
                            "random_probes": 1, "k_max": 6, "dropouts": [0.0, 0.3], "mlm_seeds": [0], "mlm_steps": 2,
                            "mlm_batch_size": 8, "mlm_text_size": 64, "n_permutations": 99, "n_null": 19},
    "zero_shot_pruning": {**GLUE, "finetune_ablations": ["zero"], "fractions": [0.5], "probe_size": 8,
                          "probe_max_length": 32, "importance_size": 8},
    "specialized_heads_l0": {**GLUE, "score_size": 16, "ablation_size": 16, "ud_sentences": 8, "lambdas": [0.01, 1.0],
                             "l0_steps": 3, "l0_batch_size": 8, "n_random_baselines": 2, "n_permutations": 199},
    "nmt_heads": {"corpus": "multi30k", "train_size": 200, "dev_size": 16, "test_size": 16, "vocab_size": 600,
                  "max_length": 32, "max_tokens": 512, "batch_size": 16, "max_steps": 4, "warmup_steps": 2,
                  "eval_every": 2, "eval_batch_size": 16, "model_seeds": [0], "seeds": [0, 1], "fractions": [0.5],
                  "retrain_types": ["all"], "retrain_fractions": [0.5], "retrain_steps": 2, "retrain_warmup": 1,
                  "strategies": ["random", "top"], "strategy_budgets": [0.5], "role_sentences": 16,
                  "importance_size": 16, "ud_sentences": 8, "lambdas": [0.01, 1.0], "l0_steps": 3, "l0_batch_size": 8,
                  "n_random_baselines": 2, "n_permutations": 199, "progress": False},
}
# what the shrinking leaves of the paper section: its model shape above all
KEPT = {"nmt_heads": ("encoder_layers", "decoder_layers", "heads", "d_model", "ffn_dim", "lr", "dropout")}


@pytest.fixture(scope="module")
def bert_base_shaped(tmp_path_factory) -> Path:
    """A randomly initialised BERT of bert-base-uncased's shape, saved with an uncased BERT tokenizer."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    folder = tmp_path_factory.mktemp("bert-base-shaped")
    source = embedded_model_path("minilm")  # its tokenizer is BERT's uncased WordPiece (30522 tokens)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512)
    BertForMaskedLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """One outputs root for the module: the studies share their fine-tuned models as the paper profile has them."""
    return tmp_path_factory.mktemp("outputs")


# Breaks found by this test and not yet fixed (in modules this test does not own): strict, so a fix must remove them.
BROKEN: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=BROKEN[n]))
                                  if n in BROKEN else n for n in STUDIES])
def test_the_paper_profile_executes(name, bert_base_shaped, outputs, data_root, tmp_path, monkeypatch):
    section = PAPER[name]
    shrink = dict(SHRINK[name])
    if "model" in section:
        assert section["model"] == "bert-base-uncased"
        shrink["model"] = str(bert_base_shaped)
    assert set(shrink) - {"progress"} <= set(STUDIES[name].Config.__dataclass_fields__), "explicit parameters exist"
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(outputs))
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "run.ipynb"
    import papermill as pm

    pm.execute_notebook(str(REPO / "notebooks" / STUDIES[name].notebook), str(out),
                        parameters={**PAPER, "profile": "paper", **shrink}, kernel_name=notebooks.kernel_name(),
                        cwd=str(REPO), progress_bar=False, log_output=False,
                        kernel_manager_class=notebooks.ipc_kernel_manager())
    folders = [p for p in (outputs / name).iterdir() if not p.name.startswith((".", "_"))]
    assert [p.name[:7] for p in folders] == ["custom-"], "a shrunk paper run is not the paper profile's"
    paths = StudyPaths(name, folders[0].name, root=outputs)
    meta = json.loads(paths.meta.read_text())
    for k, v in section.items():  # the paper section applied wherever no explicit parameter replaced it
        if k not in shrink:
            got = meta["params"][k]
            assert got == v or (isinstance(v, (int, float)) and got == pytest.approx(v)), k
    for k in KEPT.get(name, ()):
        assert meta["params"][k] == section[k]
    if "model" in section:
        import transformers

        shape = transformers.AutoConfig.from_pretrained(bert_base_shaped)
        assert (shape.num_hidden_layers, shape.num_attention_heads, shape.hidden_size) == (12, 12, 768)
    assert json.loads(paths.metrics.read_text())["n_cells"] > 0
    text = "\n".join(o.get("text", "") for c in nbformat.read(out, 4).cells for o in c.get("outputs", []))
    assert "Loading weights" not in text
