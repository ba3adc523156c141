"""Longbow-style Arrow Flight benchmark: ``sagitta serve`` and the peer
Longbow (github 23skdu/longbow, a Go Arrow Flight vector database) in the
same run, on the same rows and queries, through the same client code
(``pyarrow.flight``; both speak Longbow's tickets and actions).

Both servers run on loopback for the whole run. For each operation the
engines take turns (the first engine rotating from operation to
operation); only one engine is measured at any time.

1. **DoPut**: the first N rows of debian-minilm (384-d float32,
   re-normalised from the stored float16) with ``id`` int64, ``vector``
   fixed_size_list<float32>[384] and the payload columns ``category``
   (string, from the row number: ``category_of``) and ``text`` (the row's
   passage), in batches of ``--batch`` rows in one DoPut stream. MB/s =
   (vector + id bytes) / wall seconds until the stream closed. Then the
   time until the engine has indexed every row: Longbow indexes after
   DoPut returns (``longbow.sh wait``, plus our own poll of its insert
   counter for the time of the last insert); Sagitta acknowledges rows
   once durable and searchable, and its background optimizer builds the
   HNSW segments afterwards (polled over HTTP ``/collections/C/index``).
   Searches start only after both.
2. **DoGet download** of the whole dataset (``{"name": D}``), MB/s of the
   Arrow data received, median of ``--download-reps``; and once with
   Longbow's ``filters`` in the download ticket.
3. **Search** (DoGet ``{"search": {...}}``, k=10) at concurrency 1 and 8
   (threads, each with its own FlightClient): QPS, p50, p99, recall@10
   against exact cosine top-10 (numpy) over the same N rows.
4. **Filtered search** (``category eq X``, X rotating over the 4
   categories, 25 % of rows each): the same, recall against the exact
   top-10 among the rows of that category, and the share of returned rows
   that pass the filter.
5. **Hybrid search** (``text_query`` = the query's passage, ``alpha``
   0.5): QPS, p50, p99 (no recall).
6. **Search by id** (DoAction ``VectorSearchByID``, ids as strings, as
   Longbow's SDK sends them): QPS, p50, p99, recall@10 against the exact
   neighbours of the stored row, the row itself left out.
7. **Delete** (DoAction ``delete``, one id per action, ids as strings):
   ops/s, then the rows a full download returns.

Engine-specific setup only: Sagitta's collection is created beforehand by
the ``create-collection`` action with ``text_fields: ["text"]`` and
``dtype: f32`` (what a DoPut-created collection gets, plus a BM25 index on
``text``), since hybrid search needs declared text fields; Longbow is
started by ``shared/peers/longbow.sh`` with ``LONGBOW_HYBRID_TEXT_COLUMNS=
meta,text``. An operation that fails is recorded as ``error: <message>``
for that engine; the run goes on.

``python -m sagitta_bench longbow --rows 20000 --queries 1000``
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from . import datasets

REPO = Path(__file__).resolve().parents[2]
# $SAGITTA_BIN, as the server tests take it (e.g. to set two builds side by side).
SAGITTA_BIN = Path(os.environ.get("SAGITTA_BIN") or REPO / "target" / "release" / "sagitta")
LONGBOW_SH = REPO.parent / "shared" / "peers" / "longbow.sh"
LONGBOW_MIRROR = Path("/work/.mirror/23skdu+longbow/repo")
LONGBOW_PEER_HOME = os.environ.get("LONGBOW_PEER_HOME", "/tmp/longbow")
CATEGORIES = ("amber", "blue", "green", "red")
K = 10
ENGINES = ("sagitta", "longbow")
GRPC_OPTS = [
    ("grpc.max_receive_message_length", 1 << 30),
    ("grpc.max_send_message_length", 1 << 30),
]
MAX_ERRORS = 3  # an operation stops after this many failed requests


# ---------------------------------------------------------------- pure helpers


def category_of(rows: np.ndarray) -> np.ndarray:
    """The ``category`` payload of rows (by row number): 4 values, 25 % each."""
    return np.asarray(CATEGORIES, dtype=object)[np.asarray(rows) % len(CATEGORIES)]


def query_category(i: int) -> str:
    """The category query ``i`` filters on."""
    return CATEGORIES[i % len(CATEGORIES)]


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int, rows=None) -> np.ndarray:
    """Exact cosine top-k (unit-norm inputs) of ``queries`` among ``rows``
    of ``base`` (all rows if None), as row numbers, nearest first."""
    if rows is None:
        return datasets.exact_topk(base, queries, k)
    rows = np.asarray(rows)
    return rows[datasets.exact_topk(base[rows], queries, k)]


def filtered_truth(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k of each query among the rows of ``query_category(i)``."""
    cats = category_of(np.arange(len(base)))
    out = np.zeros((len(queries), k), dtype=np.int64)
    for c in CATEGORIES:
        qs = np.array([i for i in range(len(queries)) if query_category(i) == c], dtype=np.int64)
        if len(qs):
            out[qs] = exact_topk(base, queries[qs], k, np.flatnonzero(cats == c))
    return out


