"""Physical head pruning: remove heads from the weights.

For each pruned head the query/key/value output rows and the output-projection input columns are
sliced away, so the model is smaller and faster, and its outputs equal those of the model with the
same heads gated to zero (``head_gates(..., ablation="zero")``; a test checks it to 1e-5).

- A layer may lose ALL its heads: its attention then contributes only the output projection's bias
  (what a zero gate on every head gives); transformers' own old ``prune_heads`` crashed there.
- Pruning twice works; heads are always named by their ORIGINAL ids (``architecture.kept_heads``).
- Grouped-query attention (Llama, Mistral, Qwen2, Qwen3): a query head is its rows of the query projection and its
  columns of the output projection; a key/value head goes when no kept query head reads it. The groups left may be
  uneven; the adapter's pruned attention gathers each kept query head's key/value head by index (its KV cache holds
  the kept key/value heads only). :func:`prune_kv_groups` removes whole key/value groups.
- GPT-2: the fused ``c_attn`` is sliced in its q, k and v column blocks (the adapter slices its own Conv1D out
  projection).
- Encoder-decoders (Marian, BART) take the mask as a dict by attention type, like the gates
  (``{"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]}``; a type left out keeps its heads). Their
  attention reshapes by ``head_dim`` (``view(..., -1, head_dim)``), so slicing q/k/v/out_proj is enough; the
  per-layer KV cache of ``generate()`` then holds only the kept heads. A decoder self-attention with no head
  left still writes a 1-wide placeholder into the cache, because the decoder reads the number of positions
  generated so far from the cache (of layer 0).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from headprune_utils.model.architecture import (  # EmptyAttention: re-exported (users import it from here)
    ACTIVE_GATES_ATTR, EmptyAttention, attention_kinds, attention_sites, family_of, grid_name, head_shapes,
    UnsupportedArchitectureError, kept_heads, kind_dict, kind_value, kv_head_of, kv_shape, present_mask,
    set_kept_heads,
)

__all__ = ["PRUNED_FILE", "EmptyAttention", "count_attention_params", "kv_mask_to_head_mask", "load_pruned_weights",
           "prune_heads", "prune_kv_groups", "pruned_record", "save_pruned"]


def _check_mask(mask, shape: tuple[int, int], name: str) -> torch.Tensor:
    mask = torch.as_tensor(mask)
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} must have shape [n_layers, n_heads] = {list(shape)}, got {list(mask.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must hold only 0 (prune) and 1 (keep)")
    return mask


def prune_heads(model: nn.Module, mask) -> nn.Module:
    """Remove, in place, every present head whose ``mask`` entry is 0.

    mask: ``[n_layers, n_heads]`` over ORIGINAL head ids, 1 = keep, 0 = prune; for an encoder-decoder a dict
    of them by attention type (``"enc"``, ``"dec"``, ``"cross"``; a type left out is untouched). Keeping a head
    that an earlier call already removed is an error, found before anything changes. Returns ``model``.
    """
    if getattr(model, ACTIVE_GATES_ATTR, None):
        raise ValueError("prune_heads inside a head_gates block: the block's hooks sit on the modules pruning "
                         "replaces, so its gates would stop acting; prune before the block or after it")
    masks = kind_dict(model, mask, "the mask",
                      hint=', {"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]}')
    shapes = head_shapes(model)
    before = {k: kept_heads(model, k) for k in attention_kinds(model)}
    # every grid is checked before anything changes
    after = {k: _kept_after(k, _check_mask(m, shapes[k], grid_name("mask", k)), before[k]) for k, m in masks.items()}
    problem = family_of(model).prune_problem(model)
    if problem is not None and any(after[k] != before[k] for k in after):
        raise UnsupportedArchitectureError(problem)
    for kind, kept in after.items():
        _prune_grid(model, kind, before[kind], kept)
    set_kept_heads(model, kind_value(model, {**before, **after}))
    return model


def _kept_after(kind, mask: torch.Tensor, kept_before: list[list[int]]) -> list[list[int]]:
    """Original ids kept per layer once ``mask`` is applied; an error if it keeps a head already removed."""
    where = "" if kind is None else f"{kind} "
    after = []
    for layer, present in enumerate(kept_before):
        want = [h for h in range(mask.shape[1]) if mask[layer, h] == 1]
        missing = sorted(set(want) - set(present))
        if missing:
            raise ValueError(f"{where}layer {layer}: heads {missing} were already pruned and cannot be kept")
        after.append([h for h in present if h in want])
    return after


def _prune_grid(model: nn.Module, kind, kept_before: list[list[int]], kept_after: list[list[int]]) -> None:
    """Slice one grid of heads (one attention type) from ``kept_before`` down to ``kept_after`` (original ids)."""
    family = family_of(model)
    for site in attention_sites(model, kind):
        present = kept_before[site.layer]
        keep_pos = [present.index(h) for h in kept_after[site.layer]]
        if len(keep_pos) == len(present):
            continue
        old = site.module
        family.prune_layer(site, keep_pos)
        new = getattr(site.parent, site.attr)
        if new is not old:
            _carry_output_hooks(model, old, new)


def _carry_output_hooks(model: nn.Module, old: nn.Module, new: nn.Module) -> None:
    """Hugging Face (v5) records ``output_attentions`` by forward hooks on the modules of each model's attention
    class, installed once per model: a replaced attention module (a pruned Llama-family layer, a layer left empty)
    would drop out of ``model(..., output_attentions=True)`` and shift the later layers' indices, silently. The
    replacement gets the forward hooks the old module had (HF's, once installed, and any of the user's), or, before
    HF installed any, the capture hooks HF gives the old module's class."""
    if old._forward_hooks:
        for key in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
            getattr(new, key).update(getattr(old, key))
        return
    try:
        from transformers.modeling_utils import PreTrainedModel
        from transformers.utils import output_capturing as capture
    except ImportError:  # a transformers without output recorders: nothing to carry
        return
    install = getattr(capture, "install_output_capuring_hook", None)  # HF's own installer (its spelling)
    if install is None or getattr(model, "_output_capturing_hooks_installed", False):
        return
    done = set()
    for owner in (m for m in model.modules() if isinstance(m, PreTrainedModel)):
        for key, specs in capture._CAN_RECORD_REGISTRY.get(owner).items():
            for spec in specs if isinstance(specs, list) else [specs]:
                target = spec.target_class if isinstance(spec, capture.OutputRecorder) else spec
                index = spec.index if isinstance(spec, capture.OutputRecorder) else (0 if "hidden_states" in key else 1)
                if isinstance(target, type) and isinstance(old, target) and key not in done:
                    install(new, key, index)
                    done.add(key)


