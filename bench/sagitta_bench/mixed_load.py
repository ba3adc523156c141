"""Sustained mixed load: the real ``sagitta serve`` under many clients for
minutes, then a full consistency check.

What it does:

1. **Server.** Copies ``target/release/sagitta`` (``--bin`` or
   ``$SAGITTA_BIN`` to override; it never builds) into a temporary
   directory and starts ``serve`` from there on free loopback ports for
   HTTP and Flight, with its data directory beside it. It creates one small
   collection (64-d float32, L2, HNSW, a 256 KiB ``segment_size`` and an
   ``index_threshold`` of 1000 rows by default) so that the background
   optimizer seals, builds and merges segments all through the run, and
   declares its payload columns by writing and deleting one row outside
   every client's range (a filter on a column nobody has written yet is
   refused).
2. **Load.** ``--clients`` threads for ``--minutes``, half over HTTP/JSON
   (``http.client``, one keep-alive connection each), half over Arrow
   Flight (``pyarrow.flight``, one client each). Each thread mixes
   upserts (1-64 rows with the payload ``owner`` / ``grp`` int64 and
   ``tag`` string, sometimes null), deletes by id (and, over HTTP, by
   filter), searches (k=10) without and with a payload filter (some of
   them ``exact``), gets by id, counts, and (Flight) filtered scans.
   A monitor thread polls ``/health`` and ``GET /collections/C/index``
   (the index status, as a dashboard would; ``--no-index-poll`` leaves it
   out). Each client owns a disjoint key range, so its model of that
   range (key -> vector seed and payload) is exact: a write enters the
   model only once the server acknowledged it (HTTP 2xx, a Flight
   ``PutResult`` or action result). A refused write (4xx, 503) leaves the
   model as it was; a write whose outcome is unknown (timeout, 5xx, a
   broken connection) leaves its keys in either state until a read
   settles them (and again after a restart, which may replay it).
3. **Online checks** during the load: for the client's own rows (other
   clients' rows change concurrently) the acknowledged upsert and delete
   counts, get / scan results (vectors bit-exact, payloads equal, absent
   keys absent), counts filtered on the client's ``owner``, and for every
   search hit: the row is live, passes the filter, its score is its L2
   distance to the query and its payload is the model's; ``exact``
   searches filtered on ``owner`` equal a numpy brute force over the
   model, approximate ones give a recall. For every search hit of any
   client: its payload's ``owner`` is the owner of its key (a torn or
   foreign read fails this).
4. **Measurements.** Every operation's latency (request sent to response
   read; client-side JSON / Arrow encoding excluded), per kind and
   protocol: count, ops/s, p50 / p99 / max, and p50 / p99 per time bucket
   (``--bucket-s``, a minute by default). Errors by kind and status; 503 /
   UNAVAILABLE ("server busy", the admission bound) counted apart as
   deliberate overload. The server's RSS (``/proc/PID/status`` VmRSS),
   segment count and optimizer state every ``--sample-s`` seconds, and
   its Prometheus figures after the load. The machine: CPU model, ISA
   flags (AVX2 / AVX-512), load average at the start and the end.
5. **Hangs.** The load stops early when the server answers no HTTP
   request, or acknowledges no write, for ``--hang-s``; after the load a
   probe (``/health``, one write) decides whether it still works. A hung
   server's threads are dumped with gdb (``<result>.stacks.txt``, and a
   summary of every thread waiting for a lock in the report), then it is
   killed with SIGKILL.
6. **Final check**, after the load stops: at once, after the optimizer
   settles, and after a restart on the same data directory (SIGTERM, or
   SIGKILL for a hung server): every key of every client's range read back
   by HTTP get (vector bit-exact, payload equal, deleted and never-written
   keys absent), a full Flight scan equal to the models, the total and
   per-owner counts, and exact searches (HTTP and Flight, with and without
   a filter) against a numpy brute force over the models; the recall@10
   of approximate searches is reported at the default beam width and at
   256.

Results go to ``--out`` as JSON and Markdown (the Markdown is printed).
The exit status is non-zero when any check found a mismatch, any request
failed other than with 503 / UNAVAILABLE, the server hung, died, logged
an error or did not exit cleanly.

The clients are Python threads on the machine that runs the server, so
latencies include client-side waiting (the GIL) and the clients compete
with the server for cores; the figures are a reliability campaign's, not
a latency benchmark's.

``python -m sagitta_bench.mixed_load --minutes 10 --clients 16``
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / "target" / "release" / "sagitta"
DEFAULT_OUT = REPO / "bench" / "results" / "mixed_load"
COLLECTION = "mixed"
DIMS = 64
K = 10
GROUPS = 8
TAGS = ("alpha", "beta", "gamma", "delta", "épsilon", "数据")
KINDS = ("upsert", "delete", "delete_where", "search", "search_filtered", "get", "count", "scan")
# Relative weights of the operations per protocol (delete_where is HTTP
# only, scan Flight only).
WEIGHTS = {
    "http": {
        "upsert": 30,
        "delete": 8,
        "delete_where": 1,
        "search": 18,
        "search_filtered": 18,
        "get": 13,
        "count": 12,
    },
    "flight": {
        "upsert": 30,
        "delete": 9,
        "search": 18,
        "search_filtered": 18,
        "get": 12,
        "count": 10,
        "scan": 3,
    },
}
RECALL_EF = 256  # the final check's recall is also taken at this beam width
SEED_KEY = 1 << 40  # the key of the row that declares the payload columns
SEED_ROW = {"owner": -1, "grp": 0, "tag": "alpha"}
MAX_SAMPLES = 20  # error and mismatch messages kept per run
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
)


# ------------------------------------------------------------------ vectors


def vectors_of(seeds: Any) -> np.ndarray:
    """The vectors of ``seeds`` (one uint64 each), ``(n, DIMS)`` float32:
    splitmix64 of ``seed * DIMS + j``, its top 24 bits mapped onto [-1, 1)
    (exact in float32, so they survive JSON both ways bit for bit)."""
    s = np.asarray(seeds, dtype=np.uint64).reshape(-1, 1)
    with np.errstate(over="ignore"):
        x = s * np.uint64(DIMS) + np.arange(DIMS, dtype=np.uint64)
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    bits = (x >> np.uint64(40)).astype(np.float32)
    return bits * np.float32(2.0 / (1 << 24)) - np.float32(1.0)


def l2(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Squared L2 distances of the rows of ``x`` to ``q`` (float64)."""
    d = x.astype(np.float64) - q.astype(np.float64)
    return np.einsum("ij,ij->i", d, d)


# -------------------------------------------------------------------- model


class Row(NamedTuple):
    """A written row: the vector's seed and the payload (``owner`` is the
    client owning the key)."""

    seed: int
    grp: int
    tag: str | None


def payload_of(owner: int, row: Row) -> dict:
    """The payload as the server answers it (null columns left out)."""
    p: dict[str, Any] = {"owner": owner, "grp": row.grp}
    if row.tag is not None:
        p["tag"] = row.tag
    return p


class Model:
    """One client's view of its key range ``[lo, hi)``: the live rows, and
    for keys whose last write's outcome is unknown, every state they may be
    in (``None``: absent)."""

    def __init__(self, owner: int, lo: int, hi: int):
        self.owner, self.lo, self.hi = owner, lo, hi
        self.live: dict[int, Row] = {}
        self.uncertain: dict[int, list[Row | None]] = {}
        # Writes of unknown outcome since the key's last acknowledged one: a
        # read settles the key for now, but such a write may still be
        # applied later (stuck in a hung server, or replayed from the WAL
        # after a restart).
        self.unacked: dict[int, list[Row | None]] = {}

    def owns(self, key: int) -> bool:
        return self.lo <= key < self.hi

    def possible(self, key: int) -> list[Row | None]:
        return self.uncertain.get(key) or [self.live.get(key)]

    def apply(self, key: int, row: Row | None, acked: bool = True) -> None:
        """An acknowledged write (or, ``acked`` false, a read that settled
        the key)."""
        self.uncertain.pop(key, None)
        if acked:
            self.unacked.pop(key, None)
        if row is None:
            self.live.pop(key, None)
        else:
            self.live[key] = row

    def maybe(self, key: int, row: Row | None, new: bool = True) -> None:
        """A write whose outcome is unknown (``new``: just failed)."""
        states = self.possible(key)
        if row not in states:
            self.uncertain[key] = [*states, row]
        if new:
            self.unacked.setdefault(key, []).append(row)

    def reopen(self) -> None:
        """After a restart: every write of unknown outcome since the key's
        last acknowledged one may have been applied (replayed) or not."""
        for key, rows in self.unacked.items():
            for row in rows:
                self.maybe(key, row, new=False)

    def settle(self, key: int, found: Row | None) -> bool:
        """What a read found for ``key``: true when it is a state the key
        may be in (an uncertain key is then settled)."""
        if found not in self.possible(key):
            return False
        if key in self.uncertain:
            self.apply(key, found, acked=False)
        return True


