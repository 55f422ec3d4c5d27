"""Per-head scores of Voita et al. (2019): confidence, entropy, ablation importance, relevance, and how they agree.

Every score is a float32 tensor ``[n_layers, n_heads]`` (layer-major, ORIGINAL head ids); heads that are
physically absent (``pruning.prune_heads``) are NaN.

Queries and keys. Scores that average over tokens average over the real QUERY tokens of the data
(token-weighted, pooled over all sentences, so longer sentences weigh more). With ``exclude_special=True``
the special tokens are left out as queries by a tokenizer-independent rule: the first and the last real
token of every sequence ([CLS]/<s> and the final [SEP]/</s>, found by the attention mask, so padding may be on
either side), padding, and any id in ``special_ids`` (e.g. the middle [SEP] of a sentence pair). A causal LM
without such tokens wants ``exclude_special=False``. For :func:`confidence` and :func:`entropy` KEYS are never filtered: each
row is the model's full distribution over all real keys, specials included (EOS dropped as a query only).
:func:`attention_scores` also gives confidence with the special tokens excluded as KEYS (the same rule picks
them), the reading of Voita et al.'s "maximum attention weight excluding the end of sentence symbol" in which a
head that parks its attention on [CLS]/[SEP] (a "no-op", Clark et al. 2019) is not confident.

Definitions (``A[b, h, i, j]`` = attention of query ``i`` to key ``j``, see ``attention.attention_maps``):

- confidence ``= mean_i max_j A[., h, i, j]`` (unitless, in ``[1/n_keys, 1]``);
- confidence without special keys ``= mean_i max_{j not special} A[., h, i, j]``: the max over the non-special
  keys of the SAME distribution, not renormalised (unitless, in ``[0, 1]``), see :func:`confidence_from_maps`;
- entropy ``= mean_i -sum_j A log A`` (nats);
- ablation importance ``= score(full model) - score(model without head h)`` (task metric units);
- ablation loss ``= loss(model without head h) - loss(full model)`` (mean task loss: nats, or squared error);
- relevance: first-order Taylor relevance of the head's context, see :func:`relevance`.

Pure functions over precomputed maps (``*_from_maps``, :func:`query_mask`) do the arithmetic; the
model-level functions stream over batches and never hold more than one batch of maps.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from itertools import combinations
from typing import Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from headprune_utils.measure.mask_sweep import evaluate_masks, logits_masks
from headprune_utils.model.architecture import attention_sites, head_shape, kept_heads, present_mask
from headprune_utils.model.attention import attention_maps, check_maps, require_distributions
from headprune_utils.model.gates import Ablation
from headprune_utils.tasks.data import get_task
from headprune_utils.tasks.metrics import main_score

__all__ = [
    "query_mask", "confidence_from_maps", "entropy_from_maps", "confidence", "entropy", "confidence_entropy",
    "attention_scores",
    "ablation_importance", "ablation_loss", "relevance", "rank_agreement",
]

Batch = dict[str, torch.Tensor]


# ----------------------------------------------------------------------------- pure functions
def query_mask(
    attention_mask: torch.Tensor,
    input_ids: torch.Tensor | None = None,
    exclude_special: bool = True,
    special_ids: Iterable[int] | None = None,
) -> torch.Tensor:
    """Which positions count as queries, bool ``[batch, seq]``.

    attention_mask: ``[batch, seq]``, 1 = real token (padding on either side).
    With ``exclude_special``: the first and the last REAL token of each row are dropped (by the mask, so left
    padding drops the right ones: BERT's [CLS] and [SEP]; a causal LM without such tokens wants
    ``exclude_special=False``), and every position whose id (``input_ids``, needed then) is in ``special_ids``.
    Padding is never a query.
    """
    real = attention_mask.bool()
    if not exclude_special:
        return real
    q = real.clone()
    n = real.shape[1]
    rows = torch.arange(real.shape[0], device=real.device)
    has = real.any(dim=1)
    first = real.to(torch.int8).argmax(dim=1)  # the first real position (argmax: the first maximum)
    last = n - 1 - real.flip(1).to(torch.int8).argmax(dim=1)
    q[rows[has], first[has]] = False
    q[rows[has], last[has]] = False
    if special_ids:
        if input_ids is None:
            raise ValueError("special_ids needs input_ids")
        ids = torch.as_tensor(sorted(set(int(i) for i in special_ids)), device=input_ids.device)
        q &= ~torch.isin(input_ids, ids)
    return q


def _query_sums(values: list[torch.Tensor], queries: torch.Tensor) -> torch.Tensor:
    """Sum over the query positions of per-query values ``[batch, n_heads, seq]`` per layer -> float64 ``[L, H]``.

    NaN values at a query position (absent heads) propagate; values at non-query positions are ignored.
    """
    rows = []
    for v in values:
        q = queries.to(v.device)[:, None, :]
        rows.append(torch.where(q, v.to(torch.float64), torch.zeros((), dtype=torch.float64, device=v.device))
                    .sum(dim=(0, 2)).cpu())
    return torch.stack(rows)


def _max_weight(a: torch.Tensor) -> torch.Tensor:
    return a.amax(dim=-1)


def _entropy(a: torch.Tensor) -> torch.Tensor:
    return -torch.xlogy(a, a).sum(dim=-1)


def _mean_from_maps(stat, maps: list[torch.Tensor], queries: torch.Tensor) -> torch.Tensor:
    n = int(queries.sum())
    if n == 0:
        raise ValueError("no query tokens (every sequence is only special tokens or padding)")
    check_maps(maps, queries, "head scores")
    return (_query_sums([stat(a) for a in maps], queries) / n).to(torch.float32)


def _max_weight_over(keys: torch.Tensor):
    """The max over the keys ``keys`` (bool ``[batch, seq]``) of each row; other keys count as weight 0."""

    def stat(a: torch.Tensor) -> torch.Tensor:
        k = keys.to(a.device)[:, None, None, :]
        return torch.where(k, a, torch.zeros((), dtype=a.dtype, device=a.device)).amax(dim=-1)

    return stat


def confidence_from_maps(maps: list[torch.Tensor], queries: torch.Tensor,
                         keys: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the ``queries`` (bool ``[batch, seq]``) of each head's maximum attention weight.

    maps: per layer ``[batch, n_heads, seq, seq]`` (rows = queries, summing to 1 over the real keys).
    keys: bool ``[batch, seq]``, the keys the maximum is taken over (None: every key). The weights are those of
    the model's distribution over ALL keys, not renormalised over ``keys``: a head that puts 0.9 on [SEP] and
    0.1 spread over the words has confidence about 0.1 without the special keys. Renormalising would instead
    blow the leftover 0.1 up into a full distribution whose maximum depends on how that small remainder happens
    to be spread (a head that only attends to [SEP] would look as confident, or as diffuse, as that noise), and
    would call such a "no-op" head confident, the opposite of what excluding the end-of-sentence symbol is for.
    Returns float32 ``[n_layers, n_heads]``; NaN for an all-NaN (absent) head.
    """
    return _mean_from_maps(_max_weight if keys is None else _max_weight_over(keys), maps, queries)


