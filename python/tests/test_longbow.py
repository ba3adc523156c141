"""Longbow's clients against the real ``sagitta serve``: Longbow's own Python
SDK (../shared/longbow-client, unmodified, installed by scripts/python-env)
and pyarrow.flight with Longbow's tickets and action bodies. The SDK's own
test suite runs in scripts/longbow-sdk-tests; these tests cover what it
checks only through ``.compute()`` (filters, payload in results) and what
it does not check at all (ids as given, actions, bad input)."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from longbow import LongbowClient
from server_util import Server, raw

import sagitta

DIM = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("lb") / "data")
    yield s
    assert s.stop() == 0, s.log()[-2000:]


@pytest.fixture(scope="module")
def sdk(server):
    c = LongbowClient(uri=server.flight_url, meta_uri=server.flight_url)
    c.connect()
    return c


def action(server, kind: str, body) -> list:
    client = fl.FlightClient(server.flight_url)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return [r.body.to_pybytes() for r in client.do_action(fl.Action(kind, raw))]


def brute(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q)
    return np.argsort(-(xn @ qn), kind="stable")[:k]


@pytest.fixture(scope="module")
def docs(sdk):
    """Inserted as the SDK's users do: a DataFrame with int ids, float64
    vectors (numpy's default), text and metadata columns; the SDK adds a
    timestamp column."""
    rng = np.random.default_rng(11)
    n = 400
    x = rng.standard_normal((n, DIM))
    cats = np.array(["tech", "ai", "db"])[np.arange(n) % 3]
    df = pd.DataFrame(
        {
            "id": np.arange(n, dtype=np.int64) * 10 - 50,  # negative ids too
            "text": [f"document {i} about {c}" for i, c in enumerate(cats)],
            "category": cats,
            "priority": np.arange(n) % 4,
        }
    )
    df["vector"] = list(x)
    sdk.insert("docs", df)
    return df, x


def test_insert_search_filters_and_payload_as_longbow_users_expect(sdk, docs):
    df, x = docs
    ids = df["id"].to_numpy()
    q = x[7]
    res = sdk.search("docs", vector=q.tolist(), k=10)
    # Ids in the type they were put (int64, negative ones included), the
    # payload columns beside them, results exact against brute force.
    assert res["id"].dtype == np.int64
    assert {"category", "priority", "text", "timestamp"} <= set(res.columns)
    assert res["id"].tolist()[0] == ids[7]
    got = set(res["id"].tolist())
    want = set(ids[brute(x, q, 10)].tolist())
    assert len(got & want) >= 9
    # Filters in Longbow's list form (ops in any case, AND).
    res = sdk.search(
        "docs",
        vector=q.tolist(),
        k=10,
        filters=[
            {"field": "category", "op": "Eq", "value": "tech"},
            {"field": "priority", "op": "eq", "value": 1},
        ],
    )
    assert len(res) == 10
    assert (res["category"] == "tech").all() and (res["priority"] == 1).all()
    none = sdk.search(
        "docs", vector=q.tolist(), k=5, filters=[{"field": "category", "op": "eq", "value": "x"}]
    )
    assert len(none) == 0
    # include_vectors adds the stored vector, as it was put (cosine too).
    res = sdk.search("docs", vector=q.tolist(), k=3, include_vectors=True)
    v = np.asarray(res["vector"].iloc[0], np.float32)
    np.testing.assert_array_equal(v, x[7].astype(np.float32))


def test_search_by_id_delete_download_and_info_keep_the_ids(sdk, docs, server):
    df, x = docs
    ids = df["id"].to_numpy()
    r = sdk.search_by_id("docs", int(ids[7]), k=5)
    assert len(r["ids"]) == 5 and int(ids[7]) not in r["ids"]
    assert all(isinstance(i, int) for i in r["ids"])
    # Longbow's SDK sends ids as strings in `delete`; they are read as the
    # collection's int64 ids.
    sdk.delete("docs", ids=[int(ids[0]), int(ids[1])])
    t = sdk.download_arrow("docs")
    assert t.num_rows == len(ids) - 2
    assert t.schema.field("id").type == pa.int64()
    assert set(t["id"].to_pylist()) == set(ids[2:].tolist())
    # Conditions on `id` in a download ticket, with values as strings.
    t = sdk.download_arrow("docs", filter=[{"field": "id", "op": "lt", "value": "0"}])
    assert sorted(t["id"].to_pylist()) == sorted(i for i in ids[2:] if i < 0)
    t = sdk.download_arrow(
        "docs",
        filter=[
            {"field": "id", "op": "ge", "value": 100},
            {"field": "category", "op": "eq", "value": "ai"},
        ],
    )
    assert t.num_rows > 0 and all(i >= 100 for i in t["id"].to_pylist())
    assert set(t["category"].to_pylist()) == {"ai"}
    info = sdk.get_info("docs")
    assert info["total_records"] == len(ids) - 2
    # HTTP answers with the same ids.
    hits = sagitta.Client(server.url).collection("docs").search(x[9].astype(np.float32), k=1)
    assert hits.keys[0] == ids[9]


def test_string_ids_round_trip_every_path(sdk, server):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((50, DIM)).astype(np.float32)
    names = [f"pkg-{i}" for i in range(50)]
    table = pa.table(
        {
            "id": pa.array(names),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM),
            "section": pa.array(["main"] * 25 + ["contrib"] * 25),
        }
    )
    sdk.insert("pkgs", table)
    res = sdk.search("pkgs", vector=x[3].tolist(), k=3)
    assert res["id"].tolist()[0] == "pkg-3"
    r = sdk.search_by_id("pkgs", "pkg-3", k=2)
    assert len(r["ids"]) == 2 and all(i.startswith("pkg-") for i in r["ids"])
    sdk.delete("pkgs", ids=["pkg-0"])
    t = sdk.download_arrow("pkgs")
    assert t.schema.names == ["id", "vector", "section"]
    assert sorted(t["id"].to_pylist()) == sorted(names[1:])
    t = sdk.download_arrow("pkgs", filter=[{"field": "id", "op": "in", "value": ["pkg-4", "x"]}])
    assert t["id"].to_pylist() == ["pkg-4"]
    # The HTTP API takes and returns the same strings.
    c = sagitta.Client(server.url).collection("pkgs")
    assert c.info()["id_type"] == "string"
    vec = c.get(["pkg-5", "nope"])
    assert np.isfinite(vec[0]).all() and np.isnan(vec[1]).all()
    # Integers put into a string collection are their decimal strings.
    sdk.insert(
        "pkgs",
        pa.table(
            {
                "id": pa.array([77], pa.int64()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(x[0]), DIM),
                "section": pa.array(["main"]),
            }
        ),
    )
    assert "77" in sdk.download_arrow("pkgs")["id"].to_pylist()


def test_node_actions_answer_as_longbow_does(server, docs):
    st = json.loads(action(server, "cluster-status", b"")[0])
    assert st["count"] == 1 and st["members"][0]["Addr"] == server.flight_addr
    assert st["members"][0]["Status"] == 0 and st["self"]["ID"]
    ready = json.loads(action(server, "check_readiness", {"dataset": "docs"})[0])
    assert ready["status"] == "READY"
    assert json.loads(action(server, "check_readiness", {"dataset": "no"})[0])["status"] == (
        "NOT_FOUND"
    )
    assert json.loads(action(server, "MeshIdentity", b"")[0])["GRPCAddr"] == server.flight_addr
    assert len(json.loads(action(server, "MeshStatus", b"")[0])) == 1
    assert json.loads(action(server, "DiscoveryStatus", b"")[0])["peers"] == []
    # Namespaces (in memory, as in Longbow).
    action(server, "CreateNamespace", {"name": "team-a"})
    with pytest.raises(pa.ArrowException, match="already exists"):
        action(server, "CreateNamespace", {"name": "team-a"})
    ns = json.loads(action(server, "ListNamespaces", b"")[0])
    assert {"default", "team-a"} <= set(ns["namespaces"])
    total = json.loads(action(server, "GetTotalNamespaceCount", b"")[0])["count"]
    assert total == ns["count"]
    count = json.loads(action(server, "GetNamespaceDatasetCount", {"name": "default"})[0])
    assert count["count"] >= 1
    action(server, "DeleteNamespace", {"name": "team-a"})
    with pytest.raises(pa.ArrowKeyError, match="not found"):
        action(server, "GetNamespaceDatasetCount", {"name": "team-a"})
    assert json.loads(action(server, "ForceSnapshot", b"")[0])["status"] == "ok"


def test_search_actions(server, docs):
    df, x = docs
    body = {"dataset": "docs", "vectors": [x[5].tolist(), x[6].tolist()], "k": 4}
    bodies = action(server, "VectorSearch", body)
    assert len(bodies) == 2
    first = pa.ipc.open_stream(bodies[0]).read_all()
    assert first["id"][0].as_py() == df["id"][5] and first.num_rows == 4
    hyb = json.loads(
        action(
            server,
            "HybridSearch",
            {"dataset": "docs", "vector": x[5].tolist(), "k": 3, "alpha": 1.0},
        )[0]
    )
    assert hyb[0]["ID"] == df["id"][5] and set(hyb[0]) == {"ID", "Distance", "Score", "Metadata"}
    assert hyb[0]["Metadata"]["category"] == df["category"][5]


# pyarrow raises INVALID_ARGUMENT as ArrowInvalid, NOT_FOUND as
# ArrowKeyError, UNIMPLEMENTED as ArrowNotImplementedError.
BAD = [
    # Unknown action types are UNIMPLEMENTED, as in Longbow.
    ("nosuch-action", b"{}", pa.ArrowNotImplementedError, "unknown action"),
    ("VectorSearchByID", b"{not json", pa.ArrowInvalid, "invalid JSON"),
    ("VectorSearchByID", b'{"dataset": "nope", "id": 1}', pa.ArrowKeyError, "not found"),
    ("VectorSearchByID", b'{"dataset": "docs", "id": "abc"}', pa.ArrowInvalid, "int64"),
    (
        "VectorSearchByID",
        b'{"dataset": "docs", "id": 123456789}',
        pa.ArrowKeyError,
        "id 123456789 is not in",
    ),
    ("delete", b'{"dataset": "docs"}', pa.ArrowInvalid, "id"),
    ("add-edge", b'{"dataset": "docs"}', pa.ArrowNotImplementedError, "no graph"),
    ("traverse-graph", b'{"dataset": "docs", "start": 1}', pa.ArrowNotImplementedError, "no graph"),
    ("GetGraphStats", b'{"dataset": "docs"}', pa.ArrowNotImplementedError, "no graph"),
    ("CreateNamespace", b"{name", pa.ArrowInvalid, "invalid JSON"),
    ("DeleteNamespace", b'{"name": ', pa.ArrowInvalid, "invalid JSON"),
    ("GetNamespaceDatasetCount", b"[not json", pa.ArrowInvalid, "invalid JSON"),
    ("GetNamespaceDatasetCount", b'{"name": 7}', pa.ArrowInvalid, "invalid JSON"),
    ("delete-dataset", b"{}", pa.ArrowInvalid, "dataset"),
    ("delete-dataset", b"{not json", pa.ArrowInvalid, "invalid JSON"),
    ("delete-dataset", b'{"dataset": "nope"}', pa.ArrowKeyError, "not found"),
]


@pytest.mark.parametrize("kind,body,exc,fragment", BAD)
def test_bad_actions_get_clear_errors(server, docs, kind, body, exc, fragment):
    with pytest.raises(exc, match=fragment):
        action(server, kind, body)


def test_bad_puts_write_nothing(server, docs):
    client = fl.FlightClient(server.flight_url)
    before = client.get_flight_info(fl.FlightDescriptor.for_path("docs")).total_records
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(2 * DIM, np.float32)), DIM)
    # Duplicate ids in one batch.
    t = pa.table({"id": pa.array([5000, 5000], pa.int64()), "vector": vec})
    with pytest.raises(pa.ArrowInvalid, match="given twice"):
        w, _r = client.do_put(fl.FlightDescriptor.for_path("docs"), t.schema)
        w.write_table(t)
        w.close()
    # Null rows in the vector column.
    nulls = pa.FixedSizeListArray.from_arrays(
        pa.array(np.zeros(2 * DIM, np.float32)), DIM, mask=pa.array([False, True])
    )
    t = pa.table({"id": pa.array([6000, 6001], pa.int64()), "vector": nulls})
    with pytest.raises(pa.ArrowInvalid, match="null"):
        w, _r = client.do_put(fl.FlightDescriptor.for_path("docs"), t.schema)
        w.write_table(t)
        w.close()
    # A ticket that is not JSON, and an unknown dataset.
    with pytest.raises(pa.ArrowInvalid, match="invalid JSON"):
        client.do_get(fl.Ticket(b"docs")).read_all()
    with pytest.raises(pa.ArrowKeyError, match="not found"):
        client.do_get(fl.Ticket(b'{"name": "nope"}')).read_all()
    after = client.get_flight_info(fl.FlightDescriptor.for_path("docs")).total_records
    assert after == before


def put(client, name: str, *batches: pa.RecordBatch) -> None:
    """One DoPut stream of `batches`, each acknowledged before the next."""
    w, r = client.do_put(fl.FlightDescriptor.for_path(name), batches[0].schema)
    for b in batches:
        w.write_batch(b)
        r.read()
    w.close()


def rows(ids, x: np.ndarray | None = None) -> pa.RecordBatch:
    """`ids` with vectors `x` (default: all ones)."""
    if x is None:
        x = np.ones((len(ids), DIM), np.float32)
    v = pa.FixedSizeListArray.from_arrays(pa.array(x.astype(np.float32).ravel()), DIM)
    return pa.record_batch([pa.array(ids), v], names=["id", "vector"])


def names(client) -> set:
    return {f.descriptor.path[0].decode() for f in client.list_flights()}


def test_delete_dataset_drops_the_dataset_named_by_dataset_or_name(server):
    client = fl.FlightClient(server.flight_url)
    for n in ["drop-a", "drop-b"]:
        put(client, n, rows(pa.array([1, 2], pa.int64())))
    assert {"drop-a", "drop-b"} <= names(client)
    r = json.loads(action(server, "delete-dataset", {"dataset": "drop-a"})[0])
    assert r == {"status": "deleted", "dataset": "drop-a"}
    assert "drop-a" not in names(client) and "drop-b" in names(client)
    # `name` names a dataset too (never a namespace).
    action(server, "delete-dataset", {"name": "drop-b"})
    assert not {"drop-a", "drop-b"} & names(client)
    with pytest.raises(pa.ArrowKeyError, match="not found"):
        action(server, "delete-dataset", {"dataset": "drop-a"})
    # A namespace of that name stays: delete-dataset does not look at it.
    action(server, "CreateNamespace", {"name": "drop-c"})
    with pytest.raises(pa.ArrowKeyError, match="not found"):
        action(server, "delete-dataset", {"name": "drop-c"})
    assert "drop-c" in json.loads(action(server, "ListNamespaces", b"")[0])["namespaces"]
    action(server, "DeleteNamespace", {"name": "drop-c"})


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(lambda a: pa.array(a, pa.int64()), id="int64"),
        pytest.param(lambda a: pa.array([f"doc-{i}" for i in a]), id="string"),
        # negative: the first batch fixes the new dataset's id type (int64)
        pytest.param(lambda a: pa.array([-i for i in a], pa.int64()), id="negative-int64"),
    ],
)
def test_an_id_repeated_in_a_later_batch_of_one_put_is_refused(server, ids):
    client = fl.FlightClient(server.flight_url)
    name = f"dups-{ids([0]).type}-{ids([1])[0].as_py()}"
    x, y, z = 1, 2, 3
    w, r = client.do_put(fl.FlightDescriptor.for_path(name), rows(ids([x, y])).schema)
    w.write_batch(rows(ids([x, y])))
    assert json.loads(r.read().to_pybytes()) == {"rows": 2, "total": 2}
    with pytest.raises(pa.ArrowInvalid, match="earlier batch of this upload"):
        w.write_batch(rows(ids([z, x]), np.eye(DIM)[:2]))
        r.read()
        w.close()
    # The acknowledged batch stays as written; nothing of the refused one.
    t = client.do_get(fl.Ticket(json.dumps({"name": name}).encode())).read_all()
    assert sorted(t["id"].to_pylist()) == sorted(ids([x, y]).to_pylist())
    first = t["vector"][t["id"].to_pylist().index(ids([x])[0].as_py())].as_py()
    np.testing.assert_array_equal(first, np.ones(DIM, np.float32))
    # Another upload may write the same ids again (an upsert).
    put(client, name, rows(ids([x, z])))
    t = client.do_get(fl.Ticket(json.dumps({"name": name}).encode())).read_all()
    assert t.num_rows == 3


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _ipc(batch: pa.RecordBatch) -> list:
    """The IPC messages of `batch`'s stream: (header, body) of its schema
    and of the batch."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return [
        (m.metadata.to_pybytes(), m.body.to_pybytes() if m.body else b"")
        for m in pa.ipc.MessageReader.open_stream(sink.getvalue())
    ]


