"""The cluster's data path without Ray: the frame format round-trips every
kind of value the replicas send and refuses malformed frames; a real
endpoint on a loopback socket serves its methods to real connections,
refuses a wrong token and methods it does not serve, gives errors back as
their own types, survives garbage, and a call past its deadline or to a
closed endpoint is reported as a lost replica."""

from __future__ import annotations

import socket
import struct
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import sagitta
from sagitta.cluster import _endpoint, _wire
from sagitta.cluster._channels import Channels
from sagitta.cluster._endpoint import Endpoint
from sagitta.cluster._errors import StaleTerm


def roundtrip(v):
    parts = _wire.encode(v)
    frame = b"".join(bytes(p) for p in parts)
    _, tlen, nbufs, total = struct.unpack("<4sIIQ", frame[:20])
    assert len(frame) == 20 + 8 * nbufs + tlen + total
    sizes = list(struct.unpack(f"<{nbufs}Q", frame[20 : 20 + 8 * nbufs]))
    at = 20 + 8 * nbufs
    return _wire.decode(frame[at : at + tlen], sizes, memoryview(frame[at + tlen :]))


def test_values_round_trip():
    rng = np.random.default_rng(3)
    table = pa.table({"g": pa.array([1, None, 3], pa.int64()), "s": ["a", "b", None]})
    v = {
        "keys": np.arange(5, dtype=np.uint64) * (2**63 // 5),
        "q": rng.random((3, 7), dtype=np.float32),
        "h": rng.random(4).astype(np.float16),
        "b": np.array([True, False]),
        "empty": np.zeros((0, 384), np.float32),
        "t": (1, "x", None, 2.5, [np.int64(7), np.float32(0.5)]),
        "bytes": b"\x00\xff",
        "table": table,
        "nested": {"where": {"field": "g", "op": "eq", "value": 1}, "cols": ["g"]},
        "dollar": {"$a": [1, 2, 3]},  # a user's key that looks like a tag is left alone
    }
    got = roundtrip(v)
    assert set(got) == set(v)
    for k in ("keys", "q", "h", "b"):
        assert got[k].dtype == v[k].dtype
        np.testing.assert_array_equal(got[k], v[k])
    assert got["empty"].shape == (0, 384) and got["empty"].dtype == np.float32
    assert got["t"] == [1, "x", None, 2.5, [7, 0.5]]  # tuples travel as lists
    assert got["bytes"] == b"\x00\xff"
    assert got["table"].equals(table)
    assert got["nested"] == v["nested"]
    assert got["dollar"] == v["dollar"]
    # A large array is sent from where it lies, and comes back whole.
    big = rng.random((300, 384), dtype=np.float32)
    assert len(_wire.encode(big)) > 1
    np.testing.assert_array_equal(roundtrip(big), big)


def test_values_that_cannot_be_sent_are_refused():
    with pytest.raises(_wire.WireError):
        _wire.encode(np.array([object()], dtype=object))
    with pytest.raises(_wire.WireError):
        _wire.encode(object())
    with pytest.raises(_wire.WireError):
        _wire.encode({("a", 1): "tuple key"})


A, R, Y = '"\\u0000a"', '"\\u0000r"', '"\\u0000y"'


@pytest.mark.parametrize(
    "text, sizes, payload",
    [
        ("not json", [], b""),
        ("{" + A + ': ["<f4", [2], 0]}', [4], b"\x00" * 4),  # 8 bytes needed
        ("{" + A + ': ["O", [1], 0]}', [8], b"\x00" * 8),  # object dtype
        ("{" + A + ': ["<f4", [-1], 0]}', [0], b""),  # negative shape
        ("{" + A + ': ["<f4", [1], 3]}', [4], b"\x00" * 4),  # no buffer 3
        ("{" + A + ': "x"}', [], b""),  # not [dtype, shape, buffer]
        ("{" + R + ": 0}", [3], b"abc"),  # not Arrow IPC
        ("{" + Y + ": 1.5}", [3], b"abc"),  # buffer index not an int
        ('{"\\u0000q": 0}', [], b""),  # unknown tag
        ("{" + A + ': 0, "b": 1}', [], b""),  # tag beside other keys
        ("1", [5], b"abc"),  # lengths past the end
        ("1", [1], b"abc"),  # bytes left over
        ("[" * 100000 + "]" * 100000, [], b""),  # nested past the recursion limit
    ],
)
def test_malformed_frames_raise_wire_error(text, sizes, payload):
    with pytest.raises(_wire.WireError):
        _wire.decode(text.encode(), sizes, memoryview(payload))


class Target:
    def __init__(self):
        self.release = threading.Event()

    def echo(self, *args, **kwargs):
        return {"args": tuple(args), "kwargs": kwargs}

    def fail(self, kind):
        if kind == "stale":
            raise StaleTerm("term 3 asked, this replica is at 4")
        if kind == "payload":
            raise sagitta.PayloadError('field "x": no such payload field')
        if kind == "key":
            raise KeyError("k")
        raise type("Odd", (Exception,), {})("an error of a type the client lacks")

    def unsendable(self):
        return object()

    def slow(self):
        self.release.wait(30)
        return "late"


@pytest.fixture
def endpoint():
    t = Target()
    ep = Endpoint(t, frozenset({"echo", "fail", "unsendable", "slow"}), "127.0.0.1")
    yield t, ep
    t.release.set()
    ep.close()


def far():
    return time.monotonic() + 10


def test_calls_answers_and_errors_over_a_real_socket(endpoint):
    _, ep = endpoint
    ch = Channels()
    addr = ep.address()
    q = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = ch.call(addr, "echo", (q, 10), {"term": 4}, far())
    np.testing.assert_array_equal(got["args"][0], q)
    assert got["args"][1] == 10 and got["kwargs"] == {"term": 4}
    for _ in range(50):
        ch.call(addr, "echo", (), {}, far())
    assert ch.opened == 1  # one connection, reused
    with pytest.raises(StaleTerm, match="term 3"):
        ch.call(addr, "fail", ("stale",), {}, far())
    with pytest.raises(sagitta.PayloadError, match="no such payload field"):
        ch.call(addr, "fail", ("payload",), {}, far())
    with pytest.raises(KeyError):
        ch.call(addr, "fail", ("key",), {}, far())
    with pytest.raises(_wire.RemoteError, match="Odd: an error of a type"):
        ch.call(addr, "fail", ("odd",), {}, far())
    with pytest.raises(_wire.WireError, match="cannot be sent"):
        ch.call(addr, "unsendable", (), {}, far())
    with pytest.raises(ValueError, match="no method 'close'"):
        ch.call(addr, "close", (), {}, far())
    # Errors leave the connection in step: still one connection.
    assert ch.call(addr, "echo", ("after",), {}, far())["args"] == ["after"]
    assert ch.opened == 1


def test_a_wrong_token_is_refused(endpoint):
    _, ep = endpoint
    bad = {**ep.address(), "token": "0" * 32}
    with pytest.raises(_wire.ReplicaLost, match="refused"):
        Channels().call(bad, "echo", (), {}, far())


def test_garbage_closes_that_connection_only(endpoint):
    _, ep = endpoint
    raw = socket.create_connection((ep.host, ep.port), timeout=5)
    raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    # The endpoint answers with an error frame, then closes.
    ans = _wire.recv(raw)
    assert "e" in ans and ans["e"][0] == "WireError"
    try:
        assert raw.recv(1) == b""  # closed (EOF) ...
    except ConnectionResetError:
        pass  # ... or reset: the request's unread bytes were dropped
    raw.close()
    # A frame announcing 3 GiB and then stopping allocates nothing and
    # does not stall other connections.
    raw = socket.create_connection((ep.host, ep.port), timeout=5)
    raw.sendall(struct.pack("<4sIIQ", b"SGW1", 10, 1, 3 << 30) + struct.pack("<Q", 3 << 30))
    assert Channels().call(ep.address(), "echo", (1,), {}, far())["args"] == [1]
    raw.close()


def test_a_call_past_its_deadline_is_a_timeout_and_the_connection_is_dropped(endpoint):
    t, ep = endpoint
    ch = Channels()
    with pytest.raises(_wire.CallTimeout):
        ch.call(ep.address(), "slow", (), {}, time.monotonic() + 0.2)
    t.release.set()
    # The late answer is never read as the answer to the next call.
    assert ch.call(ep.address(), "echo", ("next",), {}, far())["args"] == ["next"]
    assert ch.opened == 2


def test_a_closed_endpoint_is_a_lost_replica(endpoint):
    _, ep = endpoint
    ch = Channels()
    addr = ep.address()
    ch.call(addr, "echo", (), {}, far())
    ep.close()
    with pytest.raises(_wire.ReplicaLost):
        ch.call(addr, "echo", (), {}, far())
    with pytest.raises(_wire.ReplicaLost):
        Channels().call(addr, "echo", (), {}, far())


def test_silent_and_surplus_connections_are_closed(endpoint, monkeypatch):
    _, ep = endpoint
    monkeypatch.setattr(_endpoint, "HELLO_TIMEOUT", 0.2)
    monkeypatch.setattr(_endpoint, "MAX_CONNECTIONS", 3)
    # A connection that never says hello is closed by the endpoint.
    silent = socket.create_connection((ep.host, ep.port), timeout=10)
    assert silent.recv(1) == b""
    silent.close()
    # Three connections in use; a fourth is closed at once; once one of
    # the three goes, a new one is served again.
    ch = [Channels() for _ in range(3)]
    for c in ch:
        assert c.call(ep.address(), "echo", (1,), {}, far())["args"] == [1]
    with pytest.raises(_wire.ReplicaLost):
        Channels().call(ep.address(), "echo", (), {}, far())
    ch[0].close()
    for _ in range(100):  # the endpoint notices the close when it reads
        try:
            assert Channels().call(ep.address(), "echo", (2,), {}, far())["args"] == [2]
            break
        except _wire.ReplicaLost:
            time.sleep(0.01)
    else:
        raise AssertionError("no connection served after one closed")


def test_mutated_frames_raise_wire_error_or_decode():
    """Random byte flips, truncations and splices of real frames: decoding
    either gives a value or raises WireError, never another exception (a
    replica's endpoint answers anything else with a broken connection)."""
    rng = np.random.default_rng(17)
    table = pa.table({"g": pa.array([1, 2], pa.int64())})
    bodies = [
        {"m": "search", "a": [np.ones((2, 8), np.float32), 10, {"exact": True}], "k": {"term": 3}},
        {"ok": [np.arange(4, dtype=np.uint64), np.zeros(4, np.float32), table]},
        {"m": "write", "a": [1, "upsert", np.arange(3, dtype=np.uint64), b"xy", None], "k": {}},
    ]
    frames = [b"".join(bytes(p) for p in _wire.encode(b)) for b in bodies]
    outcomes = {"decoded": 0, "refused": 0}
    for i in range(3000):
        f = bytearray(frames[i % len(frames)])
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(f)))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                f[at] ^= 1 << int(rng.integers(0, 8))
            elif kind == 1:
                del f[at : at + int(rng.integers(1, 16))]
            else:
                f[at:at] = rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8).tobytes()
        a, b = socket.socketpair()
        try:
            a.sendall(bytes(f))
            a.shutdown(socket.SHUT_WR)
            try:
                _wire.recv(b)
                outcomes["decoded"] += 1
            except (_wire.WireError, _wire.ReplicaLost):
                outcomes["refused"] += 1
        finally:
            a.close()
            b.close()
    assert outcomes["refused"] > 1000, outcomes