def entropy_from_maps(maps: list[torch.Tensor], queries: torch.Tensor) -> torch.Tensor:
    """Mean over the ``queries`` of each head's attention entropy ``-sum_j A log A`` in nats (``0 log 0 = 0``).

    Shapes as :func:`confidence_from_maps`. A one-hot row has entropy 0; a uniform row over ``n`` keys ``ln n``.
    Rows of the ``queries`` must sum to 1 (a model with attention sinks, gpt-oss, is refused: its rows do not).
    """
    require_distributions(maps, queries, "entropy")
    return _mean_from_maps(_entropy, maps, queries)


# ----------------------------------------------------------------------------- streaming wrappers
def _stream_query_mean(stat, model, batches, exclude_special, special_ids) -> torch.Tensor:
    total, n = None, 0
    for batch in batches:
        maps = attention_maps(model, batch)
        q = query_mask(batch["attention_mask"], batch.get("input_ids"), exclude_special, special_ids)
        if stat is _entropy:  # entropy needs distributions (attention sinks give none)
            require_distributions(maps, q, "entropy")
        s = _query_sums([stat(a) for a in maps], q)
        total = s if total is None else total + s
        n += int(q.sum())
    if n == 0:
        raise ValueError("no query tokens in batches")
    return (total / n).to(torch.float32)


