"""The two protocols the clients speak: HTTP/JSON (``http.client``, one
keep-alive connection) and Arrow Flight (``pyarrow.flight``), each call
timed from request sent to response read; ``OpError`` for a failed one."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from typing import Any, Callable

import numpy as np

from .model import COLLECTION, DIMS, Filter, Hits, Rows

# --------------------------------------------------------------- transports


class OpError(Exception):
    """A failed request: ``status`` (``http 503``, ``flight UNAVAILABLE``,
    ``conn ConnectionResetError``), whether nothing was written for sure
    (``definite``) and whether it is the server's overload refusal."""

    def __init__(self, status: str, message: str, definite: bool, overload: bool):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message
        self.definite, self.overload = definite, overload


class HttpApi:
    """HTTP/JSON over one keep-alive connection. ``lat`` is the last
    request's seconds from sending to the response read."""

    proto = "http"

    def __init__(self, addr: str, timeout: float = 60.0):
        host, port = addr.rsplit(":", 1)
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn: http.client.HTTPConnection | None = None
        self.lat = 0.0
        self.base = f"/collections/{COLLECTION}"

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        req = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if req is not None else {}
        t0 = time.perf_counter()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.conn.connect()
                self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conn.request(method, path, body=req, headers=headers)
            r = self.conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            self.lat = time.perf_counter() - t0
            self.close()
            raise OpError(f"conn {type(e).__name__}", str(e), False, False) from None
        self.lat = time.perf_counter() - t0
        if not 200 <= r.status < 300:
            msg = data[:300].decode(errors="replace")
            definite = r.status < 500 or r.status == 503
            raise OpError(f"http {r.status}", msg, definite, r.status == 503)
        return data if raw else json.loads(data)

    def upsert(self, keys: list[int], vecs: np.ndarray, payloads: list[dict]) -> int:
        body = {"ids": keys, "vectors": vecs.tolist(), "payload": payloads}
        return self.call("POST", f"{self.base}/upsert", body)["upserted"]

    def delete(self, keys: list[int]) -> int:
        return self.call("POST", f"{self.base}/delete", {"ids": keys})["deleted"]

    def delete_where(self, f: Filter) -> int:
        return self.call("POST", f"{self.base}/delete", {"filter": f.expr})["deleted"]

    def search(
        self, q: np.ndarray, k: int, f: Filter | None, exact: bool, ef: int | None = None
    ) -> Hits:
        body: dict[str, Any] = {"vector": q.tolist(), "k": k, "include_payload": True}
        if exact:
            body["exact"] = True
        if ef is not None:
            body["ef"] = ef
        if f is not None:
            body["filter"] = f.expr
        out = self.call("POST", f"{self.base}/search", body)
        return [(h["id"], h["score"], h.get("payload")) for h in out["hits"]]

    def get(self, keys: list[int], _owner: int) -> Rows:
        out = self.call("POST", f"{self.base}/get", {"ids": keys})
        return {
            it["id"]: (np.asarray(it["vector"], dtype=np.float32), it.get("payload") or {})
            for it in out["items"]
        }

    def count(self, f: Filter | None) -> int:
        body = {} if f is None else {"filter": f.expr}
        return self.call("POST", f"{self.base}/count", body)["count"]

    def index_status(self) -> dict:
        return self.call("GET", f"{self.base}/index")

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus metrics of interest, by series."""
        try:
            raw = self.call("GET", "/metrics", raw=True)
        except OpError as e:
            return {"error": e.status}
        text = raw.decode()
        keep = (
            "sagitta_optimizer_",
            "sagitta_rejected_requests_total",
            "sagitta_collection_segments",
            "sagitta_collection_tombstones",
            "sagitta_collection_vectors",
            "sagitta_collection_memory_bytes",
            "sagitta_collection_disk_bytes",
        )
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(keep):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out


_FLIGHT_CODES = {
    "FlightUnavailableError": ("UNAVAILABLE", True),
    "FlightTimedOutError": ("DEADLINE_EXCEEDED", False),
    "FlightInternalError": ("INTERNAL", False),
    "FlightCancelledError": ("CANCELLED", False),
    "FlightUnauthenticatedError": ("UNAUTHENTICATED", True),
    "FlightUnauthorizedError": ("PERMISSION_DENIED", True),
    "ArrowInvalid": ("INVALID_ARGUMENT", True),
    "ArrowKeyError": ("NOT_FOUND", True),
    "ArrowNotImplementedError": ("UNIMPLEMENTED", True),
}


class FlightApi:
    """Arrow Flight through one ``pyarrow.flight.FlightClient``."""

    proto = "flight"

    def __init__(self, addr: str, timeout: float = 60.0):
        import pyarrow as pa
        import pyarrow.flight as fl

        self.pa, self.fl = pa, fl
        self.client = fl.FlightClient(f"grpc://{addr}")
        self.opts = fl.FlightCallOptions(timeout=timeout)
        self.desc = fl.FlightDescriptor.for_path(COLLECTION)
        self.schema = pa.schema(
            [
                ("id", pa.uint64()),
                ("vector", pa.list_(pa.float32(), DIMS)),
                ("owner", pa.int64()),
                ("grp", pa.int64()),
                ("tag", pa.string()),
            ]
        )
        self.lat = 0.0

    def close(self) -> None:
        self.client.close()

    def _run(self, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        except self.pa.ArrowException as e:
            name = type(e).__name__
            code, definite = _FLIGHT_CODES.get(name, (name, False))
            msg = str(e)[:300]
            busy = code == "UNAVAILABLE" and ("busy" in msg or "queue is full" in msg)
            if code == "UNAVAILABLE" and not busy:
                definite = False  # a broken connection, not the admission bound
            raise OpError(f"flight {code}", msg, definite, busy) from None
        finally:
            self.lat = time.perf_counter() - t0

    def _action(self, kind: str, body: dict) -> Any:
        action = self.fl.Action(kind, json.dumps(body).encode())

        def run() -> Any:
            res = list(self.client.do_action(action, options=self.opts))
            return json.loads(res[0].body.to_pybytes())

        return self._run(run)

    def _get(self, ticket: dict) -> Any:
        t = self.fl.Ticket(json.dumps(ticket).encode())
        return self._run(lambda: self.client.do_get(t, options=self.opts).read_all())

    def upsert(self, keys: list[int], vecs: np.ndarray, payloads: list[dict]) -> int:
        pa = self.pa
        batch = pa.record_batch(
            [
                pa.array(keys, type=pa.uint64()),
                pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIMS),
                pa.array([p["owner"] for p in payloads], type=pa.int64()),
                pa.array([p["grp"] for p in payloads], type=pa.int64()),
                pa.array([p.get("tag") for p in payloads], type=pa.string()),
            ],
            schema=self.schema,
        )

        def run() -> int:
            writer, reader = self.client.do_put(self.desc, self.schema, options=self.opts)
            closed: Exception | None = None
            try:
                writer.write_batch(batch)
                ack = reader.read()
                writer.done_writing()
            finally:
                # A refused batch ends the stream: the status comes with close.
                try:
                    writer.close()
                except self.pa.ArrowException as e:
                    closed = e
            if ack is None:
                raise closed or self.fl.FlightInternalError("DoPut: no PutResult, no error")
            return json.loads(ack.to_pybytes())["rows"]

        return self._run(run)

    def delete(self, keys: list[int]) -> int:
        return self._action("delete", {"dataset": COLLECTION, "id": keys})["deleted"]

    def search(
        self, q: np.ndarray, k: int, f: Filter | None, exact: bool, ef: int | None = None
    ) -> Hits:
        s: dict[str, Any] = {"dataset": COLLECTION, "vector": q.tolist(), "k": k}
        if exact:
            s["exact"] = True
        if ef is not None:
            s["ef"] = ef
        if f is not None:
            s["filters"] = f.expr
        t = self._get({"search": s})
        ids = t.column("id").to_pylist()
        scores = t.column("score").to_pylist()
        cols = [c for c in ("owner", "grp", "tag") if c in t.column_names]
        pay = {c: t.column(c).to_pylist() for c in cols}
        out: Hits = []
        for i, (key, score) in enumerate(zip(ids, scores)):
            p = {c: pay[c][i] for c in cols if pay[c][i] is not None}
            # Every row written here has an owner: no payload at all means
            # the row was deleted between the search and the server's read
            # of its payload (what HTTP says by leaving `payload` out).
            out.append((key, score, p or None))
        return out

    def _rows(self, t: Any) -> Rows:
        if t.num_rows == 0:
            return {}
        vec = t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vec = np.asarray(vec, dtype=np.float32).reshape(-1, DIMS)
        cols = [c for c in ("owner", "grp", "tag") if c in t.column_names]
        pay = {c: t.column(c).to_pylist() for c in cols}
        out: Rows = {}
        for i, key in enumerate(t.column("id").to_pylist()):
            out[key] = (vec[i], {c: pay[c][i] for c in cols if pay[c][i] is not None})
        return out

    def get(self, keys: list[int], owner: int) -> Rows:
        flt = [
            {"field": "owner", "op": "eq", "value": owner},
            {"field": "id", "op": "in", "value": keys},
        ]
        return self._rows(self._get({"name": COLLECTION, "filter": flt}))

    def scan(self, f: Filter | None) -> Rows:
        ticket: dict[str, Any] = {"name": COLLECTION}
        if f is not None:
            ticket["filter"] = f.expr
        return self._rows(self._get(ticket))

    def count(self, f: Filter | None) -> int:
        assert f is None, "Flight counts the whole collection (GetFlightInfo)"
        info = self._run(lambda: self.client.get_flight_info(self.desc, options=self.opts))
        return info.total_records
