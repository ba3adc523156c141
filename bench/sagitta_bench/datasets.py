"""Datasets: debian-minilm from ../shared/data, and a seeded synthetic set.

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


def hamming_topk(base: np.ndarray, queries: np.ndarray, k: int, chunk: int = 2_000):
    """Exact Hamming top-k over packed uint8 codes: ids and distances."""
    bw = base.view(np.uint64) if base.shape[1] % 8 == 0 else base
    qw = queries.view(np.uint64) if queries.shape[1] % 8 == 0 else queries
    best_d = np.full((len(queries), k), np.iinfo(np.int64).max, dtype=np.int64)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(bw), chunk):
        block = bw[start : start + chunk]
        d = np.bitwise_count(qw[:, None, :] ^ block[None, :, :]).sum(-1, dtype=np.int64)
        idx = np.broadcast_to(np.arange(start, start + len(block)), d.shape)
        all_d = np.concatenate([best_d, d], axis=1)
        all_i = np.concatenate([best_i, idx], axis=1)
        order = np.lexsort((all_i, all_d), axis=-1)[:, :k]
        best_d = np.take_along_axis(all_d, order, 1)
        best_i = np.take_along_axis(all_i, order, 1)
    return best_i, best_d


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


def load(spec: str, k: int) -> Dataset:
    """``debian-minilm``, ``debian-minilm-bits`` or ``synthetic:N:D[:SEED]``;
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
        raise SystemExit(f"unknown dataset {spec!r} (debian-minilm or synthetic:N:D[:SEED])")
    if ds.gt().shape[1] < k:
        raise SystemExit(f"ground truth of {ds.name} has fewer than k={k} columns")
    return ds
