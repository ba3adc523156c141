"""The GIL is released during heavy calls, and concurrent use is safe."""

import threading
import time

import numpy as np

import sagitta


def _ticks_in_middle(call) -> tuple[float, int]:
    """Runs `call` while another Python thread counts loop iterations.

    Returns the call's duration and how many iterations the other thread
    made in the middle half of it. If `call` held the GIL, that thread
    could not run at all in that window.
    """
    ticks: list[float] = []
    started = threading.Event()
    stop = threading.Event()

    def spin():
        started.set()
        while not stop.is_set():
            ticks.append(time.perf_counter())

    t = threading.Thread(target=spin)
    t.start()
    started.wait()
    t0 = time.perf_counter()
    call()
    t1 = time.perf_counter()
    stop.set()
    t.join()
    lo, hi = t0 + 0.25 * (t1 - t0), t1 - 0.25 * (t1 - t0)
    return t1 - t0, sum(1 for x in ticks if lo < x < hi)


def test_gil_released_during_add_and_search(rng):
    base = rng.standard_normal((30_000, 64)).astype(np.float32)
    index = sagitta.Index(64, metric="l2")
    took, ticks = _ticks_in_middle(lambda: index.add(np.arange(len(base)), base))
    assert took > 0.2, f"add too short to judge ({took:.3f} s)"
    assert ticks > 100, f"only {ticks} ticks while add ran {took:.2f} s"

    queries = rng.standard_normal((3000, 64)).astype(np.float32)
    took, ticks = _ticks_in_middle(lambda: index.search(queries, 10, exact=True))
    assert took > 0.2, f"search too short to judge ({took:.3f} s)"
    assert ticks > 100, f"only {ticks} ticks while search ran {took:.2f} s"


def test_concurrent_searches_while_adding(rng):
    n0, n, d, k = 2000, 12_000, 32, 10
    base = rng.standard_normal((n, d)).astype(np.float32)
    index = sagitta.Index(d, metric="l2", expansion_search=64)
    index.add(np.arange(n0), base[:n0])
    errors: list[BaseException] = []
    done = threading.Event()
    searches = [0] * 4

    def writer():
        try:
            for start in range(n0, n, 500):
                index.add(np.arange(start, start + 500), base[start : start + 500])
        except BaseException as e:
            errors.append(e)
        finally:
            done.set()

    def reader(slot: int):
        local = np.random.default_rng(slot)
        try:
            while not done.is_set() or searches[slot] < 5:
                q = local.standard_normal((16, d)).astype(np.float32)
                res = index.search(q, k)
                assert (res.counts == k).all()
                keys = res.keys.astype(np.int64)
                assert ((keys >= 0) & (keys < n)).all()
                # every reported distance is the true distance to that key's vector
                true = ((base[keys] - q[:, None, :]) ** 2).sum(-1)
                np.testing.assert_allclose(res.distances, true, rtol=1e-4, atol=1e-4)
                assert (np.diff(res.distances, axis=1) >= 0).all()
                searches[slot] += 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert all(s >= 5 for s in searches)
    assert len(index) == n
    flat = sagitta.Index(d, metric="l2", kind="flat")
    flat.add(np.arange(n), base)
    q = rng.standard_normal((200, d)).astype(np.float32)
    truth, got = flat.search(q, k).keys, index.search(q, k).keys
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(got, truth)])
    assert recall >= 0.95, recall
