"""The real ``sagitta serve`` binary on ephemeral loopback ports, driven by
real clients: ``sagitta.Client`` / ``http.client`` over HTTP and
``pyarrow.flight`` over Flight."""

from __future__ import annotations

import contextlib
import json
import socket

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from conftest import brute_force
from server_util import REPO, Server, raw, vector_array

import sagitta

N, D = 2000, 32


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # 1 MiB bodies so the size limit is testable.
    s = Server(tmp_path_factory.mktemp("srv") / "data", "--max-body-mib", "1")
    yield s
    assert s.stop() == 0, s.log()[-2000:]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, D)).astype(np.float32)
    cat = rng.choice(["a", "b", "c", "d"], size=N, p=[0.7, 0.2, 0.09, 0.01])
    year = rng.integers(2000, 2025, size=N)
    return x, cat, year


@pytest.fixture(scope="module")
def loaded(server, data):
    """Collection `vec` (l2) with payload, loaded over HTTP."""
    x, cat, year = data
    c = sagitta.Client(server.url)
    col = c.create_collection("vec", ndim=D, metric="l2")
    for s in range(0, N, 500):
        n = col.upsert(
            np.arange(s, s + 500),
            x[s : s + 500],
            payload={"cat": cat[s : s + 500], "year": year[s : s + 500]},
        )
        assert n == 500
    return col


def test_http_search_matches_the_exact_oracle(loaded, data):
    x, _cat, _year = data
    q = np.random.default_rng(8).standard_normal((50, D)).astype(np.float32)
    truth = brute_force(x, q, "l2", 10)[0]
    # Exact search over HTTP equals the numpy oracle.
    res = loaded.search(q, 10, exact=True)
    np.testing.assert_array_equal(res.keys, truth)
    # HNSW over HTTP: recall against the oracle.
    res = loaded.search(q, 10, expansion=64)
    hits = sum(len(set(a) & set(b)) for a, b in zip(res.keys.tolist(), truth.tolist()))
    assert hits / truth.size >= 0.9
    # A single query answers 1-d arrays, same as the batch row.
    one = loaded.search(q[3], 10, exact=True)
    np.testing.assert_array_equal(one.keys, truth[3])
    np.testing.assert_allclose(
        one.distances, ((x[truth[3]] - q[3]) ** 2).sum(1), rtol=1e-4, atol=1e-4
    )


def test_scroll_pages_every_row_once_and_segments_describe_the_parts(server, loaded, data):
    x, cat, year = data

    def scroll(body):
        return raw(server, "POST", "/collections/vec/scroll", json.dumps(body).encode())

    seen, offset = [], 0
    while True:
        s, _, page = scroll({"limit": 1000, "offset": offset, "columns": ["cat"]})
        assert s == 200, page
        for it in page["items"]:
            assert it["payload"] == {"cat": str(cat[it["id"]])}
        seen += [it["id"] for it in page["items"]]
        if "next_offset" not in page:
            break
        offset = page["next_offset"]
    live = loaded.count()
    assert sorted(seen) == sorted(set(seen)) and len(seen) == live
    # A filtered page: only matching rows, with their vectors.
    flt = {"field": "cat", "op": "eq", "value": "d"}
    s, _, page = scroll({"limit": 5, "filter": flt, "include_vectors": True})
    assert s == 200 and len(page["items"]) == 5
    for it in page["items"]:
        assert cat[it["id"]] == "d" and it["payload"]["year"] == int(year[it["id"]])
        np.testing.assert_allclose(it["vector"], x[it["id"]], rtol=1e-6)
    for bad in [{"limit": 0}, {"limit": 1001}, {"offset": 2_000_000}, {"filter": {"field": "zz"}}]:
        s, _, err = scroll(bad)
        assert s == 400 and err["error"]["code"] == "invalid_argument", (bad, err)
    assert raw(server, "POST", "/collections/nope/scroll", b"{}")[0] == 404
    s, _, segs = raw(server, "GET", "/collections/vec/segments")
    assert s == 200
    rows = sum(g["live"] for g in segs["segments"]) + segs["active_vectors"]
    assert rows == live
    for g in segs["segments"]:
        assert g["rows"] == g["live"] + g["tombstones"] and g["kind"] in ("flat", "hnsw")
    for h in segs["history"]:
        assert h["what"] in ("seal", "build", "merge", "compact") and h["at_ms"] > 0
    assert raw(server, "GET", "/whoami")[2] == {"role": "admin", "auth": False}