def confidence(
    model: nn.Module,
    batches: Iterable[Batch],
    exclude_special: bool = True,
    special_ids: Iterable[int] | None = None,
) -> torch.Tensor:
    """Voita et al.'s confidence: token-weighted mean over the dataset's real queries of the max attention weight.

    batches: dicts of model inputs (``input_ids``, ``attention_mask`` ``[batch, seq]``; ``labels`` ignored) on
    the model's device. Queries as in the module docstring; keys are all real keys. Returns float32 ``[L, H]``.
    """
    return _stream_query_mean(_max_weight, model, batches, exclude_special, special_ids)


def entropy(
    model: nn.Module,
    batches: Iterable[Batch],
    exclude_special: bool = True,
    special_ids: Iterable[int] | None = None,
) -> torch.Tensor:
    """Token-weighted mean attention entropy (nats) over the dataset's real queries; float32 ``[L, H]``."""
    return _stream_query_mean(_entropy, model, batches, exclude_special, special_ids)


def confidence_entropy(model: nn.Module, batches: Iterable[Batch],
                       special_ids: Iterable[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`confidence` and :func:`entropy` (float32 ``[L, H]`` each, special tokens excluded as queries) from
    ONE forward per batch (:func:`attention_scores`' two every-key scores)."""
    scores = attention_scores(model, batches, special_ids)
    return scores["confidence"], scores["entropy"]


def attention_scores(model: nn.Module, batches: Iterable[Batch],
                     special_ids: Iterable[int] | None = None) -> dict[str, torch.Tensor]:
    """The attention-map scores of one forward per batch, float32 ``[L, H]`` each, special tokens excluded as
    queries (:func:`query_mask`): ``confidence`` (every key), ``confidence_no_special_keys`` (the maximum over the
    non-special keys, picked by the same rule as the queries, not renormalised: :func:`confidence_from_maps`) and
    ``entropy`` (every key). ``confidence`` and ``entropy`` equal :func:`confidence_entropy`'s."""
    sums: dict[str, torch.Tensor] = {}
    n_total = 0
    names = ("confidence", "confidence_no_special_keys", "entropy")
    for batch in batches:
        maps = attention_maps(model, batch)
        q = query_mask(batch["attention_mask"], batch["input_ids"], True, special_ids)
        n = int(q.sum())
        if not n:
            continue
        vals = (confidence_from_maps(maps, q), confidence_from_maps(maps, q, keys=q), entropy_from_maps(maps, q))
        for name, v in zip(names, vals):
            sums[name] = v.double() * n + sums[name] if name in sums else v.double() * n
        n_total += n
    if not n_total:
        raise ValueError("no query tokens in the batches")
    return {name: (sums[name] / n_total).to(torch.float32) for name in names}


def ablation_importance(
    model: nn.Module,
    enc,
    task: str,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    metric: str | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> torch.Tensor:
    """Drop of the task score when one head alone is removed: ``score(full) - score(without h)``, ``[L, H]``.

    enc: a ``batching.Encoded`` split with labels; task: a GLUE task name (its main metric unless ``metric``).
    The full model and the N single-head masks (``ablation``/``means`` as in ``gates``) run in ONE shared sweep
    (``mask_sweep.evaluate_masks``). Higher = more important; negative = the model is better without the head.
    Units: those of the metric (accuracy as a fraction). Absent heads are NaN.
    """
    n_layers, n_heads = head_shape(model)
    masks: dict[Hashable, torch.Tensor] = {"full": present_mask(model)}
    for layer, ids in enumerate(kept_heads(model)):
        for h in ids:
            m = present_mask(model)
            m[layer, h] = 0.0
            masks[(layer, h)] = m
    results = evaluate_masks(model, enc, task, masks, batch_size=batch_size, ablation=ablation, means=means,
                             progress=progress)

    def score(metrics: dict[str, float]) -> float:
        return float(metrics[metric]) if metric is not None else main_score(task, metrics)

    full = score(results["full"])
    out = torch.full((n_layers, n_heads), float("nan"), dtype=torch.float64)
    for key, metrics in results.items():
        if key != "full":
            out[key] = full - score(metrics)
    return out.to(torch.float32)


def ablation_loss(model: nn.Module, enc, task: str, ablation: Ablation = "zero", means: torch.Tensor | None = None,
                  batch_size: int = 32) -> torch.Tensor:
    """Increase of the mean task loss on ``enc`` when head ``h`` alone is removed, float32 ``[L, H]``.

    ``loss(model without h) - loss(full model)``: cross-entropy in nats (classification) or squared error in
    standardised label units (regression: ``task`` a GLUE regression task), per example. ``enc``: a
    ``batching.Encoded`` split with labels. All 1 + N masks in one shared sweep (``mask_sweep.logits_masks``).
    Continuous, unlike the drop of accuracy on a few dozen examples (:func:`ablation_importance`), where most
    heads tie at 0.
    """

    n_layers, n_heads = shape = head_shape(model)
    sweep: dict[Hashable, torch.Tensor] = {"full": torch.ones(shape)}
    for layer in range(n_layers):
        for head in range(n_heads):
            m = torch.ones(shape)
            m[layer, head] = 0.0
            sweep[(layer, head)] = m
    logits = logits_masks(model, enc, sweep, batch_size, ablation=ablation, means=means)
    labels = torch.as_tensor(np.asarray(enc.labels))

    def loss(x: torch.Tensor) -> float:
        x = x.double()
        if get_task(task).is_regression:
            return float(F.mse_loss(x.squeeze(-1), labels.double()))
        return float(F.cross_entropy(x, labels.long()))

    full = loss(logits["full"])
    out = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for key, x in logits.items():
        if key != "full":
            out[key] = loss(x) - full
    return out.to(torch.float32)


def relevance(
    model: nn.Module,
    batches: Iterable[Batch],
    normalize: bool = True,
    target: Literal["loss", "top_logit"] = "loss",
) -> torch.Tensor:
    """First-order (gradient x activation) relevance of each head's context, float32 ``[L, H]``.

    For example ``x`` with per-example objective ``f_x`` (``target="loss"``: the model's own loss of that
    example, needs ``labels``; ``"top_logit"``: its largest logit, Voita et al.'s "top-1 logit"), and head
    ``h``'s context ``c_h`` ``[seq, head_dim]`` (the head's slice of the input of the attention output
    projection, captured by a forward pre-hook):

        R_h(x) = | sum_{s, d} c_h[s, d] * d f_x / d c_h[s, d] |,        R_h = mean_x R_h(x)

    This is the first-order Taylor estimate of how much ``f_x`` changes when the head's context is set to
    zero (equivalently ``|d f_x / d g_h|`` at ``g_h = 1`` for a zero-ablation gate ``g_h``), with the absolute
    value taken per example. It is NOT layer-wise relevance propagation (LRP; Bach et al. 2015, the variant of
    Ding et al. 2017 that Voita et al. use): LRP propagates relevance backwards layer by layer with
    conservation rules (epsilon / alpha-beta) through the softmax, LayerNorm and feed-forward, so relevances
    sum to the output; gradient x activation equals LRP-0 only for bias-free piecewise-linear networks and,
    unlike LRP, is not conservative here. With ``normalize=True`` each layer is divided by its sum over the
    present heads (the relevances of a layer sum to 1, as Voita et al. report relative relevance; a layer of
    zeros is left at zero). Units: those of ``f`` before normalisation, unitless after.

    Runs in eval mode; no ``.grad`` is left on the model's parameters (``torch.autograd.grad`` on the
    contexts only); hooks are removed and the train/eval mode restored. Absent heads are NaN.
    """
    if target not in ("loss", "top_logit"):
        raise ValueError(f"unknown target {target!r}; choose 'loss' or 'top_logit'")
    n_layers, n_heads = head_shape(model)
    kept = kept_heads(model)
    store: dict[int, torch.Tensor] = {}

    def make(layer: int):
        def hook(module, args):
            ctx = args[0]
            if not ctx.requires_grad:  # a frozen model: make the context a leaf we can differentiate
                ctx = ctx.detach().requires_grad_(True)
            store[layer] = ctx
            return (ctx,) + tuple(args[1:])

        return hook

    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    count = 0
    was_training = model.training
    model.eval()
    handles = [site.out_proj.register_forward_pre_hook(make(site.layer)) for site in attention_sites(model)
               if kept[site.layer]]
    try:
        with torch.enable_grad():
            for batch in batches:
                store.clear()
                out = model(**batch) if target == "loss" else model(**{k: v for k, v in batch.items() if k != "labels"})
                n = int(batch["input_ids"].shape[0])
                if target == "loss":
                    if out.loss is None:
                        raise ValueError('target="loss" needs batches with labels')
                    f = out.loss * n  # the mean loss times n = sum of per-example losses
                else:
                    f = out.logits.max(dim=-1).values.sum()
                layers = sorted(store)
                grads = torch.autograd.grad(f, [store[l] for l in layers], allow_unused=True)
                real = batch["attention_mask"].bool()
                for layer, g in zip(layers, grads):
                    if g is None:
                        continue
                    ctx = store[layer].detach()
                    b, s, hd = ctx.shape
                    prod = (ctx * g).view(b, s, len(kept[layer]), hd // len(kept[layer]))
                    prod = prod * real.to(prod.device, prod.dtype)[:, :, None, None]
                    r = prod.sum(dim=(1, 3)).abs().to("cpu", torch.float64)  # [b, n_present]
                    total[layer, kept[layer]] += r.sum(dim=0)
                count += n
    finally:
        for h in handles:
            h.remove()
        store.clear()
        model.train(was_training)
    if count == 0:
        raise ValueError("relevance got no examples")
    scores = total / count
    scores[~present_mask(model).bool()] = float("nan")
    if normalize:
        sums = torch.nansum(scores, dim=1, keepdim=True)
        scores = torch.where(sums > 0, scores / torch.where(sums > 0, sums, torch.ones_like(sums)), scores)
    return scores.to(torch.float32)


def rank_agreement(scores: Mapping[str, torch.Tensor]) -> pd.DataFrame:
    """Pairwise rank agreement of head scores: one row per unordered pair ``(a, b)`` in the mapping's order.

    scores: ``{name: [n_layers, n_heads]}`` (same shape). Both are flattened layer-major; heads that are NaN in
    either are left out (``n`` = heads compared). Columns: ``a, b, n, spearman, spearman_p, kendall,
    kendall_p`` (``scipy.stats.spearmanr`` and ``kendalltau`` (tau-b), two-sided p-values).
    """
    names = list(scores)
    flat = {k: torch.as_tensor(v).detach().to("cpu", torch.float64).flatten() for k, v in scores.items()}
    shapes = {tuple(torch.as_tensor(v).shape) for v in scores.values()}
    if len(shapes) > 1:
        raise ValueError(f"scores of different shapes: {sorted(shapes)}")
    rows = []
    for a, b in combinations(names, 2):
        ok = ~(torch.isnan(flat[a]) | torch.isnan(flat[b]))
        x, y = flat[a][ok].numpy(), flat[b][ok].numpy()
        rho, rho_p = stats.spearmanr(x, y)
        tau, tau_p = stats.kendalltau(x, y)
        rows.append({"a": a, "b": b, "n": int(ok.sum()), "spearman": float(rho), "spearman_p": float(rho_p),
                     "kendall": float(tau), "kendall_p": float(tau_p)})
    return pd.DataFrame(rows, columns=["a", "b", "n", "spearman", "spearman_p", "kendall", "kendall_p"])
