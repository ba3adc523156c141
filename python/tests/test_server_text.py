"""Text and hybrid search through the real server: HTTP (sagitta.Client and
raw requests) and Arrow Flight (Longbow's `text_query` / `alpha` search
ticket, vector optional), with the typed errors of bad text input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from server_util import Server
from test_server import raw

import sagitta

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
N = 2000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("srvtext") / "data", "--max-body-mib", "1")
    yield s
    assert s.stop() == 0, s.log()[-2000:]


@pytest.fixture(scope="module")
def docs(server):
    texts = gzip.open(SAMPLE / "base_texts.txt.gz", "rt", encoding="utf-8").read().splitlines()[:N]
    vecs = np.load(SAMPLE / "base.f16.npy")[:N].astype(np.float32)
    client = sagitta.Client(server.url)
    col = client.create_collection("docs", ndim=384, text_fields=["text"])
    for s in range(0, N, 100):
        col.upsert(np.arange(s, s + 100), vecs[s : s + 100], payload={"text": texts[s : s + 100]})
    return col, texts, vecs


def test_http_text_and_hybrid_search(server, docs):
    col, texts, vecs = docs
    info = col.info()
    assert info["text_fields"] == [{"name": "text", "analyzer": "en"}]
    bm25 = col.search(None, 5, text=texts[42], columns=["text"])
    assert bm25.keys[0] == 42 and (bm25.text_ranks == np.arange(1, 6)).all()
    assert bm25.payload[0]["text"] == texts[42]
    assert (bm25.dense_ranks == -1).all()
    hybrid = col.search(vecs[42], 5, text=texts[42])
    assert hybrid.keys[0] == 42 and hybrid.dense_ranks[0] == 1 and hybrid.text_ranks[0] == 1
    # Alpha alone selects the weighted sum; 1.0 is the dense order.
    dense = col.search(vecs[42], 5, exact=True)
    a1 = col.search(vecs[42], 5, text=texts[42], alpha=1.0, exact=True)
    assert list(a1.keys) == list(dense.keys)
    # A filter applies to both legs.
    col.upsert([N + 1], vecs[:1], payload={"text": ["zebra quokka"]})
    only = col.search(
        None, 3, text="quokka", where={"field": "text", "op": "eq", "value": "zebra quokka"}
    )
    assert list(only.keys) == [N + 1]


def test_http_text_bad_input_is_a_clear_400(server, docs):
    body = lambda d: json.dumps(d).encode()  # noqa: E731
    for req, msg in [
        ({"text": "", "k": 3}, "no searchable terms"),
        ({"text": "the of", "k": 3}, "no searchable terms"),
        ({"text": "x", "alpha": 2.0, "k": 3}, "alpha"),
        ({"text": "x", "fusion": "nope", "k": 3}, "fusion"),
        ({"text": "x", "depth": 0, "k": 3}, "depth"),
        ({"text": "x", "depth": 10_001, "k": 3}, "depth"),
        ({"text": "x", "vectors": [[0.0] * 384], "k": 3}, "one query"),
        ({"vector": [0.0] * 384, "alpha": 0.5, "k": 3}, "text searches"),
        ({"text": 5, "k": 3}, "expected a string"),
    ]:
        status, _, r = raw(server, "POST", "/collections/docs/search", body(req))
        assert status == 400, (req, r)
        assert msg in r["error"]["message"], (req, r)
    status, _, r = raw(
        server,
        "POST",
        "/collections",
        body({"name": "bad", "dims": 4, "text_fields": [{"name": "t", "analyzer": "x"}]}),
    )
    assert status == 400 and "analyzer" in r["error"]["message"]
    # A collection without text fields.
    sagitta.Client(server.url).create_collection("plain", ndim=4).upsert([1], [[1.0, 0, 0, 0]])
    status, _, r = raw(server, "POST", "/collections/plain/search", body({"text": "x", "k": 1}))
    assert status == 400 and "no text fields" in r["error"]["message"]
    # Upserts without vectors need a model.
    status, _, r = raw(
        server,
        "POST",
        "/collections/docs/upsert",
        body({"ids": [9999], "payload": [{"text": "a"}]}),
    )
    assert status == 400, r
    # Text over the body limit: 413, and the server keeps serving.
    status, _, _ = raw(
        server, "POST", "/collections/docs/search", body({"text": "w " * 700_000, "k": 1})
    )
    assert status == 413
    assert raw(server, "GET", "/health")[0] == 200


def test_flight_text_query_ticket(server, docs):
    _col, texts, vecs = docs
    client = fl.connect(server.flight_url)

    def get(req):
        return client.do_get(fl.Ticket(json.dumps({"search": req}).encode())).read_all()

    sparse = get({"dataset": "docs", "text_query": texts[7], "k": 4})
    assert sparse.column("id").to_pylist()[0] == 7
    assert sparse.column("text_rank").to_pylist() == [1, 2, 3, 4]
    assert sparse.column("dense_rank").null_count == 4
    empty_vec = get({"dataset": "docs", "vector": [], "text_query": texts[7], "k": 4})
    assert empty_vec.column("id").to_pylist() == sparse.column("id").to_pylist()
    hybrid = get(
        {
            "dataset": "docs",
            "vector": vecs[7].tolist(),
            "text_query": texts[7],
            "alpha": 0.5,
            "k": 4,
        }
    )
    assert hybrid.column("id").to_pylist()[0] == 7
    assert hybrid.column("dense_rank").to_pylist()[0] == 1
    for req in [
        {"dataset": "docs", "text_query": "x", "alpha": 3.0, "k": 2},
        {"dataset": "docs", "text_query": "", "k": 2},
    ]:
        with pytest.raises((fl.FlightError, pa.ArrowInvalid)):
            get(req)
    # Invalid UTF-8 in the ticket: an error, not a crash.
    with pytest.raises((fl.FlightError, pa.ArrowInvalid)):
        client.do_get(
            fl.Ticket(b'{"search": {"dataset": "docs", "text_query": "\xff\xfe", "k": 2}}')
        ).read_all()
    assert get({"dataset": "docs", "text_query": "python", "k": 1}).num_rows == 1