def test_http_classify_is_the_vote_of_the_exact_neighbours(server, loaded, data):
    x, cat, _year = data
    q = np.random.default_rng(9).standard_normal((20, D)).astype(np.float32)
    truth = brute_force(x, q, "l2", 7)[0]
    for qi, t in zip(q, truth):
        res = loaded.classify(qi, "cat", k=7, exact=True)
        assert [n["id"] for n in res["neighbors"]] == t.tolist()
        assert [n["label"] for n in res["neighbors"]] == [str(cat[i]) for i in t]
        labels, counts = np.unique(cat[t], return_counts=True)
        want = sorted(zip(labels.tolist(), counts.tolist()), key=lambda lc: (-lc[1], f'"{lc[0]}"'))
        assert [(v["label"], v["count"]) for v in res["votes"]] == want
        assert sum(v["share"] for v in res["votes"]) == pytest.approx(1.0)
    # Integer labels, a filter, and the errors.
    res = loaded.classify(
        x[3], "year", k=4, where={"field": "cat", "op": "eq", "value": "a"}, exact=True
    )
    assert all(cat[n["id"]] == "a" for n in res["neighbors"]) and len(res["neighbors"]) == 4
    assert all(isinstance(v["label"], int) for v in res["votes"])
    with pytest.raises(sagitta.BadRequestError, match="no payload column"):
        loaded.classify(x[0], "nope")
    with pytest.raises(sagitta.BadRequestError, match="dimensions"):
        loaded.classify(x[0][:5], "cat")
    with pytest.raises(sagitta.BadRequestError, match="k must be at least 1"):
        loaded.classify(x[0], "cat", k=0)
    status, _, body = raw(
        server, "POST", "/collections/vec/classify", b'{"vector": [1], "label": 3}'
    )
    assert status == 400, body
    status, _, body = raw(
        server, "POST", "/collections/missing/classify", b'{"vector": [1], "label": "c"}'
    )
    assert status == 404, body


def test_http_filters_payload_get_count_delete(server, loaded, data):
    x, cat, year = data
    where = {
        "and": [
            {"field": "cat", "op": "eq", "value": "c"},
            {"field": "year", "op": ">=", "value": 2010},
        ]
    }
    mask = (cat == "c") & (year >= 2010)
    assert loaded.count(where=where) == int(mask.sum())
    assert loaded.count() == N
    q = x[5] + 0.01
    idx = np.flatnonzero(mask)
    truth = idx[brute_force(x[idx], q, "l2", 5)[0][0]]
    res = loaded.search(q, 5, where=where, columns=["year"], exact=True)
    np.testing.assert_array_equal(res.keys, truth)
    assert [p["year"] for p in res.payload] == [int(year[i]) for i in truth]
    # The flat-list filter form (as Flight tickets send) works too.
    flat = [
        {"field": "cat", "op": "eq", "value": "c"},
        {"field": "year", "op": "ge", "value": 2010},
    ]
    assert loaded.count(where=flat) == int(mask.sum())
    vecs, rows = loaded.get([0, 1, 999_999], payload=True)
    np.testing.assert_array_equal(vecs[:2], x[:2])
    assert np.isnan(vecs[2]).all() and rows[2] is None
    assert rows[0] == {"cat": str(cat[0]), "year": int(year[0])}
    # Only missing keys: NaN rows of the collection's width, not (n, 0).
    missing = loaded.get([999_998, 999_999])
    assert missing.shape == (2, D) and np.isnan(missing).all()
    # Delete by key and by filter; both are gone from search and count.
    assert loaded.remove([0, 1, 999_999]) == 2
    rare = {"field": "cat", "op": "eq", "value": "d"}
    n_rare = int((cat[2:] == "d").sum())
    assert loaded.remove(where=rare) == n_rare
    assert loaded.count() == N - 2 - n_rare
    res = loaded.search(x[0], 1, exact=True)
    assert res.keys[0] != 0
    info = loaded.info()
    assert info["vectors"] == N - 2 - n_rare
    assert [f["name"] for f in info["schema"]] == ["cat", "year"]
    assert info["index"]["state"] == "serving"
    names = [c["name"] for c in sagitta.Client(server.url).list_collections()]
    assert "vec" in names


