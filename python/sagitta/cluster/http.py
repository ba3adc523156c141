"""HTTP/JSON in front of the clusters of a Ray cluster.

The routes and JSON shapes are those of ``sagitta serve`` (docs/SERVER.md)
for what a cluster supports, so :class:`sagitta.Client` and any HTTP client
written against the server work unchanged; each collection is a
:class:`~sagitta.cluster.Cluster` of the same name. Start it with::

    python -m sagitta.cluster serve --address auto --http 127.0.0.1:7090 \
        --location /mnt/bucket

Routes: ``GET /health``, ``GET /ready``, ``GET /metrics``, ``GET|POST
/collections``, ``GET|DELETE /collections/{name}``, ``POST
/collections/{name}/{upsert,get,delete,count,search}`` and ``GET
/collections/{name}/cluster`` (the cluster's status). API keys (``--api-key``,
``--read-key``) as the server's: ``Authorization: Bearer KEY`` or
``x-api-key: KEY``; a read key may not write. Errors answer ``{"error":
{"code", "message"}}`` with the server's codes and statuses.

This is a stateless process: run several behind a load balancer; all of
them reach the same clusters through Ray.
"""

from __future__ import annotations

import hmac
import json
import math
import threading
import time
import urllib.parse
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from .._sagitta import LIMITS
from ._client import NAMESPACE, Cluster, ClusterUnavailable
from ._layout import NO_KEY

MAX_BODY = 64 << 20
# The store's limits, as `sagitta serve` checks them.
MAX_K = LIMITS["k"]
MAX_BATCH = LIMITS["batch_queries"]
MAX_BEAM = LIMITS["beam"]