def kv_mask_to_head_mask(model: nn.Module, kv_mask) -> torch.Tensor:
    """The query-head mask ``[n_layers, n_heads]`` that removes whole key/value groups: 1 where the query head is
    still present and its key/value head is kept by ``kv_mask`` ``[n_layers, n_kv_heads]`` (ORIGINAL key/value ids,
    1 = keep the group, 0 = remove it with every query head reading it; see ``architecture.kv_head_of``).
    One-grid models only."""
    if attention_kinds(model) != (None,):
        raise ValueError("kv_mask_to_head_mask: for one-grid models (causal LMs, encoders); an encoder-decoder's "
                         "heads are not grouped")
    kv_mask = _check_mask(kv_mask, kv_shape(model), "kv_mask")
    kv = torch.tensor(kv_head_of(model), dtype=torch.long)
    return (kv_mask.to(torch.float32)[:, kv] * present_mask(model)).to(torch.float32)


def prune_kv_groups(model: nn.Module, kv_mask) -> nn.Module:
    """Remove, in place, every key/value head whose ``kv_mask`` entry is 0 (``[n_layers, n_kv_heads]``, original
    ids) together with the query heads that read it: :func:`prune_heads` with :func:`kv_mask_to_head_mask`.
    Returns ``model``."""
    return prune_heads(model, kv_mask_to_head_mask(model, kv_mask))