@dataclass(frozen=True)
class Filter:
    """A payload filter: its JSON and the same predicate in Python."""

    name: str
    expr: Any
    pred: Callable[[int, Row], bool]
    own: bool = False  # only the filtering client's rows can match


def f_owner(c: int) -> Filter:
    return Filter("owner", {"field": "owner", "op": "eq", "value": c}, lambda o, r: o == c, True)


def f_grp(g: int) -> Filter:
    return Filter("grp", {"field": "grp", "op": "eq", "value": g}, lambda o, r: r.grp == g)


def f_grp_tag(gs: list[int], t: str) -> Filter:
    expr = {
        "and": [
            {"field": "grp", "op": "in", "value": gs},
            {"field": "tag", "op": "eq", "value": t},
        ]
    }
    return Filter("grp_in_and_tag", expr, lambda o, r: r.grp in gs and r.tag == t)


def f_owner_grp(c: int, g: int) -> Filter:
    expr = {
        "and": [
            {"field": "owner", "op": "eq", "value": c},
            {"field": "grp", "op": "eq", "value": g},
        ]
    }
    return Filter("owner_and_grp", expr, lambda o, r: o == c and r.grp == g, True)


def f_owner_grp_tag(c: int, g: int, t: str) -> Filter:
    expr = {
        "and": [
            {"field": "owner", "op": "eq", "value": c},
            {"field": "grp", "op": "eq", "value": g},
            {"field": "tag", "op": "eq", "value": t},
        ]
    }
    return Filter(
        "owner_and_grp_and_tag", expr, lambda o, r: o == c and r.grp == g and r.tag == t, True
    )


# --------------------------------------------------------------- transports


class OpError(Exception):
    """A failed request: ``status`` (``http 503``, ``flight UNAVAILABLE``,
    ``conn ConnectionResetError``), whether nothing was written for sure
    (``definite``) and whether it is the server's overload refusal."""

    def __init__(self, status: str, message: str, definite: bool, overload: bool):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message
        self.definite, self.overload = definite, overload


Hits = list[tuple[int, float, "dict | None"]]
Rows = dict[int, tuple[np.ndarray, dict]]


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


# ------------------------------------------------------------------- server


class Server:
    """``sagitta serve`` on free loopback ports; logs (JSON lines) go to
    ``log_path``."""

    def __init__(self, binary: Path, data: Path, log_path: Path, extra: list[str]):
        self.log_path = log_path
        self._log = open(log_path, "ab")
        cmd = [str(binary), "serve", "--data", str(data), "--http", "127.0.0.1:0"]
        cmd += ["--flight", "127.0.0.1:0", "--log-format", "json", *extra]
        self.cmd = cmd
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            self._log.close()
            raise RuntimeError(f"server exited with {code}: {log_path.read_text()[-2000:]}")
        self.start_s = time.perf_counter() - t0
        addrs = json.loads(line)
        self.http_addr: str = addrs["http"]
        self.flight_addr: str = addrs["flight"]
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kib(self) -> int | None:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Sends ``sig`` and waits (SIGKILL after ``timeout``); the exit
        code. A second call answers the first one's."""
        if self._log.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return code


def log_summary(path: Path) -> dict:
    """Levels of the server's log lines, and the first warnings / errors."""
    levels: Counter[str] = Counter()
    first: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
            level = str(rec.get("level", "?"))
        except json.JSONDecodeError:
            level = "PANIC" if "panicked" in line else "TEXT"
        levels[level] += 1
        if level in ("WARN", "ERROR", "PANIC") and len(first) < MAX_SAMPLES:
            first.append(line[:400])
    return {"levels": dict(levels), "first_warnings_and_errors": first}


