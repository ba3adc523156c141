"""The server binary's operations side, driven over real sockets: API keys
and roles over HTTP and Flight, optimize over both protocols, refusing a
remote bind without keys, admission control (503 + Retry-After), request
timeouts (504), SIGKILL during a Flight ingest (every acknowledged row
kept) and a graceful SIGTERM with recovery on restart. The request and
answer side is test_server.py."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from conftest import brute_force
from server_util import Server, raw, vector_array

import sagitta


def test_api_keys_roles_http_and_flight(tmp_path):
    keys = (
        "read:reader-0123456789abcdef,write:writer-0123456789abcdef,admin:admin-0123456789abcdefg"
    )
    with Server(tmp_path / "data", env={"SAGITTA_API_KEYS": keys}) as s:
        anon = sagitta.Client(s.url)
        reader = sagitta.Client(s.url, api_key="reader-0123456789abcdef")
        writer = sagitta.Client(s.url, api_key="writer-0123456789abcdef")
        admin = sagitta.Client(s.url, api_key="admin-0123456789abcdefg")
        assert anon.health()["status"] == "ok"  # liveness is open
        with pytest.raises(sagitta.AuthError) as e:
            anon.list_collections()
        assert e.value.status == 401
        with pytest.raises(sagitta.AuthError):
            sagitta.Client(s.url, api_key="reader-0123456789abcdeX").list_collections()
        with pytest.raises(sagitta.AuthError) as e:
            writer.create_collection("k", ndim=2)
        assert e.value.status == 403
        admin.create_collection("k", ndim=2, metric="l2")
        with pytest.raises(sagitta.AuthError) as e:
            reader.collection("k").upsert([1], [[1.0, 0.0]])
        assert e.value.status == 403
        assert writer.collection("k").upsert([1], [[1.0, 0.0]]) == 1
        with pytest.raises(sagitta.AuthError) as e:
            reader.collection("k").set_payload([1], values={"a": 1})
        assert e.value.status == 403
        assert writer.collection("k").set_payload([1], values={"a": 1}) == 1
        with pytest.raises(sagitta.AuthError) as e:
            reader.collection("k").optimize()
        assert e.value.status == 403
        assert writer.collection("k").optimize()["unindexed_vectors"] == 0
        assert reader.collection("k").search([1.0, 0.0], 1).keys.tolist() == [1]
        # Flight: same keys, same roles.
        client = fl.FlightClient(s.flight_url)
        with pytest.raises(fl.FlightUnauthenticatedError):
            list(client.list_flights())
        opts = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer reader-0123456789abcdef")])
        assert [i.total_records for i in client.list_flights(options=opts)] == [1]
        with pytest.raises(fl.FlightUnauthorizedError):
            list(client.do_action(fl.Action("delete", b'{"dataset": "k", "id": 1}'), options=opts))


def test_optimize_merges_everything_written_before_it_over_http_and_flight(tmp_path):
    """POST /collections/C/optimize (and the `optimize` Flight action)
    answers once every row written before it is in one built segment
    (`compact` also drops the deleted rows), with nothing lost; bad bodies
    and unknown collections are refused."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3000, 16)).astype(np.float32)
    with Server(tmp_path / "data") as s:
        c = sagitta.Client(s.url)
        # A small mutable part: every batch is frozen into a part of its own.
        status, _, info = raw(
            s,
            "POST",
            "/collections",
            json.dumps(
                {
                    "name": "opt",
                    "dims": 16,
                    "metric": "l2",
                    "segment_size": 65536,
                    "index_threshold": 0,
                }
            ).encode(),
        )
        assert status == 201, info
        col = c.collection("opt")
        for i in range(0, len(x), 500):
            col.upsert(np.arange(i, i + 500), x[i : i + 500])
        status, _, st = raw(s, "POST", "/collections/opt/optimize")  # no body
        assert status == 200, st
        assert (st["unindexed_vectors"], st["optimizer_task"], st["optimizer_deferred"]) == (
            0,
            None,
            None,
        )
        status, _, parts = raw(s, "GET", "/collections/opt/segments")
        assert status == 200
        assert parts["active_vectors"] == 0
        assert [p["rows"] for p in parts["segments"]] == [len(x)], parts["segments"]
        assert all(p["indexed"] for p in parts["segments"])
        assert col.count() == len(x)
        want, _ = brute_force(x, x[:50], "l2", 1)
        got = col.search(x[:50], 1)
        assert (got.keys[:, 0] == want[:, 0]).mean() >= 0.98
        # compact: deleted rows leave the files.
        assert col.remove(np.arange(0, len(x), 2)) == len(x) // 2
        st = col.optimize(compact=True)
        assert st["unindexed_vectors"] == 0
        info = col.info()
        assert (info["vectors"], info["tombstones"]) == (len(x) // 2, 0)
        # Flight: the same, as an action.
        client = fl.FlightClient(s.flight_url)
        out = list(client.do_action(fl.Action("optimize", b'{"name": "opt"}')))
        assert json.loads(out[0].body.to_pybytes())["unindexed_vectors"] == 0
        with pytest.raises(pa.ArrowKeyError, match="nope"):
            list(client.do_action(fl.Action("optimize", b'{"name": "nope"}')))
        with pytest.raises(pa.ArrowInvalid, match="unknown field"):
            list(client.do_action(fl.Action("optimize", b'{"name": "opt", "wait": 1}')))
        # Bad input over HTTP: a clear 4xx, nothing changed.
        for body, code in [
            (b"[1]", 400),
            (b'{"compact": "yes"}', 400),
            (b'{"compact": true, "extra": 1}', 400),
            (b"{", 400),
        ]:
            status, _, err = raw(s, "POST", "/collections/opt/optimize", body)
            assert status == code, (body, err)
        assert raw(s, "POST", "/collections/nope/optimize")[0] == 404
        assert col.count() == len(x) // 2


def test_refuses_remote_bind_without_keys(tmp_path):
    with pytest.raises(RuntimeError, match="without API keys"):
        Server(tmp_path / "data", http="0.0.0.0:0")


def test_admission_control_answers_503_with_retry_after(tmp_path):
    with Server(tmp_path / "data", "--search-threads", "1", "--max-pending-searches", "2") as s:
        c = sagitta.Client(s.url)
        col = c.create_collection("big", ndim=64, metric="l2", kind="flat")
        x = np.random.default_rng(1).standard_normal((8000, 64)).astype(np.float32)
        for i in range(0, len(x), 1000):
            col.upsert(np.arange(i, i + 1000), x[i : i + 1000])
        q = x[:512].tolist()
        body = json.dumps({"vectors": q, "k": 10, "exact": True}).encode()
        barrier = threading.Barrier(12)
        statuses, retry = [], []

        def hit():
            barrier.wait()
            st, h, _ = raw(s, "POST", "/collections/big/search", body)
            statuses.append(st)
            if st == 503:
                retry.append(h.get("retry-after") or h.get("Retry-After"))

        ts = [threading.Thread(target=hit) for _ in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert set(statuses) <= {200, 503}, statuses
        assert statuses.count(200) >= 2 and statuses.count(503) >= 1, statuses
        assert all(r == "1" for r in retry)
        assert 'sagitta_rejected_requests_total{reason="search"}' in c.metrics()
        assert col.count() == 8000

        # Flight: with the search queue held full by two slow HTTP batches
        # (metrics answer outside the pools), a Flight search is refused
        # with UNAVAILABLE.
        heavy = json.dumps({"vectors": x[:1024].tolist(), "k": 10, "exact": True}).encode()
        slow = [
            threading.Thread(target=raw, args=(s, "POST", "/collections/big/search", heavy))
            for _ in range(2)
        ]
        for t in slow:
            t.start()
        deadline = time.monotonic() + 30
        while 'sagitta_pending_jobs{pool="search"} 2' not in c.metrics():
            assert time.monotonic() < deadline, "the two slow searches never queued"
        ticket = {"search": {"dataset": "big", "vector": x[0].tolist(), "k": 3}}
        with pytest.raises(fl.FlightUnavailableError, match="busy"):
            fl.FlightClient(s.flight_url).do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
        for t in slow:
            t.join()


def test_request_timeout_is_504(tmp_path):
    data = tmp_path / "data"
    x = np.random.default_rng(2).standard_normal((4000, 64)).astype(np.float32)
    with Server(data) as s:
        col = sagitta.Client(s.url).create_collection("t", ndim=64, metric="l2", kind="flat")
        col.upsert(np.arange(4000), x)
    # Restarted with a 1 ms budget, a 1024-query exact batch cannot finish.
    with Server(data, "--timeout-ms", "1", "--search-threads", "1") as s:
        body = json.dumps({"vectors": x[:1024].tolist(), "k": 10, "exact": True}).encode()
        status, _, parsed = raw(s, "POST", "/collections/t/search", body)
        assert status == 504, parsed
        assert parsed["error"]["code"] == "deadline_exceeded"
        assert raw(s, "GET", "/health")[0] == 200
        assert s.stop() == 0


def test_kill9_during_flight_ingest_keeps_every_acknowledged_row(tmp_path):
    data = tmp_path / "data"
    rng = np.random.default_rng(5)
    x = rng.standard_normal((12_000, 16)).astype(np.float32)
    acked = []
    s = Server(data)
    sagitta.Client(s.url).create_collection("crash", ndim=16, metric="l2")
    client = fl.FlightClient(s.flight_url)
    schema = pa.schema(
        [("id", pa.uint64()), ("vector", pa.list_(pa.float32(), 16)), ("n", pa.int64())]
    )
    writer, reader = client.do_put(fl.FlightDescriptor.for_path("crash"), schema)
    for b in range(0, 12_000, 500):
        ids = np.arange(b, b + 500, dtype=np.uint64)
        batch = pa.record_batch(
            [pa.array(ids), vector_array(x[b : b + 500]), pa.array(ids.astype(np.int64) * 2)],
            schema=schema,
        )
        writer.write_batch(batch)
        if b >= 6000:
            # This batch is in flight, not acknowledged: kill -9 now.
            assert s.kill() == -signal.SIGKILL
            break
        ack = json.loads(reader.read().to_pybytes())
        assert ack["rows"] == 500
        acked.extend(ids.tolist())
    with contextlib.suppress(pa.ArrowException):  # the stream died with the server
        writer.close()
    # Restart on the same data directory: every acknowledged row is there,
    # with its vector and payload.
    with Server(data) as s2:
        col = sagitta.Client(s2.url).collection("crash")
        assert col.count() >= len(acked) == 6000
        vecs, rows = col.get(acked, payload=True)
        np.testing.assert_array_equal(vecs, x[: len(acked)])
        assert [r["n"] for r in rows] == [2 * k for k in acked]


def test_sigterm_is_graceful_and_restart_recovers(tmp_path):
    data = tmp_path / "data"
    with Server(data) as s:
        c = sagitta.Client(s.url)
        col = c.create_collection("g", ndim=4, metric="l2", durability="1000ms")
        col.upsert(np.arange(100), np.eye(100, 4, dtype=np.float32) + 1)
        assert s.stop(signal.SIGTERM) == 0
        assert "every collection flushed" in s.log()
    with Server(data) as s:
        col = sagitta.Client(s.url).collection("g")
        assert col.count() == 100
        assert col.info()["durability"] == "1000ms"