def test_http_set_payload_by_ids_and_by_filter(server, data):
    """POST /collections/C/set_payload: the named columns change on the rows
    named, nothing else does (vectors, other columns, other rows); an id
    that is not stored is 404 and writes nothing; string ids work."""
    x, cat, year = data
    c = sagitta.Client(server.url)
    col = c.create_collection("setp", ndim=D, metric="l2")
    col.upsert(np.arange(300), x[:300], payload={"cat": cat[:300], "year": year[:300]})
    assert col.set_payload([3, 5], values={"year": 1, "note": "hi"}) == 2
    n_b = int((cat[:300] == "b").sum())
    assert (
        col.set_payload(where={"field": "cat", "op": "eq", "value": "b"}, values={"cat": None})
        == n_b
    )
    vecs, rows = col.get(np.arange(300), payload=True)
    np.testing.assert_array_equal(vecs, x[:300])
    for k, r in enumerate(rows):
        assert r.get("year") == (1 if k in (3, 5) else int(year[k])), k
        assert r.get("note") == ("hi" if k in (3, 5) else None), k
        assert r.get("cat") == (None if cat[k] == "b" else str(cat[k])), k
    assert col.count(where={"field": "cat", "op": "is_null"}) == n_b
    with pytest.raises(KeyError) as e:
        col.set_payload([4, 999_999], values={"year": 7})
    assert e.value.status == 404 and "ids[1]: 999999 is not in the collection" in str(e.value)
    _, after = col.get([4], payload=True)
    assert after[0]["year"] == int(year[4])
    for body, fragment in [
        ({"ids": [1]}, "payload"),
        ({"ids": [1], "payload": {}}, "payload"),
        ({"ids": [1], "payload": [1]}, "payload"),
        ({"payload": {"year": 1}}, "exactly one"),
        ({"ids": [1], "filter": {}, "payload": {"year": 1}}, "exactly one"),
        ({"ids": [1], "payload": {"year": "x"}}, "year"),
        ({"ids": [1], "payload": {"year": 1}, "extra": 1}, "extra"),
    ]:
        status, _, answer = raw(
            server, "POST", "/collections/setp/set_payload", json.dumps(body).encode()
        )
        assert status == 400 and fragment in answer["error"]["message"], (body, answer)
    status, _, _ = raw(
        server, "POST", "/collections/nope/set_payload", b'{"ids": [1], "payload": {"a": 1}}'
    )
    assert status == 404
    # String ids: the ids the user gave.
    s = c.create_collection("setp_str", ndim=D, metric="l2", id_type="string", codes="none")
    assert s.info()["id_type"] == "string" and s.info()["codes"] is None
    s.upsert(["a", "b"], x[:2], payload={"n": [1, 2]})
    assert s.set_payload(["b"], values={"n": 20}) == 1
    assert s.get(["a", "b"], payload=True)[1] == [{"n": 1}, {"n": 20}]
    with pytest.raises(KeyError):
        s.set_payload(["zz"], values={"n": 0})