def machine_info() -> dict:
    flags: set[str] = set()
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
    return {
        "cpu": model,
        "logical_cpus": os.cpu_count(),
        "isa": [f for f in ISA_FLAGS if f in flags],
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


# ----------------------------------------------------------------- checks


@dataclass
class Checks:
    """Counts of the checks passed and failed, with the first failures."""

    ok: Counter = field(default_factory=Counter)
    bad: Counter = field(default_factory=Counter)
    samples: list = field(default_factory=list)

    def check(self, name: str, good: bool, detail: Any = None) -> bool:
        if good:
            self.ok[name] += 1
        else:
            self.bad[name] += 1
            if len(self.samples) < MAX_SAMPLES:
                self.samples.append({"check": name, "detail": detail})
        return good

    def merge(self, other: Checks) -> None:
        self.ok.update(other.ok)
        self.bad.update(other.bad)
        self.samples.extend(other.samples[: MAX_SAMPLES - len(self.samples)])


def check_rows(checks: Checks, m: Model, name: str, keys: Any, got: Rows) -> None:
    """Rows read back (``got``) for ``keys`` against the model: a live key
    with its exact vector and payload, an absent key absent. A key whose
    last write's outcome was unknown is settled by what was read, if that
    is one of the states it may be in."""
    for k in keys:
        if k in got:
            vec, pay = got[k]
            found: Row | None = Row(-1, -1, None)  # present, and no state it may be in
            for r in m.possible(k):
                if (
                    r is not None
                    and pay == payload_of(m.owner, r)
                    and np.array_equal(vec, vectors_of([r.seed])[0])
                ):
                    found = r
                    break
        else:
            found = None
        if not m.settle(k, found):
            checks.check(
                name,
                False,
                {
                    "key": k,
                    "model": [r and payload_of(m.owner, r) for r in m.possible(k)],
                    "server": got[k][1] if k in got else None,
                    "server_vector_is_a_models": k in got
                    and any(
                        r is not None and np.array_equal(got[k][0], vectors_of([r.seed])[0])
                        for r in m.possible(k)
                    ),
                },
            )
        else:
            checks.check(name, True)


# ----------------------------------------------------------------- clients


@dataclass
class Shared:
    """What every client thread reads or adds to."""

    t0: float
    deadline: float
    last_write_ack: float  # perf_counter of the last acknowledged write
    stop: threading.Event = field(default_factory=threading.Event)


class Client(threading.Thread):
    """One client: a protocol, a key range, its model, and its records."""

    def __init__(self, cid: int, api: HttpApi | FlightApi, keys: int, shared: Shared, seed: int):
        super().__init__(name=f"client-{cid}", daemon=True)
        self.cid, self.api, self.shared = cid, api, shared
        self.model = Model(cid, cid * keys, (cid + 1) * keys)
        self.nkeys = keys
        self.rng = random.Random(seed * 1000 + cid)
        self.nrng = np.random.default_rng([seed, cid])
        weights = WEIGHTS[api.proto]
        self.kinds = list(weights)
        self.weights = list(weights.values())
        self.writes = 0
        # (start s, kind index, latency s, outcome: 0 ok, 1 overload, 2 error)
        self.records: list[tuple[float, int, float, int]] = []
        self.errors: Counter[tuple[str, str]] = Counter()
        self.error_samples: dict[tuple[str, str], str] = {}  # (kind, status) -> message
        self.checks = Checks()
        self.recall = [0.0, 0]  # summed recall, searches
        self.crash: str | None = None

    # -- plumbing

    def run(self) -> None:
        try:
            while not self.shared.stop.is_set() and time.perf_counter() < self.shared.deadline:
                kind = self.rng.choices(self.kinds, self.weights)[0]
                getattr(self, f"op_{kind}")()
        except Exception as e:  # a client bug: reported, the run fails
            import traceback

            self.crash = "".join(traceback.format_exception(e))[-3000:]

    def _record(self, kind: str, t_start: float, outcome: int) -> None:
        self.records.append((t_start - self.shared.t0, KINDS.index(kind), self.api.lat, outcome))

    def _do(self, kind: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Runs one request; (True, result) or (False, OpError)."""
        t = time.perf_counter()
        try:
            out = fn()
        except OpError as e:
            self._record(kind, t, 1 if e.overload else 2)
            if not e.overload:
                self.errors[(kind, e.status)] += 1
                self.error_samples.setdefault((kind, e.status), e.message)
            else:
                # The well-behaved client backs off a little (the server asks
                # for a second; the load is meant to stay high).
                time.sleep(self.rng.uniform(0.01, 0.05))
            return False, e
        self._record(kind, t, 0)
        return True, out

    def _own_keys(self, n: int) -> list[int]:
        return [self.model.lo + i for i in self.rng.sample(range(self.nkeys), n)]

    def _query(self) -> np.ndarray:
        return self.nrng.uniform(-1, 1, DIMS).astype(np.float32)

    # -- operations

    def op_upsert(self) -> None:
        n = self.rng.randint(1, 64)
        keys = self._own_keys(n)
        self.writes += 1
        rows = [
            Row(
                (k << 24) | (self.writes & 0xFFFFFF),
                self.rng.randrange(GROUPS),
                None if self.rng.random() < 0.1 else self.rng.choice(TAGS),
            )
            for k in keys
        ]
        vecs = vectors_of([r.seed for r in rows])
        payloads = [payload_of(self.cid, r) for r in rows]
        ok, out = self._do("upsert", lambda: self.api.upsert(keys, vecs, payloads))
        if ok:
            self.shared.last_write_ack = time.perf_counter()
            self.checks.check("upsert_acknowledged_rows", out == n, {"sent": n, "acked": out})
            for k, r in zip(keys, rows):
                self.model.apply(k, r)
        elif not out.definite:
            for k, r in zip(keys, rows):
                self.model.maybe(k, r)

    def op_delete(self) -> None:
        n = self.rng.randint(1, 16)
        live = list(self.model.live)
        keys = set(self.rng.sample(live, min(len(live), n // 2 + 1)))
        keys.update(self._own_keys(n - len(keys)) if n > len(keys) else [])
        keys_l = sorted(keys)
        ok, out = self._do("delete", lambda: self.api.delete(keys_l))
        if ok:
            self.shared.last_write_ack = time.perf_counter()
            if not any(k in self.model.uncertain for k in keys_l):
                want = sum(k in self.model.live for k in keys_l)
                self.checks.check(
                    "delete_count", out == want, {"keys": keys_l, "deleted": out, "model": want}
                )
        self._deleted(keys_l, ok, ok or out.definite)

    def _deleted(self, keys: list[int], acked: bool, definite: bool) -> None:
        """Enters a delete of ``keys`` into the model: done when acknowledged,
        either way when its outcome is unknown, not at all when refused."""
        for k in keys:
            if acked:
                self.model.apply(k, None)
            elif not definite:
                self.model.maybe(k, None)

    def op_delete_where(self) -> None:
        if self.model.uncertain or not isinstance(self.api, HttpApi):
            return self.op_delete()
        f = f_owner_grp_tag(self.cid, self.rng.randrange(GROUPS), self.rng.choice(TAGS))
        matched = [k for k, r in self.model.live.items() if f.pred(self.cid, r)]
        api = self.api
        ok, out = self._do("delete_where", lambda: api.delete_where(f))
        if ok:
            self.checks.check(
                "delete_where_count",
                out == len(matched),
                {"filter": f.expr, "deleted": out, "model": len(matched)},
            )
        self._deleted(matched, ok, ok or out.definite)

    def op_search(self) -> None:
        q = self._query()
        ok, hits = self._do("search", lambda: self.api.search(q, K, None, False))
        if ok:
            self._check_hits(q, hits, None, False)

    def op_search_filtered(self) -> None:
        q = self._query()
        r = self.rng.random()
        if r < 0.4:
            f = f_owner(self.cid)
        elif r < 0.7:
            f = f_grp(self.rng.randrange(GROUPS))
        else:
            f = f_grp_tag(sorted(self.rng.sample(range(GROUPS), 2)), self.rng.choice(TAGS))
        exact = f.own and self.rng.random() < 0.5
        ok, hits = self._do("search_filtered", lambda: self.api.search(q, K, f, exact))
        if ok:
            self._check_hits(q, hits, f, exact)

    def _check_hits(self, q: np.ndarray, hits: Hits, f: Filter | None, exact: bool) -> None:
        c, m = self.checks, self.model
        scores = [h[1] for h in hits]
        keys = [h[0] for h in hits]
        c.check("search_sorted", all(a <= b for a, b in zip(scores, scores[1:])), scores)
        c.check("search_unique_ids", len(set(keys)) == len(keys), keys)
        c.check("search_k", len(hits) <= K, len(hits))
        # Every version of a key has the owner of its range: a hit whose
        # payload says otherwise (an empty one included) is a torn or
        # foreign read. A hit without payload (None) is a row deleted
        # between the search and the read of its payload (HTTP leaves
        # `payload` out; over Flight all its columns are null, which an
        # empty row would look like too: HTTP tells the two apart).
        torn = [h for h in hits if h[2] is not None and h[2].get("owner") != h[0] // self.nkeys]
        c.check("search_hit_payload_owner", not torn, [type(self.api).__name__, *torn[:3]])
        for h in hits:
            if h[2] is None:
                # Counted (in the JSON's passed checks), not failed.
                c.check("search_hit_deleted_before_payload_read", True)
        mine = [h for h in hits if m.owns(h[0]) and h[0] not in m.uncertain]
        if f is not None and f.own:
            c.check("search_owner_filter_only_own_rows", all(m.owns(k) for k in keys), keys)
        if mine:
            live = [h for h in mine if h[0] in m.live]
            c.check(
                "search_hit_is_live",
                len(live) == len(mine),
                [h[0] for h in mine if h[0] not in m.live],
            )
            if live:
                rows = [m.live[h[0]] for h in live]
                d = l2(vectors_of([r.seed for r in rows]), q)
                got = np.asarray([h[1] for h in live])
                c.check(
                    "search_score_is_distance",
                    bool(np.allclose(got, d, rtol=1e-4, atol=1e-3)),
                    {"keys": [h[0] for h in live], "scores": got.tolist(), "model": d.tolist()},
                )
            if f is not None:
                c.check(
                    "search_hit_passes_filter",
                    all(f.pred(self.cid, r) for r in (m.live[h[0]] for h in live)),
                    {"filter": f.expr},
                )
            pay = [(h[0], h[2], payload_of(self.cid, m.live[h[0]])) for h in live]
            c.check(
                "search_hit_payload",
                all(p == want for _, p, want in pay),
                [x for x in pay if x[1] != x[2]][:3],
            )
        if f is not None and f.own and not m.uncertain:
            cand = [(k, r) for k, r in m.live.items() if f.pred(self.cid, r)]
            want_n = min(K, len(cand))
            if cand:
                d = l2(vectors_of([r.seed for _, r in cand]), q)
                order = np.argsort(d, kind="stable")[:want_n]
                truth = [cand[i][0] for i in order]
                if exact:
                    got = np.asarray(scores, dtype=np.float64)
                    good = len(hits) == want_n and bool(
                        np.allclose(got, d[order], rtol=1e-4, atol=1e-3)
                    )
                    c.check("exact_search_equals_brute_force", good, {"got": keys, "truth": truth})
                else:
                    self.recall[0] += len(set(keys) & set(truth)) / want_n
                    self.recall[1] += 1
            else:
                c.check("exact_search_equals_brute_force", not hits or not exact, keys)

    def _check_rows(self, name: str, keys: list[int], got: Rows) -> None:
        check_rows(self.checks, self.model, name, keys, got)

    def op_get(self) -> None:
        keys = self._own_keys(self.rng.randint(1, 64))
        ok, got = self._do("get", lambda: self.api.get(keys, self.cid))
        if ok:
            self.checks.check(
                "get_only_asked_keys", set(got) <= set(keys), sorted(set(got) - set(keys))
            )
            self._check_rows("get_row", keys, got)

    def op_scan(self) -> None:
        api = self.api
        assert isinstance(api, FlightApi)
        ok, got = self._do("scan", lambda: api.scan(f_owner(self.cid)))
        if ok:
            self.checks.check("scan_only_own_rows", all(self.model.owns(k) for k in got), None)
            own = range(self.model.lo, self.model.hi)
            self._check_rows(
                "scan_row",
                [k for k in own if k in got or k in self.model.live or k in self.model.uncertain],
                got,
            )

    def op_count(self) -> None:
        if isinstance(self.api, FlightApi):
            self._do("count", lambda: self.api.count(None))
            return
        r = self.rng.random()
        f = (
            None
            if r < 0.25
            else f_owner(self.cid)
            if r < 0.75
            else f_owner_grp(self.cid, self.rng.randrange(GROUPS))
        )
        ok, n = self._do("count", lambda: self.api.count(f))
        if ok and f is not None and not self.model.uncertain:
            want = sum(f.pred(self.cid, r) for r in self.model.live.values())
            self.checks.check(
                "count_own_rows", n == want, {"filter": f.expr, "count": n, "model": want}
            )


# ------------------------------------------------------------------ monitor


class Monitor(threading.Thread):
    """Every ``every`` seconds: the server's RSS, ``/health`` and (with
    ``index_poll``) the collection's index status, the load average. Stops
    the load (``shared.stop``) if the server dies, answers no HTTP request
    for ``hang_s``, or acknowledges no write for ``hang_s``."""

    def __init__(self, srv: Server, shared: Shared, every: float, index_poll: bool, hang_s: float):
        super().__init__(name="monitor", daemon=True)
        self.srv, self.shared, self.every = srv, shared, every
        self.index_poll, self.hang_s = index_poll, hang_s
        self.api = HttpApi(srv.http_addr, timeout=min(10.0, hang_s))
        self.samples: list[dict] = []
        self.done = threading.Event()
        self.died = False
        self.hang: str | None = None
        self.unanswered_since: float | None = None
        self.failures: Counter[str] = Counter()

    def sample(self) -> None:
        now = time.perf_counter()
        s: dict[str, Any] = {
            "t": round(now - self.shared.t0, 2),
            "rss_kib": self.srv.rss_kib(),
            "load1": (loadavg() or [None])[0],
        }
        try:
            self.api.call("GET", "/health")
            s["health_ms"] = round(self.api.lat * 1e3, 2)
            if self.index_poll:
                st = self.api.index_status()
                for k in ("segments", "active_vectors", "unindexed_vectors", "optimizer_task"):
                    s[k] = st.get(k)
                s["optimizer_errors"] = st.get("optimizer_errors")
                s["index_status_ms"] = round(self.api.lat * 1e3, 2)
            self.unanswered_since = None
        except OpError as e:
            self.failures[e.status] += 1
            s["error"] = e.status
            if self.unanswered_since is None:
                self.unanswered_since = now
        self.samples.append(s)

    def watchdog(self) -> None:
        now = time.perf_counter()
        if self.unanswered_since is not None and now - self.unanswered_since >= self.hang_s:
            self.hang = (
                f"the server answered no HTTP request for {now - self.unanswered_since:.0f} s "
                f"(from t = {self.unanswered_since - self.shared.t0:.0f} s)"
            )
        elif now - self.shared.last_write_ack >= self.hang_s:
            self.hang = (
                f"no write was acknowledged for {now - self.shared.last_write_ack:.0f} s "
                f"(the last at t = {self.shared.last_write_ack - self.shared.t0:.0f} s)"
            )
        if self.hang:
            self.shared.stop.set()

    def run(self) -> None:
        self.sample()
        while not self.done.wait(self.every):
            if not self.srv.alive():
                self.died = True
                self.shared.stop.set()
                return
            self.sample()
            self.watchdog()
            if self.hang:
                return


_FRAME = re.compile(
    r"^#\d+\s+(?:0x[0-9a-f]+ in )?(.+?) \(.*?\) at (crates/\S+?):(\d+)$", re.MULTILINE
)
_LOCK = re.compile(r"lock(?:_api)?[^<]*<parking_lot::raw_(mutex|rwlock)::Raw\w+, (.+)> \(")


def _fn_name(raw: str) -> str:
    """A gdb frame's function, without generics, impl paths or hash."""
    raw = re.sub(r"::h[0-9a-f]{16}$", "", raw)
    if ">::" in raw:
        raw = raw.rsplit(">::", 1)[1]
    return raw.split("<")[0]


def dump_stacks(pid: int, path: Path) -> list[str]:
    """Every thread's stack (gdb) into ``path``; one line per thread that
    waits for a lock or runs Sagitta code: its name, the lock it waits for
    and its innermost Sagitta frames."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return ["gdb not found: no stacks"]
    cmd = [gdb, "-p", str(pid), "-batch", "-ex", "set pagination off"]
    cmd += ["-ex", "thread apply all bt"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    except subprocess.TimeoutExpired:
        return ["gdb timed out"]
    path.write_text(out)
    lines = []
    for block in re.split(r"\n(?=Thread \d+ )", out):
        head = re.match(r'Thread \d+ \(.*?LWP (\d+)\) "([^"]*)"', block)
        if not head:
            continue
        frames = [f"{Path(m[2]).name}:{m[3]} {_fn_name(m[1])}" for m in _FRAME.finditer(block)]
        lock = _LOCK.search(block)
        wait = ""
        if "lock_shared_slow" in block[:600]:
            wait = "waits to read"
        elif "lock_exclusive_slow" in block[:600] or "wait_for_readers" in block[:600]:
            wait = "waits to write"
        elif "raw_mutex::RawMutex::lock_slow" in block[:600]:
            wait = "waits to lock"
        if wait and lock:
            wait += " " + re.sub(r"\w+::", "", lock[2])
        if frames or wait:
            where = " <- ".join(frames[:4])
            if len(frames) > 6:
                where += " <- ... <- " + " <- ".join(frames[-2:])
            jobs = sum(f.startswith("exec.rs:") for f in frames) // 2
            if jobs > 1:
                where += f" [{jobs} pool jobs nested on this stack]"
            lines.append(f"{head[2]} (LWP {head[1]}): {wait or 'runs'}: {where}")
    return lines


# -------------------------------------------------------------- final check


def everything(clients: list[Client]) -> tuple[np.ndarray, np.ndarray, list[Row], np.ndarray]:
    """Every live row of every model: keys, owners, rows, vectors."""
    keys: list[int] = []
    owners: list[int] = []
    rows: list[Row] = []
    for c in clients:
        for k, r in c.model.live.items():
            keys.append(k)
            owners.append(c.cid)
            rows.append(r)
    vecs = vectors_of([r.seed for r in rows]) if rows else np.zeros((0, DIMS), np.float32)
    return np.asarray(keys, dtype=np.int64), np.asarray(owners), rows, vecs


def compare_search(
    checks: Checks,
    name: str,
    hits: Hits,
    truth_keys: np.ndarray,
    truth_d: np.ndarray,
    live: dict[int, float],
) -> None:
    """An exact search's hits against the brute force (distances compared,
    so ties may come in any order), and each hit's score against its row."""
    got_keys = [h[0] for h in hits]
    got_d = np.asarray([h[1] for h in hits], dtype=np.float64)
    n = len(truth_keys)
    good = len(hits) == n and bool(np.allclose(got_d, truth_d, rtol=1e-4, atol=1e-3))
    known = all(k in live for k in got_keys)
    if known and hits:
        own_d = np.asarray([live[k] for k in got_keys])
        good = good and bool(np.allclose(got_d, own_d, rtol=1e-4, atol=1e-3))
    checks.check(
        name,
        good and known,
        {
            "got": got_keys[:K],
            "truth": truth_keys[:K].tolist(),
            "got_d": got_d[:K].tolist(),
            "truth_d": truth_d[:K].tolist(),
        },
    )


