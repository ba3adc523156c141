#!/usr/bin/env bash
# Sagitta's fraud service beside entries of the contest and a no-op floor,
# under the contest's own load test, in the same run.
#
#   NELSON_GIT=/work/.mirror/nelsonsimionato+rinha-backend-2026/repo \
#   RAUCH_GIT=/work/.mirror/gabrielrauch+rinha-2026/repo \
#       crates/sagitta-fraud/peer/peer.sh [RUNS]      (default 3)
#
# The engines (each built once under ~/.cache/sagitta/rinha-peer from a git
# directory of its repository, unmodified; a peer whose git directory is
# not given is left out):
#   sagitta  this repository's `sagitta-fraud serve`
#   floor    the same balancer and API processes with `--fixed-answer`: no
#            parse, no vector, no search; what the host and the transport
#            cost (the no-op floor)
#   nelson   nelsonsimionato/rinha-backend-2026 (C: exact kd-tree over int16
#            codes, AVX2, SCM_RIGHTS balancer `lbfd`), its docker-compose
#            settings as plain processes
#   rauch    gabrielrauch/rinha-2026 (Rust: monoio API processes, a
#            partitioned kd-tree with an early stop, SCM_RIGHTS balancer
#            `lb`), its Dockerfiles' settings as plain processes
#
# 1. Offline, one thread, interleaved, RUNS times: our per-request cost and
#    search over the 6,100 test requests, hot and cold (`check`); nelson's
#    search over the same vectors (`peer/search_bench.c`, our driver around
#    its `search_knn`); rauch's per-request path (its `payload::extract`,
#    `feature::vectorize_payload`, `knn::fraud_count`) and search over the
#    same bodies and vectors (`peer/rauch_bench.rs`), hot and cold.
# 2. The contest's load test (harness/run.sh, full mode: ramp to 900 req/s
#    over 120 s, test-data-6100-3m cycled), RUNS rounds; in each round
#    every configuration ENGINE-SCHED once, in turn: cfs (the normal
#    scheduler) and fifo (SCHED_FIFO priority 20 for the service, k6 at
#    SCHED_FIFO 10). Each service's balancer and API processes run on CPU 0,
#    k6 unpinned. Memory (RSS, PSS) is sampled under load.
# 3. One table: p99, dropped, errors, FP+FN, score per configuration and
#    round, and each p99 over the floor's of the same round and scheduler.
#
# ENGINES="floor sagitta nelson rauch" and SCHEDS="fifo cfs" narrow the
# matrix; LOAD=0 skips the load test, OFFLINE=0 the offline search;
# SAGITTA_ARGS adds options to `sagitta-fraud serve`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS="${1:-3}"
RINHA="${RINHA:-../shared/rinha}"
RINHA="$(cd "$RINHA" && pwd)"
WORK="${WORK:-$HOME/.cache/sagitta/rinha-peer}"
IDX="${IDX:-$HOME/.cache/sagitta/rinha-3m}"
OUT="${OUT:-/tmp/sagitta-fraud-peer}"
mkdir -p "$WORK" "$OUT"
ENGINES="${ENGINES:-floor sagitta nelson rauch}"
[[ -n ${NELSON_GIT:-} ]] || ENGINES="${ENGINES//nelson/}"
[[ -n ${RAUCH_GIT:-} ]] || ENGINES="${ENGINES//rauch/}"
SCHEDS="${SCHEDS:-fifo cfs}"

# --- build ------------------------------------------------------------------
cargo build --release -p sagitta-fraud >&2
BIN=target/release/sagitta-fraud
[[ -f "$IDX/references.sgld" ]] || "$BIN" build "$RINHA/references.json.gz" "$IDX" >&2
echo "sagitta: $(git rev-parse --short HEAD); index $(stat -c %s "$IDX/references.sgld") bytes"

unpack() {  # name git-dir: the repository's HEAD under $WORK/name/src, once per commit
    local dir="$WORK/$1" commit; commit="$(git --git-dir="$2" rev-parse HEAD)"
    if [[ "$(cat "$dir/commit" 2>/dev/null)" == "$commit" ]]; then return 1; fi
    rm -rf "$dir" && mkdir -p "$dir/src"
    git --git-dir="$2" archive "$commit" | tar -x -C "$dir/src"
    return 0
}

