"""The ``sagitta serve`` process under test (a copied binary on free
loopback ports), its log, and what a run records about the machine; a hung
server's stacks through gdb."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from .api import HttpApi, OpError
from .model import MAX_SAMPLES, REPO, SEED_KEY, SEED_ROW, vectors_of

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
