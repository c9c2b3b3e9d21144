#!/usr/bin/env bash
# Reproduces docs/performance.md: makes the benchmark models with `ubatch synth` (once, into
# $MODELS, default /tmp/ubatch-models), then runs the llama-bench, llama-batched-bench and serving
# shapes of shared/perf/README.md. Takes ~15 minutes on 2 cores. Usage: scripts/bench.sh [section...]
# with sections: single batched serve (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-/tmp/ubatch-models}
mkdir -p "$MODELS"
go build -o "$MODELS/ubatch" ./cmd/ubatch
U="$MODELS/ubatch"

model() { # shape type
  local f="$MODELS/$1-$2.gguf"
  [ -f "$f" ] || "$U" synth --shape "$1" --type "$2" -o "$f" >&2
  echo "$f"
}

sections=${*:-single batched serve}
for s in $sections; do
  case $s in
  single)
    for m in tinyllama:q4_0 tinyllama:q8_0 tinyllama:q4_k_m small:q8_0; do
      f=$(model "${m%%:*}" "${m##*:}")
      echo "== ubatch bench -m $f -p 128 -n 32 -r 3"
      "$U" bench -m "$f" -p 128 -n 32 -r 3 2>/dev/null
    done
    ;;
  batched)
    for m in tinyllama:q4_0 small:q8_0; do
      f=$(model "${m%%:*}" "${m##*:}")
      echo "== ubatch bench --batched -m $f -npp 128 -ntg 32 -npl 1,2,4,8,16"
      "$U" bench --batched -m "$f" -npp 128 -ntg 32 -npl 1,2,4,8,16 2>/dev/null
    done
    ;;
  serve)
    f=$(model small q8_0)
    # The defaults (latency first), then a throughput-oriented step size.
    for cfg in "" "--batch-size 512 --chunk-size 256 --policy fcfs"; do
      for w in shared mixed; do
        "$U" serve -m "$f" --port 18123 -c 16384 -np 16 $cfg >"$MODELS/serve-$w.log" 2>&1 &
        pid=$!
        for _ in $(seq 50); do curl -fs localhost:18123/health >/dev/null 2>&1 && break; sleep 0.2; done
        echo "== ubatch bench serve --url http://127.0.0.1:18123 --workload $w -n 64 --clients 16 (server: ubatch serve -m $f -c 16384 -np 16 $cfg)"
        "$U" bench serve --url http://127.0.0.1:18123 --workload "$w" -n 64 --clients 16 2>/dev/null
        kill $pid; wait $pid 2>/dev/null || true
      done
    done
    ;;
  *) echo "unknown section $s" >&2; exit 2 ;;
  esac
done
