"""Peak memory of the server on the big paths, at 1M rows by default.

    .venv/bin/python bench/scripts/memory_peak.py --bin target/release/sagitta \
        --rows 1000000 --dims 128 --out /tmp/memory-peak.json

One real ``sagitta serve`` process per phase group, on loopback ports; the
rows are random float32 vectors (``numpy.random.default_rng(--seed)``,
generated a batch at a time so the client holds one batch), ids 0..rows-1.

Cases (``--cases``, comma-separated):

- ``flat``: a collection created beforehand as ``kind: flat``;
  phase ``put``: one Flight DoPut stream of every row (``--batch`` rows a
  batch, each acknowledgement read before the next batch is sent), from
  the server's start to the last acknowledgement; phase ``settle``:
  ``POST .../optimize`` (the optimizer merges what the put left into one
  segment). Then the server is stopped and a fresh one opened on the same
  directory (phase ``open``), row 0 deleted and ``POST .../optimize
  {"compact": true}`` (phase ``compact``): one Flat rewrite of every
  other row, read from the one mapped segment.
- ``ivf``: the same with ``kind: ivf_rq``: ``put``, ``settle`` (the IVF
  builds and merges), ``open``, ``compact`` (one IVF build of every other
  row from the one mapped segment).
- ``put-default``: a collection created by its first DoPut (default
  settings: an HNSW index built in the background); phase ``put`` only,
  the server stopped after the last acknowledgement.

Per phase, of the server process: ``VmHWM`` (the kernel's exact peak of
the resident set, anonymous and file-backed pages together; reset at each
phase's start by writing 5 to ``/proc/PID/clear_refs``), and the peaks of
``RssAnon`` (heap) and ``RssFile`` (mapped segment pages, page cache the
kernel can drop) sampled every ``--sample-ms``, in MiB and as a multiple of
the raw vector data (rows x dims x 4 bytes). Timing is reported, never
judged.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

MIB = 1 << 20


def read_status(pid: int) -> dict[str, int]:
    """The memory lines of /proc/PID/status, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0])
    return out


class Server:
    """``sagitta serve`` on ephemeral loopback ports (the first stdout line
    gives the addresses)."""

    def __init__(self, binary: str, data: Path, log: Path):
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [
                binary,
                "serve",
                "--data",
                str(data),
                "--http",
                "127.0.0.1:0",
                "--flight",
                "127.0.0.1:0",
                "--timeout-ms",
                "7200000",
                "--log-level",
                "warn",
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            raise RuntimeError(f"server exited with {self.proc.returncode}; see {log}")
        addrs = json.loads(line)
        self.http_addr = addrs["http"]
        self.flight_url = f"grpc://{addrs['flight']}"
        self.pid = self.proc.pid

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        conn = http.client.HTTPConnection(self.http_addr, timeout=7200)
        data = json.dumps(body).encode() if body is not None else b""
        conn.request(method, path, body=data, headers={"content-type": "application/json"})
        r = conn.getresponse()
        text = r.read()
        conn.close()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {text[:500]!r}")
        return json.loads(text) if text else {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=600)
        self.proc.stdout.close()
        self._log.close()


class Meter:
    """Per-phase peaks of one process: VmHWM (reset at each phase start)
    and RssAnon / RssFile sampled by a thread."""

    def __init__(self, pid: int, sample_ms: float):
        self.pid = pid
        self.sample_s = sample_ms / 1000
        self.phases: list[dict] = []
        self._cur: dict | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                s = read_status(self.pid)
            except (FileNotFoundError, ProcessLookupError, ValueError):
                return
            with self._lock:
                if self._cur is not None:
                    for k in ("RssAnon", "RssFile", "VmRSS"):
                        key = f"peak_{k}"
                        self._cur[key] = max(self._cur.get(key, 0), s.get(k, 0))
            time.sleep(self.sample_s)

    def begin(self, name: str) -> None:
        self.end()
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        s = read_status(self.pid)
        with self._lock:
            self._cur = {
                "phase": name,
                "t0": time.perf_counter(),
                "start_VmRSS": s["VmRSS"],
                "start_RssAnon": s["RssAnon"],
                "start_RssFile": s["RssFile"],
            }

    def end(self) -> None:
        with self._lock:
            cur, self._cur = self._cur, None
        if cur is None:
            return
        s = read_status(self.pid)
        # One last sample at the end, so a short phase has one.
        for k in ("RssAnon", "RssFile", "VmRSS"):
            cur[f"peak_{k}"] = max(cur.get(f"peak_{k}", 0), s[k])
        cur["VmHWM"] = s["VmHWM"]
        cur["end_VmRSS"] = s["VmRSS"]
        cur["end_RssAnon"] = s["RssAnon"]
        cur["end_RssFile"] = s["RssFile"]
        cur["seconds"] = time.perf_counter() - cur.pop("t0")
        self.phases.append(cur)

    def close(self) -> list[dict]:
        self.end()
        self._stop.set()
        self._t.join()
        return self.phases


def put(srv: Server, name: str, rows: int, dims: int, batch: int, seed: int) -> None:
    """One DoPut stream of every row; each acknowledgement is read before
    the next batch is sent."""
    import pyarrow as pa
    import pyarrow.flight as fl

    client = fl.FlightClient(srv.flight_url)
    schema = pa.schema([("id", pa.uint64()), ("vector", pa.list_(pa.float32(), dims))])
    writer, reader = client.do_put(fl.FlightDescriptor.for_path(name), schema)
    rng = np.random.default_rng(seed)
    acked = 0
    for s in range(0, rows, batch):
        n = min(batch, rows - s)
        x = rng.standard_normal((n, dims), dtype=np.float32)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dims)
        ids = pa.array(np.arange(s, s + n, dtype=np.uint64))
        writer.write_batch(pa.record_batch([ids, vec], schema=schema))
        acked += json.loads(reader.read().to_pybytes())["rows"]
    writer.done_writing()
    writer.close()
    client.close()
    if acked != rows:
        raise RuntimeError(f"{acked} rows acknowledged of {rows}")


