"""``python -m sagitta_bench.history run``: a sagitta.cluster under clients
and a nemesis, its history recorded and checked.

The cluster: ``sagitta.cluster.local.LocalRay`` (as the cluster tests
and ``sagitta-bench cluster`` start it): ``--nodes`` Ray nodes on this
machine, each a ``ray start --block`` process tree (raylet, core
workers, agents; the head also the GCS) in a process group of its own;
node ``n0`` is the head. A collection of ``--shards`` x ``--replicas``
(2 x 2 by default: the smallest layout with two copies of every shard
and more than one shard to merge), exact (``kind="flat"``), L2, rows of
:mod:`.model`. Each replica is a detached Ray actor pinned to its node,
in one of that node's worker processes; the controller is a detached
actor on the head.

The clients: ``--clients`` threads, each with its own
``Cluster.connect`` handle, each op recorded with ``time.monotonic_ns``
at invocation and completion (:class:`Recorder`): upserts and removes
of 1 to 3 of the ``--keys`` keys, gets, exact searches (k = 1, 2 or all
keys) and counts. A write that raises is ``info`` (it may have been
applied: a primary applies before it forwards) and its thread continues
as a new process; a read that raises is ``fail``.

The nemesis, one fault at a time at random intervals (``--interval``):

- ``kill``: SIGKILL of every process of a worker node (never the head:
  its loss is the Ray cluster's, not survived by design); a new node
  is started a few seconds later, and with even odds the replicas are
  rebalanced onto it;
- ``pause``: SIGSTOP of every process of a worker node for 0.3 to 6 s
  (``--pause``), then SIGCONT (a pause longer than Ray's node-failure detection,
  about 1.5 s here, gets the node declared dead: its raylet exits when
  it resumes, and the node is replaced as after a kill);
- ``controller``: SIGKILL of the controller's worker process (found by
  its ``ray::Controller`` process title among the head's processes);
  Ray restarts it.

"Every process of a node" is its session: LocalRay starts each node's
``ray start`` with a session of its own, and the raylet, the agents
and the GCS stay in that process group, but Ray puts each *worker*
process (the replicas, the controller) in a process group of its own
within the session. ``--scope group`` signals the process group only,
as ``LocalRay.kill_node`` does: the raylet stops or dies, the replicas
run on until Ray's fate-sharing ends them (at once after a SIGKILL,
only after the resume for a SIGSTOP).

Node faults wait until the cluster is healthy again (every shard at its
replica count, no lag): a second node loss before that is outside what
docs/CLUSTER.md claims for R = 2. Controller kills do not wait.

At the end: the nemesis stops, every node resumes, the cluster heals,
the clients run on a few seconds and stop, every key is read back (the
final reads, part of the history), every replica of every shard is read
directly, and :func:`.checker.check` judges the history. Written to
``--out``: ``report.json`` and ``history.jsonl.gz``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

from . import checker, model
from .model import Op

NAME = "hist"


class Recorder:
    """The history: ops appended at invocation, completed in place."""

    def __init__(self) -> None:
        self.ops: list = []
        self.lock = threading.Lock()
        self.ids = itertools.count()

    def invoke(self, process: int, kind: str, keys: list, **kw) -> Op:
        op = Op(id=0, process=process, kind=kind, keys=list(keys), invoke=0, **kw)
        with self.lock:
            op.id = next(self.ids)
            self.ops.append(op)
        op.invoke = time.monotonic_ns()
        return op

    @staticmethod
    def done(op: Op, outcome: str, **kw) -> None:
        op.complete = time.monotonic_ns()
        op.outcome = outcome
        for k, v in kw.items():
            setattr(op, k, v)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:300]}"


# Exceptions a client is told to expect (docs/CLUSTER.md); anything else
# reaching a client is reported as unexpected.
EXPECTED = (
    "ClusterUnavailable",
    "ShardUnavailable",
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "GetTimeoutError",
    "ObjectLostError",
)


class Client(threading.Thread):
    def __init__(
        self, idx: int, n: int, cluster, rec: Recorder, versions, a, stop: threading.Event
    ):
        super().__init__(name=f"client-{idx}", daemon=True)
        self.c = cluster
        self.rec = rec
        self.versions = versions
        self.nkeys = a.keys
        self.process = idx
        self.n = n
        self.rng = random.Random(a.seed * 1000 + idx)
        self.stop = stop
        self.latest: dict = {}  # key -> the version this thread last wrote
        self.errors: Counter = Counter()

    def run(self) -> None:
        ops = ["upsert", "remove", "get", "search", "count"]
        weights = [30, 10, 25, 28, 7]
        while not self.stop.is_set():
            kind = self.rng.choices(ops, weights)[0]
            getattr(self, kind)()

    def _keys(self) -> list:
        return sorted(self.rng.sample(range(self.nkeys), self.rng.choice([1, 1, 2, 3])))

    def _failed(self, op: Op, e: BaseException, write: bool) -> None:
        name = type(e).__name__
        self.errors[name] += 1
        Recorder.done(op, "info" if write else "fail", error=_error(e))
        if write:
            # This process may still have an op in flight: a new one
            # takes over (as Jepsen does after an indefinite outcome).
            self.process += self.n

    def upsert(self) -> None:
        keys = self._keys()
        vs = [next(self.versions) for _ in keys]
        op = self.rec.invoke(self.process, "upsert", keys, values=vs)
        try:
            self.c.upsert(np.array(keys, np.uint64), model.vectors(keys, vs, self.nkeys), {"v": vs})
        except Exception as e:
            self._failed(op, e, True)
            return
        Recorder.done(op, "ok")
        self.latest.update(zip(keys, vs))

    def remove(self) -> None:
        keys = self._keys()
        op = self.rec.invoke(self.process, "remove", keys)
        try:
            n = self.c.remove(np.array(keys, np.uint64))
        except Exception as e:
            self._failed(op, e, True)
            return
        Recorder.done(op, "ok", count=int(n))

    def get(self) -> None:
        keys = self._keys()
        op = self.rec.invoke(self.process, "get", keys)
        try:
            vecs, table = self.c.get(np.array(keys, np.uint64), columns=["v"])
        except Exception as e:
            self._failed(op, e, False)
            return
        values, torn = read_rows(keys, vecs, table, self.nkeys)
        Recorder.done(op, "ok", values=values, torn=torn)

    def search(self) -> None:
        qk = self.rng.randrange(self.nkeys)
        qv = self.latest.get(qk) if self.rng.random() < 0.5 else None
        if qv is None:
            qv = self.rng.randint(1, 10**6)
        k = self.rng.choice([1, 2, self.nkeys])
        op = self.rec.invoke(self.process, "search", [qk], query=[qk, qv], k=k)
        try:
            r = self.c.search(model.vector(qk, qv, self.nkeys), k, exact=True, columns=["v"])
        except Exception as e:
            self._failed(op, e, False)
            return
        Recorder.done(op, "ok", hits=search_hits(r))

    def count(self) -> None:
        op = self.rec.invoke(self.process, "count", [])
        try:
            n = self.c.count()
        except Exception as e:
            self._failed(op, e, False)
            return
        Recorder.done(op, "ok", count=int(n))


def read_rows(keys: list, vecs: list, table, nkeys: int) -> tuple:
    """Versions read by a get (None: absent) and the keys whose row is
    not the one written with the version in its payload."""
    vs = table.column("v").to_pylist() if table is not None else [None] * len(keys)
    values, torn = [], []
    for key, vec, v in zip(keys, vecs, vs):
        if vec is None:
            values.append(None)
            if v is not None:
                torn.append(key)
        else:
            values.append(v)
            if v is None or not model.row_matches(vec, key, v, nkeys):
                torn.append(key)
    return values, torn


def search_hits(r) -> list:
    from sagitta.cluster import NO_KEY

    vs = r.payload.column("v").to_pylist()
    return [
        [int(k), v, float(d)]
        for k, d, v in zip(r.keys.tolist(), r.distances.tolist(), vs)
        if k != NO_KEY
    ]


# -------------------------------------------------------------- nemesis


class Nemesis(threading.Thread):
    def __init__(self, lr, a, stop: threading.Event, t0: int):
        super().__init__(name="nemesis", daemon=True)
        self.lr = lr
        self.rng = random.Random(a.seed)
        self.stop = stop
        self.faults = [f for f in a.faults.split(",") if f]
        self.interval = a.interval
        self.want_workers = a.nodes - 1
        self.rebalance_p = a.rebalance
        self.scope = a.scope
        self.pause = a.pause
        self.t0 = t0
        self.events: list = []
        self.paused: set = set()

    # -- helpers ---------------------------------------------------------
    def _t(self) -> float:
        return round((time.monotonic_ns() - self.t0) / 1e9, 3)

    def note(self, kind: str, **kw) -> dict:
        ev = {"t": self._t(), "fault": kind, **kw}
        self.events.append(ev)
        print(f"  [{ev['t']:8.1f} s] {kind} {json.dumps(kw, default=str)}", flush=True)
        return ev

    def controller(self):
        import ray

        return ray.get_actor(f"cluster:{NAME}", namespace="sagitta")

    def status(self) -> dict | None:
        import ray

        try:
            return ray.get(self.controller().status.remote(), timeout=10)
        except Exception:
            return None

    def healthy(self) -> bool:
        st = self.status()
        return st is not None and is_healthy(st)

    def wait_healthy(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.healthy():
                return True
            time.sleep(0.25)
        return False

    def workers(self) -> list:
        return [n for n in self.lr.alive_names() if n != "n0" and n not in self.paused]

    def add_nodes(self) -> list:
        """Starts worker nodes until there are ``--nodes - 1``; a node
        whose ``ray start`` fails (seen on this loaded machine) is noted
        and another is started, three failures in a row at most."""
        added, failed = [], []
        while len([n for n in self.lr.alive_names() if n != "n0"]) < self.want_workers:
            try:
                added.append(self.lr.add_node())
                failed = []
            except (RuntimeError, TimeoutError) as e:
                failed.append(_error(e))
                self.note("node_start_failed", error=failed[-1])
                if len(failed) >= 3:
                    raise
        return added

    # -- faults ----------------------------------------------------------
    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(*self.interval)):
            fault = self.rng.choice(self.faults)
            try:
                getattr(self, f"do_{fault}")()
            except Exception as e:  # a fault that could not be made is noted
                self.note(f"{fault}_error", error=_error(e))

    def _node_fault_ready(self, kind: str) -> str | None:
        if not self.wait_healthy(90):
            self.note(f"{kind}_skipped", why="cluster not healthy after 90 s")
            return None
        ws = self.workers()
        if not ws:
            self.note(f"{kind}_skipped", why="no worker node")
            return None
        return self.rng.choice(sorted(ws))

    def _replace(self, victim: str, ev: dict) -> None:
        """The node is gone: a new one starts after a few seconds; the
        replicas are moved onto it with even odds."""
        self.stop.wait(self.rng.uniform(2, 6))
        added = self.add_nodes()
        ev["added"] = added
        if added and self.rng.random() < self.rebalance_p:
            self.do_rebalance()

    def do_kill(self) -> None:
        victim = self._node_fault_ready("kill")
        if victim is None:
            return
        n = signal_node(self.lr, victim, signal.SIGKILL, self.scope)
        ev = self.note("kill", node=victim, processes=n)
        self.lr.kill_node(victim)
        self._replace(victim, ev)

    def do_pause(self) -> None:
        victim = self._node_fault_ready("pause")
        if victim is None:
            return
        dur = round(self.rng.uniform(*self.pause), 2)
        self.paused.add(victim)
        n = signal_node(self.lr, victim, signal.SIGSTOP, self.scope)
        ev = self.note("pause", node=victim, seconds=dur, processes=n)
        try:
            time.sleep(dur)
        finally:
            signal_node(self.lr, victim, signal.SIGCONT, self.scope)
            self.paused.discard(victim)
        # Declared dead meanwhile? Its raylet then exits on resuming.
        from sagitta.cluster import live_nodes

        end = time.monotonic() + 8
        lost = False
        while time.monotonic() < end:
            if self.lr.procs[victim].poll() is not None or victim not in live_nodes():
                lost = True
                break
            time.sleep(0.25)
        ev["became_loss"] = lost
        if lost:
            # Whatever is left of it.
            signal_node(self.lr, victim, signal.SIGKILL, self.scope)
            self.lr.kill_node(victim)
            self._replace(victim, ev)

    def do_controller(self) -> None:
        pids = controller_pids(self.lr.procs["n0"].pid)
        if not pids:
            self.note("controller_skipped", why="no ray::Controller process found")
            return
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        self.note("controller", pids=pids)

    def do_rebalance(self) -> None:
        import ray

        t = time.monotonic()
        moves = ray.get(self.controller().rebalance.remote(), timeout=120)
        self.note("rebalance", moves=len(moves), seconds=round(time.monotonic() - t, 2))

    def heal(self) -> dict:
        """Every node resumed, lost nodes replaced, then a wait until the
        cluster is healthy."""
        for name in list(self.lr.procs):
            if self.lr.procs[name].poll() is None:
                signal_node(self.lr, name, signal.SIGCONT, self.scope)
        self.paused.clear()
        added = self.add_nodes()
        t = time.monotonic()
        ok = self.wait_healthy(180)
        return {"added": added, "healthy": ok, "seconds": round(time.monotonic() - t, 2)}


def is_healthy(st: dict) -> bool:
    live = set(st["nodes"])
    return (
        st["healthy"]
        and not st["rebuilding"]
        and all(
            "error" not in r and r.get("lag") == 0 and r["node"] in live
            for sh in st["shards"]
            for r in sh["replicas"]
        )
    )


def session_pids(sid: int, title: bytes = b"") -> list:
    """The processes of session ``sid`` (a node started by LocalRay: its
    ``ray start`` process leads a session of its own), those whose
    command line starts with ``title`` when given."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.getsid(int(d)) != sid:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if f.read().startswith(title):
                    out.append(int(d))
        except OSError:
            continue
    return out


