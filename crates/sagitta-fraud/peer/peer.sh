#!/usr/bin/env bash
# Sagitta's fraud service beside a C entry of the contest, in the same run:
# nelsonsimionato/rinha-backend-2026 (c-impl: exact kd-tree over int16
# codes, AVX2, SCM_RIGHTS balancer `lbfd`), built here from a git directory
# of its repository, unmodified.
#
#   PEER_GIT=/work/.mirror/nelsonsimionato+rinha-backend-2026/repo \
#       crates/sagitta-fraud/peer/peer.sh [RUNS]      (default 3)
#
# 1. Builds the peer (gcc, make; its index with its own Go tool) and our
#    index, once, under ~/.cache/sagitta/rinha-peer.
# 2. Offline search: both engines' exact 5-NN over the same 6,100 vectors
#    (`sagitta-fraud check --vectors`), interleaved, RUNS times; the peer
#    with its default search and with SEARCH_V2=1.
# 3. The contest's load test (harness/run.sh, full mode, test-data-6100-3m
#    cycled), RUNS rounds of four interleaved configurations: each engine
#    under the normal scheduler (cfs) and under SCHED_FIFO priority 20 with
#    k6 at SCHED_FIFO 10 (fifo, as bench.sh). Each service's balancer and
#    its two API processes run on CPU 0 (`taskset -c 0`), k6 unpinned; the
#    load average and the memory (RSS, PSS) of the service's processes
#    under load are reported. SCONFIGS="sagitta-cfs peer-cfs" narrows it;
#    LOAD=0 skips it; SAGITTA_ARGS adds options to `sagitta-fraud serve`
#    (e.g. "--busy-poll").
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS="${1:-3}"
RINHA="${RINHA:-../shared/rinha}"
RINHA="$(cd "$RINHA" && pwd)"
PEER_GIT="${PEER_GIT:?a git directory of github.com/nelsonsimionato/rinha-backend-2026}"
WORK="${WORK:-$HOME/.cache/sagitta/rinha-peer}"
IDX="${IDX:-$HOME/.cache/sagitta/rinha-3m}"
OUT="${OUT:-/tmp/sagitta-fraud-peer}"
mkdir -p "$WORK" "$OUT"
PEER="$WORK/src"
COMMIT="$(git --git-dir="$PEER_GIT" rev-parse HEAD)"

# --- build ------------------------------------------------------------------
cargo build --release -p sagitta-fraud >&2
BIN=target/release/sagitta-fraud
[[ -f "$IDX/references.sgld" ]] || "$BIN" build "$RINHA/references.json.gz" "$IDX" >&2
if [[ "$(cat "$WORK/commit" 2>/dev/null)" != "$COMMIT" ]]; then
    rm -rf "$PEER" && mkdir -p "$PEER"
    git --git-dir="$PEER_GIT" archive "$COMMIT" | tar -x -C "$PEER"
    rm -f "$PEER/c-impl/tests/bench_search"   # a prebuilt binary in the repository
    (cd "$PEER/c-impl" && make -j2 api >&2 && cd lb && make -j2 >&2)
    ln -sf "$RINHA/references.json.gz" "$PEER/resources/references.json.gz"
    (cd "$PEER" && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off go run tools/build_kdtree.go >&2)
    echo "$COMMIT" > "$WORK/commit"
