"""Datasets: debian-minilm from ../shared/data, a Gaussian mixture fitted
to it (``minilm-gmm``, for sizes the real set does not have), and a seeded
synthetic set.

Every dataset is materialised once as float32 ``.npy`` files plus exact
ground truth in a cache directory (``$SAGITTA_BENCH_CACHE`` or
``~/.cache/sagitta-bench``), so that engine subprocesses can memory-map it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def data_root() -> Path:
    env = os.environ.get("SAGITTA_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def cache_root() -> Path:
    env = os.environ.get("SAGITTA_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sagitta-bench"


@dataclass
class Dataset:
    """A materialised dataset: unit-norm float32 base and queries, and the
    exact cosine top-``gt.shape[1]`` of each query (row ids)."""

    name: str
    dir: Path
    metric: str = "cos"

    @property
    def suffix(self) -> str:
        return "f32" if self.metric == "cos" else "u8"

    def lengths(self, which: str) -> np.ndarray | None:
        """Code lengths in bytes (NPHD datasets) of ``base`` or ``queries``."""
        p = self.dir / f"{which}_len.npy"
        return np.load(p) if p.exists() else None

    def base(self) -> np.ndarray:
        return np.load(self.dir / f"base.{self.suffix}.npy", mmap_mode="r")

    def queries(self) -> np.ndarray:
        return np.load(self.dir / f"queries.{self.suffix}.npy")

    def gt(self) -> np.ndarray:
        return np.load(self.dir / "gt.npy")

    def kth_dist(self) -> np.ndarray | None:
        """Hamming datasets: the exact distance of each query's 100th
        neighbour column by column (``gt_dist[:, j]``), for tie-aware
        recall; None for float datasets."""
        p = self.dir / "gt_dist.npy"
        return np.load(p) if p.exists() else None


def nphd_dist(q: bytes, codes: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """NPHD of one code against padded codes (N x 32) of lengths ``lens``:
    differing bits over the shorter code's prefix, divided by its bits."""
    qa = np.zeros(codes.shape[1], dtype=np.uint8)
    qa[: len(q)] = np.frombuffer(q, dtype=np.uint8)
    m = np.minimum(lens, len(q))
    x = np.bitwise_count(codes ^ qa)  # per-byte differing bits
    mask = np.arange(codes.shape[1])[None, :] < m[:, None]
    return (x * mask).sum(axis=1) / (8.0 * m)


def nphd_topk(codes, lens, queries, qlens, k):
    ids = np.empty((len(queries), k), dtype=np.int64)
    dists = np.empty((len(queries), k))
    for i, (q, ql) in enumerate(zip(queries, qlens)):
        d = nphd_dist(bytes(q[:ql]), codes, lens)
        order = np.lexsort((np.arange(len(d)), d))[:k]
        ids[i], dists[i] = order, d[order]
    return ids, dists


def _iscc_codes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """ISCC text codes (iscc-core), 64 / 128 / 256 bits by row, padded."""
    import iscc_core

    codes = np.zeros((len(texts), 32), dtype=np.uint8)
    lens = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        bits = (64, 128, 256)[i % 3]
        digest = iscc_core.iscc_decode(iscc_core.gen_text_code_v0(text, bits=bits)["iscc"])[4]
        codes[i, : len(digest)] = np.frombuffer(digest, dtype=np.uint8)
        lens[i] = len(digest)
    return codes, lens


