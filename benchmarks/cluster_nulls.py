#!/usr/bin/env python
"""Study 4's permutation nulls: our silhouette and Mantel test against the plain way (scikit-learn, full matrices).

Study 4 (redundancy_patterns) chooses the number of head clusters by the silhouette over k = 2..20 and asks
whether the best one beats ``silhouette_null``'s shuffled matrices; it compares matrices with Mantel permutation
tests. At the standard profile that is tens of thousands of silhouettes and about two thousand Mantel tests per
render. One run, on a random ``N x N`` distance matrix (default N = 144, bert-base's 12 x 12 heads):

- **silhouette**: ``clustering.silhouette_widths`` against scikit-learn's ``silhouette_samples(metric=
  "precomputed")`` on the same labels (seconds per call, ratio, and whether the widths are the same bits);
- **silhouette null**: ``clustering.silhouette_null`` against the same null computed the plain way (every
  k's silhouette through scikit-learn, the matrix checked at each call, as this code did before), same seed:
  seconds, ratio, and whether the null distributions are identical;
- **Mantel**: ``clustering.mantel`` against the plain way (each permuted matrix built whole, then its upper
  triangle taken; the standard deviation computed twice): seconds, ratio, whether r and p are identical.

Usage::

    python benchmarks/cluster_nulls.py [--n 144] [--perm 20] [--mantel-perm 999] [--repeats 3] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.cluster import hierarchy
from sklearn.metrics import silhouette_samples

from headprune_utils.measure import clustering


def plain_core_silhouette(d, labels, min_size):
    d = clustering.check_distance(d)
    sizes = np.bincount(labels)
    core = sizes[labels] >= min_size
    if len(np.unique(labels[core])) < 2:
        return float("nan")
    sub = labels[core]
    if min_size <= 1:
        if len(np.unique(labels)) > len(labels) - 1:
            return float("nan")
        return float(np.mean(silhouette_samples(d, labels, metric="precomputed")))
    if len(np.unique(sub)) > len(sub) - 1:
        return float("nan")
    return float(silhouette_samples(d[np.ix_(core, core)], sub, metric="precomputed").sum() / len(labels))


def plain_best(d, k_range, min_size):
    z = clustering.linkage(d)
    tried = {k: plain_core_silhouette(d, hierarchy.fcluster(z, k, criterion="maxclust"), min_size)
             for k in range(max(2, k_range[0]), min(k_range[1], d.shape[0] - 1) + 1)}
    valid = {k: s for k, s in tried.items() if np.isfinite(s)}
    if not valid:
        return plain_core_silhouette(d, hierarchy.fcluster(z, max(2, k_range[0]), criterion="maxclust"), min_size)
    best = max(valid.values())
    k = min(kk for kk, s in valid.items() if s >= best - 1e-12)
    return plain_core_silhouette(d, hierarchy.fcluster(z, k, criterion="maxclust"), min_size)


def plain_null(d, k_range, n_perm, seed, min_size):
    d = clustering.check_distance(d)
    iu = np.triu_indices(d.shape[0], k=1)
    rng = np.random.default_rng(seed)
    out = np.empty(n_perm)
    for i in range(n_perm):
        m = np.zeros_like(d)
        m[iu] = rng.permutation(d[iu])
        out[i] = plain_best(m + m.T, k_range, min_size)
    return out


def plain_mantel(a, b, n_perm, seed):
    a, b = clustering.check_distance(a), clustering.check_distance(b)
    n = a.shape[0]
    iu = np.triu_indices(n, k=1)
    x = a[iu]
    x = (x - x.mean()) / (x.std() or 1.0)

    def corr(m):
        y = m[..., iu[0], iu[1]]
        y = (y - y.mean(-1, keepdims=True)) / np.where(y.std(-1, keepdims=True) > 0, y.std(-1, keepdims=True), 1.0)
        return (y * x).mean(-1)

    r = float(corr(b))
    rng = np.random.default_rng(seed)
    null = np.empty(n_perm)
    for s in range(0, n_perm, 200):
        perms = np.stack([rng.permutation(n) for _ in range(min(200, n_perm - s))])
        null[s:s + len(perms)] = corr(b[perms[:, :, None], perms[:, None, :]])
    return r, float((1 + (null >= r - 1e-12).sum()) / (1 + n_perm))


def timed(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=144, help="heads (matrix size), default 144")
    ap.add_argument("--perm", type=int, default=20, help="shuffled matrices of the silhouette null, default 20")
    ap.add_argument("--mantel-perm", type=int, default=999, help="Mantel permutations, default 999")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each (the fastest kept), default 3")
    ap.add_argument("--out", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.random((args.n, 8)) + np.repeat(rng.random((6, 8)) * 3, -(-args.n // 6), axis=0)[: args.n]
    d = clustering.check_distance(np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)))
    y = x + 0.5 * rng.random(x.shape)
    e = clustering.check_distance(np.sqrt(((y[:, None] - y[None]) ** 2).sum(-1)))
    labels = hierarchy.fcluster(clustering.linkage(d), 8, criterion="maxclust")
    res = {"n": args.n}

    calls = 200
    t_ours, w_ours = timed(lambda: [clustering.silhouette_widths(d, labels) for _ in range(calls)][-1], args.repeats)
    t_sk, w_sk = timed(lambda: [silhouette_samples(d, labels, metric="precomputed") for _ in range(calls)][-1],
                       args.repeats)
    res["silhouette"] = {"ours_s": t_ours / calls, "sklearn_s": t_sk / calls, "ratio": t_sk / t_ours,
                         "same_bits": w_ours.tobytes() == w_sk.tobytes()}

    t_ours, n_ours = timed(lambda: clustering.silhouette_null(d, (2, 20), n_perm=args.perm, seed=1, min_size=2),
                           args.repeats)
    t_plain, n_plain = timed(lambda: plain_null(d, (2, 20), args.perm, 1, 2), args.repeats)
    res["silhouette_null"] = {"ours_s": t_ours, "plain_s": t_plain, "ratio": t_plain / t_ours,
                              "identical": n_ours.tobytes() == n_plain.tobytes()}

    t_ours, m_ours = timed(lambda: clustering.mantel(d, e, n_perm=args.mantel_perm, seed=3), args.repeats)
    t_plain, m_plain = timed(lambda: plain_mantel(d, e, args.mantel_perm, 3), args.repeats)
    res["mantel"] = {"ours_s": t_ours, "plain_s": t_plain, "ratio": t_plain / t_ours, "identical": m_ours == m_plain}

    print(f"N = {args.n} heads; fastest of {args.repeats} runs each")
    s = res["silhouette"]
    print(f"silhouette widths   ours {s['ours_s'] * 1e3:8.3f} ms  scikit-learn {s['sklearn_s'] * 1e3:8.3f} ms  "
          f"x{s['ratio']:.1f}  same bits: {s['same_bits']}")
    s = res["silhouette_null"]
    print(f"silhouette null     ours {s['ours_s']:8.2f} s   plain {s['plain_s']:8.2f} s   x{s['ratio']:.1f}  "
          f"({args.perm} shuffles, k = 2..20)  identical: {s['identical']}")
    s = res["mantel"]
    print(f"Mantel test         ours {s['ours_s']:8.3f} s   plain {s['plain_s']:8.3f} s   x{s['ratio']:.1f}  "
          f"({args.mantel_perm} permutations)  identical: {s['identical']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