def final_check(
    label: str, http: HttpApi, flight: FlightApi, clients: list[Client], queries: int, seed: int
) -> dict:
    """Reads back every key of every client's range and compares with the
    models (see the module docstring)."""
    checks = Checks()
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 99])
    gone: list[str] = []  # set when the server stopped answering

    def req(name: str, fn: Callable[[], Any]) -> Any:
        if gone:
            checks.check(f"{name}_request", False, f"not sent: {gone[0]}")
            return None
        try:
            return fn()
        except OpError as e:
            checks.check(f"{name}_request", False, str(e))
            if e.status.startswith("conn") or "DEADLINE" in e.status:
                gone.append(e.status)
            return None

    # 1. Every key of every range, by HTTP get.
    for c in clients:
        m = c.model
        for s in range(m.lo, m.hi, 1024):
            keys = list(range(s, min(m.hi, s + 1024)))
            got = req("get_all", lambda keys=keys, c=c: http.get(keys, c.cid))
            if got is not None:
                checks.check("get_all_only_asked_keys", set(got) <= set(keys))
                check_rows(checks, m, "get_all_row", keys, got)
    unsettled = sum(len(c.model.uncertain) for c in clients)
    checks.check("no_unsettled_keys", unsettled == 0, unsettled)
    keys_all, owners_all, _rows_all, vecs_all = everything(clients)
    total = len(keys_all)
    # 2. A full Flight scan.
    got = req("scan_all", lambda: flight.scan(None))
    if got is not None:
        nkeys = clients[0].nkeys
        foreign = [k for k in got if not 0 <= k < nkeys * len(clients)]
        checks.check("scan_all_no_foreign_keys", not foreign, foreign[:10])
        for c in clients:
            m = c.model
            ks = [k for k in range(m.lo, m.hi) if k in got or k in m.live]
            check_rows(checks, m, "scan_all_row", ks, got)
    # 3. Counts.
    n = req("count", lambda: http.count(None))
    checks.check("count_total_http", n == total, {"server": n, "model": total})
    n = req("count", lambda: flight.count(None))
    checks.check("count_total_flight", n == total, {"server": n, "model": total})
    for c in clients:
        n = req("count", lambda c=c: http.count(f_owner(c.cid)))
        want = len(c.model.live)
        checks.check("count_per_owner", n == want, {"owner": c.cid, "server": n, "model": want})
    # 4. Exact searches against a brute force; recall of approximate ones.
    live_d: dict[int, float] = {}
    recall: dict[str, list[float]] = {}
    rows_by_key = {}
    for c in clients:
        for k, r in c.model.live.items():
            rows_by_key[k] = (c.cid, r)
    for i in range(queries):
        q = rng.uniform(-1, 1, DIMS).astype(np.float32)
        d = l2(vecs_all, q) if total else np.zeros(0)
        live_d = dict(zip(keys_all.tolist(), d.tolist()))
        g = int(rng.integers(GROUPS))
        fs: list[Filter | None] = [None, f_grp(g), f_grp_tag([g, (g + 3) % GROUPS], TAGS[i % 4])]
        for f in fs:
            if f is None:
                mask = np.ones(total, dtype=bool)
            else:
                mask = np.asarray(
                    [
                        f.pred(o, rows_by_key[k][1])
                        for k, o in zip(keys_all.tolist(), owners_all.tolist())
                    ],
                    dtype=bool,
                )
            idx = np.flatnonzero(mask)
            order = idx[np.argsort(d[idx], kind="stable")[:K]]
            name = "none" if f is None else f.name
            for api in (http, flight):
                hits = req("search", lambda api=api, f=f, q=q: api.search(q, K, f, True))
                if hits is not None:
                    compare_search(
                        checks,
                        f"exact_search_{api.proto}_{name}",
                        hits,
                        keys_all[order],
                        d[order],
                        live_d,
                    )
                if f is None:
                    for ef in (None, RECALL_EF):
                        hits = req(
                            "search", lambda api=api, q=q, ef=ef: api.search(q, K, None, False, ef)
                        )
                        if hits is not None and len(order):
                            found = {h[0] for h in hits}
                            at = api.proto if ef is None else f"{api.proto}_ef{ef}"
                            recall.setdefault(at, []).append(
                                len(found & set(keys_all[order].tolist())) / len(order)
                            )
    return {
        "pass": label,
        "seconds": round(time.perf_counter() - t0, 2),
        "keys_checked": sum(c.nkeys for c in clients),
        "live_rows": total,
        "checks": sum(checks.ok.values()) + sum(checks.bad.values()),
        "mismatches": sum(checks.bad.values()),
        "mismatches_by_check": dict(checks.bad),
        "mismatch_samples": checks.samples,
        "recall_at_10": {p: (float(np.mean(v)) if v else None) for p, v in recall.items()},
    }