class ApiError(Exception):
    """An error answered to the client: HTTP status and the server's code."""

    def __init__(self, status: HTTPStatus, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def invalid(msg: str) -> ApiError:
    return ApiError(HTTPStatus.BAD_REQUEST, "invalid_argument", msg)


def _error_of(e: BaseException) -> ApiError:
    """One exhaustive mapping of library errors onto HTTP answers."""
    import sagitta

    if isinstance(e, ApiError):
        return e
    if isinstance(e, KeyError):
        msg = e.args[0] if e.args else str(e)
        return ApiError(HTTPStatus.NOT_FOUND, "not_found", str(msg))
    if isinstance(e, FileExistsError):
        return ApiError(HTTPStatus.CONFLICT, "already_exists", str(e))
    if isinstance(e, ClusterUnavailable):
        return ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", str(e))
    if isinstance(e, (ValueError, TypeError, sagitta.PayloadError, OverflowError)):
        return invalid(str(e))
    return ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", f"{type(e).__name__}: {e}")


def _ids(v: Any) -> np.ndarray:
    if not isinstance(v, list):
        raise invalid("ids: expected a list of integers")
    for i in v:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < int(NO_KEY):
            raise invalid(f"ids: {i!r} is not an integer in 0..2^64-2")
    return np.array(v, dtype=np.uint64)


def _vectors(v: Any, n_max: int | None = None) -> np.ndarray:
    if not isinstance(v, list) or not v or not all(isinstance(r, list) for r in v):
        raise invalid("vectors: expected a non-empty list of lists of numbers")
    if n_max is not None and len(v) > n_max:
        raise invalid(f"vectors: at most {n_max} per request")
    if len({len(r) for r in v}) != 1:
        raise invalid("vectors: rows of different lengths")
    try:
        a = np.array(v, dtype=np.float32)
    except (TypeError, ValueError):
        raise invalid("vectors: expected numbers") from None
    if not np.isfinite(a).all():
        raise invalid("vectors: NaN or infinite value")
    return a


def _payload_columns(c: Cluster, body: dict) -> tuple:
    """``(with_payload, columns)`` a request asks for: ``columns``, or every
    column with ``include_payload`` alone."""
    cols = body.get("columns")
    with_pay = bool(body.get("include_payload")) or cols is not None
    if with_pay and cols is None:
        cols = list(c.schema())
    if cols is not None and not (isinstance(cols, list) and all(isinstance(x, str) for x in cols)):
        raise invalid("columns: a list of names")
    return with_pay, cols


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


class Front:
    """What the handler calls: the clusters by name, auth, counters."""

    def __init__(
        self,
        *,
        location: str | None = None,
        root: str | None = None,
        api_keys: tuple = (),
        read_keys: tuple = (),
        timeout: float = 30.0,
    ):
        self.location = location
        self.root = root
        self.api_keys = [k.encode() for k in api_keys]
        self.read_keys = [k.encode() for k in read_keys]
        self.timeout = timeout
        self.clusters: dict[str, Cluster] = {}
        self.lock = threading.Lock()
        self.requests: Counter = Counter()
        self.seconds: Counter = Counter()

    # -- auth --------------------------------------------------------------
    def role(self, headers: Any) -> str:
        """``write``, ``read`` or raises 401."""
        if not self.api_keys and not self.read_keys:
            return "write"
        got = None
        a = headers.get("authorization")
        if a and a[:7].lower() == "bearer ":
            got = a[7:].strip().encode()
        elif headers.get("x-api-key"):
            got = headers.get("x-api-key").strip().encode()
        if got is not None:
            if any(hmac.compare_digest(got, k) for k in self.api_keys):
                return "write"
            if any(hmac.compare_digest(got, k) for k in self.read_keys):
                return "read"
        raise ApiError(HTTPStatus.UNAUTHORIZED, "unauthenticated", "a valid API key is required")

    # -- clusters ----------------------------------------------------------
    def names(self) -> list:
        import ray

        found = ray.util.list_named_actors(all_namespaces=True)
        out = []
        for a in found:
            if a.get("namespace") == NAMESPACE and a.get("name", "").startswith("cluster:"):
                out.append(a["name"][len("cluster:") :])
        return sorted(out)

    def get(self, name: str) -> Cluster:
        with self.lock:
            c = self.clusters.get(name)
        if c is None:
            c = Cluster.connect(name, timeout=self.timeout)  # KeyError: 404
            with self.lock:
                c = self.clusters.setdefault(name, c)
        return c

    def forget(self, name: str) -> None:
        with self.lock:
            self.clusters.pop(name, None)

    def describe(self, name: str) -> dict:
        c = self.get(name)
        st = c.stats()
        cfg = st["config"]
        spec = st["spec"]
        return {
            "name": name,
            "dims": cfg["ndim"],
            "metric": cfg.get("metric", "cos"),
            "kind": cfg.get("kind", "hnsw"),
            "vectors": c.count(),
            "shards": spec["shards"],
            "replicas": spec["replicas"],
            "quorum": spec["quorum"],
            "healthy": st["healthy"],
            "nodes": st["nodes"],
            "schema": c.schema(),
        }

    def create(self, body: dict) -> dict:
        name = body.get("name")
        if not isinstance(name, str):
            raise invalid("name: a string")  # its form is Cluster.create's to check
        dims = body.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 65536:
            raise invalid("dims: an integer in 1..65536")
        location = body.get("location") or self.location
        if not location:
            raise invalid("location: no object store given (and the front has no --location)")
        opts: dict = {}
        for src, dst in (
            ("metric", "metric"),
            ("kind", "kind"),
            ("dtype", "dtype"),
            ("m", "connectivity"),
            ("ef_construction", "expansion_add"),
            ("ef_search", "expansion_search"),
            ("index_threshold", "index_threshold"),
        ):
            if body.get(src) is not None:
                opts[dst] = body[src]
        shards = body.get("shards", 3)
        replicas = body.get("replicas", 2)
        for n, v in (("shards", shards), ("replicas", replicas)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1024:
                raise invalid(f"{n}: an integer in 1..1024")
        Cluster.create(
            name,
            ndim=dims,
            location=location,
            shards=shards,
            replicas=replicas,
            root=self.root,
            timeout=self.timeout,
            **opts,
        )
        return self.describe(name)

    def drop(self, name: str) -> None:
        self.get(name).drop()
        self.forget(name)

    # -- rows --------------------------------------------------------------
    def upsert(self, c: Cluster, body: dict) -> dict:
        keys = _ids(body.get("ids"))
        if len(keys) == 0:
            return {"upserted": 0}
        if len(np.unique(keys)) != len(keys):
            raise invalid("ids: duplicate ids in one request")
        vecs = _vectors(body.get("vectors"))
        if len(vecs) != len(keys):
            raise invalid(f"vectors: {len(vecs)} rows for {len(keys)} ids")
        payload = body.get("payload")
        table = None
        if payload is not None:
            import pyarrow as pa

            if not isinstance(payload, list) or len(payload) != len(keys):
                raise invalid("payload: one object (or null) per id")
            if not all(p is None or isinstance(p, dict) for p in payload):
                raise invalid("payload: one object (or null) per id")
            try:
                table = pa.Table.from_pylist([p or {} for p in payload])
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise invalid(f"payload: {e}") from None
            if table.num_columns == 0:
                table = None
        return {"upserted": c.upsert(keys, vecs, table)}

    def get_rows(self, c: Cluster, body: dict) -> dict:
        keys = _ids(body.get("ids"))
        with_vec = body.get("include_vectors", True)
        with_pay, cols = _payload_columns(c, body)
        if with_pay and cols:
            vecs, table = c.get(keys, columns=cols)
            rows = table.to_pylist()
        else:
            vecs, rows = c.get(keys), None
        items, missing = [], []
        for i, k in enumerate(keys.tolist()):
            if vecs[i] is None:
                missing.append(k)
                continue
            it: dict = {"id": k}
            if with_vec:
                it["vector"] = np.asarray(vecs[i], dtype=np.float32).tolist()
            if with_pay:
                it["payload"] = _jsonable(
                    {n: v for n, v in (rows[i] if rows else {}).items() if v is not None}
                )
            items.append(it)
        return {"items": items, "missing": missing}

    def delete(self, c: Cluster, body: dict) -> dict:
        if ("ids" in body) == ("filter" in body):
            raise invalid("give exactly one of ids or filter")
        if "ids" in body:
            return {"deleted": c.remove(_ids(body["ids"]))}
        return {"deleted": c.remove(where=body["filter"])}

    def count(self, c: Cluster, body: dict) -> dict:
        return {"count": c.count(body.get("filter"))}

    def search(self, c: Cluster, body: dict) -> dict:
        if "text" in body:
            raise ApiError(
                HTTPStatus.NOT_IMPLEMENTED,
                "unimplemented",
                "text search is not served by clusters yet; give a vector",
            )
        k = body.get("k", 10)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise invalid(f"k: an integer in 1..{MAX_K}")
        one = "vector" in body
        if one == ("vectors" in body):
            raise invalid("give exactly one of vector or vectors")
        q = _vectors([body["vector"]] if one else body["vectors"], MAX_BATCH)
        with_pay, cols = _payload_columns(c, body)
        ef = body.get("ef")
        if ef is not None and (
            isinstance(ef, bool) or not isinstance(ef, int) or not 1 <= ef <= MAX_BEAM
        ):
            raise invalid(f"ef: an integer in 1..{MAX_BEAM}")
        r = c.search(
            q,
            k,
            where=body.get("filter"),
            columns=cols if with_pay and cols else None,
            exact=bool(body.get("exact", False)),
            expansion=ef,
        )
        rows = r.payload.to_pylist() if r.payload is not None else None
        with_vec = bool(body.get("include_vectors"))
        results = []
        for i in range(len(q)):
            hits = []
            for j in range(k):
                key = int(r.keys[i, j])
                if key == int(NO_KEY):
                    break
                h: dict = {"id": key, "score": float(r.distances[i, j])}
                if with_pay:
                    row = rows[i * k + j] if rows else {}
                    h["payload"] = _jsonable({n: v for n, v in row.items() if v is not None})
                hits.append(h)
            results.append({"hits": hits})
        if with_vec:
            every = [h["id"] for res in results for h in res["hits"]]
            vecs = dict(zip(every, c.get(every))) if every else {}
            for res in results:
                for h in res["hits"]:
                    v = vecs.get(h["id"])
                    if v is not None:
                        h["vector"] = np.asarray(v, dtype=np.float32).tolist()
        return results[0] if one else {"results": results}

    def metrics(self) -> str:
        lines = []
        for name in self.names():
            try:
                lines.append(self.get(name).metrics_text())
            except Exception:  # a cluster being dropped meanwhile
                continue
        lines.append("# TYPE sagitta_front_requests_total counter")
        for route, n in sorted(self.requests.items()):
            lines.append(f'sagitta_front_requests_total{{route="{route}"}} {n}')
        lines.append("# TYPE sagitta_front_request_seconds_total counter")
        for route, s in sorted(self.seconds.items()):
            lines.append(f'sagitta_front_request_seconds_total{{route="{route}"}} {s:.6f}')
        return "\n".join(lines) + "\n"


WRITES = {"upsert", "delete"}


class Handler(BaseHTTPRequestHandler):
    front: Front
    protocol_version = "HTTP/1.1"
    server_version = "sagitta-cluster"

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        pass

    def _send(self, status: int, body: Any, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.send_header("x-content-type-options", "nosniff")
        if status == HTTPStatus.SERVICE_UNAVAILABLE:
            self.send_header("retry-after", "1")
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("www-authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        n = self.headers.get("content-length")
        if n is None:
            return {}
        try:
            n = int(n)
        except ValueError:
            raise invalid("bad content-length") from None
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large", f"body over {MAX_BODY} bytes"
            )
        raw = self.rfile.read(n)
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise invalid(f"malformed JSON: {e}") from None
        if not isinstance(body, dict):
            raise invalid("expected a JSON object")
        return body

    def _route(self, method: str) -> None:
        f = self.front
        t = time.perf_counter()
        route = "other"
        try:
            path = urllib.parse.urlsplit(self.path).path
            parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
            body = self._body() if method == "POST" else {}
            if parts == ["health"]:
                route = "health"
                return self._send(200, {"status": "ok"})
            if parts == ["ready"]:
                route = "ready"
                f.names()  # raises when Ray is not reachable
                return self._send(200, {"ready": True})
            role = f.role(self.headers)
            if parts == ["metrics"]:
                route = "metrics"
                return self._send(200, f.metrics(), "text/plain; version=0.0.4")
            if parts == ["collections"]:
                route = "collections"
                if method == "GET":
                    return self._send(200, {"collections": [f.describe(n) for n in f.names()]})
                if method == "POST":
                    if role != "write":
                        raise ApiError(HTTPStatus.FORBIDDEN, "permission_denied", "read-only key")
                    return self._send(200, f.create(body))
            if len(parts) >= 2 and parts[0] == "collections":
                name = parts[1]
                if len(parts) == 2:
                    route = "collection"
                    if method == "GET":
                        return self._send(200, f.describe(name))
                    if method == "DELETE":
                        if role != "write":
                            raise ApiError(
                                HTTPStatus.FORBIDDEN, "permission_denied", "read-only key"
                            )
                        f.drop(name)
                        return self._send(200, {"dropped": name})
                if len(parts) == 3:
                    op = route = parts[2]
                    c = f.get(name)
                    if method == "GET" and op == "cluster":
                        return self._send(200, _jsonable(c.stats()))
                    if method == "POST" and op in ("upsert", "get", "delete", "count", "search"):
                        if op in WRITES and role != "write":
                            raise ApiError(
                                HTTPStatus.FORBIDDEN, "permission_denied", "read-only key"
                            )
                        fn = {"get": f.get_rows}.get(op) or getattr(f, op)
                        return self._send(200, fn(c, body))
            raise ApiError(HTTPStatus.NOT_FOUND, "not_found", f"no route {method} {path}")
        except Exception as e:  # every error becomes an answer
            err = _error_of(e)
            self._send(err.status, {"error": {"code": err.code, "message": err.message}})
        finally:
            f.requests[route] += 1
            f.seconds[route] += time.perf_counter() - t

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")


def make_server(front: Front, host: str = "127.0.0.1", port: int = 7090) -> ThreadingHTTPServer:
    """An HTTP server for ``front`` (port 0 picks one; ``server_address``
    tells which). Call ``serve_forever()`` on it."""
    handler = type("BoundHandler", (Handler,), {"front": front})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    return srv