def _flight_data(header: bytes, body: bytes, path: str | None = None) -> bytes:
    """A FlightData protobuf: descriptor (1, PATH), data_header (2), data_body (1000)."""
    out = b""
    if path:
        out += _field(1, _varint(1 << 3) + _varint(1) + _field(3, path.encode()))
    return out + _field(2, header) + (_field(1000, body) if body else b"")


@pytest.mark.parametrize("with_schema", [True, False], ids=["new-schema", "other-layout"])
def test_a_schema_change_within_a_put_is_refused_and_earlier_batches_stay(server, with_schema):
    # pyarrow's writer refuses a batch of another schema before sending it,
    # so the stream is sent as raw FlightData over gRPC (grpcio comes with
    # Longbow's SDK): a batch of int64 ids, then one of string ids, with its
    # own schema message or without one.
    name = f"schema-change-{int(with_schema)}"
    (s1, b1) = _ipc(rows(pa.array([1, 2], pa.int64())))
    (s2, b2) = _ipc(rows(pa.array(["x", "y"])))
    msgs = [_flight_data(*s1, path=name), _flight_data(*b1)]
    msgs += [_flight_data(*s2), _flight_data(*b2)] if with_schema else [_flight_data(*b2)]
    with grpc.insecure_channel(server.flight_addr) as ch:
        call = ch.stream_stream(
            "/arrow.flight.protocol.FlightService/DoPut",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        acks = []
        with pytest.raises(grpc.RpcError) as err:
            for a in call(iter(msgs), timeout=30):
                acks.append(a)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert len(acks) == 1
    client = fl.FlightClient(server.flight_url)
    t = client.do_get(fl.Ticket(json.dumps({"name": name}).encode())).read_all()
    assert sorted(t["id"].to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    "vector",
    [
        pytest.param(
            pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2 * DIM, np.int64)), DIM),
            id="int64-list",
        ),
        pytest.param(pa.array(["a", "b"]), id="utf8"),
        pytest.param(
            pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2 * DIM, np.uint8)), DIM),
            id="uint8-list",
        ),
        pytest.param(pa.array([[1.0] * DIM] * 2, pa.list_(pa.float32())), id="variable-list"),
    ],
)
def test_a_vector_column_of_another_type_is_refused_and_writes_nothing(server, docs, vector):
    client = fl.FlightClient(server.flight_url)
    desc = fl.FlightDescriptor.for_path("docs")
    before = client.get_flight_info(desc).total_records
    t = pa.table({"id": pa.array([7001, 7002], pa.int64()), "vector": vector})
    with pytest.raises(pa.ArrowInvalid, match="`vector`"):
        w, _r = client.do_put(desc, t.schema)
        w.write_table(t)
        w.close()
    assert client.get_flight_info(desc).total_records == before
    got = client.do_get(
        fl.Ticket(b'{"name": "docs", "filters": [{"field": "id", "op": "ge", "value": 7001}]}')
    ).read_all()
    assert got.num_rows == 0


