#!/usr/bin/env bash
# TTFT of a prompt a peer holds (issue 20, peers): nodes A and B share a Redis; C is the same
# node without a fleet. For each of R fresh 900-token prompts: A computes it, then B serves it
# (fetching A's KV blocks) and C computes it. TTFT is the wall time of a max_tokens=1 completion
# (curl's time_total on loopback), so it includes B's Redis lookup and fetch.
# Usage: scripts/peer-ttft.sh  (env: MODEL, R=9, LEN=900, THREADS=1, CTX=4096, BASE=18200)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DIR:-/tmp/ubatch-peer-ttft}
MODEL=${MODEL:-../shared/models/stories260K.gguf}
R=${R:-9} LEN=${LEN:-900} THREADS=${THREADS:-1} CTX=${CTX:-4096} BASE=${BASE:-18200}
. scripts/lib.sh

redis-server --port $((BASE + 9)) --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" --loglevel warning >"$DIR/redis.log" 2>&1 &
pids+=($!)
REDIS=redis://127.0.0.1:$((BASE + 9))
common=(-m "$MODEL" -c "$CTX" -np 2 -t "$THREADS")
"$U" serve "${common[@]}" --port $((BASE + 1)) --redis "$REDIS" --node-id a >"$DIR/a.log" 2>&1 &
pids+=($!)
"$U" serve "${common[@]}" --port $((BASE + 2)) --redis "$REDIS" --node-id b >"$DIR/b.log" 2>&1 &
pids+=($!)
"$U" serve "${common[@]}" --port $((BASE + 3)) >"$DIR/c.log" 2>&1 &
pids+=($!)
for i in 1 2 3; do wait_up "http://127.0.0.1:$((BASE + i))/health" 200; done
sleep 1.5 # B's peer list is read every second

body() { # seed: a completion body of LEN token ids (BOS, then ids from the seed)
  python3 -c "import json,random,sys; r=random.Random(int(sys.argv[1])); print(json.dumps({'prompt':[1]+[r.randrange(3,500) for _ in range($LEN-1)],'max_tokens':1,'temperature':0}))" "$1"
}
ttft() { curl -sf -o "$DIR/last.json" -w '%{time_total}' -H 'Content-Type: application/json' -d @"$2" "http://127.0.0.1:$1/v1/completions"; }
cached() { python3 -c "import json; print(json.load(open('$DIR/last.json'))['usage']['prompt_tokens_details']['cached_tokens'])"; }

# Warm every node up (first-request allocations) with a prompt no later one shares.
body 999999 >"$DIR/warm.json"
for i in 1 2 3; do ttft $((BASE + i)) "$DIR/warm.json" >/dev/null; done

printf '%-6s %-12s %-12s %-12s %s\n' run a_compute b_peer c_compute b_cached
bs=() cs=()
for i in $(seq "$R"); do
  body "$i" >"$DIR/p.json"
  a=$(ttft $((BASE + 1)) "$DIR/p.json")
  sleep 0.3 # A's publisher writes its new blocks every 100 ms
  b=$(ttft $((BASE + 2)) "$DIR/p.json"); bc=$(cached)
  c=$(ttft $((BASE + 3)) "$DIR/p.json")
  printf '%-6s %-12s %-12s %-12s %s\n' "$i" "$a" "$b" "$c" "$bc"
  bs+=("$b") cs+=("$c")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
mb=$(median "${bs[@]}") mc=$(median "${cs[@]}")
echo "median TTFT: b (peer) ${mb}s, c (compute) ${mc}s, ratio $(python3 -c "print(round($mb/$mc, 3))")"
curl -s "http://127.0.0.1:$((BASE + 2))/metrics" | grep -E '^ubatch_peer_(fetches|fetched_blocks|fetch_failures)_total' || true
