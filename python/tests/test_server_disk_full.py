"""The real server on a full disk: ``sagitta serve`` with its data directory
on a size-limited tmpfs (mounted in a private mount namespace by
``unshare``, so nothing outlives the server), written over HTTP by the
Python client until the file system has no room. Every upsert is
acknowledged or refused with 507 (``StorageFullError``, an ``OSError``
with errno ENOSPC); the server stays up and answers reads meanwhile; every
acknowledged row comes back exactly and exact search agrees with a numpy
oracle; once space returns, the same server optimizes and takes writes
again. A machine that cannot create the namespace fails the test with the
reason; it is not skipped (the store's own test, ``tests/enospc.rs``, needs
the same)."""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest
from server_util import Server

import sagitta

DIMS = 64
BATCH = 200
FS_MIB = 64
# Taken at the start and given back to end the fault: several times what
# the collection can hold by then, so that its built segments (rows,
# graph codes and links: about twice the raw rows) fit beside the Flat
# ones they replace (with 44 MiB of 64 the merges still found no room).
FILLER_MIB = 54


def vectors(keys: np.ndarray) -> np.ndarray:
    """Each key's own vector (seeded by the key), float32."""
    rows = [np.random.default_rng(int(k)).standard_normal(DIMS, dtype=np.float32) for k in keys]
    return np.stack(rows) if rows else np.empty((0, DIMS), np.float32)


def check(col, acked: np.ndarray, refused: np.ndarray) -> None:
    """Acknowledged keys hold their vectors exactly; a refused batch's keys
    hold theirs or nothing; exact search equals the numpy oracle over the
    rows present."""
    got = col.get(acked)
    np.testing.assert_array_equal(got, vectors(acked))
    present = [acked]
    if len(refused):
        maybe = col.get(refused)
        assert maybe.shape == (len(refused), DIMS)
        kept = ~np.isnan(maybe).any(axis=1)
        np.testing.assert_array_equal(maybe[kept], vectors(refused[kept]))
        present.append(refused[kept])
    keys = np.concatenate(present)
    assert col.count() == len(keys)
    base = vectors(keys)
    for q in vectors(np.arange(10) + (1 << 40)):
        want = keys[np.argsort(((base - q) ** 2).sum(axis=1), kind="stable")[:10]]
        r = col.search(q, 10, exact=True)
        assert list(r.keys) == list(want)


def test_server_on_a_full_disk_refuses_writes_with_507_and_recovers(tmp_path):
    unshare = shutil.which("unshare")
    assert unshare, "util-linux's unshare is needed for a private tmpfs"
    vol = tmp_path / "vol"
    vol.mkdir()
    script = (
        f'mount -t tmpfs -o size={FS_MIB}m sagitta-full "$0" && '
        f'head -c {FILLER_MIB << 20} /dev/zero > "$0/.filler" && exec "$@"'
    )
    prefix = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script, str(vol)]
    with Server(vol, prefix=prefix) as s:
        # The namespace's view of the volume (the filler is removed there).
        filler = f"/proc/{s.proc.pid}/root{vol}/.filler"
        assert os.path.getsize(filler) == FILLER_MIB << 20, "the tmpfs is not mounted"
        c = sagitta.Client(s.url)
        col = c.create_collection("full", ndim=DIMS, metric="l2", segment_size=1 << 20)
        acked, refused = [], []
        refused_in_a_row, nxt = 0, 0
        # Until the disk has refused 20 writes in a row (a refused log
        # append is cut back, so a later smaller one may fit again).
        while refused_in_a_row < 20:
            assert nxt < 2_000_000, "the file system never filled up"
            keys = np.arange(nxt, nxt + BATCH, dtype=np.uint64)
            nxt += BATCH
            try:
                assert col.upsert(keys, vectors(keys)) == BATCH
                acked.append(keys)
                refused_in_a_row = 0
            except sagitta.StorageFullError as e:
                assert e.status == 507 and e.errno == errno.ENOSPC, e
                assert isinstance(e, OSError)
                refused.append(keys)
                refused_in_a_row += 1
            assert s.proc.poll() is None, s.log()[-2000:]
        acked_keys = np.concatenate(acked)
        refused_keys = np.concatenate(refused)
        assert len(acked_keys) > 10 * BATCH
        print(f"full disk: {len(acked_keys)} rows acknowledged, {len(refused)} writes refused")
        # Reads go on while writes are refused.
        check(col, acked_keys, refused_keys)

        # Space returns: the same server catches up and takes writes.
        os.remove(filler)
        errors = []
        for _ in range(3):  # a task that failed just before may report it once
            try:
                col.optimize()
                break
            except sagitta.StorageFullError as e:
                errors.append(e)
        else:
            pytest.fail(f"optimize after space returned: {errors}")
        status = col.index_status()
        assert status["unindexed_vectors"] == 0, status
        keys = np.arange(nxt, nxt + BATCH, dtype=np.uint64)
        assert col.upsert(keys, vectors(keys)) == BATCH
        check(col, np.concatenate([acked_keys, keys]), refused_keys)
    assert s.proc.returncode == 0, s.log()[-2000:]