def hamming_topk(
    base: np.ndarray, queries: np.ndarray, k: int, rows: int = 32_768, block: int = 128
):
    """Exact Hamming top-k over packed uint8 codes: ids and distances,
    nearest first, ties by row. Each (distance, row) pair is one int64
    (distance in the high half), so a partial partition per block of rows
    keeps exactly the k smallest pairs: linear in the rows (10M codes x
    1,000 queries in minutes, where a full sort per block took hours)."""
    bw = base.view(np.uint64) if base.shape[1] % 8 == 0 else base
    qw = queries.view(np.uint64) if queries.shape[1] % 8 == 0 else queries
    k = min(k, len(bw))
    best = np.full((len(qw), k), np.iinfo(np.int64).max, dtype=np.int64)
    for start in range(0, len(bw), rows):
        chunk = np.asarray(bw[start : start + rows])
        ids = np.arange(start, start + len(chunk), dtype=np.int64)
        for q0 in range(0, len(qw), block):
            q = qw[q0 : q0 + block]
            d = np.bitwise_count(q[:, None, :] ^ chunk[None, :, :]).sum(-1, dtype=np.int64)
            pairs = np.concatenate([best[q0 : q0 + block], (d << 32) | ids], axis=1)
            best[q0 : q0 + block] = np.partition(pairs, k - 1, axis=1)[:, :k]
    best.sort(axis=1)
    return best & 0xFFFF_FFFF, best >> 32


def hamming_topk_flat(base: np.ndarray, queries: np.ndarray, k: int):
    """The same as :func:`hamming_topk` (distances exact; rows at equal
    distance in any order) from Sagitta's Flat index, the exact oracle:
    10M codes x 1,000 queries in seconds where numpy takes an hour."""
    import sagitta

    flat = sagitta.Index(base.shape[1] * 8, metric="hamming", kind="flat")
    rows = 1 << 20
    for start in range(0, len(base), rows):
        block = np.asarray(base[start : start + rows])
        flat.add(np.arange(start, start + len(block), dtype=np.uint64), block)
    ids, dist = flat.search(queries, min(k, len(base)), exact=True)
    return ids.astype(np.int64), np.rint(dist).astype(np.int64)


def _normalize(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(n, 1e-30)


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int, chunk: int = 20_000) -> np.ndarray:
    """Exact cosine top-k (inputs unit-norm), nearest first, ties by row."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(base), chunk):
        s = queries @ np.asarray(base[start : start + chunk]).T
        idx = np.broadcast_to(np.arange(start, start + s.shape[1]), s.shape)
        all_s = np.concatenate([best_s, s], axis=1)
        all_i = np.concatenate([best_i, idx], axis=1)
        order = np.lexsort((all_i, -all_s), axis=-1)[:, :k]
        best_s = np.take_along_axis(all_s, order, 1)
        best_i = np.take_along_axis(all_i, order, 1)
    return best_i


def exact_topk_fast(
    base: np.ndarray, queries: np.ndarray, k: int, chunk: int = 25_000
) -> np.ndarray:
    """Exact cosine top-k (inputs unit-norm, float32), nearest first: a
    blockwise matmul, the top k of each block by ``argpartition``, merged
    with the best so far. Ties by row except at a block's k-th score, where
    ``argpartition`` picks (continuous data has none)."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(base), chunk):
        s = queries @ np.asarray(base[start : start + chunk], dtype=np.float32).T
        kk = min(k, s.shape[1])
        top = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
        all_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        all_i = np.concatenate([best_i, top + start], axis=1)
        order = np.lexsort((all_i, -all_s), axis=-1)[:, :k]
        best_s = np.take_along_axis(all_s, order, 1)
        best_i = np.take_along_axis(all_i, order, 1)
    return best_i


# The mixture fitted to debian-minilm for ``minilm-gmm``: k-means in the
# PCA basis of the (unit-norm) base vectors, then per component its weight,
# mean and per-axis variance in that basis. Fixed, so that every size and
# seed samples the same mixture.
GMM_FIT = {"components": 256, "iterations": 20, "fit_seed": 0, "basis": "pca-384"}
GMM_QUERIES = 1000
GMM_CHUNK = 10_000  # rows per sampling chunk: a smaller N is a prefix of a larger one


def _group_sums(xt: np.ndarray, labels: np.ndarray, c: int):
    """Per-label row sums (float64, c x d) of the rows of ``xt.T`` (the
    data transposed: one bincount per contiguous column), and counts."""
    counts = np.bincount(labels, minlength=c)
    sums = np.stack([np.bincount(labels, weights=col, minlength=c) for col in xt], axis=1)
    return sums, counts


