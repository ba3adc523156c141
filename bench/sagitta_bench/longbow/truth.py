"""Ground truth and scores of the Longbow benchmark: the rows' categories,
exact (filtered, by-id) top-k in numpy, recall, the share of rows passing a
filter, and latency summaries."""

from __future__ import annotations

import numpy as np

from .. import datasets

CATEGORIES = ("amber", "blue", "green", "red")
K = 10


# ---------------------------------------------------------------- pure helpers


def category_of(rows: np.ndarray) -> np.ndarray:
    """The ``category`` payload of rows (by row number): 4 values, 25 % each."""
    return np.asarray(CATEGORIES, dtype=object)[np.asarray(rows) % len(CATEGORIES)]


def query_category(i: int) -> str:
    """The category query ``i`` filters on."""
    return CATEGORIES[i % len(CATEGORIES)]


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int, rows=None) -> np.ndarray:
    """Exact cosine top-k (unit-norm inputs) of ``queries`` among ``rows``
    of ``base`` (all rows if None), as row numbers, nearest first."""
    if rows is None:
        return datasets.exact_topk(base, queries, k)
    rows = np.asarray(rows)
    return rows[datasets.exact_topk(base[rows], queries, k)]


def filtered_truth(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k of each query among the rows of ``query_category(i)``."""
    cats = category_of(np.arange(len(base)))
    out = np.zeros((len(queries), k), dtype=np.int64)
    for c in CATEGORIES:
        qs = np.array([i for i in range(len(queries)) if query_category(i) == c], dtype=np.int64)
        if len(qs):
            out[qs] = exact_topk(base, queries[qs], k, np.flatnonzero(cats == c))
    return out


def by_id_truth(base: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k neighbours of stored rows ``ids``, each row left out."""
    top = datasets.exact_topk(base, base[ids], k + 1)
    return np.array([[r for r in t if r != i][:k] for t, i in zip(top, ids)], dtype=np.int64)


def recall(found: list, truth: np.ndarray, k: int) -> float | None:
    """Mean |found[:k] ∩ truth[:k]| / k over the queries answered (None
    entries are failed requests and left out)."""
    pairs = [(f, t) for f, t in zip(found, truth) if f is not None]
    if not pairs:
        return None
    hits = sum(len(set(f[:k]) & set(t[:k].tolist())) for f, t in pairs)
    return hits / (len(pairs) * k)


def recall_without_self(found: list, ids, truth: np.ndarray, k: int) -> float | None:
    """Recall of a search by id with the stored row itself left out of what
    came back: each answer's other rows (m of them, at most k) against the
    first m exact neighbours (the row left out there too), so an engine that
    returns the row itself among its k is not marked down for it."""
    num = den = 0
    for f, i, t in zip(found, ids, truth):
        if f is None:
            continue
        rest = [x for x in f if x != int(i)][:k]
        num += len(set(rest) & set(t[: len(rest)].tolist()))
        den += len(rest)
    return num / den if den else None


def filter_pass_share(found: list, n_queries_cat) -> float | None:
    """Share of returned rows whose category is the one query i filtered on."""
    ok = total = 0
    for i, f in enumerate(found):
        if f is None:
            continue
        want = n_queries_cat(i)
        total += len(f)
        ok += sum(1 for r in f if CATEGORIES[r % len(CATEGORIES)] == want)
    return ok / total if total else None


def as_ids(values) -> list[int]:
    """Ids as ints, whatever type came back (int64, uint64 or decimal strings)."""
    return [int(v) for v in values]


def latency_summary(lat_s: list[float], wall_s: float) -> dict:
    a = np.asarray(lat_s, dtype=np.float64) * 1e3
    return {
        "qps": len(a) / wall_s if wall_s > 0 else None,
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
    }


def id_json(i: int, form: str):
    """An id as a DoAction body carries it: ``str`` (what Longbow's SDK
    sends, and its server's ``id`` field type) or ``int`` (a JSON number)."""
    return str(int(i)) if form == "str" else int(i)