def by_id_truth(base: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k neighbours of stored rows ``ids``, each row left out."""
    top = datasets.exact_topk(base, base[ids], k + 1)
    return np.array([[r for r in t if r != i][:k] for t, i in zip(top, ids)], dtype=np.int64)


def recall(found: list, truth: np.ndarray, k: int) -> float | None:
    """Mean |found[:k] ∩ truth[:k]| / k over the queries answered (None
    entries are failed requests and left out)."""
    pairs = [(f, t) for f, t in zip(found, truth) if f is not None]
    if not pairs:
        return None
    hits = sum(len(set(f[:k]) & set(t[:k].tolist())) for f, t in pairs)
    return hits / (len(pairs) * k)


def recall_without_self(found: list, ids, truth: np.ndarray, k: int) -> float | None:
    """Recall of a search by id with the stored row itself left out of what
    came back: each answer's other rows (m of them, at most k) against the
    first m exact neighbours (the row left out there too), so an engine that
    returns the row itself among its k is not marked down for it."""
    num = den = 0
    for f, i, t in zip(found, ids, truth):
        if f is None:
            continue
        rest = [x for x in f if x != int(i)][:k]
        num += len(set(rest) & set(t[: len(rest)].tolist()))
        den += len(rest)
    return num / den if den else None


def filter_pass_share(found: list, n_queries_cat) -> float | None:
    """Share of returned rows whose category is the one query i filtered on."""
    ok = total = 0
    for i, f in enumerate(found):
        if f is None:
            continue
        want = n_queries_cat(i)
        total += len(f)
        ok += sum(1 for r in f if CATEGORIES[r % len(CATEGORIES)] == want)
    return ok / total if total else None


def as_ids(values) -> list[int]:
    """Ids as ints, whatever type came back (int64, uint64 or decimal strings)."""
    return [int(v) for v in values]


def latency_summary(lat_s: list[float], wall_s: float) -> dict:
    a = np.asarray(lat_s, dtype=np.float64) * 1e3
    return {
        "qps": len(a) / wall_s if wall_s > 0 else None,
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
    }


def schema_str(schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


class OpFailed(Exception):
    """An operation none of whose requests was answered (the message is
    the first request's error)."""


def error_text(e: BaseException, limit: int = 300) -> str:
    if isinstance(e, OpFailed):
        return str(e)
    msg = " ".join(str(e).split())
    msg = re.sub(r"\. Detail: .*$", "", msg)  # gRPC debug context
    return f"{type(e).__name__}: {msg[:limit]}"


# ------------------------------------------------------------------ machine


def machine_info() -> dict:
    info = {
        "cpu": "unknown",
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
        info["cpu"] = m.group(1).strip() if m else "unknown"
        m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
        flags = set(m.group(1).split()) if m else set()
        info["isa_flags"] = sorted(f for f in flags if f.startswith(("avx", "fma", "f16c")))
        info["isa"] = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline"
        m = re.search(r"^MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text(), re.M)
        info["mem_gib"] = round(int(m.group(1)) / 2**20, 1) if m else None
    except OSError:
        pass
    import pyarrow

    info["pyarrow"] = pyarrow.__version__
    info["numpy"] = np.__version__
    return info


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def proc_rss(pid: int) -> dict:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for key, name in (("VmRSS", "rss_mib"), ("VmHWM", "hwm_mib")):
        m = re.search(rf"^{key}:\s*(\d+)", text, re.M)
        if m:
            out[name] = round(int(m.group(1)) / 1024, 1)
    return out


# ------------------------------------------------------------------ servers


class SagittaServer:
    name = "sagitta"

    def __init__(self, tmp: Path) -> None:
        self.data = tmp / "sagitta-data"
        self.log_path = tmp / "sagitta.log"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                *(str(SAGITTA_BIN), "serve", "--data", str(self.data)),
                *("--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
        )
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"sagitta serve exited: {self.log_path.read_text()[-1500:]}")
        addrs = json.loads(line)
        self.http_addr = addrs["http"]
        self.data_uri = self.meta_uri = f"grpc://{addrs['flight']}"
        self.pid = self.proc.pid

    def describe(self) -> dict:
        return {
            "binary": str(SAGITTA_BIN),
            "version": subprocess.run(
                [str(SAGITTA_BIN), "--version"], capture_output=True, text=True
            ).stdout.strip(),
            "binary_mtime": time.strftime(
                "%Y-%m-%d %H:%M:%S", time.localtime(SAGITTA_BIN.stat().st_mtime)
            ),
            "repo_head": subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
            ).stdout.strip(),
            "flight": self.data_uri,
        }

    def prepare(self, dataset: str, dims: int) -> dict:
        """Creates the collection with a BM25 index on ``text`` (else the
        first DoPut would create it without text fields)."""
        body = {"name": dataset, "dims": dims, "dtype": "f32", "text_fields": ["text"]}
        client = flight_client(self.meta_uri)
        try:
            res = list(client.do_action(action("create-collection", body), call_opts(60)))
            return {
                "create_collection": body,
                "answer": json.loads(res[0].body.to_pybytes()) if res else None,
            }
        finally:
            client.close()

    def wait_indexed(self, dataset: str, cap_s: float) -> dict:
        """Seconds until the optimizer has indexed every row, then until it
        has nothing left to do (a merge it puts off until writes pause),
        so that no background task runs under the searches measured next."""
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection(self.http_addr, timeout=60)
        st: dict = {}
        out: dict = {}
        try:
            while time.perf_counter() - t0 < cap_s:
                conn.request("GET", f"/collections/{dataset}/index")
                st = json.loads(conn.getresponse().read())
                idle = st.get("optimizer_task") is None
                if "indexed_s" not in out and st.get("unindexed_vectors", 0) == 0 and idle:
                    out["indexed_s"] = time.perf_counter() - t0
                if "indexed_s" in out and idle and st.get("optimizer_deferred") is None:
                    out["settled_s"] = time.perf_counter() - t0
                    out["status"] = st
                    return out
                time.sleep(0.1)
        finally:
            conn.close()
        return {**out, "error": f"not settled after {cap_s} s", "status": st}

    def rss(self) -> dict:
        return proc_rss(self.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        return tail_of_log(self.log_path)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._log.close()


def longbow_env() -> dict:
    env = dict(os.environ)
    env.setdefault("LONGBOW_MIRROR", str(LONGBOW_MIRROR))
    env["LONGBOW_PEER_KEEP"] = "1"  # the node's log is read after stop; the dir removed here
    return env


class LongbowServer:
    name = "longbow"

    def __init__(self, tmp: Path) -> None:
        r = subprocess.run(
            ["bash", str(LONGBOW_SH), "start"],
            capture_output=True,
            text=True,
            env=longbow_env(),
            timeout=900,
        )
        fields = dict(re.findall(r"(\w+)=(\S+)", r.stdout))
        if r.returncode != 0 or "data" not in fields:
            raise RuntimeError(f"longbow.sh start failed ({r.returncode}): {r.stderr[-1500:]}")
        self.data_uri, self.meta_uri = fields["data"], fields["meta"]
        self.metrics_url, self.pid, self.dir = fields["metrics"], int(fields["pid"]), fields["dir"]

    def describe(self) -> dict:
        commit = Path(LONGBOW_PEER_HOME, "bin", "longbow.commit").read_text().strip()
        return {"commit": commit, "data": self.data_uri, "meta": self.meta_uri}

    def prepare(self, dataset: str, dims: int) -> dict:
        return {}

    def _counters(self) -> tuple[float, float]:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            text = r.read().decode()
        inserts = sum(
            float(m)
            for m in re.findall(
                r"^longbow_hnsw_insert_latency_by_dim_seconds_count\S* (\S+)", text, re.M
            )
        )
        m = re.search(r"^longbow_index_queue_depth (\S+)", text, re.M)
        return inserts, float(m.group(1)) if m else 0.0

    def wait_indexed(self, dataset: str, cap_s: float) -> dict:
        """``longbow.sh wait`` (15 s of a still insert counter) and, beside
        it, a 0.25 s poll of the counter: the time of its last change."""
        seen: list[tuple[float, float, float]] = []
        done = threading.Event()
        t0 = time.perf_counter()

        def poll():
            while not done.is_set():
                with contextlib.suppress(Exception):
                    seen.append((time.perf_counter() - t0, *self._counters()))
                done.wait(0.25)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        try:
            r = subprocess.run(
                ["bash", str(LONGBOW_SH), "wait", str(int(cap_s))],
                capture_output=True,
                text=True,
                env=longbow_env(),
                timeout=cap_s + 60,
            )
        finally:
            done.set()
            th.join()
        wait_s = time.perf_counter() - t0
        out = {"wait_s": wait_s, "wait_output": (r.stdout + r.stderr).strip()[-300:]}
        if seen:
            final = seen[-1][1]
            out["hnsw_inserts"] = final
            out["indexed_s"] = next(t for t, c, q in seen if c == final and q == 0)
        if r.returncode != 0:
            out["error"] = f"longbow.sh wait: {out['wait_output']}"
        return out

    def rss(self) -> dict:
        return proc_rss(self.pid)

    def alive(self) -> bool:
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            return state != "Z" and os.readlink(f"/proc/{self.pid}/exe").startswith(
                str(Path(LONGBOW_PEER_HOME, "bin", "longbow"))
            )
        except (OSError, IndexError):
            return False

    def log_tail(self) -> str:
        return tail_of_log(Path(self.dir) / "longbow.log")

    def stop(self) -> None:
        subprocess.run(["bash", str(LONGBOW_SH), "stop"], env=longbow_env(), timeout=120)
        runs = Path(LONGBOW_PEER_HOME, "runs").resolve()
        node = Path(self.dir).resolve()
        if node.parent == runs:  # the node directory longbow.sh made for this run
            import shutil

            shutil.rmtree(node, ignore_errors=True)


# ------------------------------------------------------------------ flight


def flight_client(uri: str):
    import pyarrow.flight as fl

    return fl.FlightClient(uri, generic_options=GRPC_OPTS)


def call_opts(timeout: float):
    import pyarrow.flight as fl

    return fl.FlightCallOptions(timeout=timeout)


def action(kind: str, body: dict):
    import pyarrow.flight as fl

    return fl.Action(kind, json.dumps(body).encode())


def ticket(body: dict):
    import pyarrow.flight as fl

    return fl.Ticket(json.dumps(body).encode())


def make_table(vectors: np.ndarray, texts: list[str] | None, start: int = 0):
    import pyarrow as pa

    n, d = vectors.shape
    rows = np.arange(start, start + n)
    cols = {
        "id": pa.array(rows.astype(np.int64)),
        "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel()), d
        ),
        "category": pa.array(category_of(rows).tolist(), type=pa.string()),
    }
    if texts is not None:
        cols["text"] = pa.array(texts, type=pa.string())
    return pa.table(cols)


def do_put(srv, dataset: str, table, batch_rows: int) -> dict:
    import pyarrow.flight as fl

    client = flight_client(srv.data_uri)
    n, d = table.num_rows, table.schema.field("vector").type.list_size
    batches = table.to_batches(max_chunksize=batch_rows)
    acks: list[str] = []
    try:
        t0 = time.perf_counter()
        writer, reader = client.do_put(
            fl.FlightDescriptor.for_path(dataset), table.schema, options=call_opts(1800)
        )
        for b in batches:
            writer.write_batch(b)
        writer.done_writing()
        while True:
            buf = reader.read()
            if buf is None:
                break
            acks.append(buf.to_pybytes().decode(errors="replace")[:200])
        writer.close()
        secs = time.perf_counter() - t0
    finally:
        client.close()
    mb = n * (d * 4 + 8) / 1e6
    return {
        "rows": n,
        "batches": len(batches),
        "seconds": secs,
        "mb_per_s": mb / secs,
        "rows_per_s": n / secs,
        "arrow_mb_per_s": table.nbytes / 1e6 / secs,
        "acks": len(acks),
        "last_ack": acks[-1] if acks else None,
    }


def download(srv, body: dict) -> dict:
    client = flight_client(srv.data_uri)
    try:
        t0 = time.perf_counter()
        tab = client.do_get(ticket(body), options=call_opts(300)).read_all()
        secs = time.perf_counter() - t0
    finally:
        client.close()
    return {
        "rows": tab.num_rows,
        "seconds": secs,
        "mb": tab.nbytes / 1e6,
        "mb_per_s": tab.nbytes / 1e6 / secs,
        "schema": schema_str(tab.schema),
        "_table": tab,
    }


def run_requests(srv, n: int, conc: int, request, cap_s: float, warmup: bool = True) -> dict:
    """Requests 0..n-1 split round-robin over ``conc`` threads, each with
    its own data and meta FlightClient; ``request(clients, i)`` returns
    what the request found. One untimed warm-up request per thread (the
    first of its share) unless ``warmup`` is False."""
    lat: list = [None] * n
    found: list = [None] * n
    errors: list[str] = []
    stop = threading.Event()
    barrier = threading.Barrier(conc + 1)
    lock = threading.Lock()
    t_start = [0.0]

    def fail(e: BaseException) -> None:
        with lock:
            errors.append(error_text(e))
            if len(errors) >= MAX_ERRORS or "Deadline" in str(e) or "deadline" in str(e):
                stop.set()

    def body(tid: int) -> None:
        data = flight_client(srv.data_uri)
        meta = data if srv.meta_uri == srv.data_uri else flight_client(srv.meta_uri)
        clients = (data, meta)
        try:
            if warmup:
                try:
                    request(clients, tid % n)
                except Exception as e:
                    fail(e)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            for i in range(tid, n, conc):
                if stop.is_set() or time.perf_counter() - t_start[0] > cap_s:
                    break
                t0 = time.perf_counter()
                try:
                    found[i] = request(clients, i)
                except Exception as e:
                    fail(e)
                    continue
                lat[i] = time.perf_counter() - t0
        finally:
            data.close()
            if meta is not data:
                meta.close()

    threads = [threading.Thread(target=body, args=(t,)) for t in range(conc)]
    for t in threads:
        t.start()
    t_start[0] = time.perf_counter()  # before the threads pass the barrier
    barrier.wait()
    t_start[0] = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start[0]
    ok = [x for x in lat if x is not None]
    out: dict = {"concurrency": conc, "requests": n, "ok": len(ok), "errors": len(errors)}
    if errors:
        out["first_error"] = errors[0]
    if len(ok) < n and not errors:
        out["truncated_after_s"] = cap_s
    if ok:
        out.update(latency_summary(ok, wall))
        out["wall_s"] = wall
    out["_found"] = found
    return out


def search_request(dataset: str, vector: np.ndarray, extra: dict | None = None) -> bytes:
    body = {"dataset": dataset, "vector": [float(x) for x in vector], "k": K, **(extra or {})}
    return json.dumps({"search": body}).encode()


# ------------------------------------------------------------------ the run


def rotate(seq: list, r: int) -> list:
    r %= len(seq)
    return seq[r:] + seq[:r]


def strip(d):
    """Without the private ``_`` keys (tables, found ids)."""
    if isinstance(d, dict):
        return {k: strip(v) for k, v in d.items() if not k.startswith("_")}
    return d


def load_data(rows: int, n_queries: int) -> dict:
    root = datasets.data_root() / "debian-minilm"
    base16 = np.load(root / "base.f16.npy", mmap_mode="r")
    if rows > len(base16):
        raise SystemExit(f"--rows {rows}: debian-minilm has {len(base16)}")
    base = datasets._normalize(np.asarray(base16[:rows]))
    queries = datasets._normalize(np.load(root / "queries.f16.npy")[:n_queries])
    texts = qtexts = None
    if (root / "base_texts.txt.gz").exists():
        with gzip.open(root / "base_texts.txt.gz", "rt") as f:
            texts = [line.rstrip("\n") for _, line in zip(range(rows), f)]
        with gzip.open(root / "query_texts.txt.gz", "rt") as f:
            qtexts = [line.rstrip("\n") for _, line in zip(range(n_queries), f)]
    t0 = time.perf_counter()
    gt = exact_topk(base, queries, K)
    gt_note = "numpy exact cosine top-10 over the same rows"
    if rows == len(base16) and (root / "gt.i32.npy").exists():
        ds_gt = np.load(root / "gt.i32.npy")[:n_queries, :K]
        agree = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(gt, ds_gt)]))
        gt_note += f"; agrees with the dataset's gt.i32.npy at {agree:.4f}"
        if agree >= 0.999:
            gt, gt_note = ds_gt.astype(np.int64), f"the dataset's gt.i32.npy ({gt_note})"
    fgt = filtered_truth(base, queries, K)
    by_id = np.random.default_rng(7).choice(rows, size=min(n_queries, rows), replace=False)
    idgt = by_id_truth(base, by_id, K)
    return {
        "base": base,
        "queries": queries,
        "texts": texts,
        "qtexts": qtexts,
        "gt": gt,
        "gt_note": gt_note,
        "fgt": fgt,
        "by_id": by_id,
        "idgt": idgt,
        "truth_s": time.perf_counter() - t0,
    }


