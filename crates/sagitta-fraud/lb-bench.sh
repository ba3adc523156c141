#!/usr/bin/env bash
# The load balancer, measured and chosen (issue 17): the contest's own load
# test against the same two API processes behind each balancer, turns
# interleaved, everything (balancer and API processes) on CPU 0.
#
#   crates/sagitta-fraud/lb-bench.sh [ROUNDS]     (default 2)
#
#   handoff  `serve`: our balancer hands each accepted socket to an API
#            process (SCM_RIGHTS) and never touches a request again
#   haproxy  HAProxy (Debian's package), one thread, HTTP mode, keep-alive
#            to `serve --backends` Unix sockets
#   nginx    nginx (Debian's package), one worker, upstream keep-alive to
#            the same sockets
# each under the normal scheduler (cfs) and under SCHED_FIFO (fifo:
# balancer and API processes at priority 20, k6 at 10).
# Installs haproxy and nginx-light with apt when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS="${1:-2}"
RINHA="${RINHA:-../shared/rinha}"
IDX="${IDX:-$HOME/.cache/sagitta/rinha-3m}"
OUT="${OUT:-/tmp/sagitta-fraud-lb-bench}"
CONFIGS="${CONFIGS:-handoff-cfs haproxy-cfs nginx-cfs handoff-fifo haproxy-fifo nginx-fifo}"
mkdir -p "$OUT"
command -v haproxy >/dev/null && command -v nginx >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy nginx-light >&2
cargo build --release -p sagitta-fraud >&2
BIN=target/release/sagitta-fraud
[[ -f "$IDX/references.sgld" ]] || "$BIN" build "$RINHA/references.json.gz" "$IDX"
echo "ISA: $(grep -o -m1 'avx512[a-z]*' /proc/cpuinfo | head -1 || echo none); $(nproc) CPUs; $(haproxy -v | head -1); $(nginx -v 2>&1)"
SOCKS="$OUT/socks"

cat > "$OUT/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 8192
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 2s
    timeout client 60s
    timeout server 60s
frontend rinha
    bind 127.0.0.1:9999
    default_backend api
backend api
    balance roundrobin
    server api0 $SOCKS/api-0.sock
    server api1 $SOCKS/api-1.sock
CFG

cat > "$OUT/nginx.conf" <<CFG
user $(id -un);
worker_processes 1;
daemon off;
pid $OUT/nginx.pid;
error_log $OUT/nginx-error.log;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $OUT/nginx-body;
    proxy_temp_path $OUT/nginx-proxy;
    upstream api {
        server unix:$SOCKS/api-0.sock;
        server unix:$SOCKS/api-1.sock;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:9999;
        location / {
            proxy_pass http://api;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CFG

memory() {  # RSS and PSS of the given processes, KiB
    local rss=0 pss=0 p
    for p in "$@"; do
        [[ -r /proc/$p/status ]] || continue
        rss=$((rss + $(awk '/^VmRSS/{print $2}' /proc/$p/status)))
        pss=$((pss + $(awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup)))
    done
    echo "rss=${rss}KiB pss=${pss}KiB"
}

cpu_s() {  # CPU seconds (user + system) of the given processes so far
    local t=0 p
    for p in "$@"; do
        [[ -r /proc/$p/stat ]] || continue
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    awk -v t="$t" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}

run() {  # lb-sched
    local lb=${1%-*} sched=${1#*-} pin=(taskset -c 0) envs=() args=(--cpu 0)
    [[ $sched == fifo ]] && { pin+=(chrt -f 20); envs=(K6_RTPRIO=10); args+=(--rtprio 20); }
    local pids=()
    if [[ $lb == handoff ]]; then
        "$BIN" serve --index "$IDX" --port 9999 --bind 127.0.0.1 "${args[@]}" > "$OUT/serve.log" 2>&1 &
        pids+=($!)
    else
        rm -rf "$SOCKS"
        "$BIN" serve --index "$IDX" --backends "$SOCKS" "${args[@]}" > "$OUT/serve.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 300); do grep -q listening "$OUT/serve.log" && break; sleep 0.1; done
        if [[ $lb == haproxy ]]; then
            "${pin[@]}" haproxy -db -f "$OUT/haproxy.cfg" > "$OUT/haproxy.log" 2>&1 &
        else
            mkdir -p "$OUT/nginx-body" "$OUT/nginx-proxy"
            "${pin[@]}" nginx -c "$OUT/nginx.conf" > "$OUT/nginx.log" 2>&1 &
        fi
        pids+=($!)
    fi
    local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
    ( sleep "${MEM_AT:-100}"; memory $(pgrep -f "sagitta-fraud (serve|worker)") $(pgrep -x haproxy) $(pgrep -x nginx) > "$OUT/mem" ) &
    local sampler=$!
    local line; line=$(env "${envs[@]}" "$RINHA/harness/run.sh" 127.0.0.1:9999 "$RINHA/test-data-6100-3m.json.gz" 2>&1 | grep '^requests=' || true)
    wait "$sampler"
    local lbs apis
    if [[ $lb == handoff ]]; then
        lbs=$(pgrep -f "sagitta-fraud serve" || true)
    else
        lbs="$(pgrep -x haproxy || true) $(pgrep -x nginx || true)"
    fi
    apis=$(pgrep -f "sagitta-fraud worker" || true)
    local cpu="cpu: balancer $(cpu_s $lbs) s, API processes $(cpu_s $apis) s"
    kill "${pids[@]}" 2>/dev/null || true
    pkill -x haproxy 2>/dev/null || true
    pkill -x nginx 2>/dev/null || true
    pkill -f "sagitta-fraud (serve|worker)" 2>/dev/null || true
    wait 2>/dev/null || true
    echo "$1: $line load=$load0->$(cut -d' ' -f1 /proc/loadavg) $(cat "$OUT/mem") $cpu"
}

for i in $(seq "$ROUNDS"); do
    for c in $CONFIGS; do
        run "$c"
    done
done
