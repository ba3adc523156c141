"""``sagitta.Client``: the HTTP/JSON API of ``sagitta serve``, shaped like
:class:`sagitta.Collection`.

>>> c = sagitta.Client("http://127.0.0.1:7080")
>>> docs = c.create_collection("docs", ndim=384, metric="cos")
>>> docs.upsert(keys, vectors, payload={"lang": langs})
>>> res = docs.search(query, 10, where={"field": "lang", "op": "eq", "value": "en"})
>>> res.keys, res.distances, res.payload

Standard library only (``http.client`` with one keep-alive connection per
thread), so one ``Client`` may be shared by threads.
"""

from __future__ import annotations

import errno
import http.client
import json
import threading
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._sagitta import string_key

__all__ = [
    "AuthError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "NotFoundError",
    "RemoteCollection",
    "RemoteSearchResult",
    "ServerError",
    "StorageFullError",
    "UnavailableError",
    "string_key",
]


class ServerError(Exception):
    """An error answered by the server: ``status`` (HTTP), ``code`` (stable
    string such as ``invalid_argument``) and ``message``."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class BadRequestError(ServerError, ValueError):
    """400 / 413: the request was refused as invalid."""


class NotFoundError(ServerError, KeyError):
    """404: no such collection."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


class ConflictError(ServerError):
    """409: the collection already exists."""


class AuthError(ServerError, PermissionError):
    """401 / 403: missing, unknown or insufficient API key."""


class StorageFullError(ServerError, OSError):
    """507: the disk under the collection is full; the write was refused
    and nothing it carried was acknowledged. An ``OSError`` with errno
    ``ENOSPC``, as the in-process ``Collection`` raises."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(status, code, message)
        self.errno = errno.ENOSPC


class UnavailableError(ServerError):
    """503 / 504: the server is busy, timed out or shutting down; retry
    after ``retry_after`` seconds."""

    retry_after: float | None = None


def _error(status: int, body: bytes, headers: Mapping[str, str]) -> ServerError:
    try:
        e = json.loads(body)["error"]
        code, message = e["code"], e["message"]
    except Exception:
        code, message = "http_error", body.decode("utf-8", "replace")[:500]
    cls = {
        400: BadRequestError,
        413: BadRequestError,
        404: NotFoundError,
        409: ConflictError,
        401: AuthError,
        403: AuthError,
        503: UnavailableError,
        504: UnavailableError,
        507: StorageFullError,
    }.get(status, ServerError)
    err = cls(status, code, message)
    if isinstance(err, UnavailableError) and headers.get("retry-after"):
        try:
            err.retry_after = float(headers["retry-after"])
        except ValueError:
            pass
    return err


def _id_array(ids: list) -> np.ndarray:
    """Ids as the server returns them, in the collection's id type: uint64,
    int64 (when one is negative) or strings (an object array)."""
    if any(isinstance(i, str) for i in ids):
        return np.array(ids, dtype=object)
    if any(i < 0 for i in ids):
        return np.array(ids, dtype=np.int64)
    return np.array(ids, dtype=np.uint64)


def _json_filter(where: Any) -> Any:
    if where is None:
        return None
    if isinstance(where, str):
        return json.loads(where)
    return where


def _rows_of(payload: Any, n: int) -> list | None:
    """Payload as one JSON object per row: a dict of columns, a list of
    row dicts, a pandas DataFrame or a pyarrow Table."""
    if payload is None:
        return None
    if hasattr(payload, "to_pylist"):  # pyarrow Table
        return payload.to_pylist()
    if hasattr(payload, "to_dict") and hasattr(payload, "columns"):  # DataFrame
        return payload.to_dict(orient="records")
    if isinstance(payload, Mapping):
        cols = {k: list(v.tolist() if hasattr(v, "tolist") else v) for k, v in payload.items()}
        for k, v in cols.items():
            if len(v) != n:
                raise ValueError(f"payload column {k!r} has {len(v)} values for {n} keys")
        return [{k: cols[k][i] for k in cols} for i in range(n)]
    rows = list(payload)
    if len(rows) != n:
        raise ValueError(f"{len(rows)} payload rows for {n} keys")
    return rows


def _wire_id(k: Any) -> Any:
    """An id as JSON carries it: ints past 2**64 - 1 and ``bytes(16)`` as
    32 hex digits (the server's uint128 form; JSON numbers stop at
    2**64 - 1), everything else as :func:`_plain` gives it."""
    if isinstance(k, (bytes, bytearray)) and len(k) == 16:
        return bytes(k).hex()
    k = _plain(k)
    if isinstance(k, int) and not isinstance(k, bool) and k >= 2**64:
        return f"{k:032x}"
    return k


def _wire_ids(keys: Any) -> list:
    return [_wire_id(k) for k in (keys.tolist() if hasattr(keys, "tolist") else keys)]


def _plain(v: Any) -> Any:
    """numpy scalars and timestamps into JSON-ready values."""
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "isoformat"):
        s = v.isoformat()
        return s if ("+" in s[10:] or s.endswith("Z")) else s + "Z"
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    return v


@dataclass
class RemoteSearchResult:
    """Neighbours of one query (1-d ``keys`` / ``distances``) or a batch
    (2-d, rows padded with ``NO_KEY`` / ``inf`` when a query has fewer than
    k); ``payload``: the hits' payload rows (lists of dicts), when asked;
    ``vectors``: the hits' vectors, when asked."""

    keys: np.ndarray
    distances: np.ndarray
    payload: list | None = None
    vectors: list | None = field(default=None, repr=False)


