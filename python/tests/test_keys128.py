"""128-bit keys (``key_bits=128``) through sagitta.Collection: every input
form, ids above 2**64 read back exactly from the mutable part, sealed
segments and after a reopen, lookups that never answer for another id,
and typed errors."""

import numpy as np
import pytest
from conftest import brute_force

import sagitta

D = 8


def ids_of(n, seed=0):
    rng = np.random.default_rng(seed)
    hi = rng.integers(0, 2**63, n, dtype=np.uint64) | np.uint64(1 << 63)
    lo = rng.integers(0, 2**63, n, dtype=np.uint64)
    return np.stack([hi, lo], axis=1)  # (n, 2) (high, low) halves


def as_int(pair):
    return (int(pair[0]) << 64) | int(pair[1])


def test_128_bit_keys_round_trip_and_search_like_the_oracle(tmp_path, rng):
    n = 2000
    x = rng.standard_normal((n, D)).astype(np.float32)
    keys = ids_of(n)
    size = 400 * (D * 4 + 16 + 4 * 33)
    c = sagitta.Collection.create(
        tmp_path / "c", ndim=D, metric="l2", key_bits=128, segment_size=size, max_segment_size=size
    )
    c.add(keys[:1000], x[:1000])  # (n, 2) halves
    be = np.ascontiguousarray(keys[1000:1500].astype(">u8")).view("V16").ravel()
    c.add(be, x[1000:1500])  # V16 items, big-endian
    c.add([as_int(k) for k in keys[1500:1999]], x[1500:1999])  # Python ints
    c.add(as_int(keys[1999]).to_bytes(16, "big"), x[1999])  # one 16-byte key
    c.optimize()
    assert len(c) == n and c.stats()["segments"] >= 3

    q = rng.standard_normal((20, D)).astype(np.float32)
    want, want_d = brute_force(x, q, "l2", 10)
    res = c.search(q, 10, exact=True)
    assert res.keys.shape == (20, 10, 2) and res.keys.dtype == np.uint64
    np.testing.assert_array_equal(res.keys, keys[want])
    np.testing.assert_allclose(res.distances, want_d, rtol=1e-4, atol=1e-4)
    one = c.search(q[0], 3)
    assert one.keys.shape == (3, 2)
    # filter= takes 128-bit keys too.
    f = c.search(q[0], 2, filter=keys[[5, 7]], exact=True)
    assert {as_int(k) for k in f.keys} == {as_int(keys[5]), as_int(keys[7])}

    # Lookups: ints, bytes, strings, arrays; an absent id is absent.
    k7 = as_int(keys[7])
    assert c.contains(k7) and k7 in c and f"{k7:032x}" in c
    assert not c.contains(k7 ^ (1 << 100)) and (k7 ^ 1) not in c
    raw = k7.to_bytes(16, "big")
    assert raw in c and bytearray(raw) in c and (k7 ^ 1).to_bytes(16, "big") not in c
    assert raw[:15] not in c and [k7] not in c and "not a key" not in c
    np.testing.assert_array_equal(c.contains(keys[:5]), [True] * 5)
    np.testing.assert_array_equal(c.get(k7), x[7])
    got = c.get([k7, 12345])
    np.testing.assert_array_equal(got[0], x[7])
    assert got[1] is None
    assert sorted(c.keys())[:3] == sorted(as_int(k) for k in keys)[:3]

    # add refuses a present key; add_once skips it; remove by key.
    with pytest.raises(ValueError):
        c.add(k7, x[0])
    assert c.add_once([k7, 99], x[:2]) == 1
    assert c.remove([k7, 99, 5]) == 2
    assert k7 not in c and 99 not in c
    c.close()

    assert sagitta.Collection.metadata(tmp_path / "c")["key_bits"] == 128
    c = sagitta.Collection.open(tmp_path / "c", read_only=True)
    assert len(c) == n - 1
    res = c.search(q, 10, exact=True)
    live = np.array([i != 7 for i in range(n)])
    want, _ = brute_force(x[live], q, "l2", 10)
    np.testing.assert_array_equal(res.keys, keys[live][want])


