"""A Jepsen-style history check of ``sagitta.cluster``.

Clients record every operation (upsert, remove, get, exact search,
count) with its invocation and completion times and its outcome while a
nemesis kills nodes (SIGKILL of a node's process group), pauses them
(SIGSTOP, then SIGCONT) and kills the controller; after healing, every
key is read back; then the history is checked (:mod:`.checker`):
linearizability per key as a register, the claims of docs/CLUSTER.md
(no acknowledged write lost, no stale read after an acknowledged write),
exact searches and counts against what the registers held.

    python -m sagitta_bench.history run --minutes 5 --seed 1 --out results/history/RUN
    python -m sagitta_bench.history check results/history/RUN/history.jsonl.gz

Modules: :mod:`.model` (the op record, the rows written),
:mod:`.checker` (pure Python), :mod:`.runner` (the cluster, the
clients, the nemesis; needs Ray).
"""
