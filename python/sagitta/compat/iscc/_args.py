"""Arguments of the iscc-usearch surface: metric and dtype names (usearch's
and ISCC's spellings), and keys in (uint64, or 128-bit as ``bytes(16)`` /
``V16``) and out."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

_METRICS = {
    "cos": "cos",
    "cosine": "cos",
    "l2sq": "l2",
    "l2": "l2",
    "euclidean": "l2",
    "ip": "ip",
    "dot": "ip",
    "hamming": "hamming",
    "nphd": "nphd",
}
_DTYPES = {
    "f32": "f32",
    "float32": "f32",
    "f16": "f16",
    "float16": "f16",
    "i8": "i8",
    "int8": "i8",
    "b1": "b1",
    "b1x8": "b1",
}


class MetricKind(enum.Enum):
    """usearch's metric kinds that Sagitta has, named as usearch names
    them (``MetricKind.Cos``, ...; ``NPHD`` as in iscc-usearch's fork).
    The value is Sagitta's metric name; a member can be passed back as
    ``metric=``."""

    IP = "ip"
    Cos = "cos"
    L2sq = "l2"
    Hamming = "hamming"
    NPHD = "nphd"

    def __str__(self) -> str:
        return f"MetricKind.{self.name}"


class ScalarKind(enum.Enum):
    """usearch's scalar kinds that Sagitta stores, named as usearch names
    them; the value is Sagitta's dtype name."""

    F32 = "f32"
    F16 = "f16"
    I8 = "i8"
    B1 = "b1"

    def __str__(self) -> str:
        return f"ScalarKind.{self.name}"


try:  # usearch is a dependency of iscc-usearch: its users have it
    from usearch.index import MetricKind as _UsearchMetric
    from usearch.index import ScalarKind as _UsearchScalar
except ImportError:  # pragma: no cover - depends on the environment
    _UsearchMetric = _UsearchScalar = None


def metric_kind(name: str) -> Any:
    """Sagitta's metric name as usearch's ``MetricKind`` member when usearch
    is installed (so that it compares equal to what iscc-usearch returns),
    else as this module's :class:`MetricKind`."""
    ours = MetricKind(name)
    return getattr(_UsearchMetric, ours.name, ours)


def scalar_kind(name: str) -> Any:
    """Sagitta's dtype name as usearch's ``ScalarKind`` member when usearch
    is installed, else as this module's :class:`ScalarKind`."""
    ours = ScalarKind(name)
    return getattr(_UsearchScalar, ours.name, ours)


def _name(x: Any) -> str:
    """A metric or scalar kind as a lower-case name (strings, or usearch's
    ``MetricKind`` / ``ScalarKind`` members)."""
    return str(getattr(x, "name", x)).lower()


def _metric(x: Any) -> str:
    try:
        return _METRICS[_name(x)]
    except KeyError:
        raise ValueError(f"unsupported metric {x!r}") from None


def _dtype(x: Any) -> str:
    try:
        return _DTYPES[_name(x)]
    except KeyError:
        raise ValueError(f"unsupported dtype {x!r}") from None


def _is_single_key(keys: Any) -> bool:
    return isinstance(keys, (int, np.integer)) and not isinstance(keys, bool)


def _key_array(keys: Any) -> np.ndarray:
    """Keys as a 1-D uint64 array (negative or oversized keys refused)."""
    if _is_single_key(keys):
        keys = [int(keys)]
    arr = np.asarray(keys)
    if arr.dtype == np.uint64:
        return arr.reshape(-1)
    if arr.dtype.kind not in "iu" and arr.size:
        raise TypeError(f"keys must be integers, got {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 2**64):
        raise ValueError("keys must be in [0, 2**64)")
    return arr.astype(np.uint64).reshape(-1)


def _is_key128(keys: Any) -> bool:
    return isinstance(keys, (bytes, bytearray)) or (
        isinstance(keys, np.void) and keys.dtype.itemsize == 16
    )


def _key128(key: Any) -> bytes:
    """One 128-bit key as its 16 bytes (``ValueError`` for another length)."""
    b = bytes(key)
    if len(b) != 16:
        raise ValueError(f"UUID key must be bytes of length 16, got {len(b)} bytes")
    return b


def _key128_array(keys: Any) -> np.ndarray:
    """128-bit keys as a 1-D ``V16`` array (each 16 bytes, big-endian)."""
    if _is_key128(keys):
        if len(bytes(keys)) != 16:
            raise ValueError(f"UUID key must be exactly 16 bytes, got {len(bytes(keys))}")
        keys = [bytes(keys)]
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "VS" and keys.dtype.itemsize == 16:
        return np.ascontiguousarray(keys).reshape(-1).view("V16")
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        raise ValueError(f"Batch keys must have dtype 'V16', got {keys.dtype}")
    if isinstance(keys, (int, str, np.integer)):
        raise ValueError(
            f"UUID keys must be bytes(16) or iterable of bytes(16), got {type(keys).__name__}"
        )
    out = []
    for k in keys:
        if not isinstance(k, (bytes, bytearray, np.void)) or len(bytes(k)) != 16:
            raise ValueError(f"All batch keys must be bytes of length 16, got {k!r}")
        out.append(bytes(k))
    return np.frombuffer(b"".join(out), dtype="V16").copy()


def _v16(halves: np.ndarray) -> np.ndarray:
    """(..., 2) uint64 (high, low) halves as ``V16`` (big-endian bytes)."""
    h = np.ascontiguousarray(np.asarray(halves, dtype=np.uint64).astype(">u8"))
    return h.view("V16").reshape(h.shape[:-1])


def _first_of_each(k: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each key (uint64 or V16)."""
    if k.dtype.kind == "V":
        seen: dict[bytes, int] = {}
        for i, b in enumerate(k.tolist()):
            seen.setdefault(bytes(b), i)
        return np.array(sorted(seen.values()), dtype=np.int64)
    return np.unique(k, return_index=True)[1]


def _key_out(k: Any) -> Any:
    """One key as iscc-usearch gives it: int, or bytes for 128-bit."""
    return bytes(k) if isinstance(k, (np.void, bytes)) else int(k)
