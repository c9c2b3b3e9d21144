#!/usr/bin/env bash
# A whole local fleet on consecutive ports from BASEPORT, as docs/deploy.md describes it:
#   BASEPORT     nginx (deploy/nginx.conf): the entry point, the page, /v1/..., /live
#   BASEPORT+1   ubatch route
#   BASEPORT+2   ubatch serve, node n1     BASEPORT+3   node n2
#   BASEPORT+4   redis-server              BASEPORT+5   prometheus (deploy/prometheus.yml, alerts.yml)
# Everything lives in a temporary folder (configs rendered from deploy/ with these ports,
# nginx's pid and temporary files, Prometheus' data, one log per process, $UBATCH_HOME with the
# demo model); it prints the URLs and stops every process on Ctrl-C (or when one of them exits),
# then removes the folder (kept when something failed, for its logs).
# Usage: scripts/fleet-up.sh BASEPORT   (env: MODEL, default the demo model; THREADS=1 per node;
#        UBATCH_BIN: a ubatch binary instead of building one; DIR: the folder)
# Needs redis-server, nginx and prometheus (Debian: apt-get install redis-server nginx prometheus).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:-}
if ! [[ $BASE =~ ^[0-9]+$ ]] || [ "$BASE" -lt 1024 ] || [ "$BASE" -gt 65530 ]; then
  echo "usage: scripts/fleet-up.sh BASEPORT (1024-65530; the fleet takes BASEPORT..BASEPORT+5)" >&2
  exit 2
fi
for tool in redis-server nginx prometheus curl; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install $tool)" >&2; exit 1; }
done
for p in $(seq "$BASE" $((BASE + 5))); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "port $p is in use: choose another BASEPORT" >&2
    exit 1
  fi
done
NGINX=$BASE ROUTER=$((BASE + 1)) N1=$((BASE + 2)) N2=$((BASE + 3)) REDIS=$((BASE + 4)) PROM=$((BASE + 5))
DIR=${DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ubatch-fleet.XXXXXX")}
THREADS=${THREADS:-1}
. scripts/lib.sh
failed=1
finish() {
  cleanup
  if [ "$failed" = 0 ]; then rm -rf "$DIR"; else echo "fleet: logs kept in $DIR" >&2; fi
}
trap finish EXIT
trap 'failed=0; echo; echo "fleet: stopping"; exit 0' INT TERM

# Without MODEL every process takes the demo model from an $UBATCH_HOME of its own (so a
# library in ~/.cache/ubatch does not turn the nodes into servers of several models).
export UBATCH_HOME="$DIR/home"
model=()
if [ -n "${MODEL:-}" ]; then model=(-m "$MODEL"); fi

render() { # FILE OLD NEW...: FILE with each OLD (which must occur once) replaced by its NEW
  local text old
  text=$(<"$1")
  shift
  while [ $# -gt 0 ]; do
    old=$1
    if [ "$(grep -cF -- "$old" <<<"$text")" != 1 ]; then
      echo "fleet-up.sh: \"$old\" should occur once in the file it renders" >&2
      exit 1
    fi
    text=${text/"$old"/"$2"}
    shift 2
  done
  printf '%s\n' "$text"
}

mkdir -p "$DIR/nginx/logs" "$DIR/targets"
temp=""
for k in client_body proxy fastcgi uwsgi scgi; do temp+="    ${k}_temp_path $DIR/nginx/$k;"$'\n'; done
render deploy/nginx.conf "listen 8088;" "listen 127.0.0.1:$NGINX;" "server 127.0.0.1:8000;" "server 127.0.0.1:$ROUTER;" \
  "http {" "http {"$'\n'"$temp" >"$DIR/nginx.conf"
cp deploy/prometheus.yml deploy/alerts.yml "$DIR/"
echo "[{\"targets\": [\"127.0.0.1:$N1\", \"127.0.0.1:$N2\"], \"labels\": {\"fleet\": \"local\"}}]" >"$DIR/targets/nodes.json"
echo "[{\"targets\": [\"127.0.0.1:$ROUTER\"], \"labels\": {\"fleet\": \"local\"}}]" >"$DIR/targets/routers.json"

redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >"$DIR/redis.log" 2>&1 &
pids+=($!)
for i in 1 2; do
  port=$((BASE + 1 + i))
  "$U" serve "${model[@]}" --port "$port" -t "$THREADS" --redis "redis://127.0.0.1:$REDIS" --node-id "n$i" \
    --trusted-proxies 127.0.0.1 >"$DIR/n$i.log" 2>&1 &
  pids+=($!)
done
for port in "$N1" "$N2"; do wait_up "http://127.0.0.1:$port/health" 600; done
"$U" route "${model[@]}" --port "$ROUTER" --redis "redis://127.0.0.1:$REDIS" \
  --nodes "http://127.0.0.1:$N1,http://127.0.0.1:$N2" >"$DIR/router.log" 2>&1 &
pids+=($!)
nginx -p "$DIR/nginx/" -c "$DIR/nginx.conf" -g "daemon off; pid $DIR/nginx/nginx.pid;" >"$DIR/nginx.log" 2>&1 &
pids+=($!)
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/prometheus" \
  --web.listen-address="127.0.0.1:$PROM" >"$DIR/prometheus.log" 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$ROUTER/health" 300
wait_up "http://127.0.0.1:$NGINX/health" 300
wait_up "http://127.0.0.1:$PROM/-/ready" 300

cat <<END
fleet: up under $DIR (a log per process there); Ctrl-C stops it all
  nginx       http://127.0.0.1:$NGINX   the entry point: the page, /v1/..., /live
  router      http://127.0.0.1:$ROUTER
  node n1     http://127.0.0.1:$N1
  node n2     http://127.0.0.1:$N2
  redis       redis://127.0.0.1:$REDIS
  prometheus  http://127.0.0.1:$PROM
  pids        ${pids[*]}
try: curl -s http://127.0.0.1:$NGINX/v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 32}'
END
# Until Ctrl-C (the INT trap), or until one of the processes exits, which stops the others.
set +e
wait -n "${pids[@]}"
echo "fleet: a process exited (see its log in $DIR); stopping the others" >&2
exit 1
