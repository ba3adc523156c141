"""A Ray cluster of several nodes on this machine: ``ray start --head``
plus ``ray start --address`` workers, all on 127.0.0.1, each node's
``ray start`` in a session and process group of its own (its raylet and
agents, and on the head the GCS, stay in that group; Ray puts each
worker process, where actors run, in a group of its own in the same
session). :meth:`LocalRay.kill_node` SIGKILLs the group. For tests,
benchmarks and trying the cluster out; production clusters are started
with Ray's own tooling.

Node names are the ``sagitta_node_<name>`` resource each node carries
(``n0`` is the head); :func:`sagitta.cluster.live_nodes` reports them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Node loss is noticed after this many missed health checks of this
# period (Ray's defaults take about 15 s; a cluster on one machine can
# afford a tight check).
HEALTH_ENV = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_USAGE_STATS_ENABLED": "0",
    # A loopback-only cluster: no token (a ~/.ray/auth_token left by any
    # earlier local Ray would otherwise turn token auth on for the head
    # and not for the workers).
    "RAY_AUTH_MODE": "disabled",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRay:
    def __init__(self, nodes: int = 3, cpus_per_node: int = 1, object_store_mb: int = 100):
        self.want = nodes
        self.cpus = cpus_per_node
        self.store_mb = object_store_mb
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.tmp = tempfile.mkdtemp(prefix="sagitta-ray-")
        self.procs: dict = {}
        self.count = 0
        self.env = {**os.environ, **HEALTH_ENV}
        # This process's driver must agree with the nodes on auth, and
        # must never start a Ray of its own when it loses this one.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
        self.ray = os.path.join(os.path.dirname(sys.executable), "ray")

    def _common(self, name: str) -> list:
        return [
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus}",
            f"--object-store-memory={self.store_mb * 1_000_000}",
            f'--resources={{"sagitta_node_{name}": 1}}',
            # Nodes on one host would otherwise race for the same socket
            # names in one session directory.
            f"--temp-dir={self.tmp}/{name}",
            "--disable-usage-stats",
            "--block",
        ]

    def _spawn(self, name: str, args: list) -> None:
        log = open(os.path.join(self.tmp, f"{name}.log"), "wb")
        p = subprocess.Popen(
            [self.ray, "start", *args, *self._common(name)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        self.procs[name] = p

    def start(self) -> LocalRay:
        """Starts the head and the workers and waits until every node is
        alive in the cluster."""
        self._spawn(
            "n0",
            [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
            ],
        )
        self.count = 1
        try:
            self._wait_started("n0")
        except BaseException:
            self.stop()
            raise
        try:
            for _ in range(self.want - 1):
                self.add_node()
        except BaseException:
            self.stop()
            raise
        return self

    def add_node(self, wait: bool = True) -> str:
        """Starts one more worker node; returns its name."""
        name = f"n{self.count}"
        self.count += 1
        self._spawn(name, [f"--address={self.address}"])
        if wait:
            self._wait_started(name)
        return name

    def alive_names(self) -> list:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def _wait_started(self, name: str, timeout: float = 120.0) -> None:
        """Waits until ``ray start`` of node ``name`` reports the node up
        (it prints that once its raylet has registered with the GCS)."""
        end = time.monotonic() + timeout
        log = os.path.join(self.tmp, f"{name}.log")
        p = self.procs[name]
        while time.monotonic() < end:
            with open(log, "rb") as f:
                if b"Ray runtime started" in f.read():
                    return
            if p.poll() is not None:
                raise RuntimeError(f"Ray node {name} exited; see {log}")
            time.sleep(0.1)
        raise TimeoutError(f"Ray node {name} not up after {timeout} s; see {log}")

    def kill_node(self, name: str) -> None:
        """SIGKILLs the process group of node ``name``: its ``ray start``
        process, raylet and agents (on the head also the GCS), then reaps
        ``ray start``. The node's worker processes (its actors: replicas,
        a controller) are in process groups of their own and are not
        signalled: they exit when they notice their raylet is gone (about
        2.5 s here), and Ray declares the node dead after its missed
        health checks (``HEALTH_ENV``). Until then an actor of the node
        may still run, and answer a call already sent to it: a machine
        loss plus a short tail, not an instantaneous one. To kill every
        process of the node at once, signal its session
        (``os.getsid(procs[name].pid)``), as ``sagitta_bench.history``
        does with ``--scope session``."""
        p = self.procs[name]
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def stop(self) -> None:
        """Stops every node (workers first); disconnects this process's
        driver first, if it is connected."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        for name in sorted(self.procs, reverse=True):
            self.kill_node(name)
        if not os.environ.get("SAGITTA_KEEP_RAY_LOGS"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalRay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
