"""A pruned model saved and loaded back (``pruning.save_pruned``; ``models.load_causal_lm`` of the folder, or
``pruning.load_pruned_weights`` for any class): the same heads kept, the same outputs to the bit, the saved dtype.
Its config still describes the unpruned model, so a plain ``save_pretrained`` of a pruned model cannot be loaded:
the loader says so."""
from __future__ import annotations

import json

import pytest
import torch

from headprune_utils.model import architecture as A
from headprune_utils.model import models
from headprune_utils.model.pruning import PRUNED_FILE, PRUNED_WEIGHTS, load_pruned_weights, prune_heads, save_pruned

from .fixtures import FIXTURES

MASK = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])  # uneven groups; a key/value head emptied


# the mixtures of experts' float64 fixtures need the eager experts, a setting the saved config drops: for gpt-oss (its
# sinks sliced by pruning) the weights are compared, the logits not; Mixtral and Qwen3-MoE add nothing here
@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "opt", "llama_gqa", "qwen3", "gemma3", "phi3", "gpt_oss", "bloom",
                                  "deepseek_v3", "stablelm", "falcon_new", "falcon_rw", "falcon_mq", "llama4",
                                  "qwen3_5"])
def test_a_saved_pruned_causal_lm_loads_back_the_same(name, tmp_path):
    fx = FIXTURES[name]
    model = prune_heads(fx.build("eager"), MASK)
    save_pruned(model, tmp_path)
    loaded = models.load_causal_lm(str(tmp_path), device="cpu", attn_implementation="eager")
    assert A.kept_heads(loaded) == A.kept_heads(model) == [[0, 2, 3], [3]]
    assert loaded.dtype == torch.float64  # the saved dtype, not the config's default
    want, got = model.state_dict(), loaded.state_dict()
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    if name != "gpt_oss":
        batch = fx.inputs()
        with torch.no_grad():
            assert torch.equal(loaded(**batch).logits, model(**batch).logits)
    assert json.loads((tmp_path / PRUNED_FILE).read_text())["kept_heads"] == {"None": [[0, 2, 3], [3]]}


def test_an_encoder_decoder_loads_back_by_its_own_class(tmp_path):
    fx = FIXTURES["bart"]
    model = prune_heads(fx.build("eager"), {"enc": MASK, "cross": torch.ones(2, 4)})
    save_pruned(model, tmp_path)
    fresh = fx.model_class._from_config(fx.config("eager"), attn_implementation="eager")
    loaded = load_pruned_weights(fresh, tmp_path).eval()
    assert A.kept_heads(loaded) == A.kept_heads(model)
    batch = fx.inputs()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)


# Qwen3's pruned layers keep its weight names (their shapes differ); Falcon's and Phi-3's pruned layers are cut into
# q/k/v/o_proj where the config's module has a fused projection (names the model class would miss, left random);
# Bamba's too, with Mamba layers between; Qwen3.5's gated q_proj keeps its name, half its rows per head gone
@pytest.mark.parametrize("name", ["qwen3", "falcon_new", "falcon_rw", "phi3", "bamba", "qwen3_5"])
def test_a_pruned_model_saved_the_plain_way_is_refused_with_the_reason(name, tmp_path):
    model = prune_heads(FIXTURES[name].build("eager", dtype=torch.float32), MASK)
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="save_pruned"):
        models.load_causal_lm(str(tmp_path), device="cpu")


def test_a_record_without_its_weights_or_of_another_grid_is_refused(tmp_path):
    fx = FIXTURES["llama_gqa"]
    save_pruned(prune_heads(fx.build("eager"), MASK), tmp_path)
    (tmp_path / PRUNED_WEIGHTS).unlink()
    with pytest.raises(ValueError, match="interrupted save_pruned"):
        models.load_causal_lm(str(tmp_path), device="cpu")
    save_pruned(prune_heads(fx.build("eager"), MASK), tmp_path)
    record = json.loads((tmp_path / PRUNED_FILE).read_text())
    record["head_shapes"] = {"None": [3, 4]}
    (tmp_path / PRUNED_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="are not those of the model"):
        load_pruned_weights(fx.model_class._from_config(fx.config("eager")), tmp_path)
