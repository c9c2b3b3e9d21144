# Shared by the scripts that start processes (fleet-bench.sh, peer-ttft.sh, fleet-up.sh): source
# it after `cd` to the repository and setting DIR. It builds ubatch into $DIR/ubatch ($U; with
# UBATCH_BIN set, that binary instead), kills every process whose pid is in pids on exit, and
# defines wait_up URL [TRIES] (poll every 0.1 s until the URL answers, 100 tries by default).
mkdir -p "$DIR"
if [ -n "${UBATCH_BIN:-}" ]; then
  U="$UBATCH_BIN"
else
  go build -o "$DIR/ubatch" ./cmd/ubatch
  U="$DIR/ubatch"
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_up() { for _ in $(seq "${2:-100}"); do curl -sf "$1" >/dev/null && return; sleep 0.1; done; echo "$1 not up" >&2; exit 1; }
