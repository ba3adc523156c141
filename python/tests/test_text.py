"""Full-text and hybrid search from Python: BM25 against an independent
numpy oracle (the "simple" analyzer) through the collection's lifecycle,
fusion arithmetic from each leg's ranks, filters on both legs, typed
errors. Data: the bundled sample of debian-minilm (texts + vectors)."""

from __future__ import annotations

import gzip
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import sagitta

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
QUERIES = [
    "XML parser library for Python",
    "terminal emulator",
    "kernel module driver for wireless network cards",
    "documentation",
    "GNU C compiler",
]


@pytest.fixture(scope="module")
def sample():
    texts = gzip.open(SAMPLE / "base_texts.txt.gz", "rt", encoding="utf-8").read().splitlines()
    vecs = np.load(SAMPLE / "base.f16.npy").astype(np.float32)
    return texts[:4000], vecs[:4000]


def tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"[^\W_]+", text.lower()) if len(t.encode()) <= 40]


def bm25_oracle(texts, query, k, keep=None, k1=0.9, b=0.4):
    """Lucene BM25 over `texts` (key = row), analysed by splitting on
    non-alphanumerics and lower-casing, each distinct query term once;
    best first, ties by key."""
    docs = [Counter(tokens(t)) for t in texts]
    lens = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    n = float((lens > 0).sum())
    avgdl = lens[lens > 0].mean()
    scores = np.zeros(len(texts))
    for term in set(tokens(query)):
        df = sum(1 for d in docs if term in d)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.get(term, 0)
            if tf:
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens[i] / avgdl))
    rows = [i for i in np.nonzero(scores > 0)[0] if keep is None or keep(i)]
    rows.sort(key=lambda i: (-scores[i], i))
    return [(i, scores[i]) for i in rows[:k]]


def check_against_oracle(c, texts, what):
    for q in QUERIES:
        r = c.search(None, 10, text=q)
        want = bm25_oracle(texts, q, 10)
        assert len(r.keys) == len(want), (what, q)
        np.testing.assert_allclose(r.scores, [s for _, s in want], rtol=2e-4, err_msg=f"{what} {q}")
        got, exp = list(r.keys), [i for i, _ in want]
        for j, (g, e) in enumerate(zip(got, exp)):
            # Rows may only trade places when their scores tie.
            assert g == e or abs(want[j][1] - r.scores[j]) < 1e-4 * want[j][1], (what, q, got, exp)
        assert (r.text_ranks == np.arange(1, len(got) + 1)).all()
        assert np.isnan(r.dense_distances).all() and (r.dense_ranks == -1).all()


def test_bm25_matches_an_independent_oracle_through_the_lifecycle(tmp_path, sample):
    texts, vecs = sample
    path = tmp_path / "c"
    c = sagitta.Collection.create(path, ndim=384, text_fields={"text": "simple"})
    for s in range(0, len(texts), 1000):
        keys = np.arange(s, s + 1000, dtype=np.uint64)
        c.upsert(keys, vecs[s : s + 1000], payload={"text": texts[s : s + 1000]})
    check_against_oracle(c, texts, "mutable part")
    c.optimize()
    assert c.stats()["segments"] >= 1
    check_against_oracle(c, texts, "optimized")
    c.close()
    r = sagitta.Collection.open(path, read_only=True)
    check_against_oracle(r, texts, "reopened")


def test_hybrid_legs_fusion_and_filters(tmp_path, sample):
    texts, vecs = sample
    c = sagitta.Collection.create(tmp_path / "h", ndim=384, text_fields=["text"])
    langs = np.where(np.arange(len(texts)) % 3 == 0, "a", "b")
    c.upsert(np.arange(len(texts)), vecs, payload={"text": texts, "part": langs})
    c.optimize()
    q = vecs[17]
    r = c.search(q, 10, text=texts[17], depth=30, fusion="rrf", exact=True)
    # RRF (k 60) from the legs' ranks.
    legs = np.zeros(len(r.keys))
    legs += np.where(r.dense_ranks > 0, 1.0 / (60 + r.dense_ranks), 0)
    legs += np.where(r.text_ranks > 0, 1.0 / (60 + r.text_ranks), 0)
    np.testing.assert_allclose(r.scores, legs, rtol=1e-6)
    assert r.keys[0] == 17 and r.dense_ranks[0] == 1 and r.text_ranks[0] == 1
    # The dense leg's ranks are the order of a plain search at that depth.
    dense = c.search(q, 30, exact=True)
    for key, rank in zip(r.keys, r.dense_ranks):
        if rank > 0:
            assert dense.keys[rank - 1] == key
    # alpha = 1: dense order; 0: text order.
    a1 = c.search(q, 10, text=texts[17], alpha=1.0, exact=True)
    assert list(a1.keys) == list(dense.keys[:10])
    a0 = c.search(q, 10, text=texts[17], alpha=0.0)
    assert list(a0.keys) == list(c.search(None, 10, text=texts[17]).keys)
    # The default fusion: 0.3 · min-max(dense) + 0.7 · min-max(text).
    d = c.search(q, 10, text=texts[17], exact=True)
    assert len(d.keys) == 10 and d.keys[0] == 17
    for fusion in ("dbsf", "rrf"):
        assert len(c.search(q, 10, text="python", fusion=fusion)) == 10
    # A filter applies to both legs before top-k.
    w = {"field": "part", "op": "eq", "value": "a"}
    f = c.search(q, 10, text="library", where=w, columns=["part"])
    assert len(f.keys) == 10 and all(k % 3 == 0 for k in f.keys)
    assert set(f.payload.column("part").to_pylist()) == {"a"}


def test_bad_text_arguments_raise_clear_errors(tmp_path, sample):
    texts, vecs = sample
    c = sagitta.Collection.create(tmp_path / "e", ndim=384, text_fields=["text"])
    c.upsert(np.arange(100), vecs[:100], payload={"text": texts[:100]})
    for kwargs, msg in [
        (dict(text=""), "no searchable terms"),
        (dict(text="the of and"), "no searchable terms"),
        (dict(text="x", alpha=1.5), "alpha"),
        (dict(text="x", fusion="zzz"), "unknown method"),
        (dict(text="x", fusion="alpha"), "needs alpha"),
        (dict(text="x", depth=0), "depth"),
        (dict(text="x", depth=10_001), "depth"),
        (dict(text="w " * 600_000), "at most"),
    ]:
        with pytest.raises(ValueError, match=msg):
            c.search(None, 5, **kwargs)
    with pytest.raises(ValueError, match="apply to text searches"):
        c.search(vecs[0], 5, alpha=0.5)
    with pytest.raises(ValueError, match="analyzer"):
        sagitta.Collection.create(tmp_path / "bad", ndim=4, text_fields={"t": "klingon"})
    with pytest.raises(ValueError, match="text_field"):
        sagitta.Collection.create(tmp_path / "bad2", ndim=4, text_fields="t")
    with pytest.raises(OSError, match="no embedding model"):
        c.upsert([5000], None, payload={"text": ["hello"]})
    assert 5000 not in c
    plain = sagitta.Collection.create(tmp_path / "p", ndim=384)
    plain.upsert([1], vecs[:1])
    with pytest.raises(ValueError, match="no text fields"):
        plain.search(None, 1, text="python")