def test_a_search_ticket_for_an_unknown_dataset_is_not_found(server):
    client = fl.FlightClient(server.flight_url)
    ticket = {"search": {"dataset": "no-such-dataset", "vector": [0.5] * DIM, "k": 3}}
    with pytest.raises(pa.ArrowKeyError, match="not found"):
        client.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()


def test_hybrid_search_action_with_text_query(server):
    action(
        server,
        "create-collection",
        {"name": "lb-text", "dims": DIM, "text_fields": ["text"]},
    )
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, DIM)).astype(np.float32)
    texts = [f"ordinary note number {i}" for i in range(40)]
    texts[17] = "zeppelin harmonica recital"
    t = pa.table(
        {
            "id": pa.array(np.arange(40), pa.int64()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM),
            "text": pa.array(texts),
        }
    )
    client = fl.FlightClient(server.flight_url)
    put(client, "lb-text", *t.to_batches())
    # Text only: the one row with those words, no dense distance.
    hits = json.loads(
        action(server, "HybridSearch", {"dataset": "lb-text", "text_query": "harmonica", "k": 3})[0]
    )
    assert [h["ID"] for h in hits] == [17]
    assert hits[0]["Distance"] is None and hits[0]["Metadata"]["text"] == texts[17]
    # Hybrid: the text match and the dense match of another row both come.
    hits = json.loads(
        action(
            server,
            "HybridSearch",
            {
                "dataset": "lb-text",
                "vector": x[5].tolist(),
                "text_query": "zeppelin recital",
                "alpha": 0.5,
                "k": 5,
            },
        )[0]
    )
    ids = [h["ID"] for h in hits]
    assert {5, 17} <= set(ids)
    assert hits[ids.index(5)]["Distance"] is not None
    assert hits == sorted(hits, key=lambda h: -h["Score"])