BAD_REQUESTS = [
    # (method, path, body, status, message fragment)
    ("POST", "/collections/vec/search", b'{"vector": [1, 2], "k": 3}', 400, "dimensions"),
    ("POST", "/collections/vec/search", b'{"vector": [NaN, 1], "k": 3}', 400, "invalid JSON"),
    (
        "POST",
        "/collections/vec/search",
        b'{"vector": [1e39' + b", 0" * 31 + b'], "k": 3}',
        400,
        "finite",
    ),
    (
        "POST",
        "/collections/vec/search",
        b'{"vector": [' + b"0," * 31 + b'0], "k": 0}',
        400,
        "k must be",
    ),
    (
        "POST",
        "/collections/vec/search",
        b'{"vector": [' + b"0," * 31 + b'0], "k": 99999999}',
        400,
        "maximum",
    ),
    (
        "POST",
        "/collections/vec/search",
        b'{"vector": [' + b"0," * 31 + b'0], "k": -1}',
        400,
        "invalid JSON",
    ),
    ("POST", "/collections/vec/search", b'{"vector": "abc"}', 400, "invalid JSON"),
    ("POST", "/collections/vec/search", b'{"k": 3}', 400, "exactly one"),
    ("POST", "/collections/vec/search", b'{"vector": [1], "vectors": [[1]]}', 400, "exactly one"),
    ("POST", "/collections/vec/search", b'{"vector": [1], "filters": []}', 400, "unknown field"),
    ("POST", "/collections/vec/search", b"{not json", 400, "invalid JSON"),
    ("POST", "/collections/vec/search", b"", 400, "JSON object"),
    ("POST", "/collections/vec/search", b"[]", 400, "JSON object"),
    ("POST", "/collections/vec/search", b"  [[1, 2]]", 400, "JSON object"),
    (
        "POST",
        "/collections/vec/search",
        b'{"vector": [' + b"0," * 31 + b'0], "filter": {"field": "nope", "op": "eq", "value": 1}}',
        400,
        "nope",
    ),
    (
        "POST",
        "/collections/vec/search",
        b'{"vector": ['
        + b"0," * 31
        + b'0], "filter": {"field": "year", "op": "eq", "value": "x"}}',
        400,
        "year",
    ),
    (
        "POST",
        "/collections/vec/count",
        b'{"filter": '
        + b'{"not": ' * 200
        + b'{"field": "year", "op": "eq", "value": 1}'
        + b"}" * 201,
        400,
        "",
    ),
    ("POST", "/collections/nope/search", b'{"vector": [1], "k": 1}', 404, "not found"),
    ("GET", "/collections/nope", b"", 404, "not found"),
    ("DELETE", "/collections/nope", b"", 404, "not found"),
    ("POST", "/collections/vec/upsert", b'{"ids": [1, 2], "vectors": [[0]]}', 400, "ids"),
    ("POST", "/collections/vec/upsert", b'{"ids": [-5], "vectors": [[0]]}', 400, "uint64 id"),
    (
        "POST",
        "/collections/vec/upsert",
        b'{"ids": [1], "vectors": [[' + b"0," * 31 + b'0]], "payload": [{"year": "not a year"}]}',
        400,
        "year",
    ),
    ("POST", "/collections/vec/delete", b"{}", 400, "exactly one"),
    ("POST", "/collections", b'{"name": "../etc", "dims": 4}', 400, "invalid collection name"),
    (
        "POST",
        "/collections",
        b'{"name": "' + b"x" * 65 + b'", "dims": 4}',
        400,
        "invalid collection name",
    ),
    ("POST", "/collections", b'{"name": "ok", "dims": 0}', 400, "dims"),
    ("POST", "/collections", b'{"name": "ok", "dims": 4, "metric": "manhattan"}', 400, "metric"),
    ("POST", "/collections", b'{"name": "ok", "dims": 4, "m": 100000}', 400, "m = "),
    ("POST", "/collections", b'{"name": "vec", "dims": 4}', 409, "exists"),
    ("GET", "/collections/%2e%2e", b"", 400, "invalid collection name"),
    ("PUT", "/collections", b"{}", 405, "method"),
    ("GET", "/no/such/route", b"", 404, ""),
]


@pytest.mark.parametrize("method,path,body,status,fragment", BAD_REQUESTS)
def test_bad_input_gets_a_clear_4xx_and_the_server_stays_up(
    server, loaded, method, path, body, status, fragment
):
    got, _headers, parsed = raw(server, method, path, body, {"content-type": "application/json"})
    assert got == status, parsed
    assert isinstance(parsed, dict) and "error" in parsed, parsed
    assert fragment.lower() in parsed["error"]["message"].lower(), parsed
    # Nothing leaks paths or internals.
    assert str(server.data) not in json.dumps(parsed)
    assert raw(server, "GET", "/health")[0] == 200