def guarded(results: dict, engine: str, op: str, fn, srv=None, dead=None) -> dict | None:
    """Runs ``fn()``; an exception becomes ``error: <message>`` in that row.
    With ``srv`` and ``dead``: a server found not running is noted in
    ``dead`` (engine -> the operation during which it exited) and skipped."""
    if srv is not None and dead is not None and engine in dead:
        results.setdefault(op, {})[engine] = (
            f"error: skipped, the server process exited during {dead[engine]}"
        )
        return None
    try:
        r = fn()
    except Exception as e:  # any engine failure is a result, not a crash
        results.setdefault(op, {})[engine] = f"error: {error_text(e)}"
        print(f"  {engine:8} {op}: error: {error_text(e)}", flush=True)
        r = None
    else:
        results.setdefault(op, {})[engine] = strip(r)
    if srv is not None and dead is not None and not srv.alive():
        dead[engine] = op
        print(f"  {engine:8} the server process exited during {op}", flush=True)
    return r


def tail_of_log(path: Path, limit: int = 4000) -> str:
    """A Go panic / fatal error and what follows it, else the last lines."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    start = next((i for i, x in enumerate(lines) if re.match(r"(panic|fatal error)[: ]", x)), None)
    pick = lines[start : start + 40] if start is not None else lines[-15:]
    return "\n".join(x[:600] for x in pick)[-limit:]


def searches(srv, eng: str, dataset: str, d: dict, conc: int, kind: str, cap_s: float) -> dict:
    qs, n = d["queries"], len(d["queries"])
    if kind == "search":
        tickets = [search_request(dataset, q) for q in qs]
    elif kind == "filtered":
        tickets = [
            search_request(
                dataset,
                q,
                {"filters": [{"field": "category", "op": "eq", "value": query_category(i)}]},
            )
            for i, q in enumerate(qs)
        ]
    else:
        tickets = [
            search_request(dataset, q, {"text_query": t, "alpha": 0.5})
            for q, t in zip(qs, d["qtexts"])
        ]
    schemas: list[str] = []

    def request(clients, i):
        import pyarrow.flight as fl

        tab = clients[0].do_get(fl.Ticket(tickets[i]), options=call_opts(30)).read_all()
        if not schemas:
            schemas.append(schema_str(tab.schema))
        return as_ids(tab.column("id").to_pylist()) if "id" in tab.column_names else []

    r = run_requests(srv, n, conc, request, cap_s)
    if r["ok"] == 0:
        raise OpFailed(r.get("first_error", "no request answered"))
    found = r["_found"]
    r["result_schema"] = schemas[0] if schemas else None
    r["mean_hits"] = float(np.mean([len(f) for f in found if f is not None]))
    if kind == "search":
        r["recall_at_10"] = recall(found, d["gt"], K)
    elif kind == "filtered":
        r["recall_at_10"] = recall(found, d["fgt"], K)
        r["filter_pass_share"] = filter_pass_share(found, query_category)
    return r


def id_json(i: int, form: str):
    """An id as a DoAction body carries it: ``str`` (what Longbow's SDK
    sends, and its server's ``id`` field type) or ``int`` (a JSON number)."""
    return str(int(i)) if form == "str" else int(i)


def search_by_id(srv, eng: str, dataset: str, d: dict, cap_s: float, form: str) -> dict:
    ids = d["by_id"]
    bodies = [
        json.dumps({"dataset": dataset, "id": id_json(i, form), "k": K}).encode() for i in ids
    ]
    answers: list = []

    def request(clients, i):
        import pyarrow.flight as fl

        res = list(clients[1].do_action(fl.Action("VectorSearchByID", bodies[i]), call_opts(30)))
        ans = json.loads(res[0].body.to_pybytes()) if res else {}
        if not answers:
            answers.append(json.dumps(ans)[:200])
        return as_ids(ans.get("ids") or [])

    r = run_requests(srv, len(ids), 1, request, cap_s)
    if r["ok"] == 0:
        raise OpFailed(r.get("first_error", "no request answered"))
    found = r["_found"]
    r["first_answer"] = answers[0] if answers else None
    r["mean_hits"] = float(np.mean([len(f) for f in found if f is not None]))
    r["self_included_share"] = float(
        np.mean([int(i) in f for f, i in zip(found, ids) if f is not None])
    )
    r["recall_at_10"] = recall_without_self(found, ids, d["idgt"], K)
    return r


def deletes(srv, eng: str, dataset: str, ids: np.ndarray, cap_s: float, form: str) -> dict:
    bodies = [json.dumps({"dataset": dataset, "id": id_json(i, form)}).encode() for i in ids]
    answers: list = []

    def request(clients, i):
        import pyarrow.flight as fl

        res = list(clients[1].do_action(fl.Action("delete", bodies[i]), call_opts(30)))
        text = res[0].body.to_pybytes().decode(errors="replace") if res else ""
        if not answers:
            answers.append(text[:200])
        with contextlib.suppress(ValueError, AttributeError):
            return json.loads(text).get("deleted")
        return None

    r = run_requests(srv, len(ids), 1, request, cap_s, warmup=False)
    if r["ok"] == 0:
        raise OpFailed(r.get("first_error", "no request answered"))
    r["ops_per_s"] = r.pop("qps")
    r["first_answer"] = answers[0] if answers else None
    counts = [c for c in r["_found"] if isinstance(c, int)]
    r["answered_deleted_total"] = sum(counts) if counts else None
    return r


def run(args, argv: list[str]) -> dict:
    t_run = time.perf_counter()
    env = {
        **machine_info(),
        "loadavg_start": loadavg(),
        "command": "python -m sagitta_bench longbow " + " ".join(argv),
    }
    print(f"load average at start: {env['loadavg_start']}", flush=True)
    d = load_data(args.rows, args.queries)
    print(f"data: {args.rows} rows, {len(d['queries'])} queries; truth {d['truth_s']:.1f} s")
    dims = d["base"].shape[1]
    hybrid = d["texts"] is not None
    dataset = f"minilm_{args.rows}"
    table = make_table(d["base"], d["texts"])
    results: dict = {}
    servers: dict = {}
    info: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="longbow-bench-", dir=args.tmp))
    dead: dict = {}  # engine -> the operation during which its server exited

    def g(eng: str, op: str, fn):
        return guarded(results, eng, op, fn, servers[eng], dead)

    try:
        for eng in args.engines:
            cls = SagittaServer if eng == "sagitta" else LongbowServer
            t0 = time.perf_counter()
            try:
                servers[eng] = cls(tmp)
                info[eng] = {**servers[eng].describe(), "start_s": time.perf_counter() - t0}
            except Exception as e:
                info[eng] = {"error": f"start: {error_text(e, 1500)}"}
                print(f"{eng}: could not start: {error_text(e, 1500)}", flush=True)
        live = [e for e in args.engines if e in servers]
        for e in args.engines:
            if e not in servers:
                results.setdefault("start", {})[e] = info[e]["error"]

        # 1. DoPut, then indexing, one engine after the other.
        for eng in live:
            srv = servers[eng]
            info[eng]["prepare"] = g(eng, "prepare", lambda srv=srv: srv.prepare(dataset, dims))
            r = g(eng, "doput", lambda srv=srv: do_put(srv, dataset, table, args.batch))
            if r is not None:
                print(f"  {eng:8} doput: {r['mb_per_s']:.1f} MB/s ({r['seconds']:.1f} s)")
                w = g(
                    eng,
                    "indexed",
                    lambda srv=srv: srv.wait_indexed(dataset, args.cap_index),
                )
                if w is not None:
                    print(f"  {eng:8} indexed: {json.dumps(strip(w))[:200]}", flush=True)
            info[eng]["rss_after_ingest"] = srv.rss()
        env["loadavg_after_ingest"] = loadavg()

        # 2. Downloads, interleaved rep by rep.
        reps: dict = {e: [] for e in live}
        for rep in range(args.download_reps):
            for eng in rotate(live, rep):
                r = g(eng, "download", lambda e=eng: download(servers[e], {"name": dataset}))
                if r is not None:
                    r.pop("_table")
                    reps[eng].append(r)
        for eng in live:
            if reps[eng]:
                best = sorted(reps[eng], key=lambda r: r["mb_per_s"])[len(reps[eng]) // 2]
                results["download"][eng] = {
                    **best,
                    "reps_mb_per_s": [round(r["mb_per_s"], 1) for r in reps[eng]],
                }
                print(f"  {eng:8} download: {best['mb_per_s']:.1f} MB/s {best['rows']} rows")
        filt = [{"field": "category", "op": "eq", "value": CATEGORIES[0]}]
        for eng in rotate(live, 1):

            def dl_filtered(e=eng):
                r = download(servers[e], {"name": dataset, "filters": filt})
                tab = r.pop("_table")
                cats = (
                    set(tab.column("category").to_pylist())
                    if "category" in tab.column_names
                    else None
                )
                r["categories_returned"] = sorted(cats) if cats is not None else None
                r["expected_rows"] = int(np.sum(category_of(np.arange(args.rows)) == CATEGORIES[0]))
                return r

            g(eng, "download_filtered", dl_filtered)

        # 3-5. Searches: each kind at each concurrency, engines taking turns.
        kinds = ["search", "filtered"] + (["hybrid"] if hybrid else [])
        step = 0
        for kind in kinds:
            for conc in args.concurrency:
                op = f"{kind}_c{conc}"
                for eng in rotate(live, step):
                    r = g(
                        eng,
                        op,
                        lambda e=eng, k=kind, c=conc: searches(
                            servers[e], e, dataset, d, c, k, args.cap_op
                        ),
                    )
                    if r is not None:
                        print(
                            f"  {eng:8} {op}: qps {r['qps']:.0f} p50 {r['p50_ms']:.2f} ms "
                            f"p99 {r['p99_ms']:.2f} ms recall {r.get('recall_at_10')} "
                            f"errors {r['errors']}",
                            flush=True,
                        )
                step += 1
        if not hybrid:
            results["hybrid"] = {e: "skipped: the dataset has no texts" for e in live}

        # 6. Search by id, the id as a string (Longbow's SDK) and as a number.
        for form in ("str", "int"):
            op = f"search_by_id_{form}"
            for eng in rotate(live, step):
                r = g(
                    eng,
                    op,
                    lambda e=eng, f=form: search_by_id(servers[e], e, dataset, d, args.cap_op, f),
                )
                if r is not None:
                    print(f"  {eng:8} {op}: qps {r['qps']:.0f} recall {r['recall_at_10']}")
            step += 1

        # 7. Deletes (last: they change the data): the last 2 x --deletes
        # rows, half with string ids, half with numbers; then the rows left.
        del_sets = {
            "str": np.arange(args.rows - 2 * args.deletes, args.rows - args.deletes),
            "int": np.arange(args.rows - args.deletes, args.rows),
        }
        for form, del_ids in del_sets.items():
            op = f"delete_{form}"
            for eng in rotate(live, step):
                r = g(
                    eng,
                    op,
                    lambda e=eng, ids=del_ids, f=form: deletes(
                        servers[e], e, dataset, ids, args.cap_op, f
                    ),
                )
                if r is not None:
                    print(f"  {eng:8} {op}: {r['ops_per_s']:.0f} ops/s errors {r['errors']}")
            step += 1
        for eng in live:

            def left(e=eng):
                r = download(servers[e], {"name": dataset})
                tab = r.pop("_table")
                ids = (
                    set(as_ids(tab.column("id").to_pylist())) if "id" in tab.column_names else set()
                )
                return {
                    "rows": r["rows"],
                    "expected": args.rows - 2 * args.deletes,
                    **{
                        f"still_present_{f}": len(ids & set(v.tolist()))
                        for f, v in del_sets.items()
                    },
                }

            g(eng, "rows_after_delete", left)
        for eng in live:
            info[eng]["rss_end"] = servers[eng].rss()
    finally:
        for eng, srv in servers.items():
            try:
                if eng in dead or not srv.alive():
                    info[eng]["exited_during"] = dead.get(eng, "the run")
                    info[eng]["log_tail"] = srv.log_tail()  # before stop removes it
                srv.stop()
            except Exception as e:
                print(f"{eng}: stop failed: {error_text(e)}", flush=True)
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(tmp)
    env["loadavg_end"] = loadavg()
    print(f"load average at end: {env['loadavg_end']}")
    return {
        "dataset": "debian-minilm",
        "rows": args.rows,
        "queries": len(d["queries"]),
        "k": K,
        "batch_rows": args.batch,
        "deletes": args.deletes,
        "concurrency": args.concurrency,
        "engines": args.engines,
        "ground_truth": d["gt_note"],
        "hybrid": hybrid,
        "env": env,
        "servers": info,
        "results": results,
        "wall_s": time.perf_counter() - t_run,
    }


# ------------------------------------------------------------------ report


def _f(x, fmt="{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def cell(op: str, r) -> str:
    if r is None:
        return "–"
    if isinstance(r, str):
        return r.replace("|", "\\|")
    if op == "doput":
        return f"{r['mb_per_s']:.1f} MB/s ({r['seconds']:.2f} s, {r['rows_per_s']:,.0f} rows/s)"
    if op == "indexed":
        if "error" in r:
            return f"error: {r['error']}"
        s = f"{_f(r.get('indexed_s'), '{:.1f}')} s after DoPut"
        if "settled_s" in r:
            segs = r.get("status", {}).get("segments")
            s += f"; settled ({segs} segment(s), no task left) at {r['settled_s']:.1f} s"
        if "wait_s" in r:
            s += f" (longbow.sh wait returned at {r['wait_s']:.0f} s)"
        return s
    if op in ("download", "download_filtered"):
        s = f"{r['mb_per_s']:.0f} MB/s ({r['rows']:,} rows, {r['mb']:.0f} MB, {r['seconds']:.2f} s)"
        if "categories_returned" in r:
            s += f"; categories {r['categories_returned']}, expected {r['expected_rows']:,} rows"
        return s
    if op.startswith("delete"):
        s = f"{r['ops_per_s']:,.0f} ops/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
        if r.get("answered_deleted_total") is not None:
            s += f"; answers report {r['answered_deleted_total']:,} deleted"
        return s + (f"; {r['errors']} errors: {r['first_error']}" if r["errors"] else "")
    if op == "rows_after_delete":
        return (
            f"{r['rows']:,} rows (expected {r['expected']:,}); ids still there: "
            f"{r['still_present_str']} of those deleted by string id, "
            f"{r['still_present_int']} of those deleted by number"
        )
    if op == "prepare":
        return "create-collection (text_fields [text], dtype f32)" if r else "–"
    s = f"{r['qps']:,.0f} QPS, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
    if r.get("recall_at_10") is not None:
        s += f", recall@10 {r['recall_at_10']:.3f}"
    if r.get("filter_pass_share") is not None:
        s += f", {100 * r['filter_pass_share']:.0f} % of hits pass the filter"
    if r.get("self_included_share"):
        s += f", row itself returned in {100 * r['self_included_share']:.0f} %"
    if r["errors"]:
        s += f"; {r['errors']} errors: {r['first_error']}"
    if r.get("truncated_after_s"):
        s += f"; stopped after {r['truncated_after_s']} s ({r['ok']} answered)"
    return s.replace("|", "\\|")


LABELS = {
    "start": "server start",
    "prepare": "setup",
    "doput": "DoPut (vector+id bytes)",
    "indexed": "indexed (all rows in the HNSW index)",
    "download": "DoGet download, whole dataset (Arrow bytes)",
    "download_filtered": "DoGet download with `filters` (category = amber)",
    "search_by_id_str": 'VectorSearchByID (DoAction), id as a string ("123"), c1',
    "search_by_id_int": "VectorSearchByID (DoAction), id as a JSON number, c1",
    "delete_str": 'delete (DoAction, one id each, as a string "123"), c1',
    "delete_int": "delete (DoAction, one id each, as a JSON number), c1",
    "rows_after_delete": "rows after delete (full download)",
}


def label(op: str) -> str:
    if op in LABELS:
        return LABELS[op]
    kind, conc = op.rsplit("_c", 1)
    what = {
        "search": "search",
        "filtered": "filtered search (category eq X)",
        "hybrid": "hybrid search (text_query, alpha 0.5)",
    }
    return f"{what.get(kind, kind)}, c{conc}"


def markdown(run: dict) -> str:
    env, engines = run["env"], run["engines"]
    lines = [
        f"# Longbow-style Flight benchmark: debian-minilm, {run['rows']:,} rows\n",
        f"Command: `{env['command']}`\n",
        f"Machine: {env['cpu']}, {env['cores']} cores, {env.get('mem_gib')} GiB, "
        f"kernel {env['kernel']}; ISA {env.get('isa')} ({' '.join(env.get('isa_flags', []))}); "
        f"Python {env['python']}, pyarrow {env['pyarrow']}.\n",
        f"Load average (1, 5, 15 min): start {env['loadavg_start']}, after ingest "
        f"{env.get('loadavg_after_ingest')}, end {env['loadavg_end']}. Run wall time "
        f"{run['wall_s']:.0f} s.\n",
    ]
    for eng in engines:
        s = run["servers"].get(eng, {})
        desc = ", ".join(
            f"{k} {v}"
            for k, v in s.items()
            if k
            in ("version", "binary_mtime", "repo_head", "commit", "rss_after_ingest", "rss_end")
        )
        lines.append(f"- {eng}: {desc}")
    lines.append(
        f"\n{run['queries']} queries, k={run['k']}, DoPut batches of {run['batch_rows']:,} rows "
        f"in one stream; ground truth: {run['ground_truth']}. Every engine gets the same "
        "requests from the same pyarrow.flight code; c8 = 8 client threads, each with its own "
        "FlightClient, on the same 2-core machine as the server.\n"
    )
    lines.append("| operation | " + " | ".join(engines) + " |")
    lines.append("|---|" + "---|" * len(engines))
    for op, per in run["results"].items():
        lines.append(f"| {label(op)} | " + " | ".join(cell(op, per.get(e)) for e in engines) + " |")
    notes = []
    for op, per in run["results"].items():
        for e in engines:
            r = per.get(e)
            if isinstance(r, dict) and r.get("result_schema"):
                notes.append(f"- {e} {op}: result schema `{r['result_schema']}`")
            if isinstance(r, dict) and r.get("first_answer") is not None:
                notes.append(f"- {e} {op}: first answer `{r['first_answer']}`")
            if isinstance(r, dict) and op == "download":
                notes.append(f"- {e} download schema `{r['schema']}`")
    for eng in engines:
        s = run["servers"].get(eng, {})
        if s.get("exited_during"):
            lines.append(
                f"\n{eng}'s server process exited during {s['exited_during']}; its log's "
                "panic (or last lines):\n\n```\n" + (s.get("log_tail") or "(empty)") + "\n```"
            )
    if notes:
        lines.append("\nWhat came back (first request of each operation):\n")
        seen = set()
        for n in notes:
            key = re.sub(r"_c\d+", "", n)
            if key not in seen:
                seen.add(key)
                lines.append(n)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench longbow", description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20_000, help="first N rows of debian-minilm")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument(
        "--engines",
        default="sagitta,longbow",
        help="comma list of sagitta, longbow (default both)",
    )
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "longbow"
    )
    ap.add_argument("--batch", type=int, default=10_000, help="rows per DoPut batch")
    ap.add_argument(
        "--deletes", type=int, default=1000, help="ids deleted by string, and as many by number"
    )
    ap.add_argument("--concurrency", default="1,8", help="client threads for searches")
    ap.add_argument("--download-reps", type=int, default=3)
    ap.add_argument("--cap-op", type=float, default=120.0, help="seconds per operation at most")
    ap.add_argument("--cap-index", type=float, default=900.0, help="seconds to wait for indexing")
    ap.add_argument("--tmp", default=None, help="parent of the servers' temporary directory")
    argv = sys.argv[2:] if argv is None else argv
    args = ap.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINES]
    if bad or not args.engines:
        raise SystemExit(f"unknown engines {bad}; known: {list(ENGINES)}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.deletes = min(args.deletes, args.rows // 2)
    if "sagitta" in args.engines and not SAGITTA_BIN.exists():
        raise SystemExit(f"{SAGITTA_BIN} missing: cargo build --release -j2 -p sagitta-cli")
    result = run(args, argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = (
        f"debian-minilm-{args.rows // 1000}k"
        if args.rows % 1000 == 0
        else f"debian-minilm-{args.rows}"
    )
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = markdown(result)
    (args.out / f"{stem}.md").write_text(md)
    print(md)
    print(f"wrote {args.out / stem}.{{json,md}}")
