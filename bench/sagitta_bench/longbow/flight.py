"""The one Flight client code both engines are driven by: actions,
tickets, DoPut of a table, DoGet downloads and timed request loops."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time

import numpy as np

from .truth import K, category_of, latency_summary

GRPC_OPTS = [
    ("grpc.max_receive_message_length", 1 << 30),
    ("grpc.max_send_message_length", 1 << 30),
]
MAX_ERRORS = 3  # an operation stops after this many failed requests


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