def test_oversized_body_is_413_and_loses_nothing(server, loaded):
    before = loaded.count()
    body = json.dumps({"ids": list(range(40_000)), "vectors": [[0.0] * D] * 40_000}).encode()
    assert len(body) > 1 << 20
    # The server answers from the Content-Length alone and closes the
    # connection, so send the body best-effort and then read the answer.
    sock = socket.create_connection(
        (server.http_addr.split(":")[0], int(server.http_addr.split(":")[1]))
    )
    head = (
        f"POST /collections/vec/upsert HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head)
    with contextlib.suppress(OSError):
        sock.sendall(body)
    resp = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            resp += chunk
    sock.close()
    status_line, _, rest = resp.partition(b"\r\n")
    assert b" 413 " in status_line, resp[:300]
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"
    assert loaded.count() == before


def test_flight_put_get_search_actions(server, data):
    x, cat, year = data
    client = fl.FlightClient(server.flight_url)
    table = pa.table(
        {
            "id": pa.array(np.arange(N), pa.int64()),
            "vector": vector_array(x),
            "cat": pa.array(cat),
            "year": pa.array(year, pa.int64()),
        }
    )
    # An l2 collection, created by an action (a first put would create a
    # cosine one).
    created = list(
        client.do_action(
            fl.Action(
                "create-collection", json.dumps({"name": "fl", "dims": D, "metric": "l2"}).encode()
            )
        )
    )
    assert json.loads(created[0].body.to_pybytes())["metric"] == "l2"
    writer, reader = client.do_put(fl.FlightDescriptor.for_path("fl"), table.schema)
    total = 0
    for batch in table.to_batches(max_chunksize=400):
        writer.write_batch(batch)
        ack = json.loads(reader.read().to_pybytes())
        total += ack["rows"]
        assert ack["total"] == total
    writer.done_writing()
    writer.close()
    assert total == N
    # Listing and info: schema and row count.
    infos = {i.descriptor.path[0].decode(): i for i in client.list_flights()}
    assert infos["fl"].total_records == N
    info = client.get_flight_info(fl.FlightDescriptor.for_path("fl"))
    assert info.schema.names == ["id", "vector", "cat", "year"]
    assert info.schema.field("vector").type == pa.list_(pa.float32(), D)
    # DoGet {"name"}: every row back, as written.
    got = client.do_get(info.endpoints[0].ticket).read_all().sort_by("id")
    assert got.num_rows == N
    np.testing.assert_array_equal(got["id"].to_numpy(), np.arange(N))
    np.testing.assert_array_equal(np.stack(got["vector"].to_numpy(zero_copy_only=False)), x)
    assert got["cat"].to_pylist() == cat.tolist()
    # DoGet search: id/score, same as the exact oracle; unused fields accepted.
    q = x[11] + 0.05
    ticket = {
        "search": {
            "dataset": "fl",
            "vector": q.tolist(),
            "k": 5,
            "exact": True,
            "include_vectors": False,
            "vector_format": "f32",
            "alpha": 0.5,
            "local_only": True,
        }
    }
    res = client.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
    # Ids in the collection's id type (int64: it was made by
    # create-collection without one, and the first put's ids were int64),
    # the payload beside them.
    assert res.schema.names == ["id", "score", "cat", "year"]
    assert (
        res.schema.field("id").type == pa.int64() and res.schema.field("score").type == pa.float32()
    )
    np.testing.assert_array_equal(res["id"].to_numpy(), brute_force(x, q, "l2", 5)[0][0])
    # Filters in the flat list form.
    ticket["search"]["filters"] = [{"field": "cat", "op": "eq", "value": "b"}]
    res = client.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
    assert all(cat[i] == "b" for i in res["id"].to_numpy())
    # Scan with a filter.
    t = {"name": "fl", "filter": [{"field": "year", "op": "lt", "value": 2003}]}
    got = client.do_get(fl.Ticket(json.dumps(t).encode())).read_all()
    assert sorted(got["id"].to_pylist()) == np.flatnonzero(year < 2003).tolist()

    def action(kind, body):
        out = list(client.do_action(fl.Action(kind, json.dumps(body).encode())))
        return json.loads(out[0].body.to_pybytes())

    r = action("VectorSearchByID", {"dataset": "fl", "id": 11, "k": 4})
    d = ((x - x[11]) ** 2).sum(1)
    d[11] = np.inf
    assert r["ids"] == np.argsort(d, kind="stable")[:4].tolist() and len(r["scores"]) == 4
    assert action("delete", {"dataset": "fl", "id": [11, 12]}) == {"deleted": 2}
    # set-payload: the named column of the rows named, and nothing else.
    body = {"name": "fl", "ids": [20, 21], "payload": {"year": 1}}
    assert action("set-payload", body) == {"updated": 2}
    t = {"name": "fl", "filter": [{"field": "year", "op": "eq", "value": 1}]}
    got = client.do_get(fl.Ticket(json.dumps(t).encode())).read_all().sort_by("id")
    assert got["id"].to_pylist() == [20, 21] and got["cat"].to_pylist() == cat[20:22].tolist()
    with pytest.raises(KeyError, match=r"ids\[0\]: 11 is not in the collection"):
        action("set-payload", {"name": "fl", "ids": [11], "payload": {"year": 2}})
    assert action("delete", {"dataset": "fl", "id": 11}) == {"deleted": 0}
    st = action("cluster-status", {})
    assert {"name": "fl", "rows": N - 2} in [
        {k: c[k] for k in ("name", "rows")} for c in st["collections"]
    ]
    assert "fl" in action("list", {})["collections"]
    kinds = {a.type for a in client.list_actions()}
    assert {"delete", "VectorSearchByID", "cluster-status", "list", "set-payload"} <= kinds


def test_flight_string_ids_f16_vectors_and_created_on_first_put(server):
    client = fl.FlightClient(server.flight_url)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8)).astype(np.float16)
    ids = [f"doc-{i}" for i in range(300)]
    table = pa.table({"id": pa.array(ids), "vector": vector_array(x, pa.float16())})
    writer, _reader = client.do_put(fl.FlightDescriptor.for_path("strs"), table.schema)
    writer.write_table(table)
    writer.done_writing()
    writer.close()
    c = sagitta.Client(server.url)
    info = c.collection("strs").info()
    assert (info["dims"], info["dtype"], info["metric"], info["vectors"]) == (8, "f16", "cos", 300)
    vecs, rows = c.collection("strs").get(["doc-7"], payload=True)
    # stored as given (f16), returned as float32
    np.testing.assert_array_equal(vecs[0], x[7].astype(np.float32))
    assert rows[0] == {}  # the string id is the id, not a payload column
    # Ids come back as the strings that were put, over both protocols.
    hits = c.collection("strs").search(x[7].astype(np.float32), k=3)
    assert hits.keys[0] == "doc-7"
    ticket = {"search": {"dataset": "strs", "vector": x[7].astype(float).tolist(), "k": 3}}
    res = client.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
    assert res.schema.field("id").type == pa.string() and res["id"][0].as_py() == "doc-7"
    got = client.do_get(fl.Ticket(json.dumps({"name": "strs"}).encode())).read_all()
    assert got.schema.names == ["id", "vector"] and sorted(got["id"].to_pylist()) == sorted(ids)


