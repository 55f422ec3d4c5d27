"""Gemma 3's multimodal model (``Gemma3ForConditionalGeneration``: what ``AutoModelForCausalLM`` gives for
gemma-3-4b and larger). Its grid is its language model's heads. On text, the wrapper holding a text model's weights
computes exactly what the text-only ``Gemma3ForCausalLM`` computes (checked first), so every gate, pruning, cached
generation and attention map through the adapter must equal the text model's (which ``test_adapter_causal`` checks
against the independent reference). Image tokens attend to each other both ways inside their block, which the
adapter's causal visible keys do not express: "uniform" and the maps refuse such a batch."""
from __future__ import annotations

import copy
import functools

import pytest
import torch
import transformers as tf

from headprune_utils.model import architecture as A
from headprune_utils.model.attention import attention_maps
from headprune_utils.model.gates import head_gates, head_means
from headprune_utils.model.pruning import prune_heads

from .fixtures import FIXTURES

FX = FIXTURES["gemma3"]


@functools.lru_cache(maxsize=None)
def _pair():
    """(text model, wrapper) with the same language-model weights. The wrapper does not soft-cap its logits (its
    text config's final_logit_softcapping is read by the text-only class alone), so both have it off."""
    text_cfg = FX.config("eager")
    text_cfg.final_logit_softcapping = None
    text = tf.Gemma3ForCausalLM._from_config(text_cfg, attn_implementation="eager").to(torch.float64).eval()
    text.load_state_dict(FX.build("eager").state_dict())
    cfg = tf.Gemma3Config(text_config=text_cfg.to_dict(), mm_tokens_per_image=4,
                          vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14))
    wrapper = tf.Gemma3ForConditionalGeneration._from_config(cfg, attn_implementation="eager").to(torch.float64)
    wrapper.model.language_model.load_state_dict(text.model.state_dict())
    with torch.no_grad():
        wrapper.lm_head.weight.copy_(text.lm_head.weight)
    return text, wrapper.eval()


def _gates():
    g = torch.ones(2, 4, dtype=torch.float64)
    g[0, 1], g[1, 2] = 0.0, 0.3
    return g


def test_the_wrapper_is_the_text_model_on_text():
    text, wrapper = _pair()
    batch = FX.inputs()
    with torch.no_grad():
        assert torch.equal(wrapper(**batch).logits, text(**batch).logits)
    assert A.family_of(wrapper).name == "llama"
    assert A.head_shape(wrapper) == A.head_shape(text) == (2, 4)
    assert A.kv_shape(wrapper) == (2, 2) and A.kv_head_of(wrapper) == [0, 0, 1, 1]
    assert len(A.attention_sites(wrapper)) == 2  # the language model's layers, not the vision tower's


@pytest.mark.parametrize("how", ["zero", "mean", "uniform"])
def test_gates_on_the_wrapper_equal_the_text_model(how):
    text, wrapper = _pair()
    batch = FX.inputs()
    means = head_means(text, [batch]) if how == "mean" else None
    with torch.no_grad():
        with head_gates(text, _gates(), ablation=how, means=means):
            want = text(**batch).logits
        with head_gates(wrapper, _gates(), ablation=how, means=means):
            got = wrapper(**batch).logits
        assert float((want - wrapper(**batch).logits).abs().max()) > 1e-3  # the gates did something
    assert torch.equal(got, want)


def test_pruning_generation_and_maps_on_the_wrapper_equal_the_text_model():
    text, wrapper = _pair()
    batch, prompt = FX.inputs(), FX.inputs(padded=False)
    assert all(torch.equal(a, b) or bool(torch.isnan(a).all()) for a, b in
               zip(attention_maps(wrapper, batch), attention_maps(text, batch)))
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # a kv head emptied; an empty last layer
    pt, pw = prune_heads(copy.deepcopy(text), mask), prune_heads(copy.deepcopy(wrapper), mask)
    assert A.kept_heads(pw) == [[0, 2, 3], []] and A.kept_kv_heads(pw) == [[0, 1], []]
    with torch.no_grad():
        assert torch.equal(pw(**batch).logits, pt(**batch).logits)
    with torch.no_grad():  # cached greedy decoding, 6 tokens exactly (no stop token)
        runs = [m.generate(**prompt, do_sample=False, max_new_tokens=6, min_new_tokens=6, eos_token_id=None,
                           pad_token_id=0) for m in (pw, pt)]
    assert runs[0].shape == (2, 13) and torch.equal(runs[0], runs[1])


def test_image_tokens_are_refused_where_the_visible_keys_matter():
    _, wrapper = _pair()
    batch = FX.inputs()
    image_tokens = torch.zeros_like(batch["input_ids"])
    image_tokens[:, 1:3] = 1
    with pytest.raises(ValueError, match="image tokens"), head_gates(wrapper, _gates(), ablation="uniform"):
        wrapper(**batch, token_type_ids=image_tokens)
    with pytest.raises(ValueError, match="image tokens"):
        attention_maps(wrapper, {**batch, "token_type_ids": image_tokens})
    with torch.no_grad(), head_gates(wrapper, _gates(), ablation="uniform"):  # text-only token types: fine
        wrapper(**batch, token_type_ids=torch.zeros_like(batch["input_ids"]))
