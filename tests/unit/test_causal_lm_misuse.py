"""Misuse a user or a fault produces with the toolkit on causal LMs, found by a helper session that read the README
alone (2026-12-06): each case was silently wrong, silent or unclear before, and is refused clearly (or handled)
now."""
from __future__ import annotations

import pytest
import torch

from headprune_utils.measure.language_model import perplexity
from headprune_utils.model import architecture, models
from headprune_utils.model.gates import head_gates
from headprune_utils.model.pruning import prune_heads
from headprune_utils.tasks.subword import train_tokenizer
from headprune_utils.tasks.text import lm_batches


def _tiny():
    return models.tiny_causal_lm(60, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager").eval()


def _batch():
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(3, 60, (2, 6), generator=g), "attention_mask": torch.ones(2, 6, dtype=torch.long)}


def test_pruning_inside_a_gates_block_is_refused():
    """The block's hooks sit on the modules pruning replaces: its gates would silently stop acting."""
    model = _tiny()
    with head_gates(model, torch.full((2, 4), 0.5)):
        with pytest.raises(ValueError, match="inside a head_gates block"):
            prune_heads(model, torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]]))
    assert architecture.kept_heads(model) == [[0, 1, 2, 3]] * 2  # untouched
    prune_heads(model, torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]]))  # after the block: fine
    assert architecture.kept_heads(model) == [[0, 2, 3], [0, 1, 2, 3]]
    assert not architecture.active_gates(model)


def test_nested_gates_blocks_are_recorded_and_released():
    model = _tiny()
    with head_gates(model, torch.ones(2, 4), ablation="zero"):
        with head_gates(model, torch.ones(2, 4), ablation="uniform"):
            assert [abl.name for abl, _ in architecture.active_gates(model)] == ["zero", "uniform"]
        assert [abl.name for abl, _ in architecture.active_gates(model)] == ["zero"]
    assert not hasattr(model, architecture.ACTIVE_GATES_ATTR)
    with pytest.raises(RuntimeError), head_gates(model, torch.ones(2, 4)):
        raise RuntimeError("an error inside the block")
    assert not hasattr(model, architecture.ACTIVE_GATES_ATTR)  # released on error too


def test_gates_of_pruned_heads_are_ignored_as_documented():
    """A head pruned away has no output to scale: its gate is ignored (documented in head_gates; L0 gates sample
    every head of a pruned model), and the gates of the heads that are there act as usual."""
    model = prune_heads(_tiny(), torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]]))
    batch = _batch()
    with torch.no_grad():
        plain = model(**batch).logits
        for value in (0.0, 0.5, 1.0):
            gates = torch.ones(2, 4)
            gates[0, 2] = value
            with head_gates(model, gates):
                assert torch.equal(model(**batch).logits, plain)
        gates = torch.ones(2, 4)
        gates[0, 1] = 0.5
        with head_gates(model, gates):
            assert not torch.equal(model(**batch).logits, plain)


@pytest.mark.parametrize("name", ["minilm"])
def test_load_causal_lm_refuses_an_encoder(name):
    """MiniLM (BERT) loaded as a causal LM got a random LM head and attended to future tokens: a meaningless
    perplexity, and no warning."""
    with pytest.raises(architecture.UnsupportedArchitectureError, match="encoder: its heads attend both ways"):
        models.load_causal_lm(name, device="cpu")


def test_load_causal_lm_of_a_missing_folder_says_so():
    with pytest.raises(models.ModelUnavailableError) as err:
        models.load_causal_lm("./no_such_model_folder", device="cpu")
    msg = str(err.value)
    assert "no such folder" in msg and "tiny_causal_lm" in msg
    assert "minilm" not in msg and "hf download" not in msg  # no advice that does not apply


def test_lm_batches_of_no_text_and_perplexity_without_a_mask():
    tok = train_tokenizer(["the cat sat on the mat ."] * 8, vocab_size=40)
    with pytest.raises(ValueError, match="lines is empty"):
        lm_batches(tok, [])
    with pytest.raises(ValueError, match="not one string"):
        lm_batches(tok, "the cat sat")
    model = _tiny()
    batches = lm_batches(tok, ["the cat sat on the mat .", "the mat ."])
    full = {"input_ids": batches[0]["input_ids"][:1], "attention_mask": batches[0]["attention_mask"][:1]}
    assert bool(full["attention_mask"].all())
    # no attention_mask: every token real, as Hugging Face's models take it
    assert perplexity(model, [{"input_ids": full["input_ids"]}]) == pytest.approx(perplexity(model, [full]))