def controller_pids(head_sid: int) -> list:
    """Processes titled ``ray::Controller`` on the head node (only ours:
    other Ray clusters may run on this machine)."""
    return session_pids(head_sid, b"ray::Controller")


def signal_node(lr, name: str, sig: int, scope: str) -> int:
    """Sends ``sig`` to node ``name``: to every process of its session
    (``scope="session"``: raylet, agents and the worker processes, which
    Ray puts in process groups of their own), or to its process group
    only (``"group"``, as ``LocalRay.kill_node``: the raylet and agents,
    not the workers). Returns how many processes were signalled."""
    lead = lr.procs[name].pid
    if scope == "group":
        try:
            os.killpg(lead, sig)
        except ProcessLookupError:
            return 0
        return 1
    done: set = set()
    for _ in range(2):  # a second pass for anything started meanwhile
        for pid in session_pids(lead):
            if pid not in done:
                try:
                    os.kill(pid, sig)
                    done.add(pid)
                except ProcessLookupError:
                    pass
    return len(done)


# ------------------------------------------------------------------ run


def _pcts(xs: list) -> dict:
    if not xs:
        return {}
    a = np.asarray(xs, dtype=np.float64) / 1e6
    return {
        "n": len(xs),
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
        "max_ms": round(float(a.max()), 2),
    }