if [[ $ENGINES == *nelson* ]]; then
    NELSON="$WORK/nelson/src"
    if unpack nelson "$NELSON_GIT"; then
        rm -f "$NELSON/c-impl/tests/bench_search"   # a prebuilt binary in the repository
        (cd "$NELSON/c-impl" && make -j2 api >&2 && cd lb && make -j2 >&2)
        ln -sf "$RINHA/references.json.gz" "$NELSON/resources/references.json.gz"
        (cd "$NELSON" && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off go run tools/build_kdtree.go >&2)
        git --git-dir="$NELSON_GIT" rev-parse HEAD > "$WORK/nelson/commit"
    fi
    objs=$(ls "$NELSON"/c-impl/src/*.o | grep -v '/main\.o$')
    gcc -O3 -mavx2 -march=haswell -flto -D_GNU_SOURCE -I"$NELSON/c-impl/src" \
        -o "$WORK/nelson/search_bench" crates/sagitta-fraud/peer/search_bench.c $objs -static -lm
    NELSON_INDEX="$NELSON/resources/index.bin"
    echo "nelson: nelsonsimionato/rinha-backend-2026 $(cat "$WORK/nelson/commit"); index $(stat -c %s "$NELSON_INDEX") bytes"
fi
if [[ $ENGINES == *rauch* ]]; then
    RAUCH="$WORK/rauch/src"
    if unpack rauch "$RAUCH_GIT"; then
        # Its rust-toolchain.toml pins 1.84; built with the toolchain here,
        # with its Dockerfile's RUSTFLAGS and its Cargo.lock.
        (cd "$RAUCH" && RUSTUP_TOOLCHAIN=stable RUSTFLAGS="-C target-cpu=haswell" \
            cargo build --release --locked >&2)
        ln -sf "$RINHA/references.json.gz" "$RAUCH/resources/references.json.gz"
        (cd "$RAUCH" && target/release/builder ./resources "$WORK/rauch/blob.bin" >&2)
        git --git-dir="$RAUCH_GIT" rev-parse HEAD > "$WORK/rauch/commit"
    fi
    # Our driver around its library, a crate of its own beside its sources.
    mkdir -p "$WORK/rauch/bench/src"
    cp crates/sagitta-fraud/peer/rauch_bench.rs "$WORK/rauch/bench/src/main.rs"
    printf '%s\n' '[package]' 'name = "rauch_bench"' 'version = "0.0.0"' 'edition = "2021"' \
        'publish = false' '[dependencies]' "server = { path = \"$RAUCH/server\" }" \
        "shared = { path = \"$RAUCH/shared\" }" '[workspace]' '[profile.release]' 'lto = "fat"' \
        'codegen-units = 1' 'panic = "abort"' > "$WORK/rauch/bench/Cargo.toml"
    cp "$RAUCH/Cargo.lock" "$WORK/rauch/bench/Cargo.lock"
    (cd "$WORK/rauch/bench" && RUSTUP_TOOLCHAIN=stable RUSTFLAGS="-C target-cpu=haswell" \
        cargo build --release >&2)
    echo "rauch: gabrielrauch/rinha-2026 $(cat "$WORK/rauch/commit"); index $(stat -c %s "$WORK/rauch/blob.bin") bytes"
fi
echo "ISA: $(grep -o -m1 'avx512[a-z]*' /proc/cpuinfo | head -1 || echo 'avx2, no avx512'); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

# --- offline search ---------------------------------------------------------
if [[ ${OFFLINE:-1} == 1 ]]; then
    python3 -c "
import gzip, json, sys
for e in json.load(gzip.open(sys.argv[1]))['entries']:
    print(json.dumps(e['request'], separators=(',', ':')))" "$RINHA/test-data-6100-3m.json.gz" > "$OUT/bodies.jsonl"
    for i in $(seq "$RUNS"); do
        echo "offline $i: load $(cut -d' ' -f1 /proc/loadavg)"
        echo "  sagitta: $("$BIN" check --index "$IDX" "$RINHA/test-data-6100-3m.json.gz" --vectors "$OUT/vectors.i16" | tr '\n' ' ')"
        if [[ -n ${NELSON_INDEX:-} ]]; then
            echo "  nelson (default search): $("$WORK/nelson/search_bench" "$NELSON_INDEX" "$OUT/vectors.i16" | tr '\n' ' ')"
            echo "  nelson (SEARCH_V2=1): $(SEARCH_V2=1 "$WORK/nelson/search_bench" "$NELSON_INDEX" "$OUT/vectors.i16" | tr '\n' ' ')"
        fi
        if [[ $ENGINES == *rauch* ]]; then
            echo "  rauch: $("$WORK/rauch/bench/target/release/rauch_bench" "$WORK/rauch/blob.bin" "$OUT/bodies.jsonl" "$OUT/vectors.i16" | tr '\n' ' ')"
        fi
    done
fi

# --- the contest's load test ------------------------------------------------
memory() {  # RSS and PSS of the given processes, KiB
    local rss=0 pss=0 p
    for p in "$@"; do
        rss=$((rss + $(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
        pss=$((pss + $(awk '/^Pss:/{print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)))
    done
    echo "rss=${rss}KiB pss=${pss}KiB"
}

wait_socks() {  # paths...: until every Unix socket exists (60 s at most)
    local _p
    for _ in $(seq 600); do
        for _p in "$@"; do [[ -S $_p ]] || { sleep 0.1; continue 2; }; done
        return 0
    done
    echo "peer: sockets $* did not appear" >&2
    return 1
}

start_sagitta() {  # sched [extra serve options]
    local sched=$1 args=(--cpu 0 ${SAGITTA_ARGS:-})
    shift
    [[ $sched == fifo ]] && args+=(--rtprio 20)
    "$BIN" serve --index "$IDX" --port 9999 "${args[@]}" "$@" > "$OUT/sagitta.log" 2>&1 &
    PIDS=($!)
}

start_floor() { start_sagitta "$1" --fixed-answer; }

pin() {  # sched: the command prefix that puts a peer's process on CPU 0
    PIN=(taskset -c 0)
    [[ $1 == fifo ]] && PIN+=(chrt -f 20)
    return 0
}

start_nelson() {  # sched: its docker-compose.yml, as plain processes
    local sock="$OUT/sock" n
    pin "$1"
    rm -rf "$sock" && mkdir -p "$sock"
    PIDS=()
    for n in 1 2; do
        INDEX_PATH="$NELSON_INDEX" PORT=$((18080 + n)) FDSOCK="$sock/api$n.sock" \
            EPOLL_TIMEOUT_MS=1 WARMUP_QUERIES=5000 SPIN_US=0 EPOLL_IDLE_US=60 BUSY_POLL_US=5 \
            "${PIN[@]}" "$NELSON/c-impl/api" > "$OUT/nelson-api$n.log" 2>&1 &
        PIDS+=($!)
    done
    wait_socks "$sock/api1.sock" "$sock/api2.sock"
    DEFER_ACCEPT=1 "${PIN[@]}" "$NELSON/c-impl/lb/lbfd" --port 9999 "$sock/api1.sock" "$sock/api2.sock" \
        > "$OUT/nelson-lb.log" 2>&1 &
    PIDS+=($!)
}

start_rauch() {  # sched: its Dockerfile and Dockerfile.lb, as plain processes
    local sock="$OUT/sock" n
    pin "$1"
    rm -rf "$sock" && mkdir -p "$sock"
    PIDS=()
    for n in 1 2; do
        BLOB_PATH="$WORK/rauch/blob.bin" RINHA_FD_SOCK="$sock/api$n.sock" RINHA_THREADS=1 \
            "${PIN[@]}" "$RAUCH/target/release/server" > "$OUT/rauch-api$n.log" 2>&1 &
        PIDS+=($!)
    done
    wait_socks "$sock/api1.sock" "$sock/api2.sock"
    PORT=9999 FD_UPSTREAMS="$sock/api1.sock,$sock/api2.sock" WORKERS=2 \
        "${PIN[@]}" "$RAUCH/target/release/lb" > "$OUT/rauch-lb.log" 2>&1 &
    PIDS+=($!)
}

service_pids() {  # engine
    case $1 in
        sagitta | floor) pgrep -f "sagitta-fraud (serve|worker)" | tr '\n' ' ' ;;
        *) echo "${PIDS[@]}" ;;
    esac
}

run() {  # engine-sched round
    local engine=${1%-*} sched=${1#*-} envs=()
    [[ $sched == fifo ]] && envs=(K6_RTPRIO=10)
    "start_$engine" "$sched"
    local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
    ( sleep 100; memory $(service_pids "$engine") > "$OUT/mem-$engine" ) &
    local sampler=$!
    local line
    line=$(env "${envs[@]}" "$RINHA/harness/run.sh" 127.0.0.1:9999 "$RINHA/test-data-6100-3m.json.gz" 2>&1 \
        | grep '^requests=' || echo "requests=0 failed")
    wait "$sampler"
    kill "${PIDS[@]}" 2>/dev/null || true
    pkill -f "sagitta-fraud (serve|worker)" 2>/dev/null || true
    wait 2>/dev/null || true
    echo "round=$2 config=$1 $line load=$load0->$(cut -d' ' -f1 /proc/loadavg) $(cat "$OUT/mem-$engine")" \
        | tee -a "$OUT/load.txt"
}

[[ ${LOAD:-1} == 0 ]] && exit 0
: > "$OUT/load.txt"
for i in $(seq "$RUNS"); do
    for s in $SCHEDS; do
        for e in $ENGINES; do
            run "$e-$s" "$i"
        done
    done
done
python3 crates/sagitta-fraud/peer/table.py "$OUT/load.txt"
