"""The two servers of the Longbow benchmark on loopback: ``sagitta serve``
and the peer Longbow (``shared/peers/longbow.sh``), with what a run records
about them and the machine."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]  # sagitta_bench/longbow/ in bench/
# $SAGITTA_BIN, as the server tests take it (e.g. to set two builds side by side).
SAGITTA_BIN = Path(os.environ.get("SAGITTA_BIN") or REPO / "target" / "release" / "sagitta")
LONGBOW_SH = REPO.parent / "shared" / "peers" / "longbow.sh"
LONGBOW_MIRROR = Path("/work/.mirror/23skdu+longbow/repo")
LONGBOW_PEER_HOME = os.environ.get("LONGBOW_PEER_HOME", "/tmp/longbow")


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
        """Nothing: the first DoPut creates the dataset, its string columns
        (``meta``, ``text``) indexed for BM25 by default, as Longbow does
        with ``HYBRID_TEXT_COLUMNS``."""
        return {}

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


def tail_of_log(path: Path, limit: int = 4000) -> str:
    """A Go panic / fatal error and what follows it, else the last lines."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    start = next((i for i, x in enumerate(lines) if re.match(r"(panic|fatal error)[: ]", x)), None)
    pick = lines[start : start + 40] if start is not None else lines[-15:]
    return "\n".join(x[:600] for x in pick)[-limit:]
