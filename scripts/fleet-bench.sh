#!/usr/bin/env bash
# The fleet benchmark of docs/performance-history.md: three `ubatch serve` nodes on this machine, the
# tenants workload (K tenants with their own long system prompt, interleaved at random) sent by
# C clients through `ubatch route` (prefix-aware) and then through nginx round-robin to the same
# nodes, each run starting from cold nodes. Needs redis-server and nginx (Debian packages).
# Usage: scripts/fleet-bench.sh  (env: MODEL, N=480, C=48, K=8, CTX=8192, NP=32, THREADS=1, WORDS=300,
# ROUTE_FLAGS for extra `ubatch route` flags)
# NP=32: a node may run more than its third of the C=48 clients, so sequence slots do not cap the
# node that holds 3 of 8 tenants (3/8 of the traffic); what caps it is its KV cache, which is what
# routing is about. (With NP=16 the slots equal the clients and any imbalance queues.)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DIR:-/tmp/ubatch-fleet-bench}
MODEL=${MODEL:-../shared/models/stories260K.gguf}
N=${N:-480} C=${C:-48} K=${K:-8} CTX=${CTX:-8192} NP=${NP:-32} THREADS=${THREADS:-1} WORDS=${WORDS:-300}
BASE=${BASE:-18100} # router BASE, nodes BASE+1.., nginx BASE+10, redis BASE+20
. scripts/lib.sh

redis-server --port $((BASE + 20)) --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" --loglevel warning \
  >"$DIR/redis.log" 2>&1 &
pids+=($!)
REDIS=redis://127.0.0.1:$((BASE + 20))

node_pids=()
start_nodes() {
  node_pids=()
  for i in 1 2 3; do
    "$U" serve -m "$MODEL" --port $((BASE + i)) -c "$CTX" -np "$NP" -t "$THREADS" --redis "$REDIS" --node-id "n$i" --trusted-proxies 127.0.0.1 \
      >"$DIR/node$i.log" 2>&1 &
    node_pids+=($!)
  done
  for i in 1 2 3; do wait_up "http://127.0.0.1:$((BASE + i))/health"; done
}
stop_nodes() { for p in "${node_pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done; }
NODES=http://127.0.0.1:$((BASE + 1)),http://127.0.0.1:$((BASE + 2)),http://127.0.0.1:$((BASE + 3))

"$U" route -m "$MODEL" --redis "$REDIS" --nodes "$NODES" --port "$BASE" ${ROUTE_FLAGS:-} >"$DIR/router.log" 2>&1 &
pids+=($!)

# nginx round-robin straight to the nodes: deploy/nginx.conf with the nodes as its upstream.
sed -e "s|server 127.0.0.1:8000;|server 127.0.0.1:$((BASE + 1)); server 127.0.0.1:$((BASE + 2)); server 127.0.0.1:$((BASE + 3));|" \
  -e "s|listen 8088;|listen 127.0.0.1:$((BASE + 10));|" \
  -e "s|limit_conn ubatch_per_client 64;|limit_conn ubatch_per_client 256;|" \
  -e "s|http {|http { client_body_temp_path $DIR/body; proxy_temp_path $DIR/proxy; fastcgi_temp_path $DIR/fcgi; uwsgi_temp_path $DIR/uwsgi; scgi_temp_path $DIR/scgi;|" \
  deploy/nginx.conf >"$DIR/nginx-rr.conf"
nginx -p "$DIR" -c "$DIR/nginx-rr.conf" -g "daemon off; pid $DIR/nginx.pid;" >"$DIR/nginx.log" 2>&1 &
pids+=($!)

run() { # name url
  start_nodes
  wait_up "http://127.0.0.1:$BASE/health"
  sleep 2 # the router sees the restarted nodes healthy again
  echo "== $1: ubatch bench serve --url $2 --workload tenants --tenants $K --system-words $WORDS -n $N --clients $C"
  "$U" bench serve --url "$2" --workload tenants --tenants "$K" --system-words "$WORDS" -n "$N" --clients "$C" --json \
    >"$DIR/$1.json" 2>"$DIR/$1.err" || true
  python3 - "$DIR/$1.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ms = lambda ns: ns / 1e6
print(f"  requests {r['requests']} errors {r['errors']} rejected {r['rejected']}  output {r['output_tokens_per_sec']:.1f} tok/s"
      f"  prefix hit rate {r['prefix_hit_rate']:.3f}  TTFT p50 {ms(r['ttft']['p50_ns']):.0f} ms p99 {ms(r['ttft']['p99_ns']):.0f} ms"
      f"  inter-token p50 {ms(r['inter_token']['p50_ns']):.1f} ms p99 {ms(r['inter_token']['p99_ns']):.1f} ms")
PY
  for i in 1 2 3; do # per node: prompt tokens, cached ones, preemptions, mean queue wait and TTFT
    curl -s "http://127.0.0.1:$((BASE + i))/metrics" |
      awk -v n="node$i" '/^ubatch_prompt_tokens_total /{p=$2} /^ubatch_prefix_cache_hit_tokens_total /{h=$2}
        /^ubatch_preemptions_total /{q=$2} /^ubatch_queue_wait_seconds_sum /{ws=$2} /^ubatch_queue_wait_seconds_count /{wc=$2}
        /^ubatch_time_to_first_token_seconds_sum /{ts=$2} /^ubatch_time_to_first_token_seconds_count /{tc=$2}
        END{printf "  %s: prompt tokens %d, cached %d (%.3f), preemptions %d, requests %d, mean queue wait %.0f ms, mean TTFT %.0f ms\n",
          n, p, h, (p>0?h/p:0), q, tc, (wc>0?1000*ws/wc:0), (tc>0?1000*ts/tc:0)}'
  done
  stop_nodes
}
run router "http://127.0.0.1:$BASE"
run nginx-rr "http://127.0.0.1:$((BASE + 10))"
curl -s "http://127.0.0.1:$BASE/metrics" | grep -E '^ubatch_route_(decisions_total|prefix_hit_ratio)' || true
