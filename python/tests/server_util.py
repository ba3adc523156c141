"""Starting the real ``sagitta serve`` binary for tests and benchmarks."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[2]


def sagitta_bin() -> str:
    """$SAGITTA_BIN, else target/release/sagitta (built if out of date)."""
    env = os.environ.get("SAGITTA_BIN")
    if env:
        return env
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "sagitta-cli"], cwd=REPO, check=True
    )
    return str(REPO / "target" / "release" / "sagitta")


def sagitta_bench_bin() -> str:
    """The benchmark binary: $SAGITTA_BENCH_BIN, else ``sagitta-bench`` beside
    $SAGITTA_BIN, else target/release/sagitta-bench (built if out of date)."""
    env = os.environ.get("SAGITTA_BENCH_BIN")
    if env:
        return env
    env = os.environ.get("SAGITTA_BIN")
    if env:
        return str(Path(env).with_name("sagitta-bench"))
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "sagitta-bench"], cwd=REPO, check=True
    )
    return str(REPO / "target" / "release" / "sagitta-bench")


class Server:
    """``sagitta serve`` on ephemeral loopback ports. The first stdout line
    (printed once both sockets listen) gives the addresses, so no polling
    is needed. Logs go to ``<data>.log``."""

    def __init__(
        self,
        data: Path,
        *args: str,
        env: dict | None = None,
        http: str = "127.0.0.1:0",
        prefix: list[str] | None = None,
    ):
        """``prefix``: a command that execs the server's command line it is
        given (the server keeps its process), e.g. one that mounts a
        file system first."""
        self.data = Path(data)
        self.log_path = self.data.with_suffix(".log")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                *(prefix or []),
                sagitta_bin(),
                "serve",
                "--data",
                str(self.data),
                "--http",
                http,
                "--flight",
                "127.0.0.1:0",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**os.environ, **(env or {})},
        )
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise RuntimeError(
                f"server exited with {self.proc.returncode}: {self.log_path.read_text()[:2000]}"
            )
        addrs = json.loads(line)
        self.http_addr = addrs["http"]
        self.flight_addr = addrs["flight"]
        self.url = f"http://{self.http_addr}"
        self.flight_url = f"grpc://{self.flight_addr}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Sends ``sig`` and waits; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()
        self._log.close()
        return code

    def kill(self) -> int:
        """kill -9."""
        return self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.stop()


def raw(server, method, path, body=b"", headers=None):
    """One request with http.client; returns (status, headers, parsed or text body)."""
    conn = http.client.HTTPConnection(server.http_addr, timeout=60)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    text = r.read()
    conn.close()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text.decode(errors="replace")
    return r.status, dict(r.getheaders()), parsed


def vector_array(x: np.ndarray, type_=None) -> pa.FixedSizeListArray:
    type_ = type_ or pa.float32()
    return pa.FixedSizeListArray.from_arrays(pa.array(x.ravel(), type=type_), x.shape[1])