def text_rows(n: int = 60, seed: int = 5) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows as Longbow's perf_test.py puts them: `meta` text and a
    `category` string beside the vector; row 17's text and row 30's
    category hold words no other row has."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, DIM))
    meta = [f"ordinary note number {i}" for i in range(n)]
    meta[17] = "zeppelin harmonica recital"
    cats = ["A" if i % 2 == 0 else "B" for i in range(n)]
    cats[30] = "walrus"
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64), "meta": meta, "category": cats})
    df["vector"] = list(x)
    return df, x


def text_fields(server, name: str) -> list:
    status, _, info = raw(server, "GET", f"/collections/{name}")
    assert status == 200, info
    return [f["name"] for f in info["text_fields"]]


def test_a_dataset_made_by_doput_indexes_its_string_columns_for_hybrid_search(sdk, server):
    """No setting, no create call: the string columns of the first batch
    are the dataset's text fields, and stay payload (returned, filtered)."""
    df, x = text_rows()
    sdk.insert("lb-auto-text", df)
    assert text_fields(server, "lb-auto-text") == ["meta", "category"]
    # Hybrid, as Longbow's SDK and perf_test.py send it: the text match
    # (row 17) and the dense match (row 5) both come.
    res = sdk.search(
        "lb-auto-text", vector=x[5].tolist(), k=5, text_query="zeppelin recital", alpha=0.5
    )
    ids = res["id"].tolist()
    assert {5, 17} <= set(ids), ids
    row17 = res[res["id"] == 17].iloc[0]
    assert row17["meta"] == "zeppelin harmonica recital" and row17["text_rank"] == 1
    # Text only: the word of one category value finds that row alone.
    res = sdk.search("lb-auto-text", vector=[], k=3, text_query="walrus")
    assert res["id"].tolist() == [30]
    # Filters on a text field still test the payload value.
    res = sdk.search(
        "lb-auto-text",
        vector=x[5].tolist(),
        k=10,
        filters=[{"field": "category", "op": "Eq", "value": "A"}],
    )
    assert len(res) == 10 and (res["category"] == "A").all()


