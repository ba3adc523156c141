"""The text mode: the task's scoring rule, and smoke runs on a small
stand-in of debian-pkg-retrieval (``$SAGITTA_DATA`` in a temp dir)."""

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from sagitta_bench.text import score_query  # noqa: E402


def test_score_query_follows_the_task_rule():
    ndcg2 = 1 / (1 + 1 / math.log2(3))  # ideal DCG of 2 hits
    # The query's own row is dropped: the 11th row moves up to rank 10.
    ranked = [7, 1, 2, 3, 4, 5, 6, 8, 9, 10, 42]
    assert score_query(ranked, 7, [42]) == (1.0, 1 / math.log2(11), 0.1)
    assert score_query(ranked[:10], 7, [42]) == (0.0, 0.0, 0.0)
    # hits at ranks 1 and 3 of 2 relevant
    r, n, m = score_query([5, 9, 6, 1], 0, [5, 6])
    assert r == 1.0 and m == 1.0 and n == pytest.approx((1 + 0.5) * ndcg2)
    # first hit at rank 2; one of two relevant found
    r, n, m = score_query([9, 6, 1], 0, [5, 6])
    assert r == 0.5 and m == 0.5 and n == pytest.approx(1 / math.log2(3) * ndcg2)
    # recall and the ideal DCG are capped at 10 relevant rows
    rel = list(range(100, 112))
    r, n, m = score_query(rel[:10], 0, rel)
    assert (r, m) == (1.0, 1.0) and n == pytest.approx(1.0)
    # a row repeated gains once; keys may be numpy integers
    r, n, _ = score_query(np.array([5, 5, 6], dtype=np.uint64), 0, [5, 6])
    assert r == 1.0 and n == pytest.approx((1 + 0.5) * ndcg2)
    with pytest.raises(ValueError):
        score_query([1], 0, [])


def make_stand_in(root: Path, packages: int = 60, filler: int = 300, seed: int = 0) -> None:
    """A tiny debian-minilm + debian-pkg-retrieval: each package has a
    query row and 1-3 relevant rows sharing its topic words and lying
    near its vector, among filler rows."""
    rng = np.random.default_rng(seed)
    vocab = [f"word{i}" for i in range(3000)]
    texts, vecs, queries = [], [], []

    def add(words, vec) -> int:
        texts.append(" ".join(words))
        vecs.append(vec / np.linalg.norm(vec))
        return len(texts) - 1

    for p in range(packages):
        topic = list(rng.choice(vocab, 3, replace=False))
        center = rng.standard_normal(384)
        q = add([f"pkg{p}", *topic], center + 0.3 * rng.standard_normal(384))
        rel = [
            add([*topic, *rng.choice(vocab, 8)], center + 0.6 * rng.standard_normal(384))
            for _ in range(rng.integers(1, 4))
        ]
        queries.append(
            {
                "qid": f"dev-{p:05d}",
                "query_row": q,
                "query_text": texts[q],
                "package": f"pkg{p}",
                "relevant_rows": rel,
                "n_relevant": len(rel),
            }
        )
    for _ in range(filler):
        add(list(rng.choice(vocab, 10)), rng.standard_normal(384))
    d, t = root / "debian-minilm", root / "debian-pkg-retrieval"
    d.mkdir(parents=True)
    t.mkdir()
    np.save(d / "base.f16.npy", np.array(vecs, dtype=np.float16))
    with gzip.open(d / "base_texts.txt.gz", "wt") as f:
        f.write("".join(s + "\n" for s in texts))
    (t / "dev_queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))


def run_text(tmp_path, monkeypatch, *args) -> tuple[dict, str]:
    make_stand_in(tmp_path / "data")
    monkeypatch.setenv("SAGITTA_DATA", str(tmp_path / "data"))
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "sagitta_bench", "text", "--out", str(out), *args]
    p = subprocess.run(cmd, cwd=BENCH, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    (js,) = (out / "text").glob("text-*.json")
    return json.loads(js.read_text()), js.with_suffix(".md").read_text()


def test_text_lancedb(tmp_path, monkeypatch):
    run, md = run_text(
        tmp_path,
        monkeypatch,
        *("--engines", "lancedb", "--limit-queries", "50", "--rows", "400"),
        *("--sample-slow", "10", "--warmup", "3"),
    )
    assert run["queries"] == 50 and run["corpus_rows"] == 400 and run["common"] == 10
    (r,) = run["results"]
    methods = {m["method"]: m for m in r["methods"]}
    assert list(methods) == [
        "FTS (BM25)",
        "hybrid, flat vectors (RRF)",
        "dense only, IVF_HNSW_SQ (reference)",
        "hybrid, IVF_HNSW_SQ (RRF)",
    ]
    assert methods["hybrid, flat vectors (RRF)"]["queries"] == 10
    for m in methods.values():
        assert m["common"]["queries"] == 10 and m["mean_ms"] > 0
        assert m["p50_ms"] <= m["p99_ms"]
        assert 0.5 < m["ndcg"] <= 1 and 0 <= m["recall"] <= 1 and 0 <= m["mrr"] <= 1
    steps = [s["step"].split("(")[0].strip() for s in r["ingest"]]
    assert steps == ["create_table", "create_fts_index", "create_index IVF_HNSW_SQ"]
    assert all(s["seconds"] > 0 and s["rows"] == 400 for s in r["ingest"])
    assert run["env"]["pinning"]["used"] == hasattr(os, "sched_setaffinity")
    assert "| lancedb | FTS (BM25) | 50 |" in md and "Load average at start" in md
    assert "reduced with `--rows`" in md

    from sagitta_bench import cli

    bm = tmp_path / "BENCHMARKS.md"
    cli.write_benchmarks(bm, tmp_path / "results")
    assert "## Full-text and hybrid search (debian-pkg-retrieval, dev split)" in bm.read_text()


def test_text_tantivy(tmp_path, monkeypatch):
    run, md = run_text(
        tmp_path,
        monkeypatch,
        *("--engines", "tantivy", "--limit-queries", "50", "--rows", "400", "--warmup", "3"),
    )
    (r,) = run["results"]
    ((m),) = r["methods"]
    assert m["method"] == "BM25" and m["queries"] == 50
    # The stand-in's relevant rows share the query's topic words.
    assert m["ndcg"] > 0.5 and m["p50_ms"] <= m["p99_ms"]
    (step,) = r["ingest"]
    assert step["rows"] == 400 and step["seconds"] > 0
    assert "| tantivy | BM25 | 50 |" in md


def test_text_sagitta(tmp_path, monkeypatch):
    from sagitta_bench.text_engines import sagitta_text_api_error

    assert sagitta_text_api_error() is None
    run, md = run_text(
        tmp_path,
        monkeypatch,
        *("--engines", "sagitta", "--limit-queries", "50", "--rows", "400"),
        *("--sweep-queries", "20", "--warmup", "3", "--skip-embed"),
    )
    (r,) = run["results"]
    main = [m for m in r["methods"] if m["group"] == "main"]
    sweep = [m for m in r["methods"] if m["group"] == "sweep"]
    assert [m["method"] for m in main] == [
        "dense only (reference)",
        "BM25 only",
        "hybrid, default fusion",
    ]
    assert len(sweep) == 19 and all(m["queries"] == 20 for m in sweep)
    assert {m["params"]["fusion"] for m in sweep} == {"rrf", "alpha", "dbsf"}
    for m in r["methods"]:
        assert m["ndcg"] > 0.5 and m["common"]["queries"] == 20
    assert "Fusion sweep" in md and "| sagitta | BM25 only | 50 |" in md