def count_attention_params(model: nn.Module) -> int:
    """Parameters of the attention blocks' q/k/v and output projections (to report what pruning saved);
    for an encoder-decoder, of all three attention types."""
    seen: set[int] = set()  # a fused projection (GPT-2's c_attn) is the query, key and value of its site
    total = 0
    for site in attention_sites(model):
        for lin in (site.query, site.key, site.value, site.out_proj):
            if lin is not None and id(lin) not in seen:
                seen.add(id(lin))
                total += sum(p.numel() for p in lin.parameters())
    return total


# ------------------------------------------------------------------------------------------ saving a pruned model
PRUNED_FILE = "headprune_pruned.json"  # beside the weights: which original heads each layer keeps
PRUNED_WEIGHTS = "headprune_pruned.safetensors"  # the pruned model's own tensors, by its own parameter names


def save_pruned(model: nn.Module, folder) -> Path:
    """Save a (pruned) model to ``folder``: its config (which still describes the unpruned model), its weights
    (:data:`PRUNED_WEIGHTS`, by the pruned model's own parameter names; tied weights once) and the record of the
    heads it keeps (:data:`PRUNED_FILE`). ``models.load_causal_lm(folder)`` loads it back (or, for any model class,
    :func:`load_pruned_weights` on a model built from the config). Files are written whole, then moved in place."""
    from safetensors.torch import save_model

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    kinds = attention_kinds(model)
    record = {"format": 1, "family": family_of(model).name, "class": type(model).__name__,
              "head_shapes": {str(k): list(s) for k, s in head_shapes(model).items()},
              "kept_heads": {str(k): kept_heads(model, k) for k in kinds}}
    model.config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None and hasattr(model.generation_config, "save_pretrained"):
        model.generation_config.save_pretrained(folder)
    tmp = folder / f".{PRUNED_WEIGHTS}.tmp"
    save_model(model, str(tmp))
    os.replace(tmp, folder / PRUNED_WEIGHTS)
    tmp = folder / f".{PRUNED_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, folder / PRUNED_FILE)
    return folder


def pruned_record(folder) -> dict | None:
    """The :data:`PRUNED_FILE` record in ``folder`` (None when there is none)."""
    path = Path(folder) / PRUNED_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if record.get("format") != 1 or not isinstance(record.get("kept_heads"), dict):
            raise ValueError("unknown format")
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{path}: not a pruning record this version can read ({exc})") from exc
    if not (Path(folder) / PRUNED_WEIGHTS).is_file():
        raise ValueError(f"{folder}: {PRUNED_FILE} is there but not {PRUNED_WEIGHTS} (an interrupted save_pruned?)")
    return record


def load_pruned_weights(model: nn.Module, folder) -> nn.Module:
    """Prune ``model`` (freshly built from the folder's config, unpruned) as the record in ``folder`` says, then load
    the folder's weights into it: every tensor must fit, none may be missing; the model takes the saved dtype.
    Returns ``model``."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    folder = Path(folder)
    record = pruned_record(folder)
    if record is None:
        raise ValueError(f"{folder} has no {PRUNED_FILE}: it was not saved with pruning.save_pruned")
    shapes = head_shapes(model)
    kinds = attention_kinds(model)
    if sorted(str(k) for k in kinds) != sorted(record["kept_heads"]) or any(
            list(shapes[k]) != record["head_shapes"][str(k)] for k in kinds):
        raise ValueError(f"{folder / PRUNED_FILE}: its grids {record['head_shapes']} are not those of the model "
                         f"built from the folder's config {dict((str(k), list(v)) for k, v in shapes.items())}")
    masks = {}
    for k in kinds:
        mask = torch.zeros(shapes[k])
        for layer, ids in enumerate(record["kept_heads"][str(k)]):
            mask[layer, list(ids)] = 1
        masks[k] = mask
    prune_heads(model, kind_value(model, masks))
    path = str(folder / PRUNED_WEIGHTS)
    with safe_open(path, framework="pt") as f:
        names = list(f.keys())
        dtype = f.get_slice(names[0]).get_dtype() if names else None
    floating = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    if dtype in floating:
        model = model.to(floating[dtype])
    missing, unexpected = load_model(model, path, strict=False)
    if missing or unexpected:
        raise ValueError(f"{folder}: the saved weights do not fit the pruned model (missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]})")
    return model
