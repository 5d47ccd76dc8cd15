#!/usr/bin/env bash
# Writes scripts/switchyard.order.gz: the functions the bridge runs, as lld's --symbol-ordering-file, so that
# `make release` lays them out together at the start of the code. The kernel maps code around every page
# the bridge touches (fault-around), so code the bridge runs spread among code it never runs keeps the
# latter resident too.
#
# The list comes from valgrind's callgrind (the functions entered, not sampled) on a stripped copy of the
# release binaries in two runs: the bench's memory scenario at a small size (virtual devices, HA mirror,
# command churn) and `switchyard-sim demo` (every adapter against the simulators; the bridge's functions
# have the same names in both executables) with every command it suggests. The simulators' own code is
# left out (not the server library they share with the console: the console runs that code too). Stale
# names (after a refactor) are ignored by the linker; rerun this after larger changes: `make symbol-order`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build/static/release/switchyard}
BENCH=${2:-.build/release/switchyard-bench}
SIM=${3:-.build/static/release/switchyard-sim}
work=$(mktemp -d /tmp/symbol-order.XXXXXX)
trap 'pkill -f "mosquitto -c $work/" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

cp "$BIN" "$work/sy" && strip --strip-debug "$work/sy"   # valgrind cannot read the Swift debug info
cp "$SIM" "$work/sim" && strip --strip-debug "$work/sim"
printf '#!/bin/sh\nexec valgrind -q --tool=callgrind --callgrind-out-file=%s/cg.bench.%%p %s/sy "$@"\n' "$work" "$work" > "$work/sy-cg"
chmod +x "$work/sy-cg"
echo "symbol-order: profiling the memory scenario under callgrind (about a minute)"
SWITCHYARD_BIN="$work/sy-cg" "$BENCH" --scenario memory --devices 100 --ha-entities 300 --churn-seconds 8 > "$work/bench.out"

port=$(( 20000 + RANDOM % 20000 ))
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$port" > "$work/mosquitto.conf"
mosquitto -c "$work/mosquitto.conf" -d
sleep 0.5
echo "symbol-order: profiling switchyard-sim demo under callgrind (about a minute)"
valgrind -q --tool=callgrind --callgrind-out-file="$work/cg.demo" "$work/sim" demo --host 127.0.0.1 --port "$port" > "$work/demo.out" 2>&1 &
demo=$!
for _ in $(seq 120); do grep -q mosquitto_pub "$work/demo.out" && break; sleep 1; done   # slow under callgrind
sleep 20
# Every command the demo suggests, the rejected ones included.
grep -E '^ +mosquitto_pub' "$work/demo.out" | sed -E 's/ {2,}# .*$//' | while read -r line; do eval "$line -q 1" || true; done
sleep 10
kill -INT "$demo"; wait "$demo" || true

cat "$work"/cg.* | sed -n -E 's/^c?fn=\([0-9]+\) (.+)$/\1/p' \
    | grep -v -E '^(0x|\$s([0-9]+[A-Za-z]+Simulators|16SimulatorSupport|15switchyard_bench|14switchyard_sim))' \
    | awk '!seen[$0]++' > "$work/switchyard.order"
gzip -9n < "$work/switchyard.order" > scripts/switchyard.order.gz
echo "symbol-order: $(wc -l < "$work/switchyard.order") functions in scripts/switchyard.order.gz"