def test_a_dataset_that_exists_without_text_fields_keeps_none(server):
    """Text fields are chosen when a dataset is created: one created
    before without them (here by create-collection) stays without, and a
    hybrid search says so."""
    action(server, "create-collection", {"name": "lb-no-text", "dims": DIM})
    df, x = text_rows()
    t = pa.table(
        {
            "id": pa.array(df["id"]),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(x.astype(np.float32).ravel()), DIM
            ),
            "meta": pa.array(df["meta"]),
        }
    )
    client = fl.FlightClient(server.flight_url)
    put(client, "lb-no-text", *t.to_batches())
    assert text_fields(server, "lb-no-text") == []
    ticket = {"search": {"dataset": "lb-no-text", "vector": x[0].tolist(), "k": 3}}
    ticket["search"].update(text_query="zeppelin", alpha=0.5)
    with pytest.raises(pa.ArrowInvalid, match="no text fields"):
        client.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()


@pytest.mark.parametrize(
    "args,env,want",
    [
        # Longbow's settings by environment (LONGBOW_ prefix first), or
        # the `serve` flags, which win over the environment.
        ([], {"LONGBOW_HYBRID_TEXT_COLUMNS": "meta"}, ["meta"]),
        (["--hybrid-text-columns", "category,absent"], {}, ["category"]),
        ([], {"HYBRID_SEARCH_ENABLED": "false"}, []),
        (["--hybrid-search-enabled", "true"], {"LONGBOW_HYBRID_SEARCH_ENABLED": "0"}, None),
    ],
    ids=["env-columns", "flag-columns", "env-off", "flag-over-env"],
)
def test_longbows_hybrid_settings_choose_the_text_columns(tmp_path, monkeypatch, args, env, want):
    for k in ("HYBRID_SEARCH_ENABLED", "HYBRID_TEXT_COLUMNS"):
        monkeypatch.delenv(k, raising=False)
        monkeypatch.delenv(f"LONGBOW_{k}", raising=False)
    with Server(tmp_path / "data", *args, env=env) as srv:
        sdk = LongbowClient(uri=srv.flight_url, meta_uri=srv.flight_url)
        df, x = text_rows()
        sdk.insert("lb-set", df)
        got = text_fields(srv, "lb-set")
        assert got == (["meta", "category"] if want is None else want)
        q = {"vector": x[5].tolist(), "k": 5, "text_query": "zeppelin", "alpha": 0.5}
        if "meta" in got:
            assert 17 in sdk.search("lb-set", **q)["id"].tolist()
        elif not got:
            with pytest.raises(Exception, match="no text fields"):
                sdk.search("lb-set", **q)
        else:
            # `meta` not indexed: its words match nothing; the dense leg answers.
            res = sdk.search("lb-set", **q)
            assert res["text_rank"].isna().all() and 5 in res["id"].tolist()
        assert srv.stop() == 0, srv.log()[-2000:]


