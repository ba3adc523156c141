#!/usr/bin/env bash
# The contest's own load test against sagitta-fraud, configurations
# interleaved, with the load average and the memory of the balancer and
# API processes sampled under load.
#
#   crates/sagitta-fraud/bench.sh [RUNS]     (default 3 runs per configuration)
#
# Builds the 3M-reference index once into ~/.cache/sagitta/rinha-3m, checks
# every request of test-data-6100-3m offline, then runs the full scenario
# (harness/run.sh, 120 s ramp to 900 req/s) for each configuration:
#   cfs   the service on CPU 0 under the normal scheduler
#   fifo  the service on CPU 0 under SCHED_FIFO priority 20, k6 under
#         SCHED_FIFO priority 10 (K6_RTPRIO)
# k6 is not pinned (K6_CPUS unset): pinned to the other core alone, its own
# stalls dominate the tail (measured: p99 6.8 ms pinned vs 1.1 ms not).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS="${1:-3}"
RINHA="${RINHA:-../shared/rinha}"
IDX="${IDX:-$HOME/.cache/sagitta/rinha-3m}"
OUT="${OUT:-/tmp/sagitta-fraud-bench}"
mkdir -p "$OUT"
cargo build --release -p sagitta-fraud >&2
BIN=target/release/sagitta-fraud
[[ -f "$IDX/references.sgld" ]] || /usr/bin/time -f "build: %e s wall, %M KiB peak RSS" "$BIN" build "$RINHA/references.json.gz" "$IDX"
"$BIN" check --index "$IDX" "$RINHA/test-data-6100-3m.json.gz"
echo "ISA: $(grep -o -m1 'avx512[a-z]*' /proc/cpuinfo | head -1 || echo none); $(nproc) CPUs"

memory() {  # RSS and PSS (shared index pages counted once) of LB + API processes, KiB
    local rss=0 pss=0 p
    for p in $(pgrep -f "sagitta-fraud (serve|worker)"); do
        rss=$((rss + $(awk '/^VmRSS/{print $2}' /proc/$p/status)))
        pss=$((pss + $(awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup)))
    done
    echo "rss=${rss}KiB pss=${pss}KiB"
}

run() {  # config
    local cfg=$1 args=(--cpu 0) envs=()
    [[ $cfg == fifo ]] && { args+=(--rtprio 20); envs=(K6_RTPRIO=10); }
    pkill -f "sagitta-fraud serve" 2>/dev/null || true
    "$BIN" serve --index "$IDX" --port 9999 "${args[@]}" > "$OUT/serve-$cfg.log" 2>&1 &
    local pid=$!
    local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
    ( sleep 100; memory > "$OUT/mem-$cfg" ) &
    local sampler=$!
    local line; line=$(env "${envs[@]}" "$RINHA/harness/run.sh" 127.0.0.1:9999 "$RINHA/test-data-6100-3m.json.gz" 2>&1 | grep '^requests=')
    wait "$sampler"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "$cfg: $line load=$load0->$(cut -d' ' -f1 /proc/loadavg) $(cat "$OUT/mem-$cfg")"
}

for i in $(seq "$RUNS"); do
    run cfs
    run fifo
done