def _kmeans(x: np.ndarray, c: int, iters: int, rng: np.random.Generator) -> np.ndarray:
    """Lloyd's k-means from a k-means++ start; returns the labels."""
    n = len(x)
    xt = np.ascontiguousarray(x.T)
    xx = (x * x).sum(1)
    centers = np.empty((c, x.shape[1]), dtype=np.float32)
    centers[0] = x[rng.integers(n)]
    d2 = np.maximum(xx - 2 * x @ centers[0] + centers[0] @ centers[0], 0)
    for j in range(1, c):
        # the next center with probability proportional to d2
        cum = np.cumsum(d2, dtype=np.float64)
        pick = min(int(np.searchsorted(cum, rng.random() * cum[-1], side="right")), n - 1)
        centers[j] = x[pick]
        d2 = np.minimum(d2, np.maximum(xx - 2 * x @ centers[j] + centers[j] @ centers[j], 0))

    def assign(centers):
        cc = (centers * centers).sum(1)
        labels = np.empty(n, dtype=np.int64)
        for s in range(0, n, 20_000):
            d = cc[None, :] - 2 * x[s : s + 20_000] @ centers.T
            labels[s : s + 20_000] = d.argmin(1)
        return labels

    labels = assign(centers)
    for _ in range(iters):
        sums, counts = _group_sums(xt, labels, c)
        empty = counts == 0
        centers[~empty] = (sums[~empty] / counts[~empty, None]).astype(np.float32)
        # an empty component restarts on a random point
        centers[empty] = x[rng.integers(n, size=int(empty.sum()))]
        new = assign(centers)
        changed = int((new != labels).sum())
        labels = new
        if changed <= n // 10_000:
            break
    return labels


def gmm_model_dir() -> Path:
    return cache_root() / f"minilm-gmm-model-c{GMM_FIT['components']}-s{GMM_FIT['fit_seed']}"


def gmm_model(src: np.ndarray) -> dict:
    """Fits the mixture of ``GMM_FIT`` to ``src`` (unit-norm rows),
    cached beside the datasets: mean, PCA basis, component weights, means
    and variances in that basis."""
    p = GMM_FIT
    d = gmm_model_dir()
    if (d / "model.npz").exists():
        return dict(np.load(d / "model.npz"))
    x = np.asarray(src, dtype=np.float32)
    mean = x.mean(0)
    xc = x - mean
    w, v = np.linalg.eigh((xc.T @ xc).astype(np.float64) / len(x))
    basis = v[:, ::-1].astype(np.float32)  # columns: principal axes, largest first
    y = xc @ basis
    rng = np.random.default_rng(p["fit_seed"])
    c = p["components"]
    labels = _kmeans(y, c, p["iterations"], rng)
    sums, counts = _group_sums(np.ascontiguousarray(y.T), labels, c)
    means = sums / np.maximum(counts, 1)[:, None]
    sq, _ = _group_sums(np.ascontiguousarray(((y - means[labels]) ** 2).T), labels, c)
    var = sq / np.maximum(counts, 1)[:, None]
    model = {
        "mean": mean,
        "basis": basis,
        "weights": counts / counts.sum(),
        "labels_count": counts,
        "means": means.astype(np.float32),
        "stds": np.sqrt(np.maximum(var, 1e-12)).astype(np.float32),
        "pca_variance": w[::-1].astype(np.float32),
    }
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "model.tmp.npz", **model)
    (d / "model.tmp.npz").replace(d / "model.npz")
    return model


