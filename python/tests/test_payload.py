"""Payload columns and filtered search through the Python API."""

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import brute_force

import sagitta

N = 600
DIM = 8


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((N, DIM)).astype(np.float32)
    langs = np.array(["en", "de", "fr"])[rng.integers(0, 3, N)].astype(object)
    langs[::11] = None
    payload = {
        "lang": list(langs),
        "year": rng.integers(1990, 2020, N),
        "score": rng.random(N),
        "ok": rng.random(N) < 0.5,
        "tags": [["x", "y"][: i % 3] for i in range(N)],
    }
    return vectors, payload


def make(tmp_path, vectors, payload, segment_vectors=200):
    c = sagitta.Collection.create(
        tmp_path / "c", ndim=DIM, metric="l2", segment_size=segment_vectors * 160
    )
    c.upsert(np.arange(N), vectors, payload=payload)
    return c


def mask(payload, f):
    return np.array([f(i) for i in range(N)])


def test_inputs_dict_dataframe_table_agree(tmp_path, data):
    vectors, payload = data
    df = pd.DataFrame(payload)
    table = pa.table({k: pa.array(v) for k, v in payload.items()})
    counts = []
    for i, p in enumerate([payload, df, table]):
        c = sagitta.Collection.create(tmp_path / f"c{i}", ndim=DIM, metric="l2")
        c.upsert(np.arange(N), vectors, payload=p)
        assert c.schema == {
            "lang": "string",
            "year": "int64",
            "score": "float64",
            "ok": "bool",
            "tags": "tags",
        }
        counts.append(c.count(where={"field": "lang", "op": "eq", "value": "en"}))
    want = sum(1 for x in payload["lang"] if x == "en")
    assert counts == [want] * 3


@pytest.mark.parametrize("sealed", [False, True])
def test_filters_match_numpy(tmp_path, data, sealed):
    vectors, p = data
    c = make(tmp_path, vectors, p)
    if sealed:
        c.seal()
    lang, year, score, ok, tags = (np.array(p[k], dtype=object) for k in p)
    cases = [
        ({"field": "lang", "op": "eq", "value": "en"}, lang == "en"),
        ({"field": "lang", "op": "is_null"}, np.array([x is None for x in lang])),
        ({"field": "year", "op": ">=", "value": 2010}, year >= 2010),
        ({"field": "score", "op": "<", "value": 0.25}, score < 0.25),
        ({"field": "ok", "op": "eq", "value": True}, ok == True),  # noqa: E712
        ({"field": "tags", "op": "contains", "value": "y"}, np.array(["y" in t for t in tags])),
        (
            {
                "and": [
                    {"field": "lang", "op": "in", "value": ["de", "fr"]},
                    {"field": "year", "op": "lt", "value": 2000},
                ]
            },
            np.isin(lang, ["de", "fr"]) & (year < 2000),
        ),
        (
            {
                "or": [
                    {"field": "lang", "op": "eq", "value": "fr"},
                    {"not": {"field": "year", "op": "le", "value": 2015}},
                ]
            },
            (lang == "fr") | ~(year <= 2015),
        ),
        (
            [
                {"field": "year", "op": "=", "value": 1999},
                {"field": "ok", "op": "!=", "value": True},
            ],
            (year == 1999) & (ok == False),  # noqa: E712
        ),
    ]
    for f, m in cases:
        assert c.count(where=f) == m.sum(), f
        scanned = c.scan(where=f, columns=["year"])
        assert sorted(scanned.column("key").to_pylist()) == list(np.flatnonzero(m)), f
        # JSON text is the same filter
        import json

        assert c.count(where=json.dumps(f)) == m.sum()
        # exact filtered search equals the numpy oracle restricted to matches
        allowed = np.flatnonzero(m)
        q = vectors[3] + 0.1
        k = min(10, len(allowed))
        want, _ = brute_force(vectors[allowed], q[None], "l2", k)
        res = c.search(q, 10, where=f, exact=True)
        assert res.counts == k
        np.testing.assert_array_equal(res.keys[:k], allowed[want[0]])
        approx = c.search(q, 10, where=f)
        assert approx.counts == k, "never fewer than k when k match"
        assert m[approx.keys[:k].astype(np.int64)].all()