fi
objs=$(ls "$PEER"/c-impl/src/*.o | grep -v '/main\.o$')
gcc -O3 -mavx2 -march=haswell -flto -D_GNU_SOURCE -I"$PEER/c-impl/src" \
    -o "$WORK/search_bench" crates/sagitta-fraud/peer/search_bench.c $objs -static -lm
PEER_INDEX="$PEER/resources/index.bin"
echo "peer: nelsonsimionato/rinha-backend-2026 $COMMIT; index $(stat -c %s "$PEER_INDEX") bytes"
echo "sagitta: $(git rev-parse --short HEAD); index $(stat -c %s "$IDX/references.sgld") bytes"
echo "ISA: $(grep -o -m1 'avx512[a-z]*' /proc/cpuinfo | head -1 || echo 'avx2, no avx512'); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
denied=$(python3 -c "
import gzip, json
e = json.load(gzip.open('$RINHA/test-data-6100-3m.json.gz'))['entries']
print(sum(1 for x in e if not x['expected_approved']))")
echo "expected: $denied of 6100 requests denied"

# --- offline search ---------------------------------------------------------
for i in $(seq "$RUNS"); do
    echo "offline $i: load $(cut -d' ' -f1 /proc/loadavg)"
    echo "  sagitta: $("$BIN" check --index "$IDX" "$RINHA/test-data-6100-3m.json.gz" --vectors "$OUT/vectors.i16" | tr '\n' ' ')"
    echo "  peer (default search): $("$WORK/search_bench" "$PEER_INDEX" "$OUT/vectors.i16")"
    echo "  peer (SEARCH_V2=1): $(SEARCH_V2=1 "$WORK/search_bench" "$PEER_INDEX" "$OUT/vectors.i16")"
done

# --- the contest's load test ------------------------------------------------
memory() {  # RSS and PSS of the given processes, KiB
    local rss=0 pss=0 p
    for p in "$@"; do
        rss=$((rss + $(awk '/^VmRSS/{print $2}' /proc/$p/status)))
        pss=$((pss + $(awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup)))
    done
    echo "rss=${rss}KiB pss=${pss}KiB"
}

start_sagitta() {  # sched
    local args=(--cpu 0 ${SAGITTA_ARGS:-})
    [[ $1 == fifo ]] && args+=(--rtprio 20)
    "$BIN" serve --index "$IDX" --port 9999 "${args[@]}" > "$OUT/sagitta.log" 2>&1 &
    PIDS=($!)
}

start_peer() {  # sched: the submission's docker-compose.yml, as plain processes on CPU 0
    local sock="$OUT/sock" pin=(taskset -c 0)
    [[ $1 == fifo ]] && pin+=(chrt -f 20)
    rm -rf "$sock" && mkdir -p "$sock"
    PIDS=()
    for n in 1 2; do
        INDEX_PATH="$PEER_INDEX" PORT=$((18080 + n)) FDSOCK="$sock/api$n.sock" \
            EPOLL_TIMEOUT_MS=1 WARMUP_QUERIES=5000 SPIN_US=0 EPOLL_IDLE_US=60 BUSY_POLL_US=5 \
            "${pin[@]}" "$PEER/c-impl/api" > "$OUT/peer-api$n.log" 2>&1 &
        PIDS+=($!)
    done
    for _ in $(seq 100); do [[ -S "$sock/api1.sock" && -S "$sock/api2.sock" ]] && break; sleep 0.1; done
    DEFER_ACCEPT=1 "${pin[@]}" "$PEER/c-impl/lb/lbfd" --port 9999 "$sock/api1.sock" "$sock/api2.sock" \
        > "$OUT/peer-lb.log" 2>&1 &
    PIDS+=($!)
}

run() {  # engine-sched
    local engine=${1%-*} sched=${1#*-} envs=()
    [[ $sched == fifo ]] && envs=(K6_RTPRIO=10)
    "start_$engine" "$sched"
    local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
    ( sleep 100; memory $( [[ $engine == sagitta ]] && pgrep -f "sagitta-fraud (serve|worker)" || echo "${PIDS[@]}") > "$OUT/mem-$engine" ) &
    local sampler=$!
    local line; line=$(env "${envs[@]}" "$RINHA/harness/run.sh" 127.0.0.1:9999 "$RINHA/test-data-6100-3m.json.gz" 2>&1 | grep '^requests=' || true)
    wait "$sampler"
    kill "${PIDS[@]}" 2>/dev/null || true
    pkill -f "sagitta-fraud (serve|worker)" 2>/dev/null || true
    wait 2>/dev/null || true
    echo "$1: $line load=$load0->$(cut -d' ' -f1 /proc/loadavg) $(cat "$OUT/mem-$engine")"
}

[[ ${LOAD:-1} == 0 ]] && exit 0
for i in $(seq "$RUNS"); do
    for c in ${SCONFIGS:-sagitta-cfs peer-cfs sagitta-fifo peer-fifo}; do
        run "$c"
    done
done