def gmm_sample(model: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit-norm float32 vectors drawn from the mixture."""
    comp = rng.choice(len(model["weights"]), size=n, p=model["weights"])
    z = rng.standard_normal((n, model["means"].shape[1]), dtype=np.float32)
    y = model["means"][comp] + model["stds"][comp] * z
    return _normalize(y @ model["basis"].T + model["mean"])


def parse_count(text: str) -> int:
    """``20000``, ``20k``, ``1m`` -> an int."""
    text = text.lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def count_name(n: int) -> str:
    for div, suffix in ((1_000_000, "m"), (1_000, "k")):
        if n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


def minilm_gmm(n: int, seed: int) -> Dataset:
    """``minilm-gmm:N[:SEED]``: N base vectors and 1000 queries sampled
    from a Gaussian mixture fitted to debian-minilm (``gmm_model``), unit
    norm, with the exact cosine top-100 of each query. Base rows come in
    chunks of ``GMM_CHUNK`` from generators keyed by (seed, chunk), queries
    from their own, so a smaller N is a prefix of a larger one. Cached with
    a ``meta.json`` (written last: its presence means complete)."""
    name = f"minilm-gmm-{count_name(n)}" + (f"-s{seed}" if seed else "")
    d = cache_root() / name
    if not (d / "meta.json").exists():
        import json
        import time

        t0 = time.perf_counter()
        cached = (gmm_model_dir() / "model.npz").exists()
        model = gmm_model(load("debian-minilm", 10).base())
        fit_s = time.perf_counter() - t0
        d.mkdir(parents=True, exist_ok=True)
        base = np.lib.format.open_memmap(
            d / "base.tmp.npy", mode="w+", dtype=np.float32, shape=(n, model["means"].shape[1])
        )
        for ci, start in enumerate(range(0, n, GMM_CHUNK)):
            rng = np.random.default_rng([seed, 0, ci])
            rows = min(GMM_CHUNK, n - start)
            base[start : start + rows] = gmm_sample(model, GMM_CHUNK, rng)[:rows]
        base.flush()
        queries = gmm_sample(model, GMM_QUERIES, np.random.default_rng([seed, 1]))
        t1 = time.perf_counter()
        gt = exact_topk_fast(base, queries, 100)
        gt_s = time.perf_counter() - t1
        # how near the neighbours are (debian-minilm at 20k rows: 0.68 / 0.52)
        near = {
            f"top{j + 1}_cos_mean": float((queries * base[gt[:, j]]).sum(1).mean()) for j in (0, 9)
        }
        del base
        (d / "base.tmp.npy").replace(d / "base.f32.npy")
        np.save(d / "queries.f32.npy", queries)
        np.save(d / "gt.npy", gt)
        meta = {
            "name": name,
            "n": n,
            "queries": GMM_QUERIES,
            "dims": int(queries.shape[1]),
            "seed": seed,
            "source": "debian-minilm base (100k x 384, re-normalised float32)",
            "fit": GMM_FIT
            | {
                "method": "k-means++ start, Lloyd iterations in the PCA basis; per component "
                "weight, mean and per-axis (diagonal) variance in that basis",
                "model": str(gmm_model_dir() / "model.npz"),
                "model_was_cached": cached,
            },
            "sampling": f"base chunk c of {GMM_CHUNK} rows from default_rng([seed, 0, c]), "
            "queries from default_rng([seed, 1]); component by weight, then mean + std * "
            "N(0, 1) in the PCA basis, rotated back, L2-normalised",
            "ground_truth": "exact cosine top-100, float32 blockwise matmul",
            **near,
            "fit_s": fit_s,
            "gt_s": gt_s,
        }
        (d / "meta.json").write_text(json.dumps(meta, indent=1))
    return Dataset(name, d)


def load(spec: str, k: int) -> Dataset:
    """``debian-minilm``, ``debian-minilm-bits``, ``debian-minilm-nphd``,
    ``minilm-gmm-1m`` / ``minilm-gmm:N[:SEED]`` or ``synthetic:N:D[:SEED]``;
    materialised on first use."""
    if spec == "debian-minilm":
        d = cache_root() / "debian-minilm"
        if not (d / "gt.npy").exists():
            src = data_root() / "debian-minilm"
            if not (src / "base.f16.npy").exists():
                raise SystemExit(f"debian-minilm not found at {src} (set SAGITTA_DATA)")
            d.mkdir(parents=True, exist_ok=True)
            np.save(d / "base.f32.npy", _normalize(np.load(src / "base.f16.npy")))
            np.save(d / "queries.f32.npy", _normalize(np.load(src / "queries.f16.npy")))
            np.save(d / "gt.npy", np.load(src / "gt.i32.npy").astype(np.int64))
        ds = Dataset("debian-minilm", d)
    elif spec == "debian-minilm-bits":
        # Sign bits of the embeddings: 384-bit codes, compared by Hamming.
        d = cache_root() / "debian-minilm-bits"
        if not (d / "gt_dist.npy").exists():
            src = load("debian-minilm", k)
            d.mkdir(parents=True, exist_ok=True)
            base = np.packbits(np.asarray(src.base()) > 0, axis=1)
            queries = np.packbits(src.queries() > 0, axis=1)
            gt, gt_dist = hamming_topk(base, queries, 100)
            np.save(d / "base.u8.npy", base)
            np.save(d / "queries.u8.npy", queries)
            np.save(d / "gt.npy", gt)
            np.save(d / "gt_dist.npy", gt_dist)
        ds = Dataset("debian-minilm-bits", d, metric="hamming")
    elif spec == "debian-minilm-nphd":
        # ISCC text codes of the passages, 64 / 128 / 256 bits mixed:
        # variable-length codes compared by NPHD.
        import gzip

        d = cache_root() / "debian-minilm-nphd"
        if not (d / "gt_dist.npy").exists():
            src = data_root() / "debian-minilm"
            d.mkdir(parents=True, exist_ok=True)
            with gzip.open(src / "base_texts.txt.gz", "rt") as f:
                base, blens = _iscc_codes([line.rstrip("\n") for line in f])
            with gzip.open(src / "query_texts.txt.gz", "rt") as f:
                queries, qlens = _iscc_codes([line.rstrip("\n") for line in f])
            gt, gt_dist = nphd_topk(base, blens, queries, qlens, 100)
            np.save(d / "base.u8.npy", base)
            np.save(d / "base_len.npy", blens)
            np.save(d / "queries.u8.npy", queries)
            np.save(d / "queries_len.npy", qlens)
            np.save(d / "gt.npy", gt)
            np.save(d / "gt_dist.npy", gt_dist)
        ds = Dataset("debian-minilm-nphd", d, metric="nphd")
    elif spec == "minilm-gmm-1m" or spec.startswith("minilm-gmm:"):
        parts = spec.split(":")
        n = 1_000_000 if len(parts) == 1 else parse_count(parts[1])
        ds = minilm_gmm(n, int(parts[2]) if len(parts) > 2 else 0)
    elif spec.startswith("synthetic:"):
        parts = spec.split(":")
        n, dims = int(parts[1]), int(parts[2])
        seed = int(parts[3]) if len(parts) > 3 else 0
        d = cache_root() / f"synthetic-{n}-{dims}-{seed}"
        if not (d / "gt.npy").exists():
            d.mkdir(parents=True, exist_ok=True)
            rng = np.random.default_rng(seed)
            # Clustered Gaussian data: closer to embeddings than uniform noise.
            centers = rng.standard_normal((max(16, n // 500), dims)).astype(np.float32)
            assign = rng.integers(0, len(centers), size=n + 1000)
            x = centers[assign] + 0.6 * rng.standard_normal((n + 1000, dims)).astype(np.float32)
            x = _normalize(x)
            base, queries = x[:n], x[n:]
            np.save(d / "base.f32.npy", base)
            np.save(d / "queries.f32.npy", queries)
            np.save(d / "gt.npy", exact_topk(base, queries, 100))
        ds = Dataset(f"synthetic-{n}x{dims}", d)
    else:
        raise SystemExit(
            f"unknown dataset {spec!r} (debian-minilm, debian-minilm-bits, debian-minilm-nphd, "
            "minilm-gmm-1m, minilm-gmm:N[:SEED] or synthetic:N:D[:SEED])"
        )
    if ds.gt().shape[1] < k:
        raise SystemExit(f"ground truth of {ds.name} has fewer than k={k} columns")
    return ds
