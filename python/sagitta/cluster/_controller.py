"""The cluster's controller: a Ray actor that places replicas on nodes,
watches them, promotes a follower when a primary is lost, recreates lost
replicas on live nodes from the object store, publishes each shard on a
schedule, moves replicas when nodes join, and reports status.

It is not on the data path: clients send writes and reads to each
shard's primary directly, from a routing table they fetch here
(refetched when its ``epoch`` changes or a call fails). The table names
each shard's **term**: a number the controller hands out at every
promotion, written to Ray's GCS key-value store *before* the replica is
promoted, so a restarted controller never hands one out twice (replicas
refuse calls from older terms, so a reused term would let a deposed
primary's writes through). The routing epoch, the counters and the
latest events are kept there too, so a restart keeps them.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
import uuid
import warnings
from collections import Counter, deque
from typing import Any

from ._layout import place, rebalance_moves
from ._replica import Replica

NAMESPACE = "sagitta"


def _state_key(cluster: str, what: str) -> bytes:
    return f"cluster:{cluster}:{what}".encode()


def load_state(cluster: str, what: str) -> Any:
    """What the controller of ``cluster`` saved under ``what`` (``terms``:
    the highest term handed out per shard; ``state``: epoch, counters,
    events) in the GCS key-value store, or None. The store lives as long
    as the Ray cluster, which is as long as a controller can be
    restarted."""
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(_state_key(cluster, what), namespace=NAMESPACE)
    return None if raw is None else json.loads(raw)


def save_state(cluster: str, what: str, value: Any) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(
        _state_key(cluster, what), json.dumps(value).encode(), overwrite=True, namespace=NAMESPACE
    )


def delete_state(cluster: str) -> None:
    from ray.experimental import internal_kv

    for what in ("terms", "state"):
        internal_kv._internal_kv_del(_state_key(cluster, what), namespace=NAMESPACE)


def replica_prefix(cluster: str) -> str:
    """Name prefix of the replica actors of ``cluster``."""
    return f"replica:{cluster}:"


def head_node_id() -> str | None:
    """The Ray head node's id (its loss takes the whole Ray cluster down,
    so the controller lives there unless it is gone)."""
    import ray

    for n in ray.nodes():
        if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {}):
            return n["NodeID"]
    return None


def _node_name(n: dict) -> str:
    tags = sorted(r for r in n.get("Resources", {}) if r.startswith("sagitta_node_"))
    return tags[0][len("sagitta_node_") :] if tags else n["NodeID"][:12]


def dead_nodes(known: dict) -> list:
    """The nodes Ray reports dead and not back: by the name they had while
    alive when ``known`` (name -> node id, as seen by this controller)
    has it (Ray forgets a dead node's resources), else by node id."""
    import ray

    nodes = ray.nodes()
    alive = {n["NodeID"] for n in nodes if n.get("Alive")}
    names = {i: name for name, i in known.items()}
    out = {names.get(n["NodeID"], n["NodeID"][:12]) for n in nodes if n["NodeID"] not in alive}
    return sorted(out - {_node_name(n) for n in nodes if n.get("Alive")})


def live_nodes() -> dict:
    """Live Ray nodes by name: the ``sagitta_node_*`` resource a node was
    started with (``sagitta.cluster.local`` names them so), else the first
    12 hex digits of its node id. Values are node ids."""
    import ray

    return {_node_name(n): n["NodeID"] for n in ray.nodes() if n.get("Alive")}


class _Copy:
    """The controller's record of one replica."""

    def __init__(self, handle: Any, node: str):
        self.handle = handle
        self.node = node
        self.id = handle._actor_id.hex()


class Controller:
    def __init__(self, spec: dict):
        self.spec = spec
        self.name = spec["name"]
        # {"primary": _Copy, "followers": [_Copy], "term": the primary's term}
        self.shards: list[dict] = []
        # The highest term handed out per shard (saved before it is used).
        self.terms = [0] * spec["shards"]
        self._saved: Any = None
        self.epoch = 0
        self.lock = threading.RLock()
        # Held by a whole check round or rebalance (they add and remove
        # replicas); `lock` guards the table only, briefly.
        self.ops = threading.Lock()
        # Replicas being rebuilt: shard -> target nodes; `idle` is notified
        # whenever one ends.
        self.joining: dict = {}
        self.idle = threading.Condition(self.lock)
        self.wake = threading.Event()
        self.stopping = False
        self.events: deque = deque(maxlen=256)
        self.counters: Counter = Counter()
        self.last_publish: dict = {}
        # Nodes whose loss has been recorded as an event.
        self.reported_lost: set = set()
        # Every node seen alive: name -> node id.
        self.known: dict = {}
        self.started = False
        self.thread: threading.Thread | None = None
        # A controller restarted by Ray (its node died) takes over the
        # replicas that are still alive.
        import ray

        with warnings.catch_warnings():  # Ray's property uses its own deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            restarted = ray.get_runtime_context().was_current_actor_reconstructed
        if restarted:
            self._recover()

    def _recover(self) -> None:
        """Rebuilds the shard table from the live replicas of this cluster
        (named ``replica:<cluster>:<shard>:<id>``), if there are any, and
        the saved terms, epoch, counters and events. Per shard the primary
        of the newest term stays primary, promoted again in a new term
        (every table a client holds is then stale, and any older primary
        fenced); the others follow it. A replica that may hold writes the
        primary lacks (deposed, a second primary, or ahead of it) is
        removed, and replaced by the repair. A shard with no primary gets
        one from the next check. Then watching starts."""
        import ray

        prefix = replica_prefix(self.name)
        found: dict = {}
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a.get("namespace") != NAMESPACE or not a.get("name", "").startswith(prefix):
                continue
            try:
                h = ray.get_actor(a["name"], namespace=NAMESPACE)
                info = ray.get(h.info.remote(), timeout=10)
            except Exception:  # gone meanwhile, or its node is dead
                continue
            found.setdefault(info["shard"], []).append((info, _Copy(h, info["node"])))
        if not found:
            return
        saved = load_state(self.name, "state") or {}
        self.counters.update(saved.get("counters", {}))
        self.events.extend(saved.get("events", []))
        stored = load_state(self.name, "terms") or []
        for s in range(self.spec["shards"]):
            reps = found.get(s, [])
            seen = [i.get("term", 0) for i, _ in reps]
            self.terms[s] = max([self.terms[s], *seen, *stored[s : s + 1]])
            leaders = [x for x in reps if x[0]["primary"] and not x[0].get("deposed")]
            lead = max(leaders, key=lambda x: (x[0].get("term", 0), x[0]["applied"]), default=None)
            if lead is not None:
                # Asked again after every follower: writes went on while the
                # infos came in, and a primary is never behind its followers.
                try:
                    now = ray.get(lead[1].handle.ping.remote(), timeout=10)
                    lead = ({**lead[0], "applied": now["applied"]}, lead[1])
                except Exception:  # gone meanwhile: the next check promotes
                    lead = None
            rest = []
            for info, c in reps:
                if lead is not None and c is lead[1]:
                    continue
                if (
                    info.get("deposed")
                    or info["primary"]
                    or (
                        lead is not None
                        and (
                            info["applied"] > lead[0]["applied"]
                            or info.get("term", 0) > lead[0].get("term", 0)
                        )
                    )
                ):
                    self._kill(c)
                    self.counters["replicas_discarded"] += 1
                    self.events.append(
                        {"t": time.time(), "event": "replica_discarded", "shard": s, "node": c.node}
                    )
                    continue
                rest.append(c)
            if lead is not None:
                term = self._next_term(s)
                ray.get(lead[1].handle.promote.remote([c.handle for c in rest], term))
                self.shards.append({"primary": lead[1], "followers": rest, "term": term})
            else:
                self.shards.append({"primary": None, "followers": rest, "term": 0})
            self.last_publish[s] = time.monotonic()
        self.counters["controller_recoveries"] += 1
        self.events.append(
            {
                "t": time.time(),
                "event": "controller_recovered",
                "replicas": sum(len(v) for v in found.values()),
            }
        )
        # An epoch no client has seen: every table a client holds is stale.
        self.epoch = int(saved["epoch"]) + 1 if "epoch" in saved else int(time.time() * 1000)
        self._save()
        self.started = True
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    # -- saved state -------------------------------------------------------
    def _next_term(self, shard: int) -> int:
        """A term for a promotion in ``shard``: above every term handed out
        before (by this controller or an earlier one), saved before it is
        returned."""
        stored = load_state(self.name, "terms") or []
        terms = [max([a, *stored[i : i + 1]]) for i, a in enumerate(self.terms)]
        terms[shard] += 1
        save_state(self.name, "terms", terms)
        self.terms = terms
        return terms[shard]

    def _save(self) -> None:
        """Saves the epoch, counters and latest events when they changed
        (after each check round, and after operations)."""
        state = {"epoch": self.epoch, "counters": dict(self.counters), "events": list(self.events)}
        if state != self._saved:
            save_state(self.name, "state", state)
            self._saved = state

    def _kill(self, c: _Copy, wait: float = 5.0) -> None:
        """Kills a replica and waits (up to ``wait`` seconds) until Ray
        reports it dead, so that no table built later finds it."""
        import ray

        ray.kill(c.handle)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                ray.get(c.handle.ping.remote(), timeout=1)
            except ray.exceptions.RayActorError:
                return
            except ray.exceptions.GetTimeoutError:
                continue
            time.sleep(0.02)

    # -- placement -------------------------------------------------------
    def _new_replica(self, shard: int, node: str, node_id: str) -> _Copy:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        spec = self.spec
        actor = (
            ray.remote(Replica)
            .options(
                # Named and detached: a replica outlives a controller that
                # dies (its restart finds the replicas by name) and is
                # removed only by the controller (drop, move, loss).
                name=f"{replica_prefix(self.name)}{shard}:{uuid.uuid4().hex[:12]}",
                namespace=NAMESPACE,
                lifetime="detached",
                num_cpus=0,
                max_concurrency=8,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(
                shard,
                node,
                spec["root"],
                spec["config"],
                f"{spec['location'].rstrip('/')}/{self.name}/shard-{shard}",
                spec["quorum"],
            )
        )
        return _Copy(actor, node)

    def start(self) -> dict:
        """Creates every shard's replicas (empty collections) on distinct
        nodes, least loaded first, and starts watching them."""
        import ray

        with self.lock:
            if self.started:
                return self.table()
            nodes = live_nodes()
            names = sorted(nodes)
            replicas = self.spec["replicas"]
            if len(names) < self.spec["quorum"]:
                raise RuntimeError(
                    f"{len(names)} live node(s): a write quorum of {self.spec['quorum']} "
                    "needs as many nodes"
                )
            load: Counter = Counter()
            created = []
            for s in range(self.spec["shards"]):
                where = place(replicas, names, load)
                copies = [self._new_replica(s, n, nodes[n]) for n in where]
                created.append(copies)
            ray.get([c.handle.create.remote() for copies in created for c in copies])
            for s, copies in enumerate(created):
                term = self._next_term(s)
                ray.get(copies[0].handle.promote.remote([c.handle for c in copies[1:]], term))
                self.shards.append({"primary": copies[0], "followers": copies[1:], "term": term})
                self.last_publish[s] = time.monotonic()
            self.epoch = 1
            self._save()
            self.started = True
            self.thread = threading.Thread(target=self._watch, daemon=True)
            self.thread.start()
            return self.table()

    # -- routing ---------------------------------------------------------
    def table(self) -> dict:
        """The routing table: per shard its primary, the primary's term,
        and every replica."""
        with self.lock:
            return {
                "epoch": self.epoch,
                "shards": [
                    {
                        "primary": sh["primary"].handle if sh["primary"] else None,
                        "term": sh["term"],
                        "replicas": [
                            c.handle
                            for c in ([sh["primary"]] if sh["primary"] else []) + sh["followers"]
                        ],
                    }
                    for sh in self.shards
                ],
            }

    def refresh(self, seen_epoch: int, timeout: float = 5.0) -> dict:
        """A client saw a failure under ``seen_epoch``: checks the replicas
        now and returns the table once it changed (or after ``timeout``)."""
        self.wake.set()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if self.epoch != seen_epoch:
                    return self.table()
            self.wake.set()
            time.sleep(0.02)
        return self.table()

    # -- watching --------------------------------------------------------
    def _watch(self) -> None:
        interval = self.spec["check_interval"]
        while not self.stopping:
            self.wake.wait(interval)
            self.wake.clear()
            if self.stopping:
                return
            try:
                with self.ops:
                    self.check()
                    self._save()
            except Exception:  # keep watching; the error is in status()
                self.counters["check_errors"] += 1
                self.events.append(
                    {"t": time.time(), "event": "check_error", "error": traceback.format_exc()}
                )

    def check(self) -> None:
        """One round: drop replicas that are gone, promote where a primary
        was lost, recreate missing replicas, publish what is due."""
        import ray

        nodes = live_nodes()
        self.known.update(nodes)
        with self.lock:
            copies = [c for sh in self.shards for c in [sh["primary"], *sh["followers"]] if c]
            leading = {sh["primary"].id for sh in self.shards if sh["primary"]}
        refs = {c.id: c.handle.ping.remote() for c in copies if c.node in nodes}
        applied = {}
        # Replicas to remove although they answer: followers a primary
        # stopped forwarding to (they miss writes), replicas deposed by a
        # newer term, a primary of the table that no longer leads.
        bad: set = set()
        why: dict = {}
        t0 = time.monotonic()
        for c in copies:
            if c.id not in refs:
                continue
            try:
                got = ray.get(refs[c.id], timeout=max(0.05, 2.0 - (time.monotonic() - t0)))
                applied[c.id] = got["applied"]
                bad |= set(got["dropped"])
                why.update(got.get("why", {}))
                if got.get("deposed") or (c.id in leading and not got.get("primary", True)):
                    bad.add(c.id)
                    why[c.id] = "deposed" if got.get("deposed") else "no longer primary"
            except ray.exceptions.GetTimeoutError:
                applied[c.id] = None  # slow, not gone
            except ray.exceptions.RayActorError:
                pass
        # Killed (and waited for) before the primary is told it may forget
        # them (`_drop` detaches them): then none can be promoted later.
        for c in copies:
            if c.id in bad and c.id in applied:
                del applied[c.id]
                self._kill(c)
        gone = [c for c in copies if c.id not in applied]
        for n in set(c.node for c in copies) - set(nodes):
            if n not in self.reported_lost:
                self.reported_lost.add(n)
                self.events.append({"t": time.time(), "event": "node_lost", "node": n})
        if gone:
            self._drop(gone, applied, why)
        self._promote(applied)
        self._repair(nodes)
        self._publish_due()

    def _drop(self, gone: list, applied: dict, why: dict | None = None) -> None:
        import ray

        gone_ids = {c.id for c in gone}
        with self.lock:
            for s, sh in enumerate(self.shards):
                lost = [c for c in [sh["primary"], *sh["followers"]] if c and c.id in gone_ids]
                if not lost:
                    continue
                t = time.time()
                sh["followers"] = [c for c in sh["followers"] if c.id not in gone_ids]
                for c in lost:
                    self.counters["replicas_lost"] += 1
                    ev = {"t": t, "event": "replica_lost", "shard": s, "node": c.node}
                    if why and c.id in why:
                        ev["why"] = why[c.id]
                    self.events.append(ev)
                if sh["primary"] and sh["primary"].id in gone_ids:
                    sh["primary"] = None  # a follower is promoted by _promote
                else:
                    # The primary forwards to the followers it still has.
                    for c in lost:
                        ray.get(sh["primary"].handle.detach.remote(c.id))
            self.epoch += 1

    def _promote(self, applied: dict) -> None:
        """Gives every shard without a primary its most advanced follower
        as primary. Every follower the lost primary counted holds every
        acknowledged write (a write waits for them); one it had stopped
        forwarding to is behind, so the choice waits until every follower
        has reported its sequence this round (a slow one: next round)."""
        import ray

        with self.lock:
            for s, sh in enumerate(self.shards):
                if sh["primary"] is not None or not sh["followers"]:
                    continue
                if any(applied.get(c.id) is None for c in sh["followers"]):
                    continue
                new = max(sh["followers"], key=lambda c: applied[c.id])
                rest = [c for c in sh["followers"] if c is not new]
                term = self._next_term(s)
                ray.get(new.handle.promote.remote([c.handle for c in rest], term))
                sh["primary"], sh["followers"], sh["term"] = new, rest, term
                self.counters["promotions"] += 1
                self.events.append(
                    {
                        "t": time.time(),
                        "event": "promoted",
                        "shard": s,
                        "node": new.node,
                        "term": term,
                    }
                )
                self.epoch += 1

    def _repair(self, nodes: dict) -> None:
        """Brings every shard back to its replica count on live nodes: each
        missing replica is rebuilt in a thread of its own (a fetch of a
        large shard takes minutes), so check rounds go on meanwhile and a
        second loss elsewhere is handled at once."""
        want = self.spec["replicas"]
        for s in range(len(self.shards)):
            while True:
                with self.lock:
                    if self.stopping:
                        return
                    sh = self.shards[s]
                    have = [c for c in [sh["primary"], *sh["followers"]] if c]
                    pending = self.joining.setdefault(s, [])
                    if sh["primary"] is None or len(have) + len(pending) >= want:
                        break
                    load = Counter(
                        c.node for x in self.shards for c in [x["primary"], *x["followers"]] if c
                    )
                    load.update(n for v in self.joining.values() for n in v)
                    for n in nodes:
                        load[n] += 0
                    avoid = [c.node for c in have] + pending
                    target = place(1, sorted(nodes), load, avoid=avoid)
                    if not target:
                        break  # not enough live nodes: stays under-replicated
                    primary = sh["primary"]
                    pending.append(target[0])
                threading.Thread(
                    target=self._rebuild,
                    args=(s, primary, target[0], nodes[target[0]]),
                    daemon=True,
                ).start()

    def _rebuild(self, s: int, primary: _Copy, node: str, node_id: str) -> None:
        """One replica of shard ``s`` rebuilt on ``node`` from ``primary``;
        added to the table if ``primary`` still leads the shard, else
        removed (the next check round starts over from the new primary)."""
        import ray

        t = time.time()
        try:
            new = self._new_replica(s, node, node_id)
            boot = self._join(primary, new)
            with self.lock:
                keep = not self.stopping and self.shards[s]["primary"] is primary
                if keep:
                    self.shards[s]["followers"].append(new)
                    self.epoch += 1
            if not keep:
                try:
                    ray.get(primary.handle.detach.remote(new.id), timeout=5)
                except Exception:  # that primary is gone
                    pass
                ray.kill(new.handle)
                self.events.append(
                    {"t": time.time(), "event": "replica_discarded", "shard": s, "node": node}
                )
                return
            self.counters["replicas_added"] += 1
            self.last_publish[s] = time.monotonic()
            self.events.append(
                {
                    "t": time.time(),
                    "event": "replica_added",
                    "shard": s,
                    "node": node,
                    "seconds": time.time() - t,
                    "fetch_seconds": boot["fetch_s"],
                }
            )
        except Exception:
            self.counters["repair_errors"] += 1
            self.events.append(
                {
                    "t": time.time(),
                    "event": "repair_failed",
                    "shard": s,
                    "node": node,
                    "error": traceback.format_exc(limit=3),
                }
            )
        finally:
            with self.lock:
                self.joining[s].remove(node)
                self.idle.notify_all()
            self.wake.set()

    def _wait_rebuilds(self, timeout: float | None = None) -> bool:
        """Waits until no replica is being rebuilt; returns whether none is."""
        with self.lock:
            return self.idle.wait_for(lambda: not any(self.joining.values()), timeout=timeout)

    def _join(self, primary: _Copy, new: _Copy) -> dict:
        """Brings ``new`` up to ``primary``: a publish, a fetch, a replay of
        the writes made meanwhile. On failure the new replica is removed
        and the primary stops retaining writes for it."""
        import ray

        joined = False
        try:
            ray.get(primary.handle.begin_join.remote())
            joined = True
            boot = ray.get(new.handle.bootstrap.remote())
            ray.get(primary.handle.attach.remote(new.handle))
            return boot
        except Exception:
            if joined:
                try:
                    ray.get(primary.handle.cancel_join.remote(), timeout=10)
                except Exception:  # the primary is gone: nothing to undo
                    pass
            ray.kill(new.handle)
            raise

    def _publish_due(self) -> None:
        import ray

        every = self.spec["publish_interval"]
        if not every:
            return
        now = time.monotonic()
        for s, sh in enumerate(self.shards):
            if sh["primary"] and now - self.last_publish.get(s, 0) >= every:
                # Due again a whole interval later, whether it worked or
                # not (a store that refuses writes is not hammered).
                self.last_publish[s] = time.monotonic()
                try:
                    ray.get(sh["primary"].handle.publish.remote())
                    self.counters["publishes"] += 1
                except Exception as e:
                    self.counters["publish_errors"] += 1
                    self.events.append(
                        {"t": time.time(), "event": "publish_failed", "shard": s, "error": str(e)}
                    )

    # -- operations ------------------------------------------------------
    def publish_all(self) -> list:
        """Publishes every shard now."""
        import ray

        with self.lock:
            prim = [sh["primary"] for sh in self.shards]
        out = ray.get([p.handle.publish.remote() for p in prim if p])
        for s in range(len(prim)):
            self.last_publish[s] = time.monotonic()
        return out

    def rebalance(self) -> list:
        """Moves replicas so that live nodes hold within one of each other
        (a node that joined gets its share): each move adds the replica on
        the new node (joined from the object store) before it removes the
        old one; a moved primary hands over to a follower first."""
        with self.ops:
            self._wait_rebuilds()
            return self._rebalance()

    def _rebalance(self) -> list:
        import ray

        nodes = live_nodes()
        names = sorted(nodes)
        with self.lock:
            assignment = {
                s: [c.node for c in [sh["primary"], *sh["followers"]] if c]
                for s, sh in enumerate(self.shards)
            }
        moves = rebalance_moves(assignment, names)
        done = []
        for s, src, dst in moves:
            t = time.time()
            with self.lock:
                sh = self.shards[s]
                primary = sh["primary"]
            new = self._new_replica(s, dst, nodes[dst])
            self._join(primary, new)
            with self.lock:
                sh["followers"].append(new)
                old = next(c for c in [sh["primary"], *sh["followers"]] if c.node == src)
                if old is sh["primary"]:
                    ray.get(old.handle.demote.remote())
                    heir = new
                    rest = [c for c in sh["followers"] if c is not heir]
                    term = self._next_term(s)
                    # A handover: the old primary serves nothing from now on.
                    ray.get(heir.handle.promote.remote([c.handle for c in rest], term, True))
                    sh["primary"], sh["followers"], sh["term"] = heir, rest, term
                else:
                    ray.get(sh["primary"].handle.detach.remote(old.id))
                    sh["followers"] = [c for c in sh["followers"] if c is not old]
                self.epoch += 1
            ray.get(old.handle.close.remote())
            ray.kill(old.handle)
            self.counters["moves"] += 1
            ev = {"t": time.time(), "event": "moved", "shard": s, "from": src, "to": dst}
            ev["seconds"] = time.time() - t
            self.events.append(ev)
            done.append(ev)
        self._save()
        return done

    def status(self) -> dict:
        """Nodes, shards, replicas (node, role, sequence, lag, rows),
        counters and recent events."""
        import ray

        nodes = live_nodes()
        with self.lock:
            shards = [(s, sh["primary"], list(sh["followers"])) for s, sh in enumerate(self.shards)]
            terms = [sh["term"] for sh in self.shards]
            epoch = self.epoch
        out = []
        for s, p, fs in shards:
            infos = []
            for c in ([p] if p else []) + fs:
                try:
                    info = ray.get(c.handle.info.remote(), timeout=5)
                except Exception as e:
                    info = {"error": type(e).__name__, "node": c.node}
                info["role"] = "primary" if c is p else "follower"
                infos.append(info)
            top = max((i.get("applied", 0) for i in infos), default=0)
            for i in infos:
                i["lag"] = top - i.get("applied", 0)
            out.append(
                {
                    "shard": s,
                    "replicas": infos,
                    "healthy": p is not None and len(infos) >= self.spec["replicas"],
                }
            )
        return {
            "name": self.name,
            "epoch": epoch,
            "terms": terms,
            "nodes": sorted(nodes),
            "dead_nodes": dead_nodes(self.known),
            "rebuilding": {s: list(v) for s, v in self.joining.items() if v},
            "controller_node": next(
                (n for n, i in nodes.items() if i == ray.get_runtime_context().get_node_id()),
                None,
            ),
            "shards": out,
            "healthy": all(x["healthy"] for x in out),
            "counters": dict(self.counters),
            "events": list(self.events),
            "spec": {k: v for k, v in self.spec.items() if k != "config"},
            "config": self.spec["config"],
        }

    def drop(self) -> None:
        """Stops watching and removes every replica and its directory."""
        import ray

        self.stopping = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        # Rebuilds in flight remove their new replica once they see
        # `stopping`.
        self._wait_rebuilds(timeout=120)
        with self.lock:
            copies = [c for sh in self.shards for c in [sh["primary"], *sh["followers"]] if c]
            self.shards = []
        for c in copies:
            try:
                ray.get(c.handle.close.remote(), timeout=10)
            except Exception:
                pass
            ray.kill(c.handle)
        delete_state(self.name)
