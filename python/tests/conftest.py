"""Shared fixtures and numpy oracles for the sagitta tests."""

import os
from pathlib import Path

import numpy as np
import pytest


def data_dir() -> Path:
    """debian-minilm: $SAGITTA_DATA, else ../shared/data next to the repository."""
    env = os.environ.get("SAGITTA_DATA")
    if env:
        return Path(env) / "debian-minilm" if (Path(env) / "debian-minilm").is_dir() else Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "debian-minilm"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def brute_force(base: np.ndarray, queries: np.ndarray, metric: str, k: int):
    """Exact top-k by the engine's distance definitions (smaller is nearer).

    Ties are broken by key (row number), as the engine does.
    """
    base = base.astype(np.float64)
    queries = np.atleast_2d(queries).astype(np.float64)
    if metric == "l2":
        d = ((queries[:, None, :] - base[None, :, :]) ** 2).sum(-1)
    elif metric == "ip":
        d = 1.0 - queries @ base.T
    elif metric == "cos":
        bn = base / np.maximum(np.linalg.norm(base, axis=1, keepdims=True), 1e-30)
        qn = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-30)
        d = 1.0 - qn @ bn.T
    else:
        raise ValueError(metric)
    order = np.lexsort((np.broadcast_to(np.arange(base.shape[0]), d.shape), d), axis=-1)[:, :k]
    return order, np.take_along_axis(d, order, axis=1)


def hamming_brute_force(base: np.ndarray, queries: np.ndarray, k: int):
    """Exact Hamming top-k over packed uint8 codes (ties by key)."""
    x = np.bitwise_xor(np.atleast_2d(queries)[:, None, :], base[None, :, :])
    d = np.unpackbits(x, axis=-1).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(base.shape[0]), d.shape), d), axis=-1)[:, :k]
    return order, np.take_along_axis(d, order, axis=1)


def nphd(a: bytes, b: bytes) -> float:
    """Normalized prefix Hamming distance of two codes."""
    m = min(len(a), len(b))
    diff = sum(bin(x ^ y).count("1") for x, y in zip(a[:m], b[:m]))
    return diff / (8 * m)
