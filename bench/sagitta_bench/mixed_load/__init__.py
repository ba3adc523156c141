"""Sustained mixed load: the real ``sagitta serve`` under many clients for
minutes, then a full consistency check.

What it does:

1. **Server.** Copies ``target/release/sagitta`` (``--bin`` or
   ``$SAGITTA_BIN`` to override; it never builds) into a temporary
   directory and starts ``serve`` from there on free loopback ports for
   HTTP and Flight, with its data directory beside it. It creates one small
   collection (64-d float32, L2, HNSW, a 256 KiB ``segment_size`` and an
   ``index_threshold`` of 1000 rows by default) so that the background
   optimizer seals, builds and merges segments all through the run, and
   declares its payload columns by writing and deleting one row outside
   every client's range (a filter on a column nobody has written yet is
   refused).
2. **Load.** ``--clients`` threads for ``--minutes``, half over HTTP/JSON
   (``http.client``, one keep-alive connection each), half over Arrow
   Flight (``pyarrow.flight``, one client each). Each thread mixes
   upserts (1-64 rows with the payload ``owner`` / ``grp`` int64 and
   ``tag`` string, sometimes null), deletes by id (and, over HTTP, by
   filter), searches (k=10) without and with a payload filter (some of
   them ``exact``), gets by id, counts, and (Flight) filtered scans.
   A monitor thread polls ``/health`` and ``GET /collections/C/index``
   (the index status, as a dashboard would; ``--no-index-poll`` leaves it
   out). Each client owns a disjoint key range, so its model of that
   range (key -> vector seed and payload) is exact: a write enters the
   model only once the server acknowledged it (HTTP 2xx, a Flight
   ``PutResult`` or action result). A refused write (4xx, 503) leaves the
   model as it was; a write whose outcome is unknown (timeout, 5xx, a
   broken connection) leaves its keys in either state until a read
   settles them (and again after a restart, which may replay it).
3. **Online checks** during the load: for the client's own rows (other
   clients' rows change concurrently) the acknowledged upsert and delete
   counts, get / scan results (vectors bit-exact, payloads equal, absent
   keys absent), counts filtered on the client's ``owner``, and for every
   search hit: the row is live, passes the filter, its score is its L2
   distance to the query and its payload is the model's; ``exact``
   searches filtered on ``owner`` equal a numpy brute force over the
   model, approximate ones give a recall. For every search hit of any
   client: its payload's ``owner`` is the owner of its key (a torn or
   foreign read fails this).
4. **Measurements.** Every operation's latency (request sent to response
   read; client-side JSON / Arrow encoding excluded), per kind and
   protocol: count, ops/s, p50 / p99 / max, and p50 / p99 per time bucket
   (``--bucket-s``, a minute by default). Errors by kind and status; 503 /
   UNAVAILABLE ("server busy", the admission bound) counted apart as
   deliberate overload. The server's RSS (``/proc/PID/status`` VmRSS),
   segment count and optimizer state every ``--sample-s`` seconds, and
   its Prometheus figures after the load. The machine: CPU model, ISA
   flags (AVX2 / AVX-512), load average at the start and the end.
5. **Hangs.** The load stops early when the server answers no HTTP
   request, or acknowledges no write, for ``--hang-s``; after the load a
   probe (``/health``, one write) decides whether it still works. A hung
   server's threads are dumped with gdb (``<result>.stacks.txt``, and a
   summary of every thread waiting for a lock in the report), then it is
   killed with SIGKILL.
6. **Final check**, after the load stops: at once, after the optimizer
   settles, and after a restart on the same data directory (SIGTERM, or
   SIGKILL for a hung server): every key of every client's range read back
   by HTTP get (vector bit-exact, payload equal, deleted and never-written
   keys absent), a full Flight scan equal to the models, the total and
   per-owner counts, and exact searches (HTTP and Flight, with and without
   a filter) against a numpy brute force over the models; the recall@10
   of approximate searches is reported at the default beam width and at
   256.

Results go to ``--out`` as JSON and Markdown (the Markdown is printed).
The exit status is non-zero when any check found a mismatch, any request
failed other than with 503 / UNAVAILABLE, the server hung, died, logged
an error or did not exit cleanly.

The clients are Python threads on the machine that runs the server, so
latencies include client-side waiting (the GIL) and the clients compete
with the server for cores; the figures are a reliability campaign's, not
a latency benchmark's.

``python -m sagitta_bench.mixed_load --minutes 10 --clients 16``
"""

from .run import main

__all__ = ["main"]