def segments(srv: Server, name: str) -> list[dict]:
    return [
        {k: s.get(k) for k in ("id", "rows", "live", "kind", "file_bytes")}
        for s in srv.request("GET", f"/collections/{name}/segments")["segments"]
    ]


def run_case(case: str, args, work: Path) -> dict:
    data = work / f"{case}-data"
    log = work / f"{case}.log"
    name = "mem"
    out: dict = {"case": case, "phases": [], "segments": {}}

    def group(srv: Server, body) -> None:
        m = Meter(srv.pid, args.sample_ms)
        try:
            body(m)
        finally:
            out["phases"].extend(m.close())

    srv = Server(args.bin, data, log)
    try:
        if case == "put-default":

            def body(m):
                m.begin("put")
                put(srv, name, args.rows, args.dims, args.batch, args.seed)

            group(srv, body)
            return out
        kind = {"flat": "flat", "ivf": "ivf_rq"}[case]
        srv.request(
            "POST", "/collections", {"name": name, "dims": args.dims, "metric": "l2", "kind": kind}
        )

        def load(m):
            m.begin("put")
            put(srv, name, args.rows, args.dims, args.batch, args.seed)
            m.begin("settle")
            srv.request("POST", f"/collections/{name}/optimize", {})

        group(srv, load)
        out["segments"]["settled"] = segments(srv, name)
    finally:
        srv.stop()
    srv = Server(args.bin, data, log)
    try:

        def rewrite(m):
            m.begin("open")
            srv.request("GET", f"/collections/{name}")
            srv.request("POST", f"/collections/{name}/delete", {"ids": [0]})
            m.begin("compact")
            srv.request("POST", f"/collections/{name}/optimize", {"compact": True})

        group(srv, rewrite)
        out["segments"]["compacted"] = segments(srv, name)
    finally:
        srv.stop()
    return out


def env(args) -> dict:
    try:
        import sagitta

        isa = sagitta.isa()
    except Exception as e:  # the package is optional here
        isa = f"unknown ({type(e).__name__})"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "bin": args.bin,
        "bin_mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(args.bin))),
        "isa": isa,
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "kernel": platform.release(),
        "rows": args.rows,
        "dims": args.dims,
        "batch": args.batch,
        "seed": args.seed,
        "raw_mib": args.rows * args.dims * 4 / MIB,
    }


def table(result: dict) -> str:
    raw = result["env"]["raw_mib"]
    lines = [
        "| case | phase | s | VmHWM MiB | x raw | peak RssAnon MiB | x raw | peak RssFile MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in result["cases"]:
        for p in c["phases"]:
            hwm, anon, file = p["VmHWM"] / 1024, p["peak_RssAnon"] / 1024, p["peak_RssFile"] / 1024
            lines.append(
                f"| {c['case']} | {p['phase']} | {p['seconds']:.1f} | {hwm:.0f} | "
                f"{hwm / raw:.2f} | {anon:.0f} | {anon / raw:.2f} | {file:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/sagitta")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dims", type=int, default=128)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cases", default="flat,ivf")
    ap.add_argument("--sample-ms", type=float, default=10.0)
    ap.add_argument("--work", help="directory for the data (default: a temporary one, removed)")
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args(argv)
    args.bin = str(Path(args.bin).resolve())
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="memory-peak-"))
    work.mkdir(parents=True, exist_ok=True)
    result = {"env": env(args), "cases": []}
    try:
        for case in args.cases.split(","):
            result["cases"].append(run_case(case, args, work))
            print(json.dumps(result["cases"][-1]), flush=True)
            shutil.rmtree(work / f"{case}-data", ignore_errors=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    result["env"]["loadavg_end"] = os.getloadavg()
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
