#!/bin/bash
# TTFT of one long prompt, cold and then served from the KV disk tier after a restart.
# usage: scripts/kv-disk-ttft.sh [MODEL.gguf] [ROUNDS]
# Builds ubatch, then per round: an empty --kv-disk directory, serve, one streamed /completion
# of an ~890-token prompt (time to the first content event, as the client sees it), SIGTERM
# (the prefix cache is written out), serve again on the same directory, the same request.
set -euo pipefail
MODEL=${1:-../shared/models/synth-tiny-f16.gguf}
ROUNDS=${2:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
go build -o "$WORK/ubatch" ./cmd/ubatch
python3 - "$WORK/p.json" <<'PY'
import json, sys
p = ' '.join('Once upon a time there was a little girl named Lily who liked to play %d.' % i for i in range(45))
json.dump({'prompt': p, 'n_predict': 16, 'temperature': 0, 'stream': True}, open(sys.argv[1], 'w'))
PY
once() {
  local port
  port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
  "$WORK/ubatch" serve -m "$MODEL" --port "$port" -c 4096 -np 2 --kv-disk "$WORK/kv" >"$WORK/log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do curl -s "localhost:$port/health" >/dev/null && break; sleep 0.1; done
  python3 - "$port" "$WORK/p.json" "$1" <<'PY'
import json, sys, time, http.client
port, body, what = int(sys.argv[1]), open(sys.argv[2]).read(), sys.argv[3]
c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
t0 = time.perf_counter()
c.request('POST', '/completion', body, {'Content-Type': 'application/json'})
ttft, text, last = None, '', None
for line in c.getresponse():
    line = line.decode().strip()
    if not line.startswith('data:'):
        continue
    d = json.loads(line[5:])
    if ttft is None and d.get('content'):
        ttft = time.perf_counter() - t0
    text += d.get('content', '')
    if d.get('stop'):
        last = d
print('%-5s ttft_ms %7.1f cache_n %4d prompt_n %4d text %r' % (what, ttft * 1000, last['timings']['cache_n'], last['timings']['prompt_n'], text[:40]))
PY
  kill -TERM "$pid"
  wait "$pid" || true
}
lscpu | grep 'Model name' || true
uptime
for _ in $(seq "$ROUNDS"); do
  rm -rf "$WORK/kv"
  once cold
  once disk
done
