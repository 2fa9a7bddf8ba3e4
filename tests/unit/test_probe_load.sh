#!/bin/sh
# test_probe_load: kimi-probe load on tiny-k25: the storage, load and ratio lines are there and
# agree with each other (the load's bytes are the model's weight bytes from `info --json`, the
# rates are bytes over seconds, the ratio is their quotient, all positive); bad flags are one
# usage line, exit 2. Usage: test_probe_load.sh PATH-TO-kimi-probe (from the repository root).
probe=$1
model=tests/golden/fixtures/tiny-k25
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

"$probe" info --model "$model" --json >"$tmp/info.json" || { echo "FAIL info --json"; exit 1; }
weight_bytes=$(sed -n 's/.*"weight_bytes":\([0-9]*\).*/\1/p' "$tmp/info.json")
for args in "" "--tp 2 --load-threads 1 --sample-gib 0.001 --request-mib 1"; do
    # shellcheck disable=SC2086
    if ! "$probe" load --model "$model" $args >"$tmp/out" 2>"$tmp/err"; then
        echo "FAIL: load $args"; cat "$tmp/err"; failed=1; continue
    fi
    cat "$tmp/out"
    awk -v weight_bytes="$weight_bytes" -v args="$args" '
        function fail(why) { print "FAIL (" args "): " why ": " $0; bad = 1 }
        function abs(x) { return x < 0 ? -x : x }
        # GB/s printed to 0.01 from seconds printed to 0.0001: equal within those roundings
        function rate_ok(bytes, s, gb_s) {
            return s > 0 && gb_s > 0 && abs(gb_s - bytes / s / 1e9) <= 0.005 + bytes / 1e9 * 0.00005 / (s * (s - 0.00005)) }
        # "storage: BYTES B in SECONDS s = RATE GB/s (...)", the same for "load:"
        /^storage: / {
            seen["storage"]++; storage = $8
            if (!($2 > 0) || !rate_ok($2, $5, $8)) fail("storage bytes, seconds and GB/s disagree")
            if (args != "" && $2 > 1073741.824) fail("more than --sample-gib 0.001")
            if (args == "" && $2 < weight_bytes + 0) fail("the whole checkpoint is smaller than its weights")
            if ($0 !~ /files, (O_DIRECT|buffered after posix_fadvise DONTNEED)/) fail("no read method")
        }
        /^load: / {
            seen["load"]++; load = $8
            if ($2 != weight_bytes) fail("load bytes are not the weight bytes " weight_bytes)
            if (!rate_ok($2, $5, $8)) fail("load bytes, seconds and GB/s disagree")
            if ($0 !~ /cpu backend, tp [12], [0-9]+ threads? reading; [0-9.]+% of the files in the page cache before\)$/)
                fail("load details")
        }
        /^ratio: / { seen["ratio"]++; ratio = $2; if (!(ratio > 0)) fail("ratio not positive") }
        END {
            if (seen["storage"] != 1 || seen["load"] != 1 || seen["ratio"] != 1) {
                print "FAIL (" args "): want one storage, one load and one ratio line"; exit 1 }
            # the ratio from unrounded rates; the printed ones are off by up to 0.005 each
            if (!bad && abs(ratio - load / storage) > 0.0005 + ratio * (0.005 / load + 0.005 / storage)) {
                print "FAIL (" args "): ratio " ratio " is not load / storage = " load / storage; bad = 1 }
            exit bad
        }' "$tmp/out" || failed=1
done

# expect NEEDLE ARGS...: exit 2, one stderr line containing NEEDLE
expect() {
    needle=$1
    shift
    "$probe" load "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF -- "$needle" "$tmp/err"; then
        echo "FAIL (exit $rc, want 2, '$needle'): load $*"; cat "$tmp/err"; failed=1
    else
        echo "ok   2 $(cat "$tmp/err")"
    fi
}
expect "--sample-gib 0: must be more than 0" --model "$model" --sample-gib 0
expect "--request-mib" --model "$model" --request-mib 0
expect "--load-threads" --model "$model" --load-threads 300
expect "--model" --sample-gib 1
expect "--frobnicate" --model "$model" --frobnicate 1
exit $failed
