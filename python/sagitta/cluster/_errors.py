"""The errors replicas raise to their callers (over Ray or the data path)."""

from __future__ import annotations


class ShardUnavailable(RuntimeError):
    """The shard cannot acknowledge a write or serve a read here now (too
    few live copies, not its primary, a follower awaiting removal)."""


class StaleTerm(ShardUnavailable):
    """A call named an older term than the replica's (or this replica was
    deposed): the caller's routing table, or the calling primary, is out
    of date. The client refreshes its table and retries."""
