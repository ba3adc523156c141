"""One replica of one shard: a Ray actor holding a local collection.

The shard's *primary* leads a **term** (a number the controller hands out,
higher at every promotion and never reused). It numbers every write (the
shard's log sequence), applies it to its own collection (its WAL is
fsynced before the call returns) and forwards it, in order and tagged
with its term, to every follower, which applies it the same way; the
write is acknowledged once the primary and at least ``quorum - 1``
followers hold it. A follower ignores a write it already applied (a
retried forward), refuses one that skips a number, and refuses any call
from an older term (:class:`StaleTerm`): a primary that was replaced
while it still ran learns so from its first forward, steps down, and
acknowledges nothing more. Each write carries the client's id for it
(the same on every retry), kept by every replica that applies it: a
retry is not applied again. A new replica joins from the object store:
the primary seals and publishes its collection (recording the sequence
it holds), the newcomer fetches that version, and the primary then
replays the writes made meanwhile before it forwards new ones.

**Reads** that name a term (``term=``, what the client sends) are served
by the primary of that term only, and only:

- once no write is in flight on it (reads and writes take a
  readers-writer lock, so a read never sees a write before it is on
  ``quorum`` copies, or has failed);
- while no follower it stopped forwarding to is still awaiting removal
  by the controller (such a follower lacks writes it applied; were it
  promoted, those writes would vanish);
- within its **lease**: every follower answered a forward or heartbeat
  sent less than ``LEASE`` seconds ago, and a follower promises, each
  time it answers, not to act as primary until ``LEASE + GRANT_MARGIN``
  seconds later (a promoted follower waits that out before it serves).
  So a deposed primary that still runs stops serving reads before its
  successor serves any, without a round trip per read. A read that
  finds the lease run out renews it with one heartbeat round.

A read with ``term=None`` is served by any replica, as it stands (the
client's ``reads="any"``: not linearizable).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import _sagitta
from ..remote import fetch, publish
from ._channels import Call, Channels
from ._endpoint import Endpoint
from ._errors import ShardUnavailable, StaleTerm

# Seconds a primary waits for a follower to take a forwarded write before
# it counts the follower as lost (a live follower answers in milliseconds).
FORWARD_TIMEOUT = 10.0
# Seconds a primary serves reads after its followers last answered it.
# One second: a heartbeat round on the data path costs about a
# millisecond, and a promotion after a primary's loss waits out at most
# LEASE + GRANT_MARGIN (2.2 s with a 2 s lease: over the 2 s that a
# failover may take).
LEASE = 1.0
# Extra seconds a follower's promise lasts (clock rates, scheduling).
GRANT_MARGIN = 0.2
# Ids of this many latest writes are kept, to recognise a retried write.
RECENT = 65536
# Seconds a failpoint holds a call at most (tests arm and release them).
FAILPOINT_MAX = 120.0
# What a replica serves on its data-path endpoint (clients' reads and
# writes, its primary's forwards and heartbeats); the rest (roles, joins,
# publishes, status) only through Ray, from the controller.
DATA_METHODS = frozenset(
    {"search", "get", "count", "schema", "payload_types", "write", "apply", "heartbeat", "ping"}
)


def _node_ip() -> str:
    """The address of this Ray node (loopback outside Ray)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return "127.0.0.1"


class _RWLock:
    """Many readers or one writer; a writer that waits goes before readers
    that come after it. Not reentrant."""

    def __init__(self) -> None:
        self._c = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def read(self):
        with self._c:
            while self._writer or self._waiting:
                self._c.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._c:
                self._readers -= 1
                if not self._readers:
                    self._c.notify_all()

    @contextmanager
    def write(self):
        with self._c:
            self._waiting += 1
            while self._writer or self._readers:
                self._c.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._c:
                self._writer = False
                self._c.notify_all()