@dataclass
class RemoteTextResult:
    """A text or hybrid search over HTTP, as :class:`sagitta.TextSearchResult`:
    ``keys``, fused ``scores`` (larger is better), each leg's rank (from 1,
    -1 when absent) and score (NaN when absent), and the hits' ``payload``
    rows when asked."""

    keys: np.ndarray
    scores: np.ndarray
    dense_distances: np.ndarray
    dense_ranks: np.ndarray
    text_scores: np.ndarray
    text_ranks: np.ndarray
    payload: list | None = None


class Client:
    """The HTTP API of a Sagitta server at ``url``; ``api_key`` is sent as
    a bearer token."""

    def __init__(
        self, url: str = "http://127.0.0.1:7080", api_key: str | None = None, timeout: float = 60.0
    ):
        u = urllib.parse.urlsplit(url if "//" in url else "http://" + url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"url: expected http:// or https://, got {url!r}")
        self._scheme, self._host, self._port = u.scheme, u.hostname or "127.0.0.1", u.port
        self._base = u.path.rstrip("/")
        self._timeout = timeout
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._local = threading.local()
        self.url = url

    def __repr__(self) -> str:
        return f"sagitta.Client({self.url!r})"

    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is None:
            cls = (
                http.client.HTTPSConnection
                if self._scheme == "https"
                else http.client.HTTPConnection
            )
            c = cls(self._host, self._port, timeout=self._timeout)
            c.connect()
            import socket

            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._local.conn = c
        return c

    def close(self) -> None:
        """Closes this thread's connection."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request; returns the decoded JSON answer or raises a
        :class:`ServerError` subclass."""
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, self._base + path, body=data, headers=self._headers)
                r = conn.getresponse()
                raw = r.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed; retry once on
                # a fresh one.
                self.close()
                if attempt:
                    raise
        if r.status >= 400:
            raise _error(r.status, raw, {k.lower(): v for k, v in r.getheaders()})
        ctype = r.getheader("content-type", "")
        return json.loads(raw) if "json" in ctype else raw.decode()

    # -- server --------------------------------------------------------
    def health(self) -> dict:
        return self.request("GET", "/health")

    def ready(self) -> bool:
        try:
            return bool(self.request("GET", "/ready").get("ready"))
        except UnavailableError:
            return False

    def metrics(self) -> str:
        """The Prometheus text exposition."""
        return self.request("GET", "/metrics")

    # -- collections ---------------------------------------------------
    def list_collections(self) -> list:
        """Descriptions of every collection."""
        return self.request("GET", "/collections")["collections"]

    def create_collection(
        self,
        name: str,
        *,
        ndim: int,
        metric: str = "cos",
        dtype: str | None = None,
        kind: str = "hnsw",
        connectivity: int | None = None,
        expansion_add: int | None = None,
        expansion_search: int | None = None,
        segment_size: int | None = None,
        durability: str | None = None,
        text_fields: Sequence[str] | Mapping[str, str] | None = None,
        embed_model: str | None = None,
        id_type: str | None = None,
        codes: str | None = None,
        bm25_k1: float | None = None,
        bm25_b: float | None = None,
        index_threshold: int | None = None,
    ) -> RemoteCollection:
        """Creates a collection (arguments as :meth:`sagitta.Collection.create`;
        ``id_type``: ``uint64`` (default), ``int64``, ``string`` or
        ``uint128``, the type of the ids the server takes and answers)."""
        body = {"name": name, "dims": int(ndim), "metric": metric, "kind": kind}
        if text_fields is not None:
            if isinstance(text_fields, Mapping):
                body["text_fields"] = [{"name": n, "analyzer": a} for n, a in text_fields.items()]
            else:
                body["text_fields"] = list(text_fields)
        if embed_model is not None:
            body["embed_model"] = embed_model
        for k, v in (
            ("dtype", dtype),
            ("m", connectivity),
            ("ef_construction", expansion_add),
            ("ef_search", expansion_search),
            ("segment_size", segment_size),
            ("durability", durability),
            ("id_type", id_type),
            ("codes", codes),
            ("bm25_k1", bm25_k1),
            ("bm25_b", bm25_b),
            ("index_threshold", index_threshold),
        ):
            if v is not None:
                body[k] = v
        self.request("POST", "/collections", body)
        return RemoteCollection(self, name)

    def collection(self, name: str) -> RemoteCollection:
        """The collection ``name`` (checked to exist)."""
        self.request("GET", f"/collections/{urllib.parse.quote(name, safe='')}")
        return RemoteCollection(self, name)

    __getitem__ = collection

    def drop_collection(self, name: str) -> None:
        """Drops a collection and deletes its files."""
        self.request("DELETE", f"/collections/{urllib.parse.quote(name, safe='')}")


