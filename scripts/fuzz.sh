#!/bin/sh
# Runs every fuzz target (Sources/SwitchyardFuzz) under libFuzzer with AddressSanitizer for
# FUZZ_SECONDS seconds each (default 60), starting from the stored corpus in Tests/Fuzz/corpus/<target>.
# New interesting inputs go to .build/fuzz-corpus/<target>; a crash is written to
# .build/fuzz-crashes/<target>-crash-<sha1> and the script exits non-zero after the remaining targets.
# Reproduce one with: .build/debug/switchyard-fuzz <target> <file>. Usage: scripts/fuzz.sh [target…]
set -u
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
# Crashes are reported by ASan and libFuzzer (with the input kept), not by the Swift runtime's backtracer.
export SWIFT_BACKTRACE=enable=no
scratch=.build/fuzz
# -sanitize=fuzzer would link libFuzzer's own main, which clashes with the entry point SwiftPM gives an
# executable: the same instrumentation, and libFuzzer without its main (the program calls its driver).
lib=$(dirname "$(dirname "$(command -v swiftc)")")/lib/clang
nomain=$(find "$lib" -name 'libclang_rt.fuzzer_no_main-x86_64.a' 2>/dev/null | head -1)
[ -n "$nomain" ] || { echo "fuzz: this Swift toolchain has no libFuzzer (libclang_rt.fuzzer_no_main)" >&2; exit 2; }
swift build -c release --product switchyard-fuzz --scratch-path "$scratch" \
    -Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,trace-cmp,inline-8bit-counters,pc-table \
    -Xswiftc -DFUZZING -Xlinker "$nomain" || exit 2
bin=$scratch/release/switchyard-fuzz
targets=${*:-$(ls Tests/Fuzz/corpus)}
mkdir -p .build/fuzz-crashes
failed=""
for t in $targets; do
    mkdir -p ".build/fuzz-corpus/$t"
    echo "== $t ($seconds s)"
    if ! FUZZ_TARGET=$t "$bin" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix=".build/fuzz-crashes/$t-" ".build/fuzz-corpus/$t" "Tests/Fuzz/corpus/$t" 2>".build/fuzz-crashes/$t.log"; then
        failed="$failed $t"
        grep -a -E "^(==|SUMMARY|.*Precondition|.*Fatal error|artifact_prefix)" ".build/fuzz-crashes/$t.log" | head -5
    fi
    grep -a -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" ".build/fuzz-crashes/$t.log" | tail -2
done
[ -z "$failed" ] || { echo "fuzz: crashes in:$failed (inputs in .build/fuzz-crashes/)"; exit 1; }
echo "fuzz: no crash in $(echo $targets | wc -w) targets, $seconds s each"
