"""Vectors come back as they were given, for every metric and storage type,
through every surface: ``sagitta.Index.get``, ``sagitta.Collection`` (``get``,
``items``) before and after sealing, optimizing and reopening, and the real
``sagitta serve`` binary over HTTP (``/get``, ``/scroll``) and Arrow Flight
(DoGet), before and after a restart. Cosine included: the engine keeps the
vector as given, not its unit vector (issue 59)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.flight as fl
import pytest
from server_util import Server, raw

import sagitta

N, D, BITS = 300, 24, 64

FLOAT_CASES = [(m, d) for m in ("l2", "ip", "cos") for d in ("f32", "f16", "i8")]


def given(dtype: str, n: int = N, seed: int = 5) -> np.ndarray:
    """Vectors each storage type holds exactly, never of unit length:
    quarters in [-28.75, 34.75] (exact in f16) for floats, integers in
    [-127, 127] for i8."""
    rng = np.random.default_rng(seed)
    r = rng.integers(-127, 128, size=(n, D))
    if dtype == "i8":
        return r.astype(np.float32)
    return (r / 4.0 + 3.0).astype(np.float32)


def given_bits(n: int = N, seed: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, BITS // 8), dtype=np.uint8)


def same_bits(got, want: np.ndarray, what: str) -> None:
    """Bit-exact equality of float32 values (not within a tolerance)."""
    g = np.ascontiguousarray(np.asarray(got, dtype=np.float32))
    w = np.ascontiguousarray(want.astype(np.float32))
    assert g.shape == w.shape, (what, g.shape, w.shape)
    bad = np.nonzero(g.view(np.uint32) != w.view(np.uint32))
    assert bad[0].size == 0, (what, bad[0][:5], g[bad][:5], w[bad][:5])


# --- sagitta.Index (in memory, and saved then opened) -----------------------


@pytest.mark.parametrize(("metric", "dtype"), FLOAT_CASES)
@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_index_get_returns_vectors_as_given(tmp_path, metric, dtype, kind):
    x = given(dtype)
    keys = np.arange(N, dtype=np.uint64)
    ix = sagitta.Index(D, metric=metric, dtype=dtype, kind=kind)
    ix.add(keys, x)
    same_bits(np.stack(ix.get(keys)), x, f"{metric}/{dtype}/{kind} memory")
    ix.save(tmp_path / "ix.sgt")
    opened = sagitta.Index.open(tmp_path / "ix.sgt")
    same_bits(np.stack(opened.get(keys)), x, f"{metric}/{dtype}/{kind} file")


@pytest.mark.parametrize("metric", ["l2", "ip", "cos"])
def test_default_index_with_codes_returns_vectors_as_given(tmp_path, metric):
    """A float HNSW index without a dtype walks sq8 codes and keeps f32
    rows: ``get`` returns those rows, as given."""
    x = given("f32")
    keys = np.arange(N, dtype=np.uint64)
    ix = sagitta.Index(D, metric=metric)
    ix.add(keys, x)
    same_bits(np.stack(ix.get(keys)), x, f"{metric} codes memory")
    ix.save(tmp_path / "ix.sgt")
    same_bits(np.stack(sagitta.Index.open(tmp_path / "ix.sgt").get(keys)), x, "codes file")
    # The nearest of a stored vector is still itself under cos and l2.
    if metric != "ip":
        assert list(ix.search(x[:20], 1).keys[:, 0]) == list(range(20))


def test_hamming_index_returns_bits_as_given():
    x = given_bits()
    keys = np.arange(N, dtype=np.uint64)
    ix = sagitta.Index(BITS, metric="hamming", dtype="b1")
    ix.add(keys, x)
    for k in (0, 17, N - 1):
        assert bytes(ix.get(int(k))) == x[k].tobytes()


# --- sagitta.Collection ------------------------------------------------------


def check_collection(c, x: np.ndarray, what: str) -> None:
    keys = np.arange(len(x), dtype=np.uint64)
    same_bits(np.stack(c.get(keys)), x, f"{what}: get")
    seen = {}
    for k, v in c.items():
        seen[int(k)] = np.asarray(v, dtype=np.float32)
    assert sorted(seen) == list(range(len(x))), what
    same_bits(np.stack([seen[k] for k in range(len(x))]), x, f"{what}: items")


@pytest.mark.parametrize(("metric", "dtype"), FLOAT_CASES)
def test_collection_returns_vectors_as_given(tmp_path, metric, dtype):
    x = given(dtype)
    path = tmp_path / "c"
    c = sagitta.Collection.create(
        path, ndim=D, metric=metric, dtype=dtype, segment_size=4096, index_threshold=0
    )
    c.add(np.arange(100, dtype=np.uint64), x[:100])
    check_collection(c, x[:100], f"{metric}/{dtype} mutable part")
    c.seal()
    c.add(np.arange(100, N, dtype=np.uint64), x[100:])
    c.optimize(wait=True)
    check_collection(c, x, f"{metric}/{dtype} optimized")
    c.close()
    c = sagitta.Collection.open(path, read_only=True)
    check_collection(c, x, f"{metric}/{dtype} reopened")
    c.close()


def test_collection_bits_come_back_as_given(tmp_path):
    x = given_bits()
    c = sagitta.Collection.create(
        tmp_path / "h", ndim=BITS, metric="hamming", dtype="b1", segment_size=4096
    )
    c.add(np.arange(N, dtype=np.uint64), x)
    c.optimize(wait=True)
    for k in (0, 99, N - 1):
        assert bytes(c.get(k)) == x[k].tobytes()
    c.close()


# --- the server: HTTP and Flight ---------------------------------------------


@pytest.fixture(scope="module")
def server_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rt") / "data"


def http_json(server, path: str, body: dict):
    status, _, out = raw(server, "POST", path, json.dumps(body).encode())
    assert status in (200, 201), (path, status, out)
    return out


def load(server, name: str, metric: str, dtype: str, x) -> None:
    http_json(
        server,
        "/collections",
        {
            "name": name,
            "dims": x.shape[1] * (8 if dtype == "b1" else 1),
            "metric": metric,
            "dtype": dtype,
        },
    )
    for s in range(0, len(x), 100):
        http_json(
            server,
            f"/collections/{name}/upsert",
            {"ids": list(range(s, s + 100)), "vectors": x[s : s + 100].tolist()},
        )


def check_server(server, name: str, x, what: str) -> None:
    n = len(x)
    # HTTP get, with vectors.
    out = http_json(
        server, f"/collections/{name}/get", {"ids": list(range(n)), "include_vectors": True}
    )
    assert out["missing"] == [], what
    got = {int(it["id"]): it["vector"] for it in out["items"]}
    same_bits(np.array([got[k] for k in range(n)]), x, f"{what}: HTTP get")
    # HTTP scroll, with vectors, every page.
    seen, offset = {}, 0
    while offset is not None:
        page = http_json(
            server,
            f"/collections/{name}/scroll",
            {"limit": 128, "offset": offset, "include_vectors": True},
        )
        for it in page["items"]:
            seen[int(it["id"])] = it["vector"]
        offset = page.get("next_offset")
    assert sorted(seen) == list(range(n)), what
    same_bits(np.array([seen[k] for k in range(n)]), x, f"{what}: HTTP scroll")
    # Flight DoGet of the stored rows.
    client = fl.FlightClient(server.flight_url)
    table = client.do_get(fl.Ticket(json.dumps({"name": name}).encode())).read_all()
    client.close()
    ids = table.column("id").to_pylist()
    vecs = np.array(table.column("vector").to_pylist())
    order = np.argsort(ids)
    assert sorted(ids) == list(range(n)), what
    same_bits(vecs[order], x, f"{what}: Flight DoGet")


SERVER_CASES = [*FLOAT_CASES, ("hamming", "b1")]


def case_data(metric: str, dtype: str):
    return given_bits() if dtype == "b1" else given(dtype)


def test_server_returns_vectors_as_given_over_http_and_flight(server_dir):
    with Server(server_dir) as s:
        for metric, dtype in SERVER_CASES:
            name = f"{metric}_{dtype}"
            x = case_data(metric, dtype)
            load(s, name, metric, dtype, x)
            check_server(s, name, x, f"{name} written")
            http_json(s, f"/collections/{name}/optimize", {})
            check_server(s, name, x, f"{name} optimized")
        assert s.stop() == 0, s.log()[-2000:]
    # Restarted on the same directory: read back from the segment files.
    with Server(server_dir) as s:
        for metric, dtype in SERVER_CASES:
            name = f"{metric}_{dtype}"
            check_server(s, name, case_data(metric, dtype), f"{name} restarted")
        assert s.stop() == 0, s.log()[-2000:]
