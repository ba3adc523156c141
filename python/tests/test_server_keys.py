"""Ids over the real ``sagitta serve`` binary: 128-bit ids through every HTTP
and Flight surface (JSON strings of 32 hex digits; ``fixed_size_binary(16)``,
big-endian, over Flight), the largest one included; typed errors for ids a
collection cannot hold; and the id type a collection created without one
takes from its first write (int64 ids put over Flight come back int64)."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from conftest import brute_force
from server_util import Server, raw, vector_array

D = 4
MAX = 2**128 - 1
# Edges of every width, and random ones above 2**64.
EDGE = [0, 1, 2**63, 2**64 - 1, 2**64, 2**127, MAX - 1, MAX]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("keys") / "data")
    yield s
    assert s.stop() == 0, s.log()[-2000:]


def post(server, path, body):
    return raw(server, "POST", path, json.dumps(body).encode())


def create(server, name, **kw):
    status, _, info = post(server, "/collections", {"name": name, "dims": D, "metric": "l2", **kw})
    assert status == 201, info
    return info


def hex32(v: int) -> str:
    return f"{v:032x}"


def put(client, name, table):
    writer, reader = client.do_put(fl.FlightDescriptor.for_path(name), table.schema)
    writer.write_table(table)
    writer.done_writing()
    ack = reader.read()
    writer.close()  # raises the stream's error, if any
    return json.loads(ack.to_pybytes())


def ticket(body):
    return fl.Ticket(json.dumps(body).encode())


def test_uint128_ids_round_trip_over_every_surface(server):
    rng = np.random.default_rng(11)
    rand = [int.from_bytes(rng.bytes(16), "big") | (1 << 100) for _ in range(24)]
    ids = EDGE + rand
    x = rng.standard_normal((len(ids), D)).astype(np.float32)
    create(server, "wide", id_type="uint128")

    # HTTP: every accepted form of an id (JSON integers up to 2**64 - 1,
    # decimal strings, 32 hex digits, 0x, UUID) in one upsert.
    def form(i, v):
        if v < 2**64 and i % 2 == 0:
            return v
        return [str(v), hex32(v), f"0x{v:x}", str(uuid.UUID(int=v))][i % 4]

    http_n = 16
    body = {"ids": [form(i, v) for i, v in enumerate(ids[:http_n])], "vectors": x[:http_n].tolist()}
    body["payload"] = [{"n": i} for i in range(http_n)]
    status, _, r = post(server, "/collections/wide/upsert", body)
    assert status == 200 and r["upserted"] == http_n, r

    # Flight DoPut into the same collection: fixed_size_binary(16), big-endian.
    client = fl.FlightClient(server.flight_url)
    rest = ids[http_n:]
    table = pa.table(
        {
            "id": pa.array([v.to_bytes(16, "big") for v in rest], pa.binary(16)),
            "vector": vector_array(x[http_n:]),
            "n": pa.array(range(http_n, len(ids)), pa.int64()),
        }
    )
    assert put(client, "wide", table)["rows"] == len(rest)

    # Arrow's uuid extension type (fixed_size_binary(16) underneath) too.
    u = 2**128 - 2**64 + 12345
    table = pa.table(
        {
            "id": pa.ExtensionArray.from_storage(
                pa.uuid(), pa.array([u.to_bytes(16, "big")], pa.binary(16))
            ),
            "vector": vector_array(np.ones((1, D), np.float32)),
            "n": pa.array([-2], pa.int64()),
        }
    )
    assert put(client, "wide", table)["rows"] == 1
    status, _, r = post(server, "/collections/wide/get", {"ids": [hex32(u)]})
    assert r["items"][0]["payload"]["n"] == -2, r
    status, _, r = post(server, "/collections/wide/delete", {"ids": [hex32(u)]})
    assert r["deleted"] == 1

    # HTTP get: every id back in the one documented form (32 hex digits).
    status, _, r = post(server, "/collections/wide/get", {"ids": [hex32(v) for v in ids]})
    assert status == 200 and not r["missing"], r
    assert [it["id"] for it in r["items"]] == [hex32(v) for v in ids]
    assert [it["payload"]["n"] for it in r["items"]] == list(range(len(ids)))

    # HTTP search: each row's own vector finds it, id exact.
    for i in [0, 5, 7, len(ids) - 1]:
        status, _, r = post(
            server, "/collections/wide/search", {"vector": x[i].tolist(), "k": 3, "exact": True}
        )
        assert status == 200 and r["hits"][0]["id"] == hex32(ids[i]), r
        want = brute_force(x, x[i][None], "l2", 3)[0][0]
        assert [h["id"] for h in r["hits"]] == [hex32(ids[j]) for j in want]

    # HTTP scroll: every id once, in hex.
    seen, offset = [], 0
    while offset is not None:
        status, _, r = post(server, "/collections/wide/scroll", {"limit": 10, "offset": offset})
        assert status == 200, r
        seen += [row["id"] for row in r["items"]]
        offset = r.get("next_offset")
    assert sorted(seen) == sorted(hex32(v) for v in ids)

    # Flight DoGet scan: fixed_size_binary(16), every id exact.
    got = client.do_get(ticket({"name": "wide"})).read_all()
    assert got.schema.field("id").type == pa.binary(16)
    back = {
        int.from_bytes(b, "big"): n for b, n in zip(got["id"].to_pylist(), got["n"].to_pylist())
    }
    assert back == {v: i for i, v in enumerate(ids)}
    # ... with a filter on the id (hex string, integer or decimal string).
    t = {"name": "wide", "filter": {"field": "id", "op": "in", "value": [hex32(MAX), 2**64 - 1]}}
    got = client.do_get(ticket(t)).read_all()
    assert sorted(int.from_bytes(b, "big") for b in got["id"].to_pylist()) == [2**64 - 1, MAX]

    # Flight search ticket and the VectorSearch action: the same type.
    i = EDGE.index(MAX)
    res = client.do_get(ticket({"search": {"dataset": "wide", "vector": x[i].tolist(), "k": 2}}))
    res = res.read_all()
    assert res.schema.field("id").type == pa.binary(16)
    assert res["id"][0].as_py() == MAX.to_bytes(16, "big")
    out = list(
        client.do_action(
            fl.Action(
                "VectorSearch",
                json.dumps({"dataset": "wide", "vector": x[0].tolist(), "k": 1}).encode(),
            )
        )
    )
    t = pa.ipc.open_stream(out[0].body.to_pybytes()).read_all()
    assert t.schema.field("id").type == pa.binary(16) and t["id"][0].as_py() == bytes(16)
    # VectorSearchByID and HybridSearch answer JSON: hex strings.
    out = list(
        client.do_action(
            fl.Action(
                "VectorSearchByID",
                json.dumps({"dataset": "wide", "id": hex32(MAX), "k": 2}).encode(),
            )
        )
    )
    r = json.loads(out[0].body.to_pybytes())
    assert len(r["ids"]) == 2 and all(len(s) == 32 for s in r["ids"]) and hex32(MAX) not in r["ids"]

    # set_payload and delete by id, over HTTP and the delete action.
    status, _, r = post(
        server, "/collections/wide/set_payload", {"ids": [str(MAX)], "payload": {"n": -1}}
    )
    assert status == 200 and r["updated"] == 1, r
    status, _, r = post(server, "/collections/wide/get", {"ids": [f"0x{MAX:x}"]})
    assert r["items"][0]["payload"]["n"] == -1
    status, _, r = post(
        server, "/collections/wide/delete", {"ids": [hex32(MAX), hex32(MAX ^ 1 << 70)]}
    )
    assert status == 200 and r["deleted"] == 1, r
    out = list(
        client.do_action(
            fl.Action("delete", json.dumps({"dataset": "wide", "id": [hex32(2**127)]}).encode())
        )
    )
    assert json.loads(out[0].body.to_pybytes())["deleted"] == 1
    status, _, r = post(server, "/collections/wide/get", {"ids": [hex32(MAX), hex32(2**127)]})
    assert status == 200 and not r["items"] and len(r["missing"]) == 2, r


def test_ids_a_collection_cannot_hold_are_typed_errors(server):
    create(server, "wide_err", id_type="uint128")
    v = [[0.0] * D]
    # A JSON number past 2**64 - 1 would lose digits: refused, saying how
    # to send it.
    status, _, r = raw(
        server,
        "POST",
        "/collections/wide_err/upsert",
        b'{"ids": [1267650600228229401496703205376], "vectors": [[0,0,0,0]]}',
    )
    assert status == 400 and "as a string" in r["error"]["message"], r
    for bad in [str(2**128), "0x" + "f" * 33, "g" * 32, -1, 1.5]:
        status, _, r = post(server, "/collections/wide_err/upsert", {"ids": [bad], "vectors": v})
        assert status == 400 and r["error"]["code"] == "invalid_argument", (bad, r)

    # A 128-bit id to a 64-bit collection: 400 over HTTP, INVALID_ARGUMENT
    # over Flight, nothing written, the server serving on.
    create(server, "narrow", id_type="uint64")
    wide = hex32(2**64 | 0xABC)
    status, _, r = post(server, "/collections/narrow/upsert", {"ids": [wide], "vectors": v})
    assert status == 400 and "uint64" in r["error"]["message"], r
    client = fl.FlightClient(server.flight_url)
    table = pa.table(
        {
            "id": pa.array([(2**64 + 5).to_bytes(16, "big")], pa.binary(16)),
            "vector": vector_array(np.zeros((1, D), np.float32)),
        }
    )
    with pytest.raises(pa.ArrowInvalid, match="not a valid uint64 id"):
        put(client, "narrow", table)
    status, _, info = raw(server, "GET", "/collections/narrow")
    assert status == 200 and info["vectors"] == 0 and info["id_type"] == "uint64"


def int_table(ids, dtype=None):
    x = np.arange(len(ids) * D, dtype=np.float32).reshape(len(ids), D)
    return pa.table({"id": pa.array(ids, dtype or pa.int64()), "vector": vector_array(x)}), x


def test_int64_ids_come_back_int64_in_a_collection_created_without_id_type(tmp_path):
    ids = [-(2**63), -5, 0, 7, 2**63 - 1]
    with Server(tmp_path / "data") as s:
        client = fl.FlightClient(s.flight_url)
        # Created over HTTP and by the create-collection action, no id_type.
        assert create(s, "open_http")["id_type"] == "uint64"
        body = json.dumps({"name": "open_action", "dims": D, "metric": "l2"}).encode()
        list(client.do_action(fl.Action("create-collection", body)))
        for name in ["open_http", "open_action"]:
            table, x = int_table(ids)
            assert put(client, name, table)["rows"] == len(ids)
            got = client.do_get(ticket({"name": name})).read_all()
            assert got.schema.field("id").type == pa.int64(), name
            assert sorted(got["id"].to_pylist()) == sorted(ids)
            q = {"search": {"dataset": name, "vector": x[1].tolist(), "k": 2, "exact": True}}
            res = client.do_get(ticket(q)).read_all()
            assert res.schema.field("id").type == pa.int64() and res["id"][0].as_py() == -5
            status, _, info = raw(s, "GET", f"/collections/{name}")
            assert info["id_type"] == "int64"
            status, _, r = post(s, f"/collections/{name}/search", {"vector": x[0].tolist(), "k": 1})
            assert r["hits"][0]["id"] == -(2**63), r

        # Declared uint64: int64 ids are read as uint64 and come back so.
        create(s, "declared", id_type="uint64")
        table, _ = int_table([1, 2, 3])
        put(client, "declared", table)
        got = client.do_get(ticket({"name": "declared"})).read_all()
        assert got.schema.field("id").type == pa.uint64()
        # A first write over JSON fixes the type: integers uint64, ...
        create(s, "json_first")
        status, _, r = post(s, "/collections/json_first/upsert", {"ids": [9], "vectors": [[0] * D]})
        assert status == 200, r
        put(client, "json_first", int_table([1, 2])[0])
        got = client.do_get(ticket({"name": "json_first"})).read_all()
        assert got.schema.field("id").type == pa.uint64()
        # ... a negative one int64.
        create(s, "json_neg")
        status, _, r = post(
            s, "/collections/json_neg/upsert", {"ids": [-9, 4], "vectors": [[0] * D, [1] * D]}
        )
        assert status == 200, r
        got = client.do_get(ticket({"name": "json_neg"})).read_all()
        assert got.schema.field("id").type == pa.int64()
        assert sorted(got["id"].to_pylist()) == [-9, 4]
        # utf8 ids put first: string.
        create(s, "str_first")
        x = np.zeros((2, D), np.float32)
        put(client, "str_first", pa.table({"id": ["a", "7"], "vector": vector_array(x)}))
        got = client.do_get(ticket({"name": "str_first"})).read_all()
        assert got.schema.field("id").type == pa.string()
        assert sorted(got["id"].to_pylist()) == ["7", "a"]
        # uint64 ids put first: uint64, and above 2**63 - 1 exact.
        create(s, "u64_first")
        put(client, "u64_first", int_table([2**64 - 2, 1], pa.uint64())[0])
        got = client.do_get(ticket({"name": "u64_first"})).read_all()
        assert got.schema.field("id").type == pa.uint64()
        assert sorted(got["id"].to_pylist()) == [1, 2**64 - 2]

    # Recorded in the collection: the same after a restart.
    with Server(tmp_path / "data") as s:
        client = fl.FlightClient(s.flight_url)
        for name, want in [
            ("open_http", pa.int64()),
            ("json_neg", pa.int64()),
            ("json_first", pa.uint64()),
            ("u64_first", pa.uint64()),
        ]:
            info = client.get_flight_info(fl.FlightDescriptor.for_path(name))
            assert info.schema.field("id").type == want, name
        got = client.do_get(ticket({"name": "open_http"})).read_all()
        assert sorted(got["id"].to_pylist()) == sorted(ids)