def declare_payload(nkeys: int, shards: int) -> None:
    """Writes and removes one row outside the key space in every shard,
    so that every shard knows the payload column ``v`` before the
    clients start (a get or search asking for a column a collection has
    never seen is refused with a PayloadError)."""
    import sagitta.cluster as sc
    from sagitta.cluster._layout import shard_of

    spare = np.arange(nkeys, nkeys + 64, dtype=np.uint64)
    sh = shard_of(spare, shards)
    keys = np.array([spare[sh == s][0] for s in range(shards)], dtype=np.uint64)
    c = sc.Cluster.connect(NAME)
    c.upsert(keys, np.zeros((len(keys), nkeys + 2), np.float32), {"v": [0] * len(keys)})
    c.remove(keys)


def final_reads(rec: Recorder, nkeys: int, tries: int = 5) -> None:
    import sagitta.cluster as sc

    c = sc.Cluster.connect(NAME, timeout=60)
    keys = list(range(nkeys))
    for _ in range(tries):
        op = rec.invoke(-1, "get", keys, final=True)
        try:
            vecs, table = c.get(np.array(keys, np.uint64), columns=["v"])
        except Exception as e:
            Recorder.done(op, "fail", error=_error(e))
            continue
        values, torn = read_rows(keys, vecs, table, nkeys)
        Recorder.done(op, "ok", values=values, torn=torn)
        return