def test_delete_vector_takes_the_id_rows_were_put_with(server):
    client = fl.FlightClient(server.flight_url)
    put(client, "dv", rows(pa.array([100, 200, 300], pa.int64())))
    # Longbow's vector_id is its internal row index; here it is the user's id.
    r = json.loads(action(server, "delete-vector", {"dataset": "dv", "vector_id": 200})[0])
    assert r == {"deleted": 1}
    assert json.loads(action(server, "delete-vector", {"dataset": "dv", "vector_id": 0})[0]) == {
        "deleted": 0
    }
    t = client.do_get(fl.Ticket(b'{"name": "dv"}')).read_all()
    assert sorted(t["id"].to_pylist()) == [100, 300]
    for kind in ["traverse-graph", "GetGraphStats"]:
        with pytest.raises(pa.ArrowNotImplementedError, match="no graph"):
            action(server, kind, {"dataset": "dv", "start": 100, "max_hops": 2})


def test_flight_info_total_bytes_counts_the_files_and_grows(server):
    client = fl.FlightClient(server.flight_url)
    desc = fl.FlightDescriptor.for_path("sized")
    put(client, "sized", rows(pa.array(np.arange(100), pa.int64())))
    first = client.get_flight_info(desc).total_bytes
    # At least the rows' vectors (the WAL holds them).
    assert first >= 100 * DIM * 4
    listed = {f.descriptor.path[0].decode(): f for f in client.list_flights()}
    assert listed["sized"].total_bytes > 0
    put(client, "sized", rows(pa.array(np.arange(100, 1100), pa.int64())))
    assert client.get_flight_info(desc).total_bytes >= first + 1000 * DIM * 4


