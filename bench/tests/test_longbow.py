"""The Longbow-style Flight benchmark's pure helpers (no servers)."""

import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from sagitta_bench import longbow as lb  # noqa: E402


def unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_categories_are_balanced_and_deterministic():
    cats = lb.category_of(np.arange(8))
    assert list(cats) == [*lb.CATEGORIES, *lb.CATEGORIES]
    assert [lb.query_category(i) for i in range(4)] == list(lb.CATEGORIES)


def test_filtered_truth_stays_in_the_querys_category():
    rng = np.random.default_rng(1)
    base, queries = unit(rng.normal(size=(400, 8))), unit(rng.normal(size=(12, 8)))
    fgt = lb.filtered_truth(base, queries, 5)
    for i, row in enumerate(fgt):
        assert set(lb.category_of(row)) == {lb.query_category(i)}
        # the same as brute force over that category alone
        rows = np.flatnonzero(lb.category_of(np.arange(400)) == lb.query_category(i))
        sims = base[rows] @ queries[i]
        assert list(row) == list(rows[np.argsort(-sims)[:5]])


def test_by_id_truth_leaves_the_row_out():
    rng = np.random.default_rng(2)
    base = unit(rng.normal(size=(300, 8)))
    ids = np.array([0, 17, 299])
    gt = lb.by_id_truth(base, ids, 4)
    full = lb.exact_topk(base, base[ids], 5)
    for i, g, f in zip(ids, gt, full):
        assert i not in g and list(g) == [x for x in f if x != i][:4]


def test_recalls():
    truth = np.array([[1, 2, 3], [4, 5, 6]])
    assert lb.recall([[1, 2, 9], None], truth, 3) == 2 / 3
    assert lb.recall([None, None], truth, 3) is None
    # by id: the row itself (7 and 8) is left out, the rest compared with
    # as many exact neighbours
    assert lb.recall_without_self([[7, 1, 2], [4, 5, 6]], [7, 8], truth, 3) == 1.0
    assert lb.recall_without_self([[7, 9, 2]], [7], truth, 3) == 0.5  # 2 of [1, 2]


def test_filter_pass_share_and_ids():
    # rows 0 and 4 are CATEGORIES[0]; row 1 is not
    assert lb.filter_pass_share([[0, 4, 1], None], lambda i: lb.CATEGORIES[0]) == 2 / 3
    assert lb.as_ids(["3", 4, np.uint64(5)]) == [3, 4, 5]
    assert lb.id_json(7, "str") == "7" and lb.id_json(np.int64(7), "int") == 7


def test_markdown_shows_errors_and_figures():
    run = {
        "rows": 1000,
        "queries": 10,
        "k": 10,
        "batch_rows": 500,
        "engines": ["sagitta", "longbow"],
        "ground_truth": "numpy",
        "wall_s": 1.0,
        "servers": {},
        "env": {
            "command": "x",
            "cpu": "cpu",
            "cores": 2,
            "kernel": "k",
            "python": "3",
            "pyarrow": "1",
            "loadavg_start": [0.1, 0.1, 0.1],
            "loadavg_end": [0.2, 0.2, 0.2],
        },
        "results": {
            "search_c1": {
                "sagitta": {
                    **lb.latency_summary([0.001, 0.002], 0.003),
                    "errors": 0,
                    "recall_at_10": 0.95,
                },
                "longbow": "error: ArrowInvalid: bad | thing",
            }
        },
    }
    md = lb.markdown(run)
    assert "| search, c1 | 667 QPS, p50 1.50 ms" in md
    assert "recall@10 0.950" in md and "error: ArrowInvalid: bad \\| thing" in md
