"""Redundancy between attention heads: a distance between every pair of heads' maps, averaged over sentences.

Bian et al. (2021), "On Attention Redundancy: A Comprehensive Study" (NAACL). Heads are indexed FLAT and
layer-major, ``n = layer * n_heads + head``, ``N = n_layers * n_heads`` (72 for MiniLM 6 x 12); results are
``[N, N]`` float64 matrices, symmetric, zero diagonal, in ``[0, 1]``, 0 for identical maps.

Token-based metrics. ``p, q`` = the two heads' attention distributions of one REAL query token over the
sentence's real keys (padded keys have probability 0; rows of padded queries are excluded):

- ``"js"``: ``JS(p, q) / ln 2`` with ``JS = KL(p || m) / 2 + KL(q || m) / 2``, ``m = (p + q) / 2``, in nats
  (the quantity of :func:`attention.js_divergence`, computed here as ``H(m) - (H(p) + H(q)) / 2``, which
  needs one log per pair instead of four). ``js_eps > 0`` first smooths both with the uniform distribution
  over the real keys, ``(1 - eps) p + eps u`` (Clark et al. use 0.001); default :data:`JS_EPS` = 0.
- ``"hellinger"``: ``sqrt(1 - BC(p, q))``, ``BC = sum_k sqrt(p_k q_k)`` the Bhattacharyya coefficient
  (clamped at 0). Computed as ``sqrt((sum p + sum q) / 2 - BC) = sqrt(sum_k (sqrt p_k - sqrt q_k)^2 / 2)``,
  the same for distributions, but 0 for two equal float32 rows whose sums are 1 +- 1e-7 (``1 - BC`` would
  give ~3e-4 there). The Bhattacharyya distance ``-ln BC`` is a monotone transform of it (same ranking of
  head pairs) but unbounded, so it is not offered.
- ``"cosine"``: ``1 - p.q / (|p| |q|)``; in ``[0, 1]`` because attention weights are non-negative.
- ``"pearson"``: ``(1 - r) / 2``, ``r`` the Pearson correlation of ``p`` and ``q`` over the real keys only.
  A row of zero variance (centred norm <= :data:`ZERO_TOL`: a 1-key sentence, an exactly uniform row) has
  no correlation; then ``r := 1`` if ``p == q`` (within ``ZERO_TOL``) else ``r := 0`` (distance 1/2).

A sentence's token-metric distance is the mean over its real query tokens.

Sentence-based metrics. ``X, Y`` = the two heads' ``n x n`` maps restricted to the ``n`` real tokens
(rows = query tokens, the observations; columns = keys, the dimensions):

- ``"dcor"``: ``1 - dCor(X, Y)``, Székely's distance correlation (V-statistic): ``a_ij = ||X_i - X_j||_2``,
  ``A = a - row means - column means + grand mean`` (double centring), likewise ``B`` from ``Y``;
  ``dCov^2(X, Y) = mean_ij(A_ij B_ij)``, ``dCor = sqrt(dCov^2(X, Y) / sqrt(dVar^2(X) dVar^2(Y)))``. It is 1 for
  ``Y = c X R + b`` (``R`` orthogonal, ``c > 0``). If a distance variance is numerically 0 (``dVar <=
  ZERO_TOL``: all rows equal), the distance is 0 if ``X == Y`` (within ``ZERO_TOL``) else 1.
- ``"procrustes"``: the disparity of orthogonal Procrustes analysis with scaling, as
  ``scipy.spatial.procrustes`` computes it: centre the columns of ``X`` and ``Y`` (means over the real rows),
  scale each to unit Frobenius norm, ``disparity = 1 - (sum of the singular values of X^T Y)^2``. A map whose
  centred norm is <= ``ZERO_TOL`` (all rows equal; scipy raises there) follows the rule of ``"dcor"``.

Canonical correlation (Bian et al. also list it) is not implemented: plain CCA is degenerate here. It has
``n`` observations (query rows) in ``n`` dimensions (keys), and the column-centred maps have rank ``<= n - 1``
(their rows sum to 0), so with as many dimensions as observations every canonical correlation is 1
whatever the two maps: it would call every pair of heads identical. (Regularised or SVD-truncated CCA
would need extra choices; Procrustes and distance correlation need none.)

Averaging: per sentence as above, then the plain mean over sentences (each sentence weight 1), streamed by
:class:`RedundancyAccumulator`, which keeps only ``[N, N]`` running sums. Every metric is computed for all
head pairs at once, in float64, in chunks of at most ``chunk`` elements per temporary (peak extra memory is
a few times ``8 * chunk`` bytes: 0.4-0.9 GB measured at the default for bert-base, N = 144, 128 tokens).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from headprune_utils.model.architecture import head_shape
from headprune_utils.model.attention import attention_maps, require_distributions, smooth

TOKEN_METRICS: tuple[str, ...] = ("js", "hellinger", "cosine", "pearson")
SENTENCE_METRICS: tuple[str, ...] = ("dcor", "procrustes")
METRICS = TOKEN_METRICS + SENTENCE_METRICS
DISTRIBUTION_METRICS = ("js", "hellinger")  # defined on distributions over the keys: rows summing to 1
JS_EPS = 0.0  # smoothing of "js" with the uniform distribution over the real keys; 0 <= eps <= 1
ZERO_TOL = 1e-12  # spreads (centred norms, dVar) at or below this count as 0; maps this close count as equal
CHUNK = 1 << 24  # elements of the largest float64 temporary (128 MiB)
_TINY = 1e-300  # guards divisions whose degenerate cases are overwritten afterwards
_JS_BLOCK = 1 << 16  # elements of js's pairwise mixture per step: cache-sized, 2-3x faster than larger steps
_JS_SHIFT = 5e-301  # added to js's maps: every mixture > 0; changes no float64 value of a float32 probability


def _check_metrics(metrics: Sequence[str] | str) -> tuple[str, ...]:
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ValueError(f"unknown metric(s) {unknown or metrics!r}: allowed are {', '.join(METRICS)}")
    return tuple(dict.fromkeys(metrics))


def _nan_check(maps: torch.Tensor) -> None:
    bad = torch.isnan(maps).flatten(2).any(-1).any(0)
    if bool(bad.any()):
        heads = bad.nonzero().flatten().tolist()
        raise ValueError(f"maps of flat heads {heads} are NaN (absent or pruned heads): "
                         "redundancy needs the map of every head")


def stack_heads(maps: list[torch.Tensor]) -> torch.Tensor:
    """Per-layer maps ``[batch, n_heads, seq, seq]`` (from ``attention_maps``) -> ``[batch, N, seq, seq]``,
    layer-major. Raises ``ValueError`` on NaN maps (heads absent from a pruned model)."""
    if len(maps) == 0:
        raise ValueError("no layers given")
    shapes = {tuple(m.shape) for m in maps}
    if len(shapes) != 1 or maps[0].ndim != 4:
        raise ValueError(f"expected per-layer maps of one shape [batch, n_heads, seq, seq], got {sorted(shapes)}")
    out = torch.cat(list(maps), dim=1)
    _nan_check(out)
    return out


def _validate(maps: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """-> (real [batch, seq] bool on the maps' device, lengths [batch], whether real tokens are prefixes)."""
    if maps.ndim != 4 or maps.shape[2] != maps.shape[3]:
        raise ValueError(f"maps must be [batch, N, seq, seq], got {list(maps.shape)}")
    if attention_mask.shape != (maps.shape[0], maps.shape[2]):
        raise ValueError(f"attention_mask must be [batch, seq] = {[maps.shape[0], maps.shape[2]]}, "
                         f"got {list(attention_mask.shape)}")
    _nan_check(maps)
    real = attention_mask.to(maps.device).bool()
    lengths = real.sum(1)
    if bool((lengths == 0).any()):
        raise ValueError("every sentence needs at least one real token")
    prefix = bool((real == (torch.arange(real.shape[1], device=real.device) < lengths[:, None])).all())
    return real, lengths, prefix


def _groups(lengths: torch.Tensor, prefix: bool, seq: int, per_sentence, chunk: int):
    """Runs of sentences of one width (longest first), each of at most ``chunk`` elements (>= 1 sentence):
    yields (sentence ids, width). With right padding the width is the real length: no padded work."""
    order = torch.argsort(lengths, descending=True, stable=True)
    widths = lengths[order].tolist() if prefix else [seq] * len(order)
    start = 0
    while start < len(widths):
        w, stop = widths[start], start + 1
        cap = start + max(1, chunk // max(1, per_sentence(w)))
        while stop < min(cap, len(widths)) and widths[stop] == w:
            stop += 1
        yield order[start:stop], w
        start = stop


def _degenerate(dist: torch.Tensor, flat: torch.Tensor, sig: torch.Tensor, differ: float) -> torch.Tensor:
    """Overwrite pairs where a head is ``flat`` [c, N]: 0 if both are flat with equal signatures
    ``sig`` [c, N, k] (within ZERO_TOL, max norm), else ``differ``. ``dist`` [c, N, N]."""
    either = flat[:, :, None] | flat[:, None, :]
    if not bool(either.any()):
        return dist
    equal = torch.cdist(sig, sig, p=float("inf")) <= ZERO_TOL
    same = flat[:, :, None] & flat[:, None, :] & equal
    fill = torch.where(same, torch.zeros_like(dist), torch.full_like(dist, differ))
    return torch.where(either, fill, dist)


# ----------------------------------------------------------------------------- token metrics
def _gram(x: torch.Tensor, keys: torch.Tensor, metric: str) -> torch.Tensor:
    """Per-row distances of every head pair: x [rows, N, w], keys [rows, w] real keys -> [rows, N, N]."""
    if metric == "hellinger":  # (sum p + sum q) / 2 - BC: 1 - BC for distributions, 0 for equal float32 rows
        s = x.sqrt()
        bc = torch.bmm(s, s.transpose(1, 2))
        mass = bc.diagonal(dim1=1, dim2=2)
        return (0.5 * (mass[:, :, None] + mass[:, None, :]) - bc).clamp_min(0.0).sqrt()
    if metric == "cosine":
        xn = x / x.norm(dim=-1, keepdim=True).clamp_min(_TINY)
        return 1.0 - torch.bmm(xn, xn.transpose(1, 2))
    n = keys.sum(-1).to(x.dtype)[:, None, None]  # pearson, over the real keys only
    mean = x.sum(-1, keepdim=True) / n
    xc = (x - mean) * keys[:, None, :]
    norm = xc.norm(dim=-1)
    xn = xc / norm.clamp_min(_TINY)[..., None]
    dist = (1.0 - torch.bmm(xn, xn.transpose(1, 2))) / 2
    return _degenerate(dist, norm <= ZERO_TOL, mean, differ=0.5)


def _token_group(x, q, metric, chunk, eps) -> torch.Tensor:
    """Sums over the real query rows of the per-row distances: x [c, N, w, w] float64 (padded rows and keys
    zeroed), q [c, w] real tokens (float64) -> [c, N, N]."""
    c, n_heads, w, _ = x.shape
    xt = x.permute(1, 0, 2, 3).reshape(n_heads, c * w, w)  # heads-major: one head's rows are contiguous
    keys = q.repeat_interleave(w, dim=0)  # [rows, w], the real keys of each row's sentence
    weight, sid = q.reshape(-1), torch.arange(c, device=x.device).repeat_interleave(w)
    if metric != "js":
        out = torch.zeros(c, n_heads, n_heads, dtype=x.dtype, device=x.device)
        step = max(1, chunk // (n_heads * max(n_heads, w)))
        for r in range(0, c * w, step):
            d = _gram(xt[:, r : r + step].transpose(0, 1), keys[r : r + step], metric)
            out.index_add_(0, sid[r : r + step], d * weight[r : r + step, None, None])
        return out
    # JS = (sum p ln p + sum q ln q) / 2 - sum m ln m, and with s = p + q = 2 m:
    # sum m ln m = (sum s ln s - ln 2 sum s) / 2: one log per pair and key, the rest per head. All terms are
    # linear, so only sum s ln s is summed per pair, over rows, in the loop; rows of the N x N grid of heads
    # at a time, by broadcasting (an index gather of the pairs is 2x slower), in cache-sized blocks.
    # Padded query rows are all-equal rows (JS 0) and need no weight.
    xt = smooth(xt, eps, keys[None]) + _JS_SHIFT  # > 0, so a plain (vectorised) log is finite
    base = torch.zeros(n_heads, c, dtype=x.dtype, device=x.device)
    base.index_add_(1, sid, 0.5 * (torch.linalg.vecdot(xt, xt.log()) + math.log(2.0) * xt.sum(-1)))
    ent = torch.zeros(n_heads, n_heads, c, dtype=x.dtype, device=x.device)  # sum over rows of sum s ln s
    block = min(chunk, _JS_BLOCK)
    n_rows = max(1, block // (n_heads * w))
    n_grid = max(1, block // (n_heads * n_rows * w))
    for r in range(0, c * w, n_rows):
        rows = slice(r, r + n_rows)
        buf = torch.zeros(n_heads, n_heads, len(sid[rows]), dtype=x.dtype, device=x.device)
        for a in range(0, n_heads - 1, n_grid):
            b = min(a + n_grid, n_heads)
            s = xt[a:b, None, rows] + xt[None, a:, rows]  # [b - a, N - a, rows, w]
            buf[a:b, a:] = torch.linalg.vecdot(s, s.log())
        ent.index_add_(2, sid[rows], buf)
    js = base[:, None, :] + base[None, :, :] - 0.5 * ent  # [N, N, c], valid for pairs a < c
    upper = torch.triu(js.permute(2, 0, 1), diagonal=1).clamp_min(0.0) / math.log(2.0)
    return upper + upper.transpose(1, 2)


# ----------------------------------------------------------------------------- sentence metrics
def _sentence_group(x, q, metric, chunk, ia, ic) -> torch.Tensor:
    """Distances of whole maps: x [c, N, w, w] float64 (padded rows and keys zeroed), q [c, w] -> [c, N, N]."""
    c, n_heads, w, _ = x.shape
    n = q.sum(-1)[:, None, None, None]
    rows, cols = q[:, None, :, None], q[:, None, None, :]
    first = x[torch.arange(c, device=x.device), :, q.argmax(1)]  # first real row, [c, N, w]
    if metric == "dcor":
        flat_x = x.reshape(c * n_heads, w, w)
        d = torch.cdist(flat_x, flat_x, compute_mode="donot_use_mm_for_euclid_dist").view(c, n_heads, w, w)
        d = d * rows * cols
        row_mean = d.sum(-1, keepdim=True) / n
        grand = row_mean.sum(-2, keepdim=True) / n
        a = ((d - row_mean - row_mean.transpose(-1, -2) + grand) * rows * cols).reshape(c, n_heads, w * w)
        cov = torch.bmm(a, a.transpose(1, 2)) / n[:, :, :, 0] ** 2  # dCov^2, [c, N, N]
        var = cov.diagonal(dim1=1, dim2=2).clamp_min(0.0)  # dVar^2, [c, N]
        denom = (var[:, :, None] * var[:, None, :]).sqrt().clamp_min(_TINY)
        dist = 1.0 - (cov / denom).clamp(0.0, 1.0).sqrt()
        return _degenerate(dist, var.sqrt() <= ZERO_TOL, first, differ=1.0)
    # procrustes: column-centred over the real rows, unit Frobenius norm, then every pair's X^T Y
    xc = (x - (x * rows).sum(-2, keepdim=True) / n) * rows
    norm = xc.flatten(2).norm(dim=-1)  # [c, N]
    xn = (xc / norm.clamp_min(_TINY)[..., None, None]).reshape(c * n_heads, w, w)
    n_pairs = ia.numel()
    nuclear = torch.empty(c * n_pairs, dtype=x.dtype, device=x.device)
    step = max(1, chunk // (w * w))
    for k0 in range(0, c * n_pairs, step):
        k = torch.arange(k0, min(k0 + step, c * n_pairs), device=x.device)
        base, p = (k // n_pairs) * n_heads, k % n_pairs
        prod = torch.matmul(xn[base + ia[p]].transpose(-1, -2), xn[base + ic[p]])
        nuclear[k0 : k0 + len(k)] = torch.linalg.svdvals(prod).sum(-1)
    dist = torch.zeros(c, n_heads, n_heads, dtype=x.dtype, device=x.device)
    dist[:, ia, ic] = (1.0 - nuclear.view(c, n_pairs) ** 2).clamp(0.0, 1.0)
    dist = dist + dist.transpose(1, 2)
    return _degenerate(dist, norm <= ZERO_TOL, first, differ=1.0)


def _distances(maps, real, lengths, prefix, metric, chunk, js_eps) -> torch.Tensor:
    """[batch, N, N] float64 per-sentence distances; inputs already validated."""
    b, n_heads, s, _ = maps.shape
    out = torch.zeros(b, n_heads, n_heads, dtype=torch.float64, device=maps.device)
    ia, ic = torch.triu_indices(n_heads, n_heads, 1, device=maps.device)
    for idx, w in _groups(lengths, prefix, s, lambda w: n_heads * w * w, chunk):
        q = real[idx, :w].to(torch.float64)
        x = maps[idx, :, :w, :w].to(torch.float64) * q[:, None, :, None] * q[:, None, None, :]
        if metric in TOKEN_METRICS:
            out[idx] = _token_group(x, q, metric, chunk, js_eps) / q.sum(-1)[:, None, None]
        else:
            out[idx] = _sentence_group(x, q, metric, chunk, ia, ic)
    out = ((out + out.transpose(1, 2)) / 2).clamp_(0.0, 1.0)
    out.diagonal(dim1=1, dim2=2).zero_()
    return out


def sentence_distances(maps: torch.Tensor, attention_mask: torch.Tensor, metric: str, chunk: int = CHUNK,
                       *, js_eps: float = JS_EPS) -> torch.Tensor:
    """Each sentence's distance between every pair of heads.

    maps: ``[batch, N, seq, seq]`` (see :func:`stack_heads`); attention_mask: ``[batch, seq]``, 1 = real token.
    Token metrics: mean over the sentence's real query tokens of the per-token distance; sentence metrics:
    one distance of the two whole real ``n x n`` maps (see the module docstring). ``chunk`` bounds the
    elements of a float64 temporary. Returns ``[batch, N, N]`` float64, symmetric, zero diagonal, in [0, 1].
    """
    (metric,) = _check_metrics(metric)
    if not 0.0 <= js_eps <= 1.0:
        raise ValueError(f"js_eps must be in [0, 1], got {js_eps}")
    real, lengths, prefix = _validate(maps, attention_mask)
    if metric in DISTRIBUTION_METRICS:  # rows must be distributions (attention sinks give none)
        require_distributions(maps, attention_mask, f"redundancy metric {metric!r}")
    return _distances(maps, real, lengths, prefix, metric, chunk, js_eps)


class RedundancyAccumulator:
    """Streams batches; holds only running sums ``[N, N]`` per metric (never the maps of a dataset)."""

    def __init__(self, n_heads_total: int, metrics: Sequence[str] = METRICS, *, chunk: int = CHUNK,
                 js_eps: float = JS_EPS):
        self.metrics = _check_metrics(metrics)
        if n_heads_total < 1:
            raise ValueError(f"n_heads_total must be positive, got {n_heads_total}")
        if not 0.0 <= js_eps <= 1.0:
            raise ValueError(f"js_eps must be in [0, 1], got {js_eps}")
        self.n_heads_total, self.chunk, self.js_eps = int(n_heads_total), int(chunk), float(js_eps)
        self._sums = {m: torch.zeros(n_heads_total, n_heads_total, dtype=torch.float64) for m in self.metrics}
        self._n = 0

    def add(self, maps: torch.Tensor | list[torch.Tensor], attention_mask: torch.Tensor) -> None:
        """maps: the per-layer list from ``attention_maps`` or a stacked ``[batch, N, seq, seq]`` tensor."""
        if not isinstance(maps, torch.Tensor):
            maps = stack_heads(maps)
        if maps.ndim != 4 or maps.shape[1] != self.n_heads_total:
            raise ValueError(f"expected maps [batch, {self.n_heads_total}, seq, seq], got {list(maps.shape)}")
        real, lengths, prefix = _validate(maps, attention_mask)
        wanted = [m for m in self.metrics if m in DISTRIBUTION_METRICS]
        if wanted:  # rows must be distributions (attention sinks give none)
            require_distributions(maps, attention_mask, f"redundancy metric {wanted[0]!r}")
        for m in self.metrics:
            d = _distances(maps, real, lengths, prefix, m, self.chunk, self.js_eps)
            self._sums[m] += d.sum(0).cpu()
        self._n += maps.shape[0]

    @property
    def n_sentences(self) -> int:
        return self._n

    def result(self) -> dict[str, np.ndarray]:
        """metric -> ``[N, N]`` float64 mean over the sentences added (each sentence weight 1)."""
        if self._n == 0:
            raise ValueError("no sentences added yet")
        return {m: (s / self._n).numpy() for m, s in self._sums.items()}


def redundancy_matrices(model, batches: Iterable[dict[str, torch.Tensor]], metrics: Sequence[str] = METRICS,
                        progress: bool = False, *, chunk: int = CHUNK, js_eps: float = JS_EPS
                        ) -> dict[str, np.ndarray]:
    """Mean redundancy matrices of ``model`` over the sentences of ``batches`` (model inputs with
    ``attention_mask``; other keys such as ``labels`` are ignored): metric -> ``[N, N]`` float64."""
    n_layers, n_heads = head_shape(model)
    acc = RedundancyAccumulator(n_layers * n_heads, metrics, chunk=chunk, js_eps=js_eps)
    for batch in tqdm(batches, disable=not progress, desc="redundancy", leave=False):
        maps = attention_maps(model, batch)
        mask = batch.get("attention_mask")
        if mask is None:
            mask = torch.ones(maps[0].shape[0], maps[0].shape[2], dtype=torch.long)
        acc.add(maps, mask)
    return acc.result()


