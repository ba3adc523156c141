"""The cluster's client: a ``Collection``-shaped handle that routes writes
and reads to each shard's primary (or, with ``reads="any"``, reads to any
replica), with failover, and merges the answers exactly. Reads and writes
go straight to the replicas' data-path endpoints (``_channels``); Ray
carries only the routing table and the endpoints' addresses."""

from __future__ import annotations

import json
import os
import select
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _sagitta
from ._channels import Channels
from ._controller import NAMESPACE, Controller, head_node_id
from ._errors import ShardUnavailable
from ._layout import NO_KEY, merge_topk, shard_of
from ._wire import CallTimeout, ReplicaLost

READS = ("primary", "any")

# Seconds a replica that failed a call is avoided for.
SUSPECT_FOR = 5.0


class ClusterUnavailable(RuntimeError):
    """A shard did not answer (reads) or could not acknowledge (writes)
    within the call's time limit: too few live replicas, or nodes lost
    faster than the controller can replace them."""


@dataclass
class ClusterSearchResult:
    """Keys (``NO_KEY`` in empty slots) and distances, ``(n, k)`` for a
    batch or ``(k,)`` for one query, nearest first; ``payload``: a pyarrow
    Table, one row per entry of ``keys`` (row-major), when asked for."""

    keys: np.ndarray
    distances: np.ndarray
    payload: Any = None

    def __iter__(self):
        return iter((self.keys, self.distances))


def _controller_name(name: str) -> str:
    return f"cluster:{name}"


def _as_table(payload: Any, n: int) -> Any:
    import pyarrow as pa

    if payload is None:
        return None
    if isinstance(payload, pa.Table):
        t = payload
    elif isinstance(payload, pa.RecordBatch):
        t = pa.Table.from_batches([payload])
    elif hasattr(payload, "to_dict") and hasattr(payload, "columns"):
        t = pa.Table.from_pandas(payload, preserve_index=False)
    elif isinstance(payload, dict):
        t = pa.table({k: (v if hasattr(v, "__len__") else list(v)) for k, v in payload.items()})
    else:
        t = pa.Table.from_pylist(list(payload))
    if t.num_rows != n:
        raise ValueError(f"payload: {t.num_rows} rows for {n} keys")
    return t


def _is_lost(e: BaseException) -> bool:
    """Whether an error means "that replica is gone or not in charge", as
    opposed to a bad request (which is raised to the caller)."""
    import ray

    return isinstance(
        e,
        (
            ReplicaLost,
            ray.exceptions.RayActorError,
            ray.exceptions.ActorUnavailableError,
            ray.exceptions.GetTimeoutError,
            ray.exceptions.ObjectLostError,
            ShardUnavailable,
        ),
    )