class RemoteCollection:
    """A collection on a server; methods mirror :class:`sagitta.Collection`."""

    def __init__(self, client: Client, name: str):
        self.client = client
        self.name = name
        self._path = f"/collections/{urllib.parse.quote(name, safe='')}"

    def __repr__(self) -> str:
        return f"RemoteCollection({self.name!r} at {self.client.url!r})"

    def _post(self, op: str, body: Any) -> Any:
        return self.client.request("POST", f"{self._path}/{op}", body)

    def info(self) -> dict:
        """Settings, figures, schema and index status."""
        return self.client.request("GET", self._path)

    def index_status(self) -> dict:
        return self.client.request("GET", f"{self._path}/index")

    def optimize(self, *, compact: bool = False) -> dict:
        """Seals the mutable part and waits until the server's optimizer has
        built and merged everything written before the call (``compact``:
        also rewrites every segment holding deleted rows), as
        ``Collection.optimize`` does in-process; returns the index status.
        Past the server's request timeout this raises (504) while the work
        goes on: poll :meth:`index_status`."""
        return self._post("optimize", {"compact": bool(compact)})

    def __len__(self) -> int:
        return self.count()

    def upsert(self, keys: Iterable, vectors: Any, payload: Any = None) -> int:
        """Inserts or replaces rows; returns once they are durable. With
        ``vectors=None`` a collection with an embedding model embeds each
        row's text (from ``payload``)."""
        keys = _wire_ids(keys)
        body: dict = {"ids": keys}
        if vectors is not None:
            vecs = np.asarray(vectors)
            if vecs.ndim == 1:
                vecs = vecs[None, :]
            body["vectors"] = vecs.tolist()
        rows = _rows_of(payload, len(keys))
        if rows is not None:
            body["payload"] = [
                None if r is None else {k: _plain(v) for k, v in r.items()} for r in rows
            ]
        return self._post("upsert", body)["upserted"]

    def search(
        self,
        queries: Any,
        k: int = 10,
        *,
        where: Any = None,
        columns: Sequence[str] | None = None,
        include_vectors: bool = False,
        include_payload: bool = False,
        exact: bool = False,
        expansion: int | None = None,
        nprobe: int | None = None,
        refine: int | None = None,
        text: str | None = None,
        fusion: str | None = None,
        alpha: float | None = None,
        rrf_k: float | None = None,
        depth: int | None = None,
    ) -> RemoteSearchResult | RemoteTextResult:
        """k nearest neighbours of one query (1-d) or a batch (2-d); with
        ``text``, a text or hybrid search (one query, ``queries`` may be
        None) as :meth:`sagitta.Collection.search`."""
        body: dict = {"k": int(k), "exact": bool(exact)}
        q = None if queries is None else np.asarray(queries)
        if q is None:
            pass
        elif q.ndim == 1:
            body["vector"] = q.tolist()
        else:
            body["vectors"] = q.tolist()
        for name, v in (
            ("text", text),
            ("fusion", fusion),
            ("alpha", alpha),
            ("rrf_k", rrf_k),
            ("depth", depth),
        ):
            if v is not None:
                body[name] = v
        for name, v in (("ef", expansion), ("nprobe", nprobe), ("refine", refine)):
            if v is not None:
                body[name] = int(v)
        f = _json_filter(where)
        if f is not None:
            body["filter"] = f
        if columns is not None:
            body["columns"] = list(columns)
        if include_payload:
            body["include_payload"] = True
        if include_vectors:
            body["include_vectors"] = True
        r = self._post("search", body)
        want_payload = include_payload or columns is not None
        if text is not None:
            hits = r["hits"]

            def leg(name: str, dtype: type, missing: float) -> np.ndarray:
                return np.array([h.get(name, missing) for h in hits], dtype=dtype)

            return RemoteTextResult(
                keys=_id_array([h["id"] for h in hits]),
                scores=np.array([h["score"] for h in hits], dtype=np.float32),
                dense_distances=leg("dense_distance", np.float32, np.nan),
                dense_ranks=leg("dense_rank", np.int32, -1),
                text_scores=leg("text_score", np.float32, np.nan),
                text_ranks=leg("text_rank", np.int32, -1),
                payload=[h.get("payload", {}) for h in hits] if want_payload else None,
            )
        if q is None:
            raise ValueError("queries: give a vector or a batch (or text=...)")
        if q.ndim == 1:
            hits = r["hits"]
            return RemoteSearchResult(
                keys=_id_array([h["id"] for h in hits]),
                distances=np.array([h["score"] for h in hits], dtype=np.float32),
                payload=[h.get("payload", {}) for h in hits] if want_payload else None,
                vectors=[h.get("vector") for h in hits] if include_vectors else None,
            )
        n = len(r["results"])
        every = [h["id"] for res in r["results"] for h in res["hits"]]
        kind = _id_array(every).dtype
        missing = None if kind == np.dtype(object) else np.iinfo(kind).max
        keys = np.full((n, k), missing, dtype=kind)
        dists = np.full((n, k), np.inf, dtype=np.float32)
        payload = [] if want_payload else None
        vectors = [] if include_vectors else None
        for i, res in enumerate(r["results"]):
            hits = res["hits"]
            keys[i, : len(hits)] = [h["id"] for h in hits]
            dists[i, : len(hits)] = [h["score"] for h in hits]
            if payload is not None:
                payload.append([h.get("payload", {}) for h in hits])
            if vectors is not None:
                vectors.append([h.get("vector") for h in hits])
        return RemoteSearchResult(keys, dists, payload, vectors)

    def get(self, keys: Iterable, *, payload: bool = False, columns: Sequence[str] | None = None):
        """Vectors of ``keys`` (a 2-d float32 array, NaN rows for missing
        keys); with ``payload=True`` also a list of payload dicts (None for
        missing keys)."""
        keys = _wire_ids(keys)
        body: dict = {"ids": keys, "include_payload": bool(payload or columns is not None)}
        if columns is not None:
            body["columns"] = list(columns)
        r = self._post("get", body)
        found = {it["id"]: it for it in r["items"]}
        # NaN rows of the collection's width even when no key was found.
        dim = len(next(iter(found.values()))["vector"]) if found else int(self.info()["dims"])
        vecs = np.full((len(keys), dim), np.nan, dtype=np.float32)
        rows = []
        for i, k in enumerate(keys):
            it = found.get(k)
            if it is not None:
                vecs[i] = it["vector"]
            rows.append(None if it is None else it.get("payload", {}))
        return (vecs, rows) if body["include_payload"] else vecs

    def remove(self, keys: Iterable | None = None, *, where: Any = None) -> int:
        """Deletes by keys or by filter; returns how many were live."""
        if (keys is None) == (where is None):
            raise ValueError("give exactly one of keys or where")
        if keys is not None:
            body = {"ids": _wire_ids(keys)}
        else:
            body = {"filter": _json_filter(where)}
        return self._post("delete", body)["deleted"]

    def set_payload(self, keys: Iterable | None = None, *, where: Any = None, values: dict) -> int:
        """Sets payload ``values`` (column -> value; None clears one) on the
        rows of ``keys`` (every one must be stored: :class:`NotFoundError`,
        a KeyError, otherwise, and nothing is written) or on every row
        passing ``where``; their vectors and other columns stay. Returns the
        rows updated."""
        if (keys is None) == (where is None):
            raise ValueError("give exactly one of keys or where")
        body: dict = {"payload": {k: _plain(v) for k, v in dict(values).items()}}
        if keys is not None:
            body["ids"] = _wire_ids(keys)
        else:
            body["filter"] = _json_filter(where)
        return self._post("set_payload", body)["updated"]

    def classify(
        self,
        vector: Any,
        label: str,
        k: int = 5,
        where: Any = None,
        exact: bool = False,
        expansion: int | None = None,
    ) -> dict[str, Any]:
        """The kNN vote: the values of payload column ``label`` among the
        ``k`` nearest rows of ``vector``. Returns ``{"votes": [{"label",
        "count", "share"}, ...], "neighbors": [{"id", "score", "label"},
        ...]}``, votes most frequent first."""
        body: dict[str, Any] = {
            "vector": [float(x) for x in np.asarray(vector, dtype=np.float32).ravel()],
            "label": label,
            "k": int(k),
            "exact": bool(exact),
        }
        f = _json_filter(where)
        if f is not None:
            body["filter"] = f
        if expansion is not None:
            body["ef"] = int(expansion)
        return self._post("classify", body)

    def count(self, where: Any = None) -> int:
        """Live rows (matching ``where``)."""
        f = _json_filter(where)
        return self._post("count", {} if f is None else {"filter": f})["count"]