def test_string_key_is_the_stores():
    # Persisted in every string-id collection: these values never change.
    assert sagitta.string_key("") == 0xF52A15E9A9B5E89B
    assert sagitta.string_key("ISCC:KACYPXW445FTYNJ3") == 0xD53ED8290099F6A8


PUTTER = """
import sys, json, numpy as np, pyarrow as pa, pyarrow.flight as fl
url, name, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = fl.FlightClient(url)
schema = pa.schema([("id", pa.int64()), ("vector", pa.list_(pa.float32(), dim))])
w, r = c.do_put(fl.FlightDescriptor.for_path(name), schema)
for b in range(10_000):
    ids = np.arange(b * 100, (b + 1) * 100, dtype=np.int64)
    x = np.repeat(ids[:, None].astype(np.float32), dim, axis=1) + 1
    v = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)
    w.write_batch(pa.record_batch([pa.array(ids), v], schema=schema))
    print(json.loads(r.read().to_pybytes())["total"], flush=True)
"""


def test_a_put_cut_off_keeps_what_was_acknowledged_and_no_half_batch(server, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "putter.py"
    script.write_text(PUTTER)
    p = subprocess.Popen(
        [sys.executable, str(script), server.flight_url, "cutoff", str(DIM)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = 0
    while acked < 1000:
        acked = int(p.stdout.readline())
    p.kill()  # mid-stream, from the server's point of view
    p.wait()
    client = fl.FlightClient(server.flight_url)
    t = client.do_get(fl.Ticket(b'{"name": "cutoff"}')).read_all()
    ids = np.sort(t["id"].to_numpy())
    # Everything acknowledged is there; batches are all or nothing.
    assert len(ids) >= acked and len(ids) % 100 == 0
    np.testing.assert_array_equal(ids, np.arange(len(ids)))
    x = np.stack(t["vector"].to_numpy(zero_copy_only=False))
    order = np.argsort(t["id"].to_numpy())
    # Rows come back as written: row i is i + 1 in every component.
    want = np.repeat(np.sort(t["id"].to_numpy())[:, None].astype(np.float32) + 1, x.shape[1], 1)
    np.testing.assert_array_equal(x[order], want)


def test_a_client_leaving_a_download_early_costs_nothing(server, docs):
    client = fl.FlightClient(server.flight_url)
    for _ in range(3):
        reader = client.do_get(fl.Ticket(b'{"name": "docs"}'))
        first = reader.read_chunk()
        assert first.data.num_rows > 0
        reader.cancel()
    # The server goes on answering, with every row.
    t = client.do_get(fl.Ticket(b'{"name": "docs"}')).read_all()
    assert t.num_rows == client.get_flight_info(fl.FlightDescriptor.for_path("docs")).total_records