def test_collections_get_the_same_default_codes_however_created(server):
    """f32 vectors get sq8 graph codes by default whether the dtype is
    given or not and whether HTTP or a Flight DoPut creates the collection
    (Longbow's clients create theirs by a first DoPut); other dtypes, and
    codes "none", keep a plain graph."""
    for name, body in [
        ("codes_default", {}),
        ("codes_f32", {"dtype": "f32"}),
        ("codes_f16", {"dtype": "f16"}),
        ("codes_none", {"dtype": "f32", "codes": "none"}),
    ]:
        status, _, info = raw(
            server, "POST", "/collections", json.dumps({"name": name, "dims": 4, **body}).encode()
        )
        assert status == 201, info
    client = fl.FlightClient(server.flight_url)
    x = np.random.default_rng(6).standard_normal((50, 4)).astype(np.float32)
    table = pa.table({"id": pa.array(np.arange(50, dtype=np.uint64)), "vector": vector_array(x)})
    writer, _reader = client.do_put(fl.FlightDescriptor.for_path("codes_put"), table.schema)
    writer.write_table(table)
    writer.done_writing()
    writer.close()
    got = {}
    for name in ["codes_default", "codes_f32", "codes_f16", "codes_none", "codes_put"]:
        status, _, info = raw(server, "GET", f"/collections/{name}")
        assert status == 200, info
        got[name] = (info["dtype"], info["codes"])
    assert got == {
        "codes_default": ("f32", "sq8"),
        "codes_f32": ("f32", "sq8"),
        "codes_f16": ("f16", None),
        "codes_none": ("f32", None),
        "codes_put": ("f32", "sq8"),
    }


def test_server_and_python_take_the_same_graph_parameters(server, tmp_path):
    """HNSW build parameters have one set of limits, the index's, whether a
    collection is created over HTTP or from Python; a refused one leaves no
    collection behind."""
    cases = [
        ({"m": 2, "ef_construction": 5000, "ef_search": 65536}, True),
        ({"m": 256}, True),
        ({"m": 1}, False),
        ({"m": 257}, False),
        ({"ef_construction": 65537}, False),
        ({"ef_search": 0}, False),
    ]
    py_names = {
        "m": "connectivity",
        "ef_construction": "expansion_add",
        "ef_search": "expansion_search",
    }
    for i, (params, ok) in enumerate(cases):
        name = f"limits_{i}"
        body = json.dumps({"name": name, "dims": 4, **params}).encode()
        status, _, info = raw(server, "POST", "/collections", body)
        assert status == (201 if ok else 400), (params, info)
        if not ok:
            assert next(iter(params)) in info["error"]["message"], info
            assert raw(server, "GET", f"/collections/{name}")[0] == 404
        kw = {py_names[k]: v for k, v in params.items()}
        if ok:
            sagitta.Collection.create(tmp_path / name, ndim=4, **kw).close()
        else:
            with pytest.raises(ValueError, match=py_names[next(iter(params))]):
                sagitta.Collection.create(tmp_path / name, ndim=4, **kw)