def settle(http: HttpApi, timeout: float) -> dict:
    """Waits until the optimizer is idle with every row indexed."""
    t0 = time.perf_counter()
    quiet = 0
    st: dict = {}
    while time.perf_counter() - t0 < timeout:
        with contextlib.suppress(OpError):
            st = http.index_status()
            idle = st.get("optimizer_task") is None and st.get("unindexed_vectors") == 0
            quiet = quiet + 1 if idle else 0
            if quiet >= 3:
                return {"settled": True, "seconds": round(time.perf_counter() - t0, 1), **st}
        time.sleep(0.5)
    return {"settled": False, "seconds": round(time.perf_counter() - t0, 1), **st}


# ------------------------------------------------------------------ report


def _ms(a: np.ndarray, p: float | None) -> float | None:
    """The ``p`` percentile (None: the mean) of ``a`` seconds, in ms."""
    if not len(a):
        return None
    return round(float(np.mean(a) if p is None else np.percentile(a, p)) * 1e3, 3)


def op_stats(clients: list[Client], load_s: float, bucket_s: float) -> tuple[list, list]:
    """Per kind and protocol: counts, rates, latency percentiles; per kind
    and time bucket: latency percentiles."""
    recs = []
    for c in clients:
        if c.records:
            a = np.asarray(c.records, dtype=np.float64)
            proto = np.full(len(a), 0 if c.api.proto == "http" else 1)
            recs.append(np.column_stack([a, proto]))
    if not recs:
        return [], []
    a = np.concatenate(recs)
    t, kind, lat, outcome, proto = a.T
    rows = []
    for ki, kname in enumerate(KINDS):
        for pi, pname in enumerate(("http", "flight")):
            sel = (kind == ki) & (proto == pi)
            if not sel.any():
                continue
            ok = lat[sel & (outcome == 0)]
            rows.append(
                {
                    "kind": kname,
                    "proto": pname,
                    "ok": len(ok),
                    "overload_503": int((sel & (outcome == 1)).sum()),
                    "errors": int((sel & (outcome == 2)).sum()),
                    "ops_per_s": round(len(ok) / load_s, 2),
                    "p50_ms": _ms(ok, 50),
                    "p99_ms": _ms(ok, 99),
                    "max_ms": _ms(ok, 100),
                    "mean_ms": _ms(ok, None),
                }
            )
    timeline = []
    # A last bucket of a few seconds (requests answered after the deadline)
    # joins the one before.
    nb = max(1, int(np.ceil(load_s / bucket_s - 0.1)))
    b = np.minimum((t // bucket_s).astype(int), nb - 1)
    for bi in range(nb):
        for ki, kname in enumerate((*KINDS, "all")):
            sel = (b == bi) & (outcome == 0)
            if kname != "all":
                sel &= kind == ki
            ok = lat[sel]
            if not len(ok):
                continue
            span = load_s - bi * bucket_s if bi == nb - 1 else bucket_s
            timeline.append(
                {
                    "bucket": bi,
                    "t0_s": bi * bucket_s,
                    "kind": kname,
                    "ok": len(ok),
                    "ops_per_s": round(len(ok) / max(span, 1e-9), 2),
                    "p50_ms": _ms(ok, 50),
                    "p99_ms": _ms(ok, 99),
                    "max_ms": _ms(ok, 100),
                }
            )
    return rows, timeline


def _f(x: Any, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def markdown(res: dict) -> str:
    cfg, mach, srv = res["config"], res["machine"], res["server"]
    out = [f"# Sustained mixed load: {res['verdict']['result']}", ""]
    out.append(
        f"{cfg['clients']} clients ({cfg['http_clients']} HTTP, {cfg['flight_clients']} Flight) "
        f"for {res['load_seconds']:.0f} s against `sagitta serve` "
        f"({' '.join(cfg['server_args']) or 'default flags'}); collection `{COLLECTION}`: "
        f"{json.dumps(cfg['collection'])}; {cfg['keys_per_client']} keys per client."
    )
    binfo = cfg["server_binary"]
    out.append("")
    out.append(
        f"Server binary: sha256 {binfo['sha256'][:16]}, built {binfo['mtime']}; repository at "
        f"{binfo.get('repo_head', '?')}"
        + (
            f", uncommitted under crates/: {', '.join(binfo['repo_crates_uncommitted'])}"
            if binfo.get("repo_crates_uncommitted")
            else ""
        )
        + ". Index status polled during the load: "
        + ("yes" if cfg["index_poll_during_load"] else "no")
        + "."
    )
    out.append("")
    out.append(
        f"Machine: {mach['cpu']}, {mach['logical_cpus']} logical CPUs, ISA "
        f"{' '.join(mach['isa']) or '–'}; load average at start {mach['loadavg_start']}, "
        f"at end {mach['loadavg_end']}; kernel {mach['kernel']}, Python {mach['python']}."
    )
    out += ["", "## Operations", ""]
    out.append("| kind | protocol | ok | ops/s | p50 ms | p99 ms | max ms | 503 | errors |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in res["ops"]:
        out.append(
            f"| {r['kind']} | {r['proto']} | {r['ok']} | {r['ops_per_s']:.1f} | "
            f"{_f(r['p50_ms'], 2)} | {_f(r['p99_ms'], 2)} | {_f(r['max_ms'], 1)} | "
            f"{r['overload_503']} | {r['errors']} |"
        )
    tot_ok = sum(r["ok"] for r in res["ops"])
    out.append(
        f"| **all** | | {tot_ok} | {tot_ok / res['load_seconds']:.1f} | | | | "
        f"{sum(r['overload_503'] for r in res['ops'])} | {sum(r['errors'] for r in res['ops'])} |"
    )
    tl = res["timeline"]
    buckets = sorted({x["bucket"] for x in tl})
    if buckets:
        bs = cfg["bucket_s"]
        out += ["", f"## Latency over time (p50 / p99 ms per {bs:g} s bucket, both protocols)", ""]
        out.append(
            "| kind | " + " | ".join(f"{b * bs:g}-{(b + 1) * bs:g} s" for b in buckets) + " |"
        )
        out.append("|---" * (len(buckets) + 1) + "|")
        by = {(x["kind"], x["bucket"]): x for x in tl}
        for kname in (*KINDS, "all"):
            if not any((kname, b) in by for b in buckets):
                continue
            cells = []
            for b in buckets:
                x = by.get((kname, b))
                cells.append("–" if x is None else f"{x['p50_ms']:.2f} / {x['p99_ms']:.1f}")
            out.append(f"| {kname} | " + " | ".join(cells) + " |")
        cells = [_f(by[("all", b)]["ops_per_s"]) if ("all", b) in by else "–" for b in buckets]
        out.append("| ops/s (all) | " + " | ".join(cells) + " |")
        for key, title, scale in (
            ("rss_kib", "RSS MiB (max)", 1 / 1024),
            ("segments", "segments (max)", 1),
            ("unindexed_vectors", "unindexed rows (max)", 1),
        ):
            cells = []
            for b in buckets:
                v = [
                    s[key]
                    for s in srv["samples"]
                    if s.get(key) is not None and b * bs <= s["t"] < (b + 1) * bs
                ]
                cells.append(f"{max(v) * scale:.0f}" if v else "–")
            if any(x != "–" for x in cells):
                out.append(f"| {title} | " + " | ".join(cells) + " |")
    out += ["", "## Errors", ""]
    if res["errors"]:
        out.append("| kind | protocol | status | count |")
        out.append("|---|---|---|---|")
        for e in res["errors"]:
            out.append(f"| {e['kind']} | {e['proto']} | {e['status']} | {e['count']} |")
        out.append("")
        out.append("First message of each:")
        out.append("")
        for e in res["error_samples"]:
            out.append(f"- {e['proto']} {e['kind']}: {e['status']}: `{e['message'][:240]}`")
    else:
        out.append("No request failed other than with 503 / UNAVAILABLE (overload).")
    ov = sum(r["overload_503"] for r in res["ops"])
    rej = {
        k.split("reason=")[-1].strip('"}'): v
        for k, v in srv["metrics_end"].items()
        if k.startswith("sagitta_rejected_requests_total")
    }
    out.append("")
    out.append(
        f"Overload (503 / UNAVAILABLE, deliberate): {ov} requests; the server counted "
        f"rejections {json.dumps(rej) if rej else '{}'}."
    )
    rss = srv["rss_mib"]
    out += ["", "## Server", ""]
    out.append(f"- RSS MiB: start {_f(rss['start'])}, end {_f(rss['end'])}, max {_f(rss['max'])}")
    segs = [s["segments"] for s in srv["samples"] if s.get("segments") is not None]
    me = srv["metrics_end"]
    seg_end = me.get(f'sagitta_collection_segments{{collection="{COLLECTION}"}}')
    tomb_end = me.get(f'sagitta_collection_tombstones{{collection="{COLLECTION}"}}')
    out.append(
        f"- after the load: {_f(seg_end, 0)} segments, {_f(tomb_end, 0)} tombstones; "
        f"optimizer tasks finished {_f(srv['optimizer_tasks'], 0)}, optimizer errors "
        f"{_f(srv['optimizer_errors'], 0)}"
    )
    if segs:
        out.append(f"- segments during the load (index status samples): max {max(segs)}")
    tasks = Counter(s.get("optimizer_task") for s in srv["samples"] if s.get("optimizer_task"))
    if tasks:
        out.append(f"- optimizer seen running (samples): {dict(tasks)}")
    st = srv.get("settle") or {}
    if st:
        out.append(
            f"- settle after load: {'settled' if st.get('settled') else 'NOT settled'} "
            f"in {st.get('seconds')} s ({st.get('segments')} segments)"
        )
    else:
        out.append("- settle after load: skipped")
    out.append(
        f"- exit codes (SIGTERM): {srv['exit_codes']}"
        + (
            f" (the hung server was killed with SIGKILL: {srv['killed_hung_server']})"
            if srv.get("killed_hung_server") is not None
            else ""
        )
        + f"; restart to listening: {_f(srv.get('restart_s'), 2)} s; died during load: "
        f"{srv['died']}"
    )
    out.append(f"- log lines by level: {json.dumps(srv['log']['levels'])}")
    if srv["hang"]:
        out += ["", "## Hang", "", f"The load was stopped: {srv['hang']}.", ""]
        if srv["stacks"]:
            out.append(f"Threads waiting for a lock or in Sagitta code ({srv['stacks_file']}):")
            out.append("")
            out += [f"- `{line}`" for line in srv["stacks"]]
    out += ["", "## Consistency", ""]
    on = res["online_checks"]
    out.append(
        f"- online (during load, own rows): {on['checks']} checks, "
        f"**{on['mismatches']} mismatches** {json.dumps(on['mismatches_by_check'])}; "
        f"recall@10 of approximate owner-filtered searches: {_f(on['recall_at_10'], 3)}"
    )
    out.append("")
    out.append(
        "| final pass | keys checked | live rows | checks | mismatches | recall@10 http "
        f"(ef default / {RECALL_EF}) | recall@10 flight (ef default / {RECALL_EF}) | seconds |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for p in res["final_checks"]:
        rc = p["recall_at_10"]
        cells = [
            f"{_f(rc.get(proto), 3)} / {_f(rc.get(f'{proto}_ef{RECALL_EF}'), 3)}"
            for proto in ("http", "flight")
        ]
        out.append(
            f"| {p['pass']} | {p['keys_checked']} | {p['live_rows']} | {p['checks']} | "
            f"**{p['mismatches']}** | {cells[0]} | {cells[1]} | {p['seconds']} |"
        )
    for p in res["final_checks"]:
        for s in p["mismatch_samples"][:5]:
            out.append(f"- {p['pass']}: {s['check']}: {json.dumps(s['detail'])[:300]}")
    for s in on["mismatch_samples"][:5]:
        out.append(f"- online: {s['check']}: {json.dumps(s['detail'])[:300]}")
    v = res["verdict"]
    out += ["", f"**{v['result']}**" + (": " + "; ".join(v["failures"]) if v["failures"] else "")]
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m sagitta_bench.mixed_load",
        description="Sustained mixed HTTP + Flight load on the real server, then a full "
        "consistency check.",
    )
    ap.add_argument("--minutes", type=float, default=10.0, help="load duration (default 10)")
    ap.add_argument("--clients", type=int, default=16, help="client threads (default 16)")
    ap.add_argument(
        "--http-clients",
        type=int,
        default=None,
        help="how many of them use HTTP (default half; the rest Flight)",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results directory")
    ap.add_argument(
        "--bin",
        type=Path,
        default=Path(os.environ.get("SAGITTA_BIN", DEFAULT_BIN)),
        help="the sagitta binary (default $SAGITTA_BIN or target/release/sagitta)",
    )
    ap.add_argument("--keys-per-client", type=int, default=4096)
    ap.add_argument(
        "--segment-kib",
        type=int,
        default=256,
        help="the collection's segment_size, KiB (default 256: frequent seals)",
    )
    ap.add_argument(
        "--index-threshold",
        type=int,
        default=1000,
        help="the collection's index_threshold, rows (default 1000)",
    )
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for `sagitta serve` (repeatable), e.g. "
        "--server-arg=--max-pending-ingest=2",
    )
    ap.add_argument("--bucket-s", type=float, default=60.0, help="latency-over-time bucket")
    ap.add_argument("--sample-s", type=float, default=2.0, help="server sampling interval")
    ap.add_argument(
        "--final-queries", type=int, default=20, help="queries of the final exact-search comparison"
    )
    ap.add_argument(
        "--settle-s",
        type=float,
        default=180.0,
        help="longest wait for the optimizer to settle after the load",
    )
    ap.add_argument("--no-restart", action="store_true", help="skip the restart pass")
    ap.add_argument(
        "--no-index-poll",
        action="store_true",
        help="do not poll GET /collections/C/index during the load (the monitor's poll is "
        "part of the mixed load by default)",
    )
    ap.add_argument(
        "--request-timeout", type=float, default=45.0, help="client timeout per request, s"
    )
    ap.add_argument(
        "--hang-s",
        type=float,
        default=60.0,
        help="stop the load (and take the server's stacks) when no HTTP request is answered, "
        "or no write acknowledged, for this long",
    )
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args(argv)


def binary_info(path: Path) -> dict:
    """What identifies the server binary: hash, size, time, and the
    repository's commit and uncommitted changes under crates/ (the binary
    may have been built from either)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    st = path.stat()
    info = {
        "path": str(path),
        "sha256": h.hexdigest(),
        "bytes": st.st_size,
        "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
    }
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        git = ["git", "-C", str(REPO)]
        info["repo_head"] = subprocess.run(
            [*git, "log", "-1", "--format=%h %cI %s"], capture_output=True, text=True, check=True
        ).stdout.strip()[:120]
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "crates"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        info["repo_crates_uncommitted"] = [x.strip() for x in dirty if x.strip()]
    return info


def run_load(
    srv: Server, args: argparse.Namespace, n_http: int
) -> tuple[list[Client], Monitor, float]:
    """The clients' load for ``args.minutes``; returns them, the monitor
    and the load's seconds."""
    t0 = time.perf_counter()
    shared = Shared(t0, t0 + args.minutes * 60, t0)
    clients = [
        Client(
            cid,
            HttpApi(srv.http_addr, args.request_timeout)
            if cid < n_http
            else FlightApi(srv.flight_addr, args.request_timeout),
            args.keys_per_client,
            shared,
            args.seed,
        )
        for cid in range(args.clients)
    ]
    mon = Monitor(srv, shared, args.sample_s, not args.no_index_poll, args.hang_s)
    mon.start()
    for c in clients:
        c.start()
    print(
        f"load: {args.clients} clients for {args.minutes:g} min; server pid {srv.pid}, "
        f"http {srv.http_addr}, flight {srv.flight_addr}",
        file=sys.stderr,
    )
    last = 0.0
    try:
        while any(c.is_alive() for c in clients):
            for c in clients:
                c.join(timeout=0.5 / len(clients))
            el = time.perf_counter() - t0
            if el - last >= 10 or not any(c.is_alive() for c in clients):
                last = el
                ops = sum(len(c.records) for c in clients)
                errs = sum(sum(c.errors.values()) for c in clients)
                bad = sum(sum(c.checks.bad.values()) for c in clients)
                rss = srv.rss_kib()
                print(
                    f"  {el:6.0f} s  {ops} ops ({ops / max(el, 1e-9):.0f}/s)  errors {errs}"
                    f"  mismatches {bad}  rss {rss and rss // 1024} MiB"
                    + (f"  STOPPING: {mon.hang}" if mon.hang else ""),
                    file=sys.stderr,
                )
    except KeyboardInterrupt:
        shared.stop.set()
        for c in clients:
            c.join()
    load_s = time.perf_counter() - t0
    mon.done.set()
    mon.join()
    return clients, mon, load_s


def responsive(srv: Server, timeout: float = 10.0) -> tuple[bool, str | None]:
    """Whether the server answers ``/health``, and what failed when it
    does not, or does not take a write (the row that declared the payload
    columns, written and deleted again)."""
    api = HttpApi(srv.http_addr, timeout)
    answers = False
    try:
        api.call("GET", "/health")
        answers = True
        for attempt in range(5):  # 503 with no load left: a queue that does not drain
            try:
                api.upsert([SEED_KEY], vectors_of([SEED_KEY]), [SEED_ROW])
                break
            except OpError as e:
                if not e.overload or attempt == 4:
                    raise
                time.sleep(2)
        api.delete([SEED_KEY])
        return True, None
    except OpError as e:
        what = "a write" if answers else "GET /health"
        return answers, f"after the load, {what} failed: {e.status} {e.message[:100]}"
    finally:
        api.close()


def after_load(
    srv: Server,
    args: argparse.Namespace,
    clients: list[Client],
    mon: Monitor,
    start: Callable[[], Server],
    stacks_path: Path,
) -> tuple[Server, dict]:
    """Stacks if the server hung, then the final checks: after the load,
    after the optimizer settled, and after a restart (SIGTERM, or kill -9
    if it hung). Returns the server now running and the findings."""
    out: dict[str, Any] = {"final_checks": [], "exit_codes": [], "stacks": []}
    if not srv.alive():
        return srv, out
    ok, probe = responsive(srv)
    mon.hang = mon.hang or probe
    if mon.hang:
        print("the server hangs: taking its stacks (gdb)", file=sys.stderr)
        out["stacks"] = dump_stacks(srv.pid, stacks_path)
        out["stacks_file"] = str(stacks_path)
    out["metrics_end"] = HttpApi(srv.http_addr, 10).metrics() if ok else {}
    out["rss_end_kib"] = srv.rss_kib()
    fq, seed = args.final_queries, args.seed
    if ok:
        http = HttpApi(srv.http_addr, args.request_timeout)
        flight = FlightApi(srv.flight_addr, args.request_timeout)
        out["final_checks"].append(final_check("after load", http, flight, clients, fq, seed))
        if not mon.hang:
            out["settle"] = settle(http, args.settle_s)
            out["final_checks"].append(
                final_check("after settle", http, flight, clients, fq, seed + 1)
            )
        http.close()
        flight.close()
    if args.no_restart:
        return srv, out
    hung = bool(mon.hang)
    if hung:
        out["killed_hung_server"] = srv.stop(sig=signal.SIGKILL)
    else:
        out["exit_codes"].append(srv.stop())
    label = "after kill -9 and restart" if hung else "after restart"
    for c in clients:
        c.model.reopen()
    srv = start()
    out["restart_s"] = srv.start_s
    http = HttpApi(srv.http_addr, args.request_timeout)
    flight = FlightApi(srv.flight_addr, args.request_timeout)
    out["final_checks"].append(final_check(label, http, flight, clients, fq, seed + 2))
    http.close()
    flight.close()
    return srv, out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.bin.exists():
        print(
            f"{args.bin} not found: build it with `cargo build --release -p sagitta-cli` "
            "(or give --bin / $SAGITTA_BIN)",
            file=sys.stderr,
        )
        return 2
    n_http = args.clients // 2 if args.http_clients is None else args.http_clients
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / f"{stamp}-{args.minutes:g}min-{args.clients}c"
    machine = {**machine_info(), "loadavg_start": loadavg()}
    coll = {
        "name": COLLECTION,
        "dims": DIMS,
        "metric": "l2",
        "segment_size": args.segment_kib * 1024,
        "index_threshold": args.index_threshold,
    }
    res: dict[str, Any] = {
        "config": {
            "minutes": args.minutes,
            "clients": args.clients,
            "http_clients": n_http,
            "flight_clients": args.clients - n_http,
            "keys_per_client": args.keys_per_client,
            "collection": coll,
            "server_binary": binary_info(args.bin),
            "server_args": args.server_arg,
            "index_poll_during_load": not args.no_index_poll,
            "request_timeout_s": args.request_timeout,
            "hang_s": args.hang_s,
            "weights": WEIGHTS,
            "bucket_s": args.bucket_s,
            "seed": args.seed,
            "started": stamp,
        },
    }
    tmp = tempfile.TemporaryDirectory(prefix="sagitta-mixed-")
    # The binary is copied first: a rebuild during the run must not change
    # the server the restart pass starts.
    binary = Path(tmp.name) / "sagitta"
    shutil.copy2(args.bin, binary)
    data, log_path = Path(tmp.name) / "data", Path(tmp.name) / "server.log"

    def start() -> Server:
        return Server(binary, data, log_path, args.server_arg)

    srv = start()
    exit_codes: list[int] = []
    try:
        http = HttpApi(srv.http_addr, args.request_timeout)
        http.call("POST", "/collections", coll)
        # The payload columns exist before the load (a filter on a column no
        # row has written yet is refused): one row, written and deleted,
        # outside every client's range.
        http.upsert([SEED_KEY], vectors_of([SEED_KEY]), [SEED_ROW])
        http.delete([SEED_KEY])
        metrics_start = http.metrics()
        http.close()
        clients, mon, load_s = run_load(srv, args, n_http)
        mon.sample()
        print(f"load done after {load_s:.0f} s; final checks", file=sys.stderr)
        srv, fin = after_load(srv, args, clients, mon, start, Path(f"{base}.stacks.txt"))
        exit_codes += fin["exit_codes"]
    finally:
        exit_codes.append(srv.stop())
    res["load_seconds"] = round(load_s, 2)
    res["machine"] = {**machine, "loadavg_end": loadavg()}
    res.update(summarize(clients, load_s, args.bucket_s))
    log = log_summary(log_path)
    rss = [s["rss_kib"] for s in mon.samples if s.get("rss_kib")]
    metrics_end = fin.get("metrics_end", {})
    rss_end = fin.get("rss_end_kib")
    opt = f'{{collection="{COLLECTION}"}}'
    res["server"] = {
        "rss_mib": {
            "start": rss[0] / 1024 if rss else None,
            "end": rss_end / 1024 if rss_end else None,
            "max": max(rss) / 1024 if rss else None,
        },
        "samples": mon.samples,
        "monitor_failures": dict(mon.failures),
        "hang": mon.hang,
        "stacks": fin["stacks"],
        "stacks_file": fin.get("stacks_file"),
        "metrics_start": metrics_start,
        "metrics_end": metrics_end,
        "optimizer_tasks": metrics_end.get(f"sagitta_optimizer_tasks{opt}"),
        "optimizer_errors": metrics_end.get(f"sagitta_optimizer_errors{opt}"),
        "settle": fin.get("settle", {}),
        "restart_s": fin.get("restart_s"),
        "exit_codes": exit_codes,
        "killed_hung_server": fin.get("killed_hung_server"),
        "died": mon.died,
        "log": log,
    }
    res["final_checks"] = fin["final_checks"]
    res["verdict"] = verdict(res, args)
    if res["verdict"]["failures"]:
        res["server_log_tail"] = log_path.read_text(errors="replace").splitlines()[-50:]
    tmp.cleanup()
    Path(f"{base}.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = markdown(res)
    Path(f"{base}.md").write_text(md)
    print(md)
    print(f"results: {base}.json, {base}.md", file=sys.stderr)
    return 1 if res["verdict"]["failures"] else 0


def summarize(clients: list[Client], load_s: float, bucket_s: float) -> dict:
    """The clients' records, errors and online checks, merged."""
    ops, timeline = op_stats(clients, load_s, bucket_s)
    errors: Counter[tuple[str, str, str]] = Counter()
    online = Checks()
    recall = [0.0, 0]
    samples: dict[tuple[str, str, str], dict] = {}
    for c in clients:
        for (kind, status), n in c.errors.items():
            errors[(kind, c.api.proto, status)] += n
        for (kind, status), msg in c.error_samples.items():
            samples.setdefault(
                (kind, c.api.proto, status),
                {"kind": kind, "proto": c.api.proto, "status": status, "message": msg},
            )
        online.merge(c.checks)
        recall[0] += c.recall[0]
        recall[1] += c.recall[1]
    return {
        "ops": ops,
        "timeline": timeline,
        "errors": [
            {"kind": k, "proto": p, "status": s, "count": n}
            for (k, p, s), n in sorted(errors.items())
        ],
        "error_samples": list(samples.values()),
        "client_crashes": [{"client": c.cid, "traceback": c.crash} for c in clients if c.crash],
        "online_checks": {
            "checks": sum(online.ok.values()) + sum(online.bad.values()),
            "by_check": {k: online.ok[k] + online.bad[k] for k in sorted(online.ok | online.bad)},
            "mismatches": sum(online.bad.values()),
            "mismatches_by_check": dict(online.bad),
            "mismatch_samples": online.samples,
            "recall_at_10": recall[0] / recall[1] if recall[1] else None,
        },
    }


def verdict(res: dict, args: argparse.Namespace) -> dict:
    """PASS, or FAIL with the reasons."""
    failures = []
    finals, srv = res["final_checks"], res["server"]
    n_bad = res["online_checks"]["mismatches"] + sum(p["mismatches"] for p in finals)
    if n_bad:
        failures.append(f"{n_bad} consistency mismatches")
    n_err = sum(e["count"] for e in res["errors"])
    if n_err:
        failures.append(f"{n_err} failed requests (not 503)")
    if res["client_crashes"]:
        failures.append(f"{len(res['client_crashes'])} client threads crashed")
    if srv["died"]:
        failures.append("the server died during the load")
    if srv["hang"]:
        failures.append(f"the server hung: {srv['hang']}")
    want = 3 - int(args.no_restart) - int(bool(srv["hang"]))
    if any(srv["exit_codes"]) or len(finals) < want:
        failures.append(f"server exit codes {srv['exit_codes']}, {len(finals)} final passes")
    if srv["log"]["levels"].get("ERROR") or srv["log"]["levels"].get("PANIC"):
        failures.append(f"server log: {srv['log']['levels']}")
    return {"result": "FAIL" if failures else "PASS", "failures": failures}


if __name__ == "__main__":
    sys.exit(main())