def _rid(handle: Any) -> str:
    return handle._actor_id.hex()


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
        # The highest term seen (led, or followed).
        self.term = 0
        # Stepped down on meeting a newer term: may hold writes no other
        # replica has; never serves or follows again.
        self.deposed = False
        self.followers: list = []
        # Actor ids of followers this primary stopped forwarding to and the
        # controller has not removed yet (see `ping`, `detach`).
        self.dropped: set = set()
        self.why: dict = {}  # why each was dropped
        # Primary: reads are served until then (monotonic seconds).
        self.lease_until = 0.0
        # Follower: the latest promise not to act as primary before then;
        # a promoted replica serves from then on.
        self.granted_until = 0.0
        self.serve_after = 0.0
        # Writes made since a publish for joining replicas, or None.
        self.retained: list | None = None
        self.rw = _RWLock()
        # One publish at a time (scheduled, joins, on request).
        self.publishing = threading.Lock()
        # Joins between begin_join and attach (retained is kept while any).
        self.joins = 0
        self.published_version = 0
        # Ids of the latest writes -> (sequence, result) (see `write`).
        self.recent: OrderedDict = OrderedDict()
        # Test hooks: name -> (reached, released) events (`failpoint`).
        self.failpoints: dict = {}
        # Followers' endpoints (actor id -> address), and connections to
        # them: forwards and heartbeats go over the data path.
        self.follower_eps: dict = {}
        self.channels = Channels()
        self.data = Endpoint(self, DATA_METHODS, _node_ip())

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
        """The sequence held, the term, the role, and on a primary the
        followers it stopped forwarding to (a failed, timed-out or lagging
        forward or heartbeat): the controller removes them, since one
        promoted would lack writes. Takes no lock."""
        return {
            "applied": self.applied,
            "dropped": list(self.dropped),
            "why": dict(self.why),
            "primary": self.primary,
            "term": self.term,
            "deposed": self.deposed,
        }

    def info(self) -> dict:
        c = self.coll
        return {
            "shard": self.shard,
            "node": self.node,
            "dir": self.dir,
            "pid": os.getpid(),
            "primary": self.primary,
            "term": self.term,
            "deposed": self.deposed,
            "applied": self.applied,
            "rows": 0 if c is None else len(c),
            "followers": len(self.followers),
            "published_version": self.published_version,
        }

    def endpoint(self) -> dict:
        """This replica's data-path endpoint: host, port and token."""
        return self.data.address()

    def close(self, remove: bool = True) -> None:
        self.data.close()
        self.channels.close()
        with self.rw.write():
            if self.coll is not None:
                self.coll.close()
                self.coll = None
            if remove:
                shutil.rmtree(self.dir, ignore_errors=True)

    # -- test hooks --------------------------------------------------------
    def failpoint(self, name: str, armed: bool = True) -> None:
        """Arms (or disarms, releasing every call held there) the hook
        ``name``: a call that reaches an armed hook waits there until it is
        disarmed (``FAILPOINT_MAX`` seconds at most). Hooks: ``apply`` (a
        forwarded write, before a follower applies it). For tests."""
        if armed:
            self.failpoints.setdefault(name, (threading.Event(), threading.Event()))
        else:
            fp = self.failpoints.pop(name, None)
            if fp is not None:
                fp[1].set()

    def failpoint_reached(self, name: str, timeout: float) -> bool:
        """Waits until a call reaches the armed hook ``name``."""
        fp = self.failpoints.get(name)
        return fp is not None and fp[0].wait(timeout)

    def _failpoint(self, name: str) -> None:
        fp = self.failpoints.get(name)
        if fp is not None:
            fp[0].set()
            fp[1].wait(FAILPOINT_MAX)

    # -- roles -----------------------------------------------------------
    def promote(self, followers: list, term: int, handover: bool = False) -> int:
        """Becomes the shard's primary in ``term`` (newer than any it has
        seen) with these followers (already at this replica's sequence:
        the controller picks the most advanced replica). It serves reads
        and writes once the promise it last gave a primary has run out
        (at once on ``handover``: the old primary was demoted first, or
        when it led the previous term itself). Returns the sequence it
        holds."""
        with self.rw.write():
            if self.deposed:
                raise ShardUnavailable(f"shard {self.shard}: deposed, cannot lead")
            if term <= self.term:
                raise StaleTerm(f"shard {self.shard}: term {term} is not newer than {self.term}")
            led = self.primary
            self.term = term
            self.primary = True
            # A follower dropped here and not yet removed stays out (and
            # reads wait) until the controller removes it; one the
            # controller does not list any more cannot be promoted.
            self.dropped &= {_rid(f) for f in followers}
            self.why = {k: v for k, v in self.why.items() if k in self.dropped}
            self.followers = [f for f in followers if _rid(f) not in self.dropped]
            self.lease_until = 0.0  # renewed under the new term first
            self.serve_after = 0.0 if (handover or led) else self.granted_until
            # Joins begun under an earlier table (a controller that died
            # meanwhile) will never attach.
            self.joins = 0
            self.retained = None
            return self.applied

    def demote(self) -> int:
        """Stops taking writes and serving reads (a move of the primary):
        calls sent here from now on raise :class:`ShardUnavailable` and are
        retried by the client on the new primary. Returns the sequence it
        holds."""
        with self.rw.write():
            self.primary = False
            self.followers = []
            return self.applied

    def begin_join(self) -> dict:
        """Publishes this primary's collection for a joining replica and
        keeps every later write until :meth:`attach`."""
        return self._publish(join=True)

    def attach(self, replica: Any) -> int:
        """Replays the writes retained since :meth:`begin_join` to
        ``replica`` (it skips those its fetched version holds), has it
        promise a lease, and forwards every later write to it."""
        import ray

        with self.rw.write():
            if not self.primary:
                raise ShardUnavailable(f"shard {self.shard}: this replica is not the primary")
            for op in self.retained or []:
                ray.get(replica.apply.remote(*op), timeout=FORWARD_TIMEOUT)
            ray.get(replica.remember.remote(list(self.recent.items())), timeout=FORWARD_TIMEOUT)
            t = time.monotonic()
            got = ray.get(replica.heartbeat.remote(self.term), timeout=FORWARD_TIMEOUT)
            if got != self.applied:
                raise RuntimeError(
                    f"shard {self.shard}: joined at {got}, primary at {self.applied}"
                )
            self.lease_until = min(self.lease_until, t + LEASE)
            self.joins = max(0, self.joins - 1)
            if self.joins == 0:
                self.retained = None
            self.followers.append(replica)
            return self.applied

    def cancel_join(self) -> None:
        """A join that began here failed before :meth:`attach`."""
        with self.rw.write():
            self.joins = max(0, self.joins - 1)
            if self.joins == 0:
                self.retained = None

    def detach(self, replica_id: str) -> None:
        """Stops forwarding to a replica (it is being moved or dropped);
        the controller's word that it will not be promoted (a dropped
        follower no longer holds reads back)."""
        with self.rw.write():
            self.followers = [f for f in self.followers if _rid(f) != replica_id]
            self.dropped.discard(replica_id)
            self.why.pop(replica_id, None)
            ep = self.follower_eps.pop(replica_id, None)
            if ep is not None:
                self.channels.forget(ep)

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
            with self.rw.write():
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

    # -- terms and leases ------------------------------------------------
    def _await_serving(self) -> None:
        """A promoted replica waits out the promise it gave the previous
        primary (at most ``LEASE + GRANT_MARGIN`` seconds)."""
        wait = self.serve_after - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _check_leader(self, term: int) -> None:
        if term != self.term or self.deposed:
            raise StaleTerm(
                f"shard {self.shard}: term {term} asked, this replica is at {self.term}"
            )
        if not self.primary:
            raise ShardUnavailable(f"shard {self.shard}: this replica is not the primary")

    def _observe(self, term: int) -> None:
        """A forward or heartbeat from the primary of ``term``: refused
        when older than this replica's term; by a replica that leads (it
        has been replaced: its log may hold writes the new primary lacks,
        so it is marked deposed and refuses everything from then on)."""
        if term < self.term:
            raise StaleTerm(f"shard {self.shard}: term {term} is older than {self.term}")
        if self.primary or self.deposed:
            self.primary = False
            self.deposed = True
            raise ShardUnavailable(
                f"shard {self.shard}: led term {self.term}, deposed by term {term}; "
                "its log may differ: replace it"
            )
        self.term = term

    def _grant(self) -> None:
        self.granted_until = max(self.granted_until, time.monotonic() + LEASE + GRANT_MARGIN)

    def _step_down(self) -> None:
        self.primary = False
        self.deposed = True
        self.followers = []
        self.lease_until = 0.0

    def _endpoint_of(self, f: Any) -> dict:
        """A follower's endpoint, asked of it through Ray once."""
        import ray

        rid = _rid(f)
        ep = self.follower_eps.get(rid)
        if ep is None:
            ep = ray.get(f.endpoint.remote(), timeout=FORWARD_TIMEOUT)
            self.follower_eps[rid] = ep
        return ep

    def _send_all(self, method: str, args: tuple) -> list:
        """Sends ``method(*args)`` to every follower over the data path, all
        at once: (follower, call in flight or the error that stopped it)."""
        deadline = time.monotonic() + FORWARD_TIMEOUT
        out = []
        for f in self.followers:
            try:
                out.append(
                    (f, self.channels.start(self._endpoint_of(f), method, args, {}, deadline))
                )
            except Exception as e:  # unreachable: dropped by _collect
                out.append((f, e))
        return out

    def _collect(self, pending: list, sent: float) -> None:
        """Waits for the answers of one round of forwards or heartbeats
        (``pending``: (follower, call or error), sent at ``sent``). A
        follower that fails, takes over ``FORWARD_TIMEOUT`` seconds or
        does not hold exactly this replica's sequence is dropped (reported
        to the controller by `ping`); one that names a newer term deposes
        this replica (:class:`StaleTerm`). A round every follower answered
        renews the lease."""
        alive, stale = [], None
        deadline = sent + FORWARD_TIMEOUT
        for f, call in pending:
            try:
                if not isinstance(call, Call):
                    raise call
                got = call.finish(deadline)
            except StaleTerm as e:
                stale = e
                continue
            except Exception as e:  # the follower is gone, stuck or diverged: drop it
                self._drop(f, f"{type(e).__name__}: {str(e)[-300:]}")
                continue
            if got != self.applied:
                self._drop(f, f"at {got}, primary at {self.applied}")
                continue
            alive.append(f)
        if stale is not None:
            self._step_down()
            raise StaleTerm(f"shard {self.shard}: deposed: {stale}")
        if len(alive) == len(pending):
            self.lease_until = sent + LEASE
        self.followers = alive

    def _drop(self, f: Any, why: str) -> None:
        self.dropped.add(_rid(f))
        self.why[_rid(f)] = why
        ep = self.follower_eps.pop(_rid(f), None)
        if ep is not None:
            self.channels.forget(ep)

    def heartbeat(self, term: int) -> int:
        """A follower's answer to its primary's lease round: the term is
        checked as for a forward, a lease promised; returns the sequence
        held."""
        with self.rw.write():
            self._observe(term)
            self._grant()
            return self.applied

    def _renew(self, term: int) -> None:
        """One heartbeat round to every follower, when the lease ran out."""
        with self.rw.write():
            if self.primary and term == self.term and not self.dropped:
                if self.followers and time.monotonic() >= self.lease_until:
                    sent = time.monotonic()
                    self._collect(self._send_all("heartbeat", (self.term,)), sent)

    def _read(self, term: int | None, fn: Any) -> Any:
        """``fn()`` as a read of the primary of ``term`` (see the module
        doc), or of this replica as it stands when ``term`` is None."""
        if term is None:
            return fn()
        for _ in range(3):
            self._await_serving()
            with self.rw.read():
                self._check_leader(term)
                if self.dropped:
                    raise ShardUnavailable(
                        f"shard {self.shard}: followers {sorted(self.dropped)} were dropped; "
                        "reads wait until the controller has removed them"
                    )
                if not self.followers or time.monotonic() < self.lease_until:
                    return fn()
            self._renew(term)
        raise ShardUnavailable(f"shard {self.shard}: lease not renewed")

    # -- writes ----------------------------------------------------------
    def _remember(self, wid: str | None, seq: int, result: Any) -> None:
        if wid is not None:
            self.recent[wid] = (seq, result)
            while len(self.recent) > RECENT:
                self.recent.popitem(last=False)

    def remember(self, items: list) -> None:
        """Takes over a primary's ids of recent writes (a joining replica:
        its fetched version and the replays hold those writes)."""
        with self.rw.write():
            for wid, (seq, result) in items:
                self._remember(wid, seq, result)

    def write(
        self,
        term: int,
        op: str,
        keys: Any,
        vectors: Any,
        payload: Any,
        where: Any,
        wid: str | None = None,
    ) -> dict:
        """A write on the primary of ``term``: numbered, applied here,
        forwarded to every follower; acknowledged (returns) once
        ``quorum`` copies hold it. Raises :class:`ShardUnavailable` when
        fewer can, :class:`StaleTerm` when ``term`` is not the one this
        replica leads or a follower has moved to a newer one.

        ``wid``: the write's id, the same on every retry of it. A write
        whose id this replica holds (applied here or forwarded here by an
        earlier primary, whether acknowledged then or not) is not applied
        again: applying it a second time could undo a later write of the
        same key. Its first answer is returned once ``quorum`` copies hold
        it (every follower holds every write its primary applied)."""
        self._await_serving()
        with self.rw.write():
            self._check_leader(term)
            if 1 + len(self.followers) < self.quorum:
                raise ShardUnavailable(
                    f"shard {self.shard}: {1 + len(self.followers)} live copies, "
                    f"a write needs {self.quorum}"
                )
            if wid is not None and wid in self.recent:
                seq, result = self.recent[wid]
                return {"seq": seq, "result": result, "copies": 1 + len(self.followers)}
            seq = self.applied + 1
            result = self._apply(op, keys, vectors, payload, where)
            self.applied = seq
            self._remember(wid, seq, result)
            args = (self.term, seq, op, keys, vectors, payload, where, wid)
            if self.retained is not None:
                self.retained.append(args)
            sent = time.monotonic()
            self._collect(self._send_all("apply", args), sent)
            if 1 + len(self.followers) < self.quorum:
                raise ShardUnavailable(
                    f"shard {self.shard}: write {seq} reached {1 + len(self.followers)} copies, "
                    f"{self.quorum} needed; not acknowledged"
                )
            return {"seq": seq, "result": result, "copies": 1 + len(self.followers)}

    def apply(
        self,
        term: int,
        seq: int,
        op: str,
        keys: Any,
        vectors: Any,
        payload: Any,
        where: Any,
        wid: str | None = None,
    ) -> int:
        """A forwarded write on a follower, in sequence order, from the
        primary of ``term``; its id is kept (see :meth:`write`). Returns
        the sequence held."""
        self._failpoint("apply")
        with self.rw.write():
            self._observe(term)
            if seq > self.applied:
                if seq != self.applied + 1:
                    raise RuntimeError(
                        f"shard {self.shard}: write {seq} after {self.applied} (a gap)"
                    )
                self._remember(wid, seq, self._apply(op, keys, vectors, payload, where))
                self.applied = seq
            elif wid is not None and wid not in self.recent:
                self._remember(wid, seq, len(keys) if op == "upsert" else 0)
            self._grant()
            return self.applied

    def _apply(self, op: str, keys: Any, vectors: Any, payload: Any, where: Any) -> int:
        c = self.coll
        if op == "upsert":
            c.upsert(keys, vectors, payload)
            return len(keys)
        if op == "remove":
            return c.remove(keys) if where is None else c.remove(where=where)
        raise ValueError(f"unknown write {op!r}")

    # -- reads -----------------------------------------------------------
    def _with_columns(self, fn: Any, columns: list, rows: Any) -> tuple:
        """``fn(columns)`` -> (result, payload table); a column this
        replica never saw comes back as nulls (type null: the client
        types it from a shard that knows it, or refuses a column no shard
        knows), as a collection returns nulls for rows without a known
        column."""
        try:
            return fn(columns)
        except _sagitta.PayloadError:
            schema = self.coll.schema
            known = [c for c in columns if c in schema]
            if len(known) == len(columns):
                raise  # something else (the filter) is wrong
        import pyarrow as pa

        got, table = fn(known)
        n = rows(got)
        cols = {c: (table.column(c) if c in known else pa.nulls(n)) for c in columns}
        return got, pa.table(cols) if cols else table

    def search(self, queries: np.ndarray, k: int, opts: dict, term: int | None = None) -> tuple:
        """Keys, distances and (with ``columns``) payload rows of this
        shard's ``k`` nearest for each query."""
        n = queries.shape[0]

        def run(columns: Any = None) -> tuple:
            o = dict(opts) if columns is None else {**opts, "columns": columns}
            # No clamp to len() first: rows added between the two calls would
            # push live rows out of a k cut short (the collection clamps on
            # the snapshot its search reads, padding with empty slots).
            r = self.coll.search(queries, k, **o)
            keys = np.asarray(r.keys).reshape(n, -1)
            dists = np.asarray(r.distances).reshape(n, -1)
            return (keys, dists), r.payload

        def read() -> tuple:
            if opts.get("columns") is None:
                (keys, dists), pay = run()
            else:
                (keys, dists), pay = self._with_columns(
                    run, list(opts["columns"]), lambda kd: kd[0].size
                )
            return keys, dists, pay

        return self._read(term, read)

    def get(self, keys: np.ndarray, columns: Any, term: int | None = None) -> Any:
        def read() -> Any:
            if columns is None:
                return self.coll.get(keys)
            return self._with_columns(
                lambda cs: self.coll.get(keys, columns=cs), list(columns), lambda v: len(keys)
            )

        return self._read(term, read)

    def payload_types(self, columns: list, term: int | None = None) -> tuple:
        """``(schema, table)``: this replica's payload columns, and a
        table of no rows with those of ``columns`` it knows (typed)."""

        def read() -> tuple:
            schema = self.coll.schema
            known = [c for c in columns if c in schema]
            return schema, self.coll.get(np.zeros(0, np.uint64), columns=known)[1]

        return self._read(term, read)

    def count(self, where: Any, term: int | None = None) -> int:
        return self._read(term, lambda: self.coll.count(where))

    def schema(self, term: int | None = None) -> dict:
        return self._read(term, lambda: self.coll.schema)

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