def test_uint128_ids_over_http_and_flight(server):
    """128-bit ids: given as hex strings, integers or fixed_size_binary(16)
    (big-endian), carried back as 32 hex digits (HTTP) and as
    fixed_size_binary(16) (Flight); a lookup never answers for another id."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 4)).astype(np.float32)
    ids = [(i << 64) | (i * 977) for i in range(1, 40)] + [2**128 - 1]
    status, _, info = raw(
        server,
        "POST",
        "/collections",
        json.dumps({"name": "u128", "dims": 4, "metric": "l2", "id_type": "uint128"}).encode(),
    )
    assert status == 201 and info["id_type"] == "uint128", info
    body = {"ids": [f"{v:032x}" for v in ids[:20]] + [str(v) for v in ids[20:39]] + [ids[39]]}
    body["vectors"] = x.tolist()
    # A JSON number above 2**64 - 1 is refused (it would lose bits), so the
    # last id goes as a hex string.
    body["ids"][39] = f"0x{ids[39]:x}"
    status, _, r = raw(server, "POST", "/collections/u128/upsert", json.dumps(body).encode())
    assert status == 200 and r["upserted"] == 40, r
    status, _, r = raw(
        server,
        "POST",
        "/collections/u128/search",
        json.dumps({"vector": x[25].tolist(), "k": 2, "exact": True}).encode(),
    )
    assert status == 200 and r["hits"][0]["id"] == f"{ids[25]:032x}", r
    # get: the same id in any of its forms; an absent one is missing.
    status, _, r = raw(
        server,
        "POST",
        "/collections/u128/get",
        json.dumps({"ids": [str(ids[3]), f"{ids[3] ^ (1 << 100):032x}"]}).encode(),
    )
    assert status == 200 and len(r["items"]) == 1 and len(r["missing"]) == 1, r
    status, _, r = raw(
        server, "POST", "/collections/u128/get", json.dumps({"ids": ["not-an-id"]}).encode()
    )
    assert status == 400, r
    # Flight: search ids as fixed_size_binary(16), big-endian.
    client = fl.FlightClient(server.flight_url)
    ticket = {"search": {"dataset": "u128", "vector": x[39].tolist(), "k": 1}}
    res = client.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
    assert res.schema.field("id").type == pa.binary(16)
    assert res["id"][0].as_py() == ids[39].to_bytes(16, "big")
    # DoPut of fixed_size_binary(16) ids creates a uint128 collection.
    keys = [((7 << 64) | i).to_bytes(16, "big") for i in range(30)]
    table = pa.table({"id": pa.array(keys, pa.binary(16)), "vector": vector_array(x[:30])})
    writer, _reader = client.do_put(fl.FlightDescriptor.for_path("u128put"), table.schema)
    writer.write_table(table)
    writer.done_writing()
    writer.close()
    got = client.do_get(fl.Ticket(json.dumps({"name": "u128put"}).encode())).read_all()
    assert got.schema.field("id").type == pa.binary(16)
    assert sorted(got["id"].to_pylist()) == sorted(keys)
    status, _, r = raw(
        server,
        "POST",
        "/collections/u128put/delete",
        json.dumps({"ids": [f"{(7 << 64) | 3:032x}", f"{(8 << 64) | 3:032x}"]}).encode(),
    )
    assert status == 200 and r["deleted"] == 1, r


def test_flight_put_does_not_recreate_a_collection_dropped_under_it(server):
    client = fl.FlightClient(server.flight_url)
    x = np.random.default_rng(4).standard_normal((20, 4)).astype(np.float32)
    schema = pa.schema([("id", pa.int64()), ("vector", pa.list_(pa.float32(), 4))])

    def batch(lo, hi):
        ids = pa.array(np.arange(lo, hi), pa.int64())
        return pa.record_batch([ids, vector_array(x[lo:hi])], schema=schema)

    writer, reader = client.do_put(fl.FlightDescriptor.for_path("dropme"), schema)
    writer.write_batch(batch(0, 10))
    assert json.loads(reader.read().to_pybytes())["rows"] == 10
    c = sagitta.Client(server.url)
    c.drop_collection("dropme")
    with pytest.raises(pa.ArrowKeyError, match="dropped during this put"):
        writer.write_batch(batch(10, 20))
        writer.done_writing()
        reader.read()
        writer.close()
    assert "dropme" not in [x["name"] for x in c.list_collections()]


BAD_FLIGHT = [
    ({"id": pa.array([1.5]), "vector": "ok"}, "id"),
    ({"vector": "ok"}, "id"),
    ({"id": pa.array([1], pa.int64())}, "vector"),
    ({"id": pa.array([-1], pa.int64()), "vector": "ok"}, "not a valid uint64 id"),
    ({"id": pa.array([1], pa.int64()), "vector": pa.array([[1.0] * D])}, "fixed-size list"),
    ({"id": pa.array([1], pa.int64()), "vector": "short"}, "components"),
    ({"id": pa.array([1], pa.int64()), "vector": "nan"}, "finite"),
    ({"id": pa.array([1], pa.int64()), "vector": "ok", "m": pa.array([[1, 2]])}, "storable"),
]


@pytest.mark.parametrize("cols,fragment", BAD_FLIGHT)
def test_flight_wrong_schema_is_invalid_argument(server, loaded, cols, fragment):
    client = fl.FlightClient(server.flight_url)
    vec = {
        "ok": vector_array(np.zeros((1, D), np.float32)),
        "short": vector_array(np.zeros((1, D - 1), np.float32)),
        "nan": vector_array(np.full((1, D), np.nan, np.float32)),
    }
    table = pa.table({k: (vec[v] if isinstance(v, str) else v) for k, v in cols.items()})
    before = loaded.count()
    with pytest.raises(pa.ArrowInvalid, match=fragment):
        writer, reader = client.do_put(fl.FlightDescriptor.for_path("vec"), table.schema)
        writer.write_table(table)
        writer.done_writing()
        reader.read()
        writer.close()
    assert loaded.count() == before


@pytest.mark.parametrize(
    "ticket,error",
    [
        (b"not json", pa.ArrowInvalid),
        (b'{"name": "nope"}', pa.ArrowKeyError),
        (b'{"search": {"dataset": "vec", "vector": [1, 2], "k": 3}}', pa.ArrowInvalid),
        (b'{"search": {"dataset": "vec", "vector": [1], "k": 0}}', pa.ArrowInvalid),
        (b'{"search": {"dataset": "vec", "k": 3}}', pa.ArrowInvalid),
        (b'{"name": "vec", "search": {}}', pa.ArrowInvalid),
    ],
)
def test_flight_bad_tickets(server, loaded, ticket, error):
    client = fl.FlightClient(server.flight_url)
    with pytest.raises(error):
        client.do_get(fl.Ticket(ticket)).read_all()
    assert raw(server, "GET", "/health")[0] == 200


def test_openapi_served_and_committed_match(server):
    status, _, spec = raw(server, "GET", "/openapi.json")
    assert status == 200
    assert spec == json.loads((REPO / "docs" / "openapi.json").read_text())
    assert "/collections/{name}/search" in spec["paths"]
    status, _headers, page = raw(server, "GET", "/docs")
    assert status == 200 and "openapi.json" in page


def test_metrics_histograms_counters_and_gauges(server, loaded):
    loaded.search(np.zeros(D, np.float32), 3)
    text = sagitta.Client(server.url).metrics()
    assert (
        'sagitta_request_duration_seconds_bucket{protocol="http",route="/collections/{name}/search",'
        'collection="vec",le="0.0001"}' in text
    )
    assert 'sagitta_ingest_rows_total{protocol="http",collection="vec"} 2000' in text
    assert 'sagitta_collection_vectors{collection="vec"}' in text
    assert 'sagitta_collection_wal_bytes{collection="vec"}' in text
    assert (
        'sagitta_requests_total{protocol="http",route="/collections/{name}/search",status="400"}'
        in text
    )


def test_schemathesis_finds_no_server_errors(server, loaded, tmp_path):
    """Property-based run against the OpenAPI document: no 5xx."""
    import shutil
    import subprocess

    exe = shutil.which("schemathesis") or str(REPO / ".venv" / "bin" / "schemathesis")
    r = subprocess.run(
        [
            exe,
            "run",
            f"{server.url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "25",
            "--seed",
            "1",
            "--workers",
            "2",
            "--request-timeout",
            "30",
            "--suppress-health-check",
            "all",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert raw(server, "GET", "/health")[0] == 200


def test_index_threshold_over_http(server):
    """The create request's index_threshold is kept and reported; without
    it the description reports the cost model's threshold; a negative one
    is a 4xx."""
    made = []
    for name, extra in (("thr_default", {}), ("thr_zero", {"index_threshold": 0})):
        req = {"name": name, "dims": 8, "metric": "hamming", "dtype": "b1", **extra}
        status, _, info = raw(server, "POST", "/collections", json.dumps(req).encode())
        assert status == 201, info
        made.append(info["index_threshold"])
    assert made[0] > 10_000 and made[1] == 0, made
    status, _, info = raw(server, "GET", "/collections/thr_zero", b"")
    assert status == 200 and info["index_threshold"] == 0, info
    bad = {"name": "thr_bad", "dims": 8, "index_threshold": -1}
    status, _, r = raw(server, "POST", "/collections", json.dumps(bad).encode())
    assert 400 <= status < 500, r
    for name in ("thr_default", "thr_zero"):
        raw(server, "DELETE", f"/collections/{name}", b"")