def test_payload_comes_back_with_results_and_get(tmp_path, data):
    vectors, p = data
    c = make(tmp_path, vectors, p)
    res = c.search(vectors[:2], 3, columns=["year", "lang"])
    t = res.payload
    assert t.num_rows == 6 and t.column_names == ["year", "lang"]
    assert t.column("year").to_pylist() == [int(p["year"][k]) for k in res.keys.ravel()]
    vecs, table = c.get([5, 9999, 7], payload=True)
    assert vecs[1] is None
    assert table.num_rows == 3
    rows = table.to_pylist()
    assert rows[1] == {k: None for k in p}
    assert rows[2]["tags"] == p["tags"][7] and rows[2]["year"] == p["year"][7]
    assert res.payload is not None and c.search(vectors[0], 3).payload is None


def test_schema_evolution_and_type_conflict(tmp_path, data):
    vectors, p = data
    c = make(tmp_path, vectors, p)
    c.seal()
    when = [dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)] * 2
    c.upsert([1000, 1001], vectors[:2], payload={"when": pa.array(when), "lang": ["en", None]})
    assert list(c.schema) == ["lang", "year", "score", "ok", "tags", "when"]
    assert c.count(where={"field": "when", "op": "is_null"}) == N
    assert c.count(where={"field": "when", "op": ">=", "value": "2024-05-01T00:00:00Z"}) == 2
    with pytest.raises(sagitta.PayloadError, match='"year"'):
        c.upsert([2000], vectors[:1], payload={"year": ["not a number"]})
    assert 2000 not in c
    with pytest.raises(sagitta.PayloadError, match="rows"):
        c.upsert([2000, 2001], vectors[:2], payload={"year": [1]})
    assert 2000 not in c
    # survives a reopen (schema from the WAL, rows from segments and WAL)
    path = c.path
    c.close()
    c = sagitta.Collection.open(path)
    assert list(c.schema)[-1] == "when"
    assert c.count(where={"field": "when", "op": "is_not_null"}) == 2
    assert c.count(where={"field": "lang", "op": "eq", "value": "en"}) == 1 + sum(
        1 for x in p["lang"] if x == "en"
    )


def test_remove_where_and_errors(tmp_path, data):
    vectors, p = data
    c = make(tmp_path, vectors, p)
    n = sum(1 for y in p["year"] if y < 2000)
    assert c.remove(where={"field": "year", "op": "lt", "value": 2000}) == n
    assert len(c) == N - n
    assert c.count(where={"field": "year", "op": "lt", "value": 2000}) == 0
    for bad, field in [
        ({"field": "nope", "op": "eq", "value": 1}, "nope"),
        ({"field": "year", "op": "eq", "value": "x"}, "year"),
        ({"field": "year", "op": "~", "value": 1}, "year"),
        ({"field": "tags", "op": "lt", "value": 1}, "tags"),
    ]:
        with pytest.raises(sagitta.PayloadError, match=f'"{field}"'):
            c.search(vectors[0], 5, where=bad)
    for bad in [{"nand": []}, "{oops", 42]:
        with pytest.raises(sagitta.PayloadError):
            c.count(where=bad)
    with pytest.raises(ValueError):
        c.remove([1], where={"field": "year", "op": "lt", "value": 2000})
    with pytest.raises(TypeError):
        c.upsert([1], vectors[:1], payload=object())
    with pytest.raises(sagitta.PayloadError, match="score"):
        c.upsert([1], vectors[:1], payload={"score": [float("nan")]})