@pytest.mark.parametrize("token", ["pad_token_id", "bos_token_id", "eos_token_id"])
def test_tiny_causal_lm_checks_its_special_token_ids(token):
    with pytest.raises(ValueError, match=f"{token}=50 must be a token id"):
        models.tiny_causal_lm(50, **{token: 50})


@pytest.mark.parametrize("field, value", [("num_attention_heads", 8), ("num_key_value_heads", 4),
                                          ("num_hidden_layers", 3)])
def test_a_config_edited_after_the_model_was_built_is_caught(field, value):
    """The weights keep the shapes they were built with: head ids, masks and groups read from an edited config
    were silently wrong (a mask over 8 'heads' of a 4-head model, key/value groups of a 2-group model read as 4)."""
    model = _tiny()
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match="was the config edited"):
        architecture.attention_sites(model)
    with pytest.raises(ValueError, match="was the config edited"):
        prune_heads(model, torch.ones(architecture.head_shape(model)))
    for reader in (architecture.kept_heads, architecture.kept_kv_heads, architecture.kv_head_of):  # the readers too
        with pytest.raises(ValueError, match="was the config edited"):
            reader(model)


def test_a_gpt2_config_edited_after_the_model_was_built_is_caught():
    """GPT-2 derives its head size from the config (n_embd / n_head): the module's own size is what counts."""
    import transformers

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=60, n_embd=32, n_layer=2, n_head=4))
    model.config.n_head = 8
    with pytest.raises(ValueError, match="the weights hold 4 query heads"):
        with head_gates(model, torch.ones(2, 8)):
            pass


def test_measures_refuse_batches_they_cannot_score():
    """Found by a user who read only the README: head_js with a mask of another batch or length (broadcast, or a bare
    torch error), or all 0 (zeros returned); attention_maps of an empty batch; head_importance of a batch whose
    examples have no real token (zeros returned). Each is now a clear error."""
    import torch

    from headprune_utils.measure.importance import head_importance
    from headprune_utils.model import models
    from headprune_utils.model.attention import attention_maps, head_js

    model = models.tiny_causal_lm(40, pad_token_id=0, hidden_size=16, intermediate_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1).eval()
    ids = torch.randint(3, 40, (3, 5))
    mask = torch.ones(3, 5, dtype=torch.long)
    maps = attention_maps(model, {"input_ids": ids, "attention_mask": mask})
    assert head_js(maps, maps, mask).abs().max() == 0
    for bad in (mask[:1], mask[:, :4]):
        with pytest.raises(ValueError, match=r"head_js: attention_mask of shape .* for maps of 3 sentences of 5"):
            head_js(maps, maps, bad)
    with pytest.raises(ValueError, match="attention_mask is all 0"):
        head_js(maps, maps, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="an empty batch"):
        attention_maps(model, {"input_ids": ids[:0], "attention_mask": mask[:0]})
    empty = mask.clone()
    empty[1] = 0
    with pytest.raises(ValueError, match=r"example\(s\) \[1\] of a batch have no real token"):
        head_importance(model, [{"input_ids": ids, "attention_mask": empty, "labels": ids}])


@pytest.mark.parametrize("mask_shape", [(2, 4), (1, 6), (2, 6, 1)], ids=["short", "other-batch", "3-d"])
def test_an_attention_mask_that_does_not_cover_the_inputs_is_named(mask_shape):
    """A mask of another length or batch than input_ids (a batching slip): "uniform" blamed a KV cache ("after -2
    cached positions"), the maps and the loss failed inside torch; now each names both shapes."""
    from headprune_utils.measure.language_model import lm_loss
    from headprune_utils.model.attention import attention_maps

    model, batch = _tiny(), _batch()
    batch["attention_mask"] = torch.ones(mask_shape, dtype=torch.long)
    with pytest.raises(ValueError, match=r"attention_mask (of|must have the) shape"):
        with head_gates(model, torch.ones(2, 4), ablation="uniform"), torch.no_grad():
            model(**batch)
    with pytest.raises(ValueError, match=r"attention_mask of shape"):
        attention_maps(model, batch)
    with pytest.raises(ValueError, match=r"attention_mask (of|must have the) shape"):
        lm_loss(model, [batch])


def test_attention_maps_refuse_a_mask_longer_than_the_inputs():
    from headprune_utils.model.attention import attention_maps

    model, batch = _tiny(), _batch()
    batch["attention_mask"] = torch.ones(2, 8, dtype=torch.long)
    with pytest.raises(ValueError, match="full-sequence forward"):
        attention_maps(model, batch)
