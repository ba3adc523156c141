"""One replica of one shard: a Ray actor holding a local collection.

The shard's *primary* numbers every write (the shard's log sequence),
applies it to its own collection (its WAL is fsynced before the call
returns) and forwards it, in order, to every follower, which applies it
the same way; the write is acknowledged once the primary and at least
``quorum - 1`` followers hold it. A follower ignores a write it already
applied (a retried forward) and refuses one that skips a number. A new
replica joins from the object store: the primary seals and publishes
its collection (recording the sequence it holds), the newcomer fetches
that version, and the primary then replays the writes made meanwhile
before it forwards new ones.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from typing import Any

import numpy as np

from .. import _sagitta
from ..remote import fetch, publish

# Seconds a primary waits for a follower to take a forwarded write before
# it counts the follower as lost (a live follower answers in milliseconds).
FORWARD_TIMEOUT = 10.0


class ShardUnavailable(RuntimeError):
    """The shard cannot acknowledge a write now (too few live copies)."""


class Replica:
    def __init__(self, shard: int, node: str, root: str, config: dict, location: str, quorum: int):
        self.shard = shard
        self.config = config
        self.location = location
        self.quorum = quorum
        self.node = node
        self.dir = os.path.join(root, node, f"shard-{shard}-{uuid.uuid4().hex[:12]}")
        self.coll: _sagitta.Collection | None = None
        self.applied = 0
        self.primary = False
        self.followers: list = []
        # Actor ids of followers this primary stopped forwarding to.
        self.dropped: set = set()
        # Writes made since a publish for joining replicas, or None.
        self.retained: list | None = None
        self.lock = threading.Lock()
        # One publish at a time (scheduled, joins, on request).
        self.publishing = threading.Lock()
        # Joins between begin_join and attach (retained is kept while any).
        self.joins = 0
        self.published_version = 0

    # -- life ------------------------------------------------------------
    def create(self) -> dict:
        """Starts as an empty collection (a new cluster)."""
        self.coll = _sagitta.Collection.create(self.dir, **self.config)
        return self.info()

    def bootstrap(self) -> dict:
        """Starts from the shard's latest version in the object store."""
        t = time.perf_counter()
        got = fetch(self.location, self.dir)
        self.coll = _sagitta.Collection.open(self.dir)
        self.applied = int((got["meta"] or {}).get("seq", 0))
        self.published_version = got["version"]
        return {**self.info(), "fetch_s": time.perf_counter() - t, "fetched": got}

    def ping(self) -> dict:
        """The sequence held and, on a primary, the followers it stopped
        forwarding to (a failed or timed-out forward): the controller
        removes them, since they would otherwise serve reads that miss
        writes."""
        return {"applied": self.applied, "dropped": list(self.dropped)}

    def info(self) -> dict:
        c = self.coll
        return {
            "shard": self.shard,
            "node": self.node,
            "dir": self.dir,
            "pid": os.getpid(),
            "primary": self.primary,
            "applied": self.applied,
            "rows": 0 if c is None else len(c),
            "followers": len(self.followers),
            "published_version": self.published_version,
        }

    def close(self, remove: bool = True) -> None:
        with self.lock:
            if self.coll is not None:
                self.coll.close()
                self.coll = None
            if remove:
                shutil.rmtree(self.dir, ignore_errors=True)

    # -- roles -----------------------------------------------------------
    def promote(self, followers: list) -> int:
        """Becomes the shard's primary with these followers (already at
        this replica's sequence: the controller picks the most advanced
        replica). Returns the sequence it holds."""
        with self.lock:
            self.primary = True
            self.followers = list(followers)
            # Joins begun under an earlier table (a controller that died
            # meanwhile) will never attach.
            self.joins = 0
            self.retained = None
            return self.applied

    def demote(self) -> int:
        """Stops taking writes (a move of the primary): writes sent here
        from now on raise :class:`ShardUnavailable` and are retried by the
        client on the new primary. Returns the sequence it holds."""
        with self.lock:
            self.primary = False
            self.followers = []
            return self.applied

    def begin_join(self) -> dict:
        """Publishes this primary's collection for a joining replica and
        keeps every later write until :meth:`attach`."""
        return self._publish(join=True)

    def attach(self, replica: Any) -> int:
        """Replays the writes retained since :meth:`begin_join` to
        ``replica`` (it skips those its fetched version holds) and
        forwards every later write to it."""
        import ray

        with self.lock:
            for op in self.retained or []:
                ray.get(replica.apply.remote(*op), timeout=FORWARD_TIMEOUT)
            self.joins = max(0, self.joins - 1)
            if self.joins == 0:
                self.retained = None
            self.followers.append(replica)
            return self.applied

    def cancel_join(self) -> None:
        """A join that began here failed before :meth:`attach`."""
        with self.lock:
            self.joins = max(0, self.joins - 1)
            if self.joins == 0:
                self.retained = None

    def detach(self, replica_id: str) -> None:
        """Stops forwarding to a replica (it is being moved or dropped)."""
        with self.lock:
            self.followers = [f for f in self.followers if f._actor_id.hex() != replica_id]

    def publish(self) -> dict:
        """Seals and publishes the collection (the primary, on the
        controller's schedule), so a replacement starts from here."""
        return self._publish()

    def _publish(self, join: bool = False) -> dict:
        """Seals the collection and notes the sequence it holds under the
        write lock (a moment), then uploads without it: writes go on
        during the upload. The version may hold writes past the noted
        sequence (a flush or merge committed meanwhile); a joining replica
        replays from that sequence on, and a replayed upsert or delete
        leaves the state it finds unchanged, so it converges. Publishes
        of one replica take turns."""
        with self.publishing:
            with self.lock:
                self.coll.seal()
                seq = self.applied
                if join:
                    self.joins += 1
                    if self.retained is None:
                        self.retained = []
            meta = {"seq": seq, "shard": self.shard}
            try:
                got = publish(self.coll, self.location, meta=meta, seal=False)
            except BaseException:
                if join:
                    self.cancel_join()
                raise
            self.published_version = got["version"]
            return got

    # -- writes ----------------------------------------------------------
    def write(self, op: str, keys: Any, vectors: Any, payload: Any, where: Any) -> dict:
        """A write on the primary: numbered, applied here, forwarded to
        every follower; acknowledged (returns) once ``quorum`` copies hold
        it. Raises :class:`ShardUnavailable` when fewer can."""
        import ray

        with self.lock:
            if not self.primary:
                raise ShardUnavailable(f"shard {self.shard}: this replica is not the primary")
            if 1 + len(self.followers) < self.quorum:
                raise ShardUnavailable(
                    f"shard {self.shard}: {1 + len(self.followers)} live copies, "
                    f"a write needs {self.quorum}"
                )
            seq = self.applied + 1
            result = self._apply(op, keys, vectors, payload, where)
            self.applied = seq
            args = (seq, op, keys, vectors, payload, where)
            if self.retained is not None:
                self.retained.append(args)
            pending = [(f, f.apply.remote(*args)) for f in self.followers]
            alive = []
            for f, ref in pending:
                try:
                    ray.get(ref, timeout=FORWARD_TIMEOUT)
                    alive.append(f)
                except Exception:  # the follower is gone or stuck: drop it
                    self.dropped.add(f._actor_id.hex())
            self.followers = alive
            if 1 + len(alive) < self.quorum:
                raise ShardUnavailable(
                    f"shard {self.shard}: write {seq} reached {1 + len(alive)} copies, "
                    f"{self.quorum} needed; not acknowledged"
                )
            return {"seq": seq, "result": result, "copies": 1 + len(alive)}

    def apply(self, seq: int, op: str, keys: Any, vectors: Any, payload: Any, where: Any) -> int:
        """A forwarded write on a follower, in sequence order."""
        with self.lock:
            if seq <= self.applied:
                return self.applied
            if seq != self.applied + 1:
                raise RuntimeError(f"shard {self.shard}: write {seq} after {self.applied} (a gap)")
            self._apply(op, keys, vectors, payload, where)
            self.applied = seq
            return seq

    def _apply(self, op: str, keys: Any, vectors: Any, payload: Any, where: Any) -> int:
        c = self.coll
        if op == "upsert":
            c.upsert(keys, vectors, payload)
            return len(keys)
        if op == "remove":
            return c.remove(keys) if where is None else c.remove(where=where)
        raise ValueError(f"unknown write {op!r}")

    # -- reads -----------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, opts: dict) -> tuple:
        """Keys, distances and (with ``columns``) payload rows of this
        shard's ``k`` nearest for each query."""
        # No clamp to len() first: rows added between the two calls would
        # push live rows out of a k cut short (the collection clamps on
        # the snapshot its search reads, padding with empty slots).
        r = self.coll.search(queries, k, **opts)
        keys = np.asarray(r.keys).reshape(queries.shape[0], -1)
        dists = np.asarray(r.distances).reshape(queries.shape[0], -1)
        return keys, dists, r.payload

    def get(self, keys: np.ndarray, columns: Any) -> Any:
        if columns is None:
            return self.coll.get(keys)
        return self.coll.get(keys, columns=columns)

    def count(self, where: Any) -> int:
        return self.coll.count(where)

    def schema(self) -> dict:
        return self.coll.schema

    def missing(self, keys: np.ndarray) -> dict:
        """Which of ``keys`` this replica does not hold (a consistency
        check: every replica of a shard holds the same keys)."""
        have = np.asarray(self.coll.contains(keys), dtype=bool)
        gone = np.asarray(keys)[~have]
        return {**self.info(), "missing_count": len(gone), "missing": gone[:100].tolist()}

    def stats(self) -> dict:
        """The local collection's figures (segments, vectors, tombstones,
        bytes, bloom, optimizer)."""
        return self.coll.stats()

    def optimize(self) -> dict:
        """Waits until every row this replica holds is indexed and merged."""
        self.coll.optimize(wait=True)
        return self.info()