class Cluster:
    """A collection sharded and replicated over a Ray cluster.

    ``Cluster.create(name, ndim=..., location=...)`` starts a controller
    and ``shards x replicas`` replicas; ``Cluster.connect(name)`` attaches
    to one from any driver of the same Ray cluster. Keys are 64-bit.

    ``reads``: ``"primary"`` (the default) sends every read to the
    shard's primary, which serves it only while it leads (see
    docs/CLUSTER.md): reads are linearizable per key. ``"any"`` sends it
    to any replica, round robin, asking a second one after
    ``hedge_after`` seconds: lower and steadier latency when a node is
    lost, but a read may see a write before it is acknowledged, and a
    later read may not see it."""

    def __init__(
        self,
        name: str,
        controller: Any,
        timeout: float,
        hedge_after: float,
        reads: str = "primary",
    ):
        import ray

        if reads not in READS:
            raise ValueError(f"reads: one of {READS}")
        self.name = name
        self._controller = controller
        self.timeout = timeout
        self.hedge_after = hedge_after
        self.reads = reads
        self._table = ray.get(controller.table.remote())
        self._rr = 0
        # Replicas' data-path endpoints (actor id -> address), asked of
        # each replica through Ray once; connections to them.
        self._eps: dict = {}
        self._channels = Channels()
        self._learn_endpoints()
        # Replicas that failed a call recently (actor id -> until when):
        # skipped while another replica of the shard is available.
        self._suspect: dict = {}
        self.counters: Counter = Counter()

    # -- life ------------------------------------------------------------
    @classmethod
    def create(
        cls,
        name: str,
        *,
        ndim: int,
        location: str,
        shards: int = 3,
        replicas: int = 2,
        quorum: int | None = None,
        root: str | None = None,
        publish_interval: float = 30.0,
        check_interval: float = 0.2,
        timeout: float = 30.0,
        hedge_after: float = 0.25,
        reads: str = "primary",
        **collection_options: Any,
    ) -> Cluster:
        """Creates the cluster ``name``: ``shards`` shards of ``replicas``
        replicas each on distinct Ray nodes, every shard's collection made
        with ``Collection.create(ndim=..., **collection_options)``.
        ``location``: object storage for published segments (a directory
        or ``file://`` / ``s3://`` URL). A write is acknowledged once it is
        in ``quorum`` replicas' write-ahead logs (default ``min(2,
        replicas)``: it survives the loss of any one node). ``root``: the
        local directory replicas keep their collections under (on each
        node). Each shard is published every ``publish_interval`` seconds
        (0: only when a replica joins or on :meth:`publish`). ``reads``:
        see the class."""
        import ray

        if not name or len(name) > 128 or not all(c.isalnum() or c in "-_." for c in name):
            raise ValueError("name: 1 to 128 letters, digits, '-', '_' or '.'")
        if shards < 1 or replicas < 1:
            raise ValueError("shards and replicas must be at least 1")
        quorum = min(2, replicas) if quorum is None else quorum
        if not 1 <= quorum <= replicas:
            raise ValueError(f"quorum must be within 1..{replicas}")
        if reads not in READS:
            raise ValueError(f"reads: one of {READS}")
        spec = {
            "name": name,
            "shards": shards,
            "replicas": replicas,
            "quorum": quorum,
            "location": location,
            "root": root or os.path.join(tempfile.gettempdir(), "sagitta-cluster", name),
            "config": {"ndim": ndim, **collection_options},
            "publish_interval": publish_interval,
            "check_interval": check_interval,
        }
        try:
            ray.get_actor(_controller_name(name), namespace=NAMESPACE)
        except ValueError:
            pass
        else:
            raise FileExistsError(f"cluster {name!r} already exists")
        # The controller lives on the head node (whose loss takes the Ray
        # cluster down anyway), else anywhere.
        home = {"node:__internal_head__": 0.001} if head_node_id() else {}
        ctl = (
            ray.remote(Controller)
            .options(
                name=_controller_name(name),
                namespace=NAMESPACE,
                lifetime="detached",
                num_cpus=0,
                max_concurrency=16,
                # Restarted by Ray on a live node when its node dies; it
                # then takes the live replicas over (Controller._recover).
                max_restarts=-1,
                max_task_retries=3,
                resources=home,
            )
            .remote(spec)
        )
        try:
            ray.get(ctl.start.remote())
        except Exception:
            ray.kill(ctl)
            raise
        return cls(name, ctl, timeout, hedge_after, reads)

    @classmethod
    def connect(
        cls,
        name: str,
        *,
        timeout: float = 30.0,
        hedge_after: float = 0.25,
        reads: str = "primary",
    ) -> Cluster:
        """Attaches to an existing cluster (``KeyError`` when there is none)."""
        import ray

        try:
            ctl = ray.get_actor(_controller_name(name), namespace=NAMESPACE)
        except ValueError:
            raise KeyError(f"no cluster named {name!r}") from None
        return cls(name, ctl, timeout, hedge_after, reads)

    def close(self) -> None:
        """Closes this client's connections to the replicas (the cluster
        goes on; a later call opens new ones)."""
        self._channels.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def drop(self) -> None:
        """Removes every replica (and its local files) and the controller.
        Published objects stay in the object store."""
        import ray

        ray.get(self._controller.drop.remote())
        ray.kill(self._controller)
        self._channels.close()
        # The name is released asynchronously: wait for it, so that a
        # create or connect right after sees the cluster gone.
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            try:
                ray.get_actor(_controller_name(self.name), namespace=NAMESPACE)
            except ValueError:
                return
            time.sleep(0.05)

    # -- routing ---------------------------------------------------------
    def _refresh(self) -> None:
        import ray

        self.counters["table_refreshes"] += 1
        self._table = ray.get(self._controller.refresh.remote(self._table["epoch"]))
        self._learn_endpoints()

    def _learn_endpoints(self, timeout: float = 5.0) -> None:
        """Asks the replicas of the table whose endpoints this client does
        not know yet for them (through Ray, all at once). One that does not
        answer stays unknown: calls to it count as to a lost replica."""
        import ray

        reps = [r for sh in self._table["shards"] for r in sh["replicas"]]
        refs = {
            r._actor_id.hex(): r.endpoint.remote()
            for r in reps
            if r._actor_id.hex() not in self._eps
        }
        end = time.monotonic() + timeout
        for rid, ref in refs.items():
            try:
                self._eps[rid] = ray.get(ref, timeout=max(0.05, end - time.monotonic()))
            except Exception:  # gone, or its node is: the table will move on
                ray.cancel(ref, recursive=False)
        live = {r._actor_id.hex() for r in reps}
        for rid in [rid for rid in list(self._eps) if rid not in live]:
            ep = self._eps.pop(rid, None)
            if ep is not None:
                self._channels.forget(ep)

    def _start(self, replica: Any, method: str, args: tuple, kwargs: dict, deadline: float):
        """Sends a call to a replica's endpoint (``ReplicaLost`` when its
        endpoint is unknown or unreachable)."""
        ep = self._eps.get(replica._actor_id.hex())
        if ep is None:
            raise ReplicaLost(f"replica {replica._actor_id.hex()[:12]}: endpoint unknown")
        return self._channels.start(ep, method, args, kwargs, deadline)

    @property
    def shards(self) -> int:
        return len(self._table["shards"])

    def _split(self, keys: np.ndarray) -> dict:
        sh = shard_of(keys, self.shards)
        return {s: np.flatnonzero(sh == s) for s in range(self.shards) if (sh == s).any()}

    # -- writes ----------------------------------------------------------
    def _write_all(self, calls: dict) -> dict:
        """Sends each shard's write to its primary (all shards at once),
        naming the primary's term, and retries a shard whose primary is
        lost, not in charge or of another term (on a fresh table), until
        ``timeout``, under the same write id (a retry of a write that was
        applied is not applied again). ``calls``: shard -> (op, keys, vectors, payload,
        where). Returns shard -> the primary's answer."""
        deadline = time.monotonic() + self.timeout
        out: dict = {}
        todo = dict(calls)
        # One id per shard's part, the same on every retry of it.
        wids = {s: uuid.uuid4().hex for s in calls}
        last: BaseException | None = None
        while todo:
            sent = {}
            lost = expired = False
            for s, args in todo.items():
                sh = self._table["shards"][s]
                if sh["primary"] is not None:
                    try:
                        sent[s] = self._start(
                            sh["primary"], "write", (sh["term"], *args), {"wid": wids[s]}, deadline
                        )
                    except ReplicaLost as e:
                        last, lost = e, True
            try:
                for s in list(sent):
                    call = sent.pop(s)
                    try:
                        out[s] = call.finish(deadline)
                        del todo[s]
                    except Exception as e:
                        if not _is_lost(e):
                            raise
                        last, lost = e, True
                        expired |= isinstance(e, CallTimeout)
            finally:
                for call in sent.values():
                    call.abandon()
            if todo:
                if expired or time.monotonic() >= deadline:
                    raise ClusterUnavailable(
                        f"shards {sorted(todo)} did not acknowledge within {self.timeout} s: {last}"
                    )
                self.counters["write_retries"] += 1
                if lost or any(self._table["shards"][s]["primary"] is None for s in todo):
                    self._refresh()
        return out

    def upsert(self, keys: Any, vectors: Any, payload: Any = None) -> int:
        """Inserts or replaces rows (with optional payload columns: a dict
        of columns, a DataFrame or a pyarrow Table); returns once every
        row is in ``quorum`` replicas' logs."""
        keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        vectors = np.asarray(vectors)
        if vectors.ndim == 1:
            vectors = vectors[None, :]
        if len(vectors) != len(keys):
            raise ValueError(f"vectors: {len(vectors)} rows for {len(keys)} keys")
        table = _as_table(payload, len(keys))
        calls = {
            s: (
                "upsert",
                keys[idx],
                np.ascontiguousarray(vectors[idx]),
                None if table is None else table.take(idx),
                None,
            )
            for s, idx in self._split(keys).items()
        }
        self._write_all(calls)
        self.counters["upserted"] += len(keys)
        return len(keys)

    def remove(self, keys: Any = None, *, where: Any = None) -> int:
        """Deletes keys, or every row whose payload passes ``where``;
        returns how many were live."""
        if (keys is None) == (where is None):
            raise ValueError("give exactly one of keys or where")
        if keys is not None:
            keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
            calls = {
                s: ("remove", keys[idx], None, None, None) for s, idx in self._split(keys).items()
            }
        else:
            calls = {s: ("remove", None, None, None, where) for s in range(self.shards)}
        got = self._write_all(calls)
        return int(sum(r["result"] for r in got.values()))

    # -- reads -----------------------------------------------------------
    def _read_all(self, method: str, args: dict) -> dict:
        """Calls ``method`` on each shard in ``args`` (shard -> arguments),
        all at once: on its primary (``reads="primary"``), or any
        replica."""
        if self.reads == "primary":
            return self._read_primaries(method, args)
        return self._read_any(method, args)

    def _read_primaries(self, method: str, args: dict) -> dict:
        """Calls ``method`` on the primary of each shard in ``args``, naming
        its term; a shard whose primary is lost, not in charge (deposed,
        awaiting the removal of a follower it dropped) or of another term
        is asked again on a fresh routing table, until ``timeout``. No
        hedging: no other replica may answer for the primary."""
        deadline = time.monotonic() + self.timeout
        out: dict = {}
        todo = set(args)
        last: BaseException | None = None
        while todo:
            sent = {}
            for s in sorted(todo):
                sh = self._table["shards"][s]
                if sh["primary"] is not None:
                    try:
                        sent[s] = self._start(
                            sh["primary"], method, args[s], {"term": sh["term"]}, deadline
                        )
                    except ReplicaLost as e:
                        last = e
            expired = False
            try:
                for s in list(sent):
                    call = sent.pop(s)
                    try:
                        out[s] = call.finish(deadline)
                        todo.discard(s)
                    except Exception as e:
                        if not _is_lost(e):
                            raise
                        last = e
                        expired |= isinstance(e, CallTimeout)
            finally:
                for call in sent.values():
                    call.abandon()
            if todo:
                if expired or time.monotonic() >= deadline:
                    raise ClusterUnavailable(
                        f"shards {sorted(todo)} did not answer within {self.timeout} s: {last}"
                    )
                self.counters["read_retries"] += 1
                self._refresh()
        return out

    def _read_any(self, method: str, args: dict) -> dict:
        """Calls ``method`` on one replica of each shard in ``args`` (shard
        -> arguments), all at once. A shard that has not answered after
        ``hedge_after`` seconds is asked again on another replica (first
        answer wins); a lost replica is replaced by the next one, then by
        a fresh routing table, until ``timeout``."""
        deadline = time.monotonic() + self.timeout
        out: dict = {}
        tried: dict = {s: set() for s in args}
        inflight: dict = {}  # fd -> (call, shard, replica id)
        hedged: set = set()

        def send(s: int) -> bool:
            while True:
                reps = self._table["shards"][s]["replicas"]
                fresh = [r for r in reps if r._actor_id.hex() not in tried[s]]
                if not fresh:
                    return False
                now = time.monotonic()
                trusted = [r for r in fresh if self._suspect.get(r._actor_id.hex(), 0) < now]
                fresh = trusted or fresh
                r = fresh[self._rr % len(fresh)]
                self._rr += 1
                rid = r._actor_id.hex()
                tried[s].add(rid)
                try:
                    call = self._start(r, method, args[s], {}, deadline)
                except ReplicaLost:
                    self._suspect[rid] = time.monotonic() + SUSPECT_FOR
                    self.counters["read_retries"] += 1
                    continue
                inflight[call.fileno()] = (call, s, rid)
                return True

        def resend(s: int) -> None:
            if not send(s):
                self._refresh()
                tried[s] = set()
                send(s)

        try:
            for s in args:
                resend(s)
            started = time.monotonic()
            poller = select.poll()
            while len(out) < len(args):
                now = time.monotonic()
                if now >= deadline:
                    missing = sorted(set(args) - set(out))
                    raise ClusterUnavailable(
                        f"shards {missing} did not answer within {self.timeout} s"
                    )
                waiting = sorted(set(args) - set(out))
                if not inflight:
                    self._refresh()
                    for s in waiting:
                        tried[s] = set()
                        send(s)
                    if not inflight:
                        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                    continue
                hedge_at = started + self.hedge_after
                wait = (hedge_at - now) if (hedge_at > now and not hedged) else (deadline - now)
                for fd in inflight:
                    poller.register(fd, select.POLLIN)
                try:
                    ready = poller.poll(max(0.0, min(wait, 0.5)) * 1e3)
                finally:
                    for fd in inflight:
                        poller.unregister(fd)
                if not ready:
                    if time.monotonic() >= hedge_at:
                        for s in waiting:
                            if s not in hedged and send(s):
                                hedged.add(s)
                                self.counters["hedged"] += 1
                    continue
                for fd, _ in ready:
                    call, s, rid = inflight.pop(fd)
                    if s in out:
                        call.abandon()
                        continue
                    try:
                        out[s] = call.finish(deadline)
                    except Exception as e:
                        if not _is_lost(e):
                            raise
                        self._suspect[rid] = time.monotonic() + SUSPECT_FOR
                        self.counters["read_retries"] += 1
                        if not any(v[1] == s for v in inflight.values()):
                            resend(s)
        finally:
            for call, _, _ in inflight.values():
                call.abandon()
        return out

    def search(
        self,
        queries: Any,
        k: int = 10,
        *,
        where: Any = None,
        columns: list | None = None,
        exact: bool = False,
        expansion: int | None = None,
    ) -> ClusterSearchResult:
        """The ``k`` nearest rows over every shard, merged by distance then
        key exactly as a local collection merges its segments. ``where``:
        a filter in the API's language; ``columns``: payload columns to
        return."""
        import pyarrow as pa

        if k < 1:
            raise ValueError("k: must be at least 1")
        q = np.asarray(queries, dtype=np.float32)
        one = q.ndim == 1
        q2 = np.ascontiguousarray(q[None, :] if one else q)
        opts: dict = {"exact": exact}
        if where is not None:
            opts["where"] = where
        if columns is not None:
            opts["columns"] = list(columns)
        if expansion is not None:
            opts["expansion"] = expansion
        got = self._read_all("search", {s: (q2, k, opts) for s in range(self.shards)})
        parts = [got[s] for s in range(self.shards)]
        keys, dists, src = merge_topk([(p[0], p[1]) for p in parts], k)
        payload = None
        if columns is not None:
            width = max(p[0].shape[1] for p in parts)
            tables, offsets, base = [], [], 0
            for p in parts:
                offsets.append(base)
                t = p[2]
                if t is None:
                    t = pa.table({c: pa.nulls(0) for c in columns})
                tables.append(t)
                base += t.num_rows
            allrows = self._typed(pa.concat_tables(tables, promote_options="permissive"), columns)
            take = []
            for i, row in enumerate(src):
                for v in row:
                    if v < 0:
                        take.append(None)
                    else:
                        part, col = divmod(int(v), width)
                        take.append(offsets[part] + i * parts[part][0].shape[1] + col)
            payload = allrows.take(pa.array(take, type=pa.int64()))
        self.counters["searches"] += len(q2)
        if one:
            return ClusterSearchResult(keys[0], dists[0], payload)
        return ClusterSearchResult(keys, dists, payload)

    def get(self, keys: Any, *, columns: list | None = None) -> Any:
        """Stored vectors of ``keys`` (a list, None for a missing key); with
        ``columns``, ``(vectors, pyarrow Table)`` in the order of ``keys``."""
        import pyarrow as pa

        keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        split = self._split(keys)
        got = self._read_all("get", {s: (keys[idx], columns) for s, idx in split.items()})
        vecs: list = [None] * len(keys)
        order = np.empty(len(keys), dtype=np.int64)
        tables, base = [], 0
        for s, idx in split.items():
            r = got[s]
            v = r[0] if columns is not None else r
            for j, i in enumerate(idx):
                vecs[i] = v[j]
            if columns is not None:
                tables.append(r[1])
                order[idx] = base + np.arange(len(idx))
                base += len(idx)
        if columns is None:
            return vecs
        if not tables:
            return vecs, None
        t = self._typed(pa.concat_tables(tables, promote_options="permissive"), columns)
        return vecs, t.take(pa.array(order))

    def _typed(self, table: Any, columns: list) -> Any:
        """``table`` with the type of each of ``columns`` that only shards
        that never saw it answered for (nulls of type null): the type a
        shard that knows it has, as one collection types the nulls of rows
        without a known column. A column no shard knows raises
        ``PayloadError``, as one collection does."""
        import pyarrow as pa

        untyped = [c for c in columns if table.schema.field(c).type == pa.null()]
        if not untyped:
            return table
        got = self._read_all("payload_types", {s: (untyped,) for s in range(self.shards)})
        types: dict = {}
        fields: list = []
        for s in range(self.shards):
            schema, empty = got[s]
            fields += [f for f in schema if f not in fields]
            for f in empty.schema:
                types.setdefault(f.name, f.type)
        for c in untyped:
            if c not in types:
                raise _sagitta.PayloadError(
                    f"field {json.dumps(c)}: no such payload field "
                    f"(fields: {', '.join(fields) or 'none'})"
                )
            i = table.schema.get_field_index(c)
            table = table.set_column(i, c, table.column(c).cast(types[c]))
        return table

    def count(self, where: Any = None) -> int:
        """Live rows (whose payload passes ``where``)."""
        got = self._read_all("count", {s: (where,) for s in range(self.shards)})
        return int(sum(got.values()))

    def __len__(self) -> int:
        return self.count()

    def schema(self) -> dict:
        """Payload columns and their types, over every shard."""
        got = self._read_all("schema", {s: () for s in range(self.shards)})
        out: dict = {}
        for s in range(self.shards):
            for name, kind in got[s].items():
                out.setdefault(name, kind)
        return out

    # -- operations ------------------------------------------------------
    def stats(self) -> dict:
        """Cluster status: nodes, shards with their replicas (node, role,
        applied sequence, lag, rows), counters (controller and this
        client) and recent events (losses, promotions, joins, moves)."""
        import ray

        st = ray.get(self._controller.status.remote())
        st["client"] = dict(self.counters)
        return st

    status = stats

    def verify(self, keys: Any) -> list:
        """A consistency check: asks every replica of every shard whether
        it holds each of ``keys`` (those of its shard). Returns one entry
        per replica (its info, ``missing_count`` and up to 100 ``missing``
        keys); all counts are 0 when the replicas agree with the caller."""
        import ray

        keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        split = self._split(keys)
        calls = []
        for s, sh in enumerate(self._table["shards"]):
            mine = keys[split[s]] if s in split else keys[:0]
            calls += [r.missing.remote(mine) for r in sh["replicas"]]
        return ray.get(calls, timeout=self.timeout)

    def optimize(self) -> list:
        """Waits until every replica has indexed and merged every row it
        holds (as :meth:`sagitta.Collection.optimize`); returns each
        replica's info."""
        import ray

        reps = [r for sh in self._table["shards"] for r in sh["replicas"]]
        return ray.get([r.optimize.remote() for r in reps], timeout=None)

    def publish(self) -> list:
        """Publishes every shard to the object store now."""
        import ray

        return ray.get(self._controller.publish_all.remote())

    def rebalance(self) -> list:
        """Moves replicas onto nodes that joined (see
        :meth:`Controller.rebalance`); returns the moves made."""
        import ray

        moves = ray.get(self._controller.rebalance.remote())
        self._refresh()
        return moves

    def metrics_text(self) -> str:
        """Prometheus text: cluster health, replicas by state, counters."""
        st = self.stats()
        lines = [
            "# TYPE sagitta_cluster_healthy gauge",
            f'sagitta_cluster_healthy{{cluster="{self.name}"}} {int(st["healthy"])}',
            "# TYPE sagitta_cluster_nodes gauge",
            f'sagitta_cluster_nodes{{cluster="{self.name}"}} {len(st["nodes"])}',
            "# TYPE sagitta_cluster_replicas gauge",
        ]
        for sh in st["shards"]:
            lag = max((r.get("lag", 0) for r in sh["replicas"]), default=0)
            lines.append(
                f'sagitta_cluster_replicas{{cluster="{self.name}",shard="{sh["shard"]}"}} '
                f"{len(sh['replicas'])}"
            )
            lines.append(
                f'sagitta_cluster_replica_lag{{cluster="{self.name}",shard="{sh["shard"]}"}} {lag}'
            )
        for k, v in sorted({**st["counters"], **st["client"]}.items()):
            lines.append(f"# TYPE sagitta_cluster_{k}_total counter")
            lines.append(f'sagitta_cluster_{k}_total{{cluster="{self.name}"}} {v}')
        return "\n".join(lines) + "\n"


__all__ = ["NO_KEY", "Cluster", "ClusterSearchResult", "ClusterUnavailable"]
