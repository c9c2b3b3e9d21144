#!/usr/bin/env bash
# Checks the hand-encoded AVX-VNNI kernels (quant/packed_avxvnni_amd64.s), which no CPU here may
# run: in the quant test binary, each q*PanelAVXVNNI function must contain only VEX instructions
# (no EVEX prefix 0x62, no Y16-Y31, no mask registers), and its {vex} vpdpbusd operands must equal,
# in order, those of its EVEX-encoded twin q*PanelAVXVNNIEvex, which the tests run on AVX-512 VNNI
# CPUs. Needs binutils' objdump. Usage: scripts/check-avxvnni.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/quant.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./quant

dis() { # symbol
  local a
  a=$(go tool nm -size "$bin" | awk -v n="ubatch/quant.$1.abi0" '$4==n {print $1, $2}')
  [ -n "$a" ] || { echo "no symbol $1" >&2; exit 1; }
  set -- $a
  objdump -d "$bin" --start-address=0x"$1" --stop-address="$(printf '0x%x' $((0x$1 + $2)))"
}

for f in q8PanelAVXVNNI q4PanelAVXVNNI; do
  vex=$(dis "$f")
  twin=$(dis "${f}Evex")
  if grep -qP '^\s+[0-9a-f]+:\s+62 ' <<<"$vex" || grep -qE 'ymm(1[6-9]|2[0-9]|3[01])|%k[0-7]' <<<"$vex"; then
    echo "$f: uses AVX-512 encodings or registers" >&2
    exit 1
  fi
  ops() { grep vpdpbusd | sed -E 's/.*vpdpbusd +//'; }
  n=$(grep -c '{vex} vpdpbusd' <<<"$vex" || true)
  if [ "$n" -eq 0 ] || ! diff <(ops <<<"$vex") <(ops <<<"$twin") >/dev/null; then
    echo "$f: {vex} vpdpbusd operands differ from ${f}Evex" >&2
    exit 1
  fi
  echo "$f: $n {vex} vpdpbusd, operands as in ${f}Evex, no AVX-512 encodings"
done