def replica_reads(nkeys: int, shards: int) -> list:
    """Every replica of every shard, read directly."""
    import ray
    from sagitta.cluster._layout import shard_of

    ctl = ray.get_actor(f"cluster:{NAME}", namespace="sagitta")
    table = ray.get(ctl.table.remote(), timeout=30)
    keys = np.arange(nkeys, dtype=np.uint64)
    sh_of = shard_of(keys, shards)
    out = []
    for s, sh in enumerate(table["shards"]):
        mine = keys[sh_of == s]
        for r in sh["replicas"]:
            info = ray.get(r.info.remote(), timeout=30)
            vecs, t = ray.get(r.get.remote(mine, ["v"]), timeout=30)
            values, torn = read_rows(mine.tolist(), vecs, t, nkeys)
            out.append(
                {
                    "shard": s,
                    "node": info["node"],
                    "primary": info["primary"],
                    "applied": info["applied"],
                    "values": {str(k): v for k, v in zip(mine.tolist(), values)},
                    "torn": torn,
                }
            )
    return out


def _git() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run(a) -> dict:
    import ray
    import sagitta
    import sagitta.cluster as sc
    from sagitta.cluster.local import LocalRay

    from ..env import cpu_model

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": sagitta.isa(),
        "ray": ray.__version__,
        "commit": _git(),
        "loadavg_start": os.getloadavg(),
    }
    tmp = Path(tempfile.mkdtemp(prefix="sagitta-history-"))
    lr = LocalRay(nodes=a.nodes).start()
    rec = Recorder()
    versions = itertools.count(1)
    stop_clients = threading.Event()
    stop_nemesis = threading.Event()
    try:
        ray.init(address=lr.address, logging_level="ERROR", log_to_driver=False)
        sc.Cluster.create(
            NAME,
            ndim=a.keys + 2,
            metric="l2",
            kind="flat",
            shards=a.shards,
            replicas=a.replicas,
            location=str(tmp / "bucket"),
            root=str(tmp / "nodes"),
            publish_interval=a.publish_interval,
            timeout=a.timeout,
        )
        declare_payload(a.keys, a.shards)
        t0 = time.monotonic_ns()
        t0_wall = time.time()
        clients = [
            Client(
                i,
                a.clients,
                sc.Cluster.connect(NAME, timeout=a.timeout),
                rec,
                versions,
                a,
                stop_clients,
            )
            for i in range(a.clients)
        ]
        nem = Nemesis(lr, a, stop_nemesis, t0)
        for c in clients:
            c.start()
        print(f"clients running; nemesis for {a.minutes} min", flush=True)
        if a.faults:
            nem.start()
        stop_nemesis.wait(a.minutes * 60)
        stop_nemesis.set()
        if nem.is_alive():
            nem.join()
        fault_s = (time.monotonic_ns() - t0) / 1e9
        healed = nem.heal()
        print(f"healed: {healed}", flush=True)
        time.sleep(a.settle)
        stop_clients.set()
        for c in clients:
            c.join()
        settled = nem.wait_healthy(120)
        final_reads(rec, a.keys)
        reps = replica_reads(a.keys, a.shards)
        st = sc.Cluster.connect(NAME).stats()
        total_s = (time.monotonic_ns() - t0) / 1e9
    finally:
        stop_nemesis.set()
        stop_clients.set()
        lr.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    env["loadavg_end"] = os.getloadavg()
    t = time.perf_counter()
    verdict = checker.check(rec.ops, a.keys, replicas=reps)
    check_s = time.perf_counter() - t
    errors: Counter = Counter()
    for c in clients:
        errors.update(c.errors)
    lat: dict = {}
    for op in rec.ops:
        if op.outcome == "ok" and not op.final:
            lat.setdefault(op.kind, []).append(op.complete - op.invoke)
    faults = Counter(e["fault"] for e in nem.events)
    faults["pause_became_loss"] = sum(1 for e in nem.events if e.get("became_loss"))
    report = {
        "command": a.command,
        "stamp": time.strftime("%Y%m%d-%H%M%S"),
        "seed": a.seed,
        "config": {
            k: getattr(a, k)
            for k in (
                "minutes",
                "nodes",
                "shards",
                "replicas",
                "keys",
                "clients",
                "timeout",
                "interval",
                "faults",
                "publish_interval",
                "settle",
                "rebalance",
                "scope",
                "pause",
            )
        },
        "env": env,
        "seconds": {
            "faults": round(fault_s, 1),
            "total": round(total_s, 1),
            "check": round(check_s, 2),
        },
        "ops": verdict["ops"],
        "ops_total": verdict["ops_total"],
        "ops_per_s": round(verdict["ops_total"] / total_s, 1),
        "latency_ok": {k: _pcts(v) for k, v in sorted(lat.items())},
        "client_errors": dict(errors),
        "unexpected_errors": {k: v for k, v in errors.items() if k not in EXPECTED},
        "faults": {"by_kind": dict(faults), "events": nem.events},
        "healed": healed,
        "healthy_at_end": settled,
        "cluster": {
            "counters": st["counters"],
            "events": dict(Counter(e["event"] for e in st["events"])),
            # The controller's latest events on the run's clock (seconds
            # from the first op). A restarted controller starts a new
            # list, and new counters.
            "event_list": [
                {
                    **{k: v for k, v in e.items() if k != "error"},
                    "t": round(e["t"] - t0_wall, 3),
                    **({"error": e["error"].strip().splitlines()[-1]} if "error" in e else {}),
                }
                for e in st["events"]
            ],
            "errors": [e for e in st["events"] if e["event"] in ("check_error", "repair_failed")],
            "shards": [
                [{k: r.get(k) for k in ("node", "role", "applied", "rows")} for r in sh["replicas"]]
                for sh in st["shards"]
            ],
        },
        "replicas": reps,
        "verdict": verdict["verdict"],
        "checker": verdict,
    }
    model.save(
        out / "history.jsonl.gz",
        rec.ops,
        {"nkeys": a.keys, "replicas": reps, "config": report["config"]},
    )
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def summary(rep: dict) -> str:
    c = rep["checker"]
    lines = [
        f"verdict: {rep['verdict']} (linearizability {c['linearizability']}, "
        f"claims {c['claims']}); {rep['ops_total']} ops ({rep['ops_per_s']}/s) in "
        f"{rep['seconds']['total']} s; checked in {rep['seconds']['check']} s",
        f"ops: {json.dumps(rep['ops'])}",
        f"faults: {json.dumps(rep['faults']['by_kind'])}",
        f"linearizable keys: {c['linearizable']['valid']}/{c['linearizable']['keys']} "
        f"(invalid {c['linearizable']['invalid']}, unknown {c['linearizable']['unknown']}); "
        f"lost writes {c['lost_writes']}; anomalies {json.dumps(c['anomalies_by_type'])}",
        f"client errors: {json.dumps(rep['client_errors'])}",
    ]
    return "\n".join(lines)