def test_128_bit_key_errors(tmp_path):
    c = sagitta.Collection.create(tmp_path / "c", ndim=2, metric="l2", key_bits=128)
    v = np.zeros(2, np.float32)
    for bad, err in [
        (2**128, ValueError),
        (-1, ValueError),
        (b"short", ValueError),
        ("xyz", ValueError),
        (True, TypeError),
        (np.zeros(3, np.float32), TypeError),
    ]:
        with pytest.raises(err):
            c.add(bad, v)
    assert len(c) == 0
    # The largest key is a key like any other (results carry counts, so
    # no key marks an empty slot).
    c.add(2**128 - 1, v + 1)
    assert 2**128 - 1 in c and len(c) == 1
    np.testing.assert_array_equal(c.get(2**128 - 1), v + 1)
    with pytest.raises(ValueError):
        c.add([1, 1], np.zeros((2, 2), np.float32))  # one key twice
    with pytest.raises(ValueError):
        sagitta.Collection.create(tmp_path / "d", ndim=2, key_bits=96)
    # A 64-bit collection refuses keys above 2**64 - 1.
    c64 = sagitta.Collection.create(tmp_path / "e", ndim=2, metric="l2")
    with pytest.raises(ValueError):
        c64.add(2**64, v)


def test_set_payload_by_128_bit_keys(tmp_path):
    c = sagitta.Collection.create(tmp_path / "c", ndim=2, metric="l2", key_bits=128)
    keys = [2**100 + i for i in range(5)]
    c.upsert(keys, np.arange(10, dtype=np.float32).reshape(5, 2), payload={"n": list(range(5))})
    assert c.set_payload(keys[1:3], {"n": [10, 20]}) == 2
    _, t = c.get(keys, payload=True)
    assert t.column("n").to_pylist() == [0, 10, 20, 3, 4]
    # An id that is not stored (its 64-bit key may be): KeyError, nothing written.
    with pytest.raises(KeyError):
        c.set_payload([keys[0], 2**101], values={"n": 7})
    _, t = c.get(keys, payload=True)
    assert t.column("n").to_pylist() == [0, 10, 20, 3, 4]


def test_128_bit_keys_are_the_same_ids_over_python_http_and_flight(tmp_path, rng):
    """A collection written by sagitta.Collection, served by the real binary:
    HTTP carries its ids as 32 hex digits, Flight as the same 16 big-endian
    bytes Python takes; rows the server writes read back in Python."""
    import json

    import pyarrow as pa
    import pyarrow.flight as fl
    from server_util import Server, raw, vector_array

    keys = [as_int(k) for k in ids_of(50, seed=3)] + [0, 2**64 - 1, 2**64, 2**128 - 1]
    x = rng.standard_normal((len(keys), D)).astype(np.float32)
    c = sagitta.Collection.create(tmp_path / "data" / "py", ndim=D, metric="l2", key_bits=128)
    c.add(keys, x)
    c.close()
    more = [2**127 + i for i in range(3)]
    with Server(tmp_path / "data") as s:
        status, _, r = raw(
            s, "POST", "/collections/py/get", json.dumps({"ids": [str(k) for k in keys]}).encode()
        )
        # get answers each id as given (decimal here); search and scan in
        # the one form.
        assert status == 200 and [it["id"] for it in r["items"]] == [str(k) for k in keys]
        np.testing.assert_allclose([it["vector"] for it in r["items"]], x, rtol=1e-6)
        body = {"vector": x[7].tolist(), "k": 1, "exact": True}
        status, _, r = raw(s, "POST", "/collections/py/search", json.dumps(body).encode())
        assert int(r["hits"][0]["id"], 16) == keys[7]
        client = fl.FlightClient(s.flight_url)
        got = client.do_get(fl.Ticket(json.dumps({"name": "py"}).encode())).read_all()
        assert got.schema.field("id").type == pa.binary(16)
        assert sorted(got["id"].to_pylist()) == sorted(k.to_bytes(16, "big") for k in keys)
        y = rng.standard_normal((3, D)).astype(np.float32)
        t = pa.table(
            {
                "id": pa.array([k.to_bytes(16, "big") for k in more], pa.binary(16)),
                "vector": vector_array(y),
            }
        )
        writer, reader = client.do_put(fl.FlightDescriptor.for_path("py"), t.schema)
        writer.write_table(t)
        writer.done_writing()
        assert json.loads(reader.read().to_pybytes())["rows"] == 3
        writer.close()
    c = sagitta.Collection.open(tmp_path / "data" / "py", read_only=True)
    assert len(c) == len(keys) + 3
    assert all(k in c for k in more) and (2**127 + 3) not in c
    np.testing.assert_array_equal(c.get(more[1]), y[1])
