"""Smoke test: the quick mode on a small synthetic set, every engine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))


def run_bench(tmp_path, *args, stem):
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "sagitta_bench", "run", "--dataset", "synthetic:4000:32:7"]
    cmd += ["--mode", "quick", "--out", str(out), *args]
    subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True)
    run = json.loads((out / f"{stem}.json").read_text())
    return run, (out / f"{stem}.md").read_text()


def test_interleaved_two_engines(tmp_path):
    run, md = run_bench(
        tmp_path,
        *("--queries", "60", "--passes", "3", "--warmup", "10"),
        *("--engines", "sagitta-hnsw,hnswlib"),
        stem="synthetic-4000x32-k10-quick-sagitta-hnsw+hnswlib",
    )
    assert run["method"] == "interleaved" and run["passes"] == 3
    assert run["search_groups"] == [["sagitta-hnsw", "hnswlib"]]
    pin = run["env"]["pinning"]
    assert pin["used"] == hasattr(os, "sched_setaffinity")
    ours, peer = run["results"]
    assert (ours["engine"], peer["engine"]) == ("sagitta-hnsw", "hnswlib")
    assert ours["opened"].startswith("memory-mapped") and peer["opened"].startswith("loaded")
    for r in run["results"]:
        # the search process measured what opening and searching held
        assert r["resident_bytes_per_vector"] > 0 and r["open_s"] > 0
        assert [p["knob"] for p in r["sweep"]] == [16, 32, 64, 128]
        for p in r["sweep"]:
            assert len(p["qps_1t_passes"]) == 3 and len(p["qps_all_reps"]) == 3
            assert p["qps_1t_min"] <= p["qps_1t"] <= p["qps_1t_max"]
            assert p["qps_1t"] == sorted(p["qps_1t_passes"])[1]
            assert p["p50_us"] <= p["p99_us"]
        assert r["sweep"][-1]["recall"] >= 0.95
    # one engine timing at a time, taking turns pass by pass
    for a, b in zip(ours["sweep"], peer["sweep"]):
        spans = sorted(
            [(s, e, "a") for s, e in a["pass_spans"]] + [(s, e, "b") for s, e in b["pass_spans"]]
        )
        assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:])), spans
        rounds = [(spans[i][2], spans[i + 1][2]) for i in range(0, len(spans), 2)]
        # each round both engines, the first one rotating
        assert all(set(r) == {"a", "b"} for r in rounds), spans
        assert [r[0] for r in rounds[:2]] in (["a", "b"], ["b", "a"]), spans
    assert "QPS 1t is the median pass" in md and "pinned to cpu" in md
    assert "- hnswlib: loaded into memory" in md
    assert "| 0.95 |" in md and "–" not in md.split("| resident B/vec |")[1].split("\n")[2]


def test_search_in_groups_when_memory_is_short(tmp_path):
    run, md = run_bench(
        tmp_path,
        *("--queries", "30", "--passes", "2", "--warmup", "5", "--no-pin"),
        *("--engines", "sagitta-hnsw,hnswlib", "--memory-fraction", "1e-9"),
        stem="synthetic-4000x32-k10-quick-sagitta-hnsw+hnswlib",
    )
    assert run["search_groups"] == [["sagitta-hnsw"], ["hnswlib"]]
    assert [r["search_group"] for r in run["results"]] == [0, 1]
    assert run["env"]["pinning"]["used"] is False
    assert "ran in 2 groups" in md and "not pinned (--no-pin)" in md
    for r in run["results"]:
        assert r["resident_bytes_per_vector"] > 0 and len(r["sweep"]) == 4


def test_report_renders_runs_of_the_old_harness(tmp_path):
    from sagitta_bench import cli

    # A run written by the harness before interleaving, frozen as it was.
    out = tmp_path / "BENCHMARKS.md"
    cli.write_benchmarks(out, BENCH / "tests" / "data" / "old-harness")
    md = out.read_text()
    assert "the fastest of 3 passes" in md and "reopened in the process that had built it" in md
    assert "| 0.95 | 3276 | – | sagitta-hnsw | hnswlib | 3971 | – | 0.83× |" in md


def test_minilm_gmm_dataset(tmp_path, monkeypatch):
    """minilm-gmm:20000 from a stand-in source (the real fit takes ~30 s):
    shapes, unit norm, exact ground truth, metadata, reuse of the cache."""
    from sagitta_bench import datasets

    src = tmp_path / "data" / "debian-minilm"
    src.mkdir(parents=True)
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((20, 384))
    x = centers[rng.integers(0, 20, 3000)] + 0.5 * rng.standard_normal((3000, 384))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.save(src / "base.f16.npy", x[:2900].astype(np.float16))
    np.save(src / "queries.f16.npy", x[2900:].astype(np.float16))
    np.save(src / "gt.i32.npy", np.zeros((100, 100), dtype=np.int32))
    monkeypatch.setenv("SAGITTA_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("SAGITTA_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(datasets.GMM_FIT, "components", 12)
    monkeypatch.setitem(datasets.GMM_FIT, "iterations", 5)

    ds = datasets.load("minilm-gmm:20000", 10)
    assert ds.name == "minilm-gmm-20k" and ds.dir == tmp_path / "cache" / "minilm-gmm-20k"
    base, queries, gt = np.asarray(ds.base()), ds.queries(), ds.gt()
    assert base.shape == (20000, 384) and queries.shape == (1000, 384) and gt.shape == (1000, 100)
    assert base.dtype == np.float32 and np.allclose(np.linalg.norm(base, axis=1), 1, atol=1e-5)
    exact = np.argsort(-(queries[:20] @ base.T), axis=1, kind="stable")[:, :100]
    assert (exact == gt[:20]).mean() > 0.999
    meta = json.loads((ds.dir / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["n"] == 20000 and meta["fit"]["components"] == 12
    assert (tmp_path / "cache" / "minilm-gmm-model-c12-s0" / "model.npz").exists()
    # reused, not rebuilt; another seed samples other vectors from the same fit
    stamp = (ds.dir / "base.f32.npy").stat().st_mtime_ns
    assert datasets.load("minilm-gmm:20000", 10).dir == ds.dir
    assert (ds.dir / "base.f32.npy").stat().st_mtime_ns == stamp
    other = datasets.load("minilm-gmm:20000:1", 10)
    assert other.name == "minilm-gmm-20k-s1"
    assert not np.allclose(np.asarray(other.base()[:10]), base[:10])


def test_quick_run_produces_results(tmp_path):
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "sagitta_bench", "run", "--dataset", "synthetic:4000:32:7"]
    cmd += ["--mode", "quick", "--queries", "100", "--out", str(out)]
    cmd += ["--write-benchmarks", str(tmp_path / "BENCHMARKS.md")]
    subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True)
    run = json.loads((out / "synthetic-4000x32-k10-quick.json").read_text())
    engines = {r["engine"] for r in run["results"]}
    assert engines == {
        "sagitta-hnsw",
        "sagitta-hnsw-f32",
        "sagitta-hnsw-f16",
        "sagitta-collection",
        "faiss-hnsw",
        "hnswlib",
        "usearch-hnsw",
        "lancedb-hnsw",
    }
    assert run["method"] == "interleaved" and len(run["search_groups"]) == 1
    for r in run["results"]:
        assert r["build_s"] > 0 and r["size_bytes"] > 0 and r["rss_peak_mb"] > r["rss_base_mb"]
        assert r["resident_bytes_per_vector"] > 0 and r["opened"] != "?"
        assert [p["knob"] for p in r["sweep"]] == [16, 32, 64, 128]
        for p in r["sweep"]:
            assert 0.0 <= p["recall"] <= 1.0
            assert p["qps_1t"] > 0 and p["p50_us"] <= p["p99_us"]
        # every HNSW reaches high recall on 4k clustered vectors at ef=128
        assert r["sweep"][-1]["recall"] >= 0.95, r["engine"]
        # batch and one-by-one searches agree on recall within noise
        assert abs(r["sweep"][-1]["recall_batch"] - r["sweep"][-1]["recall"]) < 0.02
    assert (out / "synthetic-4000x32-k10-quick.png").stat().st_size > 10_000
    md = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| 0.95 |" in md and "sagitta-hnsw" in md


def test_quick_ivf_engines_run(tmp_path):
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "sagitta_bench", "run", "--dataset", "synthetic:4000:32:7"]
    cmd += ["--mode", "quick", "--queries", "50", "--passes", "1", "--engines", "ivf"]
    cmd += ["--out", str(out)]
    subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True)
    run = json.loads((out / "synthetic-4000x32-k10-quick-ivf.json").read_text())
    assert {r["engine"] for r in run["results"]} == {
        "faiss-ivf-rabitq",
        "lancedb-ivf-pq",
        "lancedb-ivf-rq",
        "sagitta-ivf-rq",
    }
    for r in run["results"]:
        assert r["knob"] == "nprobe"
        recalls = [p["recall"] for p in r["sweep"]]
        assert all(0.0 < x <= 1.0 for x in recalls)
        # probing more partitions never loses recall (same candidates and more)
        assert recalls[-1] >= recalls[0] - 0.02, (r["engine"], recalls)
        # the search process measured what opening and searching held
        assert r["open_s"] > 0 and r["resident_bytes_per_vector"] > 0
    # 1-bit codes over 32 dimensions with a 50-candidate rerank (0.82 here;
    # 0.98 on 384-d debian-minilm).
    ours = next(r for r in run["results"] if r["engine"] == "sagitta-ivf-rq")
    assert ours["sweep"][-1]["recall"] >= 0.75


def test_filtered_mode_runs_every_filtering_engine(tmp_path):
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "sagitta_bench", "filtered", "--dataset", "synthetic:4000:32:7"]
    cmd += ["--queries", "40", "--passes", "1", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True)
    files = list((out / "filtered").glob("*.json"))
    assert len(files) == 1
    run = json.loads(files[0].read_text())
    assert [r["engine"] for r in run["results"]] == ["sagitta", "faiss-hnsw", "hnswlib", "lancedb"]
    for r in run["results"]:
        rows = r["rows"]
        # unfiltered + 3 families x 5 selectivities
        assert len(rows) == 16 and rows[0]["family"] == "none"
        for x in rows:
            assert 0.0 <= x["recall"] <= 1.0 and x["qps"] > 0
    ours = run["results"][0]["rows"]
    # measured selectivities land near their targets (the eq family picks
    # Zipf categories, so 10% and 50% are 15% and 61%)
    for x in ours[1:]:
        assert x["target"] / 4 <= x["selectivity"] <= max(4 * x["target"], 1.0), x
    # Sagitta: exact on small filters, never short, high recall everywhere
    assert min(x["recall"] for x in ours) >= 0.95
    assert all(x["short"] == 0.0 for x in ours)
    md = (out / "filtered" / files[0].name.replace(".json", ".md")).read_text()
    assert "| and | 1% |" in md


def test_busy_times_optimize_with_and_without_busy_processes():
    cmd = [sys.executable, "-m", "sagitta_bench", "busy", "--dataset", "synthetic:3000:32:7"]
    cmd += ["--rows", "3000", "--rounds", "1", "--burners", "1"]
    out = subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True).stdout
    rows = [x for x in out.splitlines() if x.startswith("| 0 |") or x.startswith("| 1 |")]
    assert len(rows) == 2, out
    for x in rows:
        assert float(x.rstrip(" |").rsplit("|", 1)[1]) > 0


def test_memory_reports_each_engines_build():
    cmd = [sys.executable, "-m", "sagitta_bench", "memory", "--dataset", "synthetic:3000:32:7"]
    cmd += ["--rounds", "1", "--engines", "sagitta-collection,hnswlib"]
    out = subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True).stdout
    rows = {x.split("|")[1].strip(): x for x in out.splitlines() if x.startswith("| ")}
    assert {"sagitta-collection", "hnswlib"} <= rows.keys(), out
    cells = [c.strip() for c in rows["sagitta-collection"].strip(" |").split("|")]
    # peak over base, median, anon / file, after build, after close, seconds
    assert float(cells[2]) >= 0 and cells[5] != "–" and float(cells[6]) > 0, out


def test_memory_measures_a_collection_with_a_text_field():
    cmd = [sys.executable, "-m", "sagitta_bench", "memory", "--dataset", "synthetic:3000:32:7"]
    cmd += ["--rounds", "1", "--engines", "sagitta-collection-text"]
    out = subprocess.run(cmd, check=True, cwd=BENCH, capture_output=True, text=True).stdout
    rows = [x for x in out.splitlines() if x.startswith("| sagitta-collection-text |")]
    assert len(rows) == 1, out
    cells = [c.strip() for c in rows[0].strip(" |").split("|")]
    assert float(cells[2]) > 0 and cells[5] != "–" and float(cells[6]) > 0, out


def test_hamming_ground_truths_agree_with_a_brute_force_scan():
    """Both exact top-k paths (numpy, Sagitta's Flat oracle) give the
    distances of a plain per-pair scan; numpy's ids break ties by row."""
    from sagitta_bench.datasets import hamming_topk, hamming_topk_flat

    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, (3_000, 8), dtype=np.uint8)
    queries = base[rng.integers(0, len(base), 20)].copy()
    queries[:, 2] ^= 0x0F
    bits = np.unpackbits(base, axis=1)
    for q, ids, dist in zip(queries, *hamming_topk(base, queries, 30, rows=1_000, block=7)):
        full = (bits != np.unpackbits(q)).sum(1)
        order = np.lexsort((np.arange(len(base)), full))[:30]
        assert (ids == order).all() and (dist == full[order]).all()
    ids_f, dist_f = hamming_topk_flat(base, queries, 30)
    assert (dist_f == hamming_topk(base, queries, 30)[1]).all()
    for q, ids, dist in zip(queries, ids_f, dist_f):
        assert (dist == (bits[ids] != np.unpackbits(q)).sum(1)).all()