def test_set_payload_changes_only_the_named_columns(tmp_path, data):
    vectors, p = data
    c = make(tmp_path, vectors, p)
    assert c.stats()["segments"] >= 2, "rows in sealed segments and the mutable part"
    before = c.get(np.arange(N))
    keys = np.arange(0, N, 4)
    # One row per key; a None clears the value.
    new_year = [3000 + int(k) if k % 8 else None for k in keys]
    assert c.set_payload(keys, {"year": new_year}) == len(keys)
    # The same values for every key, with a new column.
    when = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert c.set_payload([1, 2], values={"lang": "xx", "when": when, "tags": ("t",)}) == 2
    _, table = c.get(np.arange(N), payload=True)
    rows = table.to_pylist()
    changed = dict(zip(keys.tolist(), new_year))
    for k in range(N):
        want_year = changed[k] if k in changed else int(p["year"][k])
        assert rows[k]["year"] == want_year, k
        assert rows[k]["score"] == pytest.approx(p["score"][k]), k
        if k in (1, 2):
            assert rows[k]["lang"] == "xx" and rows[k]["tags"] == ["t"]
            assert rows[k]["when"] == when
        else:
            assert rows[k]["lang"] == p["lang"][k] and rows[k]["tags"] == p["tags"][k], k
            assert rows[k]["when"] is None
    # Vectors are untouched.
    np.testing.assert_array_equal(np.stack(c.get(np.arange(N))), np.stack(before))
    # By filter, through a reopen.
    n = c.count(where={"field": "ok", "op": "eq", "value": True})
    assert c.set_payload(where={"field": "ok", "op": "eq", "value": True}, values={"score": 9}) == n
    path = c.path
    c.close()
    c = sagitta.Collection.open(path)
    assert c.count(where={"field": "score", "op": "eq", "value": 9.0}) == n
    assert c.count(where={"field": "year", "op": ">=", "value": 3000}) == sum(
        1 for y in new_year if y is not None
    )


def test_set_payload_errors_write_nothing(tmp_path, data):
    vectors, p = data
    c = make(tmp_path, vectors, p)
    _, before = c.get(np.arange(N), payload=True)
    with pytest.raises(KeyError, match="12345"):
        c.set_payload([1, 12345], {"year": [1, 2]})
    with pytest.raises(sagitta.PayloadError, match='"year"'):
        c.set_payload([1], {"year": ["x"]})
    with pytest.raises(sagitta.PayloadError, match="rows"):
        c.set_payload([1, 2], {"year": [1]})
    with pytest.raises(sagitta.PayloadError, match='"year"'):
        c.set_payload([1], values={"year": 2.5})
    for bad in [
        {},
        {"keys": [1]},
        {"keys": [1], "payload": {"year": [1]}, "values": {"year": 1}},
        {"where": {"field": "year", "op": "lt", "value": 0}, "payload": {"year": [1]}},
        {"keys": [1], "where": {"field": "year", "op": "lt", "value": 0}, "values": {"year": 1}},
    ]:
        with pytest.raises(ValueError, match="set_payload"):
            c.set_payload(**bad)
    with pytest.raises(ValueError, match="values"):
        c.set_payload([1], values={"score": float("nan")})
    with pytest.raises(TypeError, match="values"):
        c.set_payload([1], values=[1])
    _, after = c.get(np.arange(N), payload=True)
    assert after.equals(before)
    assert list(c.schema) == ["lang", "year", "score", "ok", "tags"]


@pytest.mark.parametrize(
    "kw,make_rows",
    [
        (dict(ndim=256, metric="hamming"), lambda r: r.integers(0, 256, (300, 32), dtype=np.uint8)),
        (dict(ndim=24, metric="l2", dtype="f16"), lambda r: r.standard_normal((300, 24))),
        (dict(ndim=24, metric="l2", dtype="i8"), lambda r: r.integers(-100, 100, (300, 24))),
        (dict(ndim=24, metric="cos"), lambda r: r.standard_normal((300, 24))),
        (dict(ndim=24, metric="l2", kind="ivf_rq"), lambda r: r.standard_normal((300, 24))),
    ],
    ids=["hamming", "f16", "i8", "cos", "ivf"],
)
def test_set_payload_keeps_every_kind_of_stored_vector(tmp_path, kw, make_rows):
    rows = make_rows(np.random.default_rng(1))
    if rows.dtype != np.uint8:
        rows = rows.astype(np.float32)
    c = sagitta.Collection.create(tmp_path / "c", segment_size=100 * 200, **kw)
    c.upsert(np.arange(300), rows, payload={"n": list(range(300))})
    before = c.get(np.arange(300))
    hits = c.search(rows[:5], 5)
    assert c.set_payload(np.arange(0, 300, 2), values={"n": -1}) == 150
    for a, b in zip(before, c.get(np.arange(300))):
        np.testing.assert_array_equal(a, b)
    c.optimize()
    again = c.search(rows[:5], 5)
    np.testing.assert_array_equal(hits.keys, again.keys)
    np.testing.assert_array_equal(hits.distances, again.distances)
    assert c.count(where={"field": "n", "op": "eq", "value": -1}) == 150
