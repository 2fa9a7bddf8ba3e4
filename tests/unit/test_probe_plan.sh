#!/bin/sh
# test_probe_plan: kimi-probe plan (the CUDA memory plan over devices given on the command line)
# on tiny-k25: the largest context is what the tightest device holds after its ranks' weights,
# workspaces and the reserve, recomputed here from the plan's own per-rank numbers; the device
# rules are usage errors (exit 2) of one line naming the flag. Usage: test_probe_plan.sh
# PATH-TO-kimi-probe (run from the repository root).
probe=$1
model=tests/golden/fixtures/tiny-k25
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect CODE NEEDLE COMMAND...: exit status CODE, one stderr line containing NEEDLE.
expect() {
    code=$1 needle=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$code" ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF -- "$needle" "$tmp/err"; then
        echo "FAIL (exit $rc, want $code, '$needle'): $*"
        cat "$tmp/err"
        failed=1
    else
        echo "ok   $code $(cat "$tmp/err")"
    fi
}

# check_plan FREE_GIB... -- PLAN ARGS: the JSON plan's context is the tightest device's fit
check_plan() {
    "$probe" plan --model "$model" --json "$@" >"$tmp/plan.json" || { echo "FAIL plan $*"; failed=1; return; }
    python3 - "$tmp/plan.json" "$*" <<'PY' || failed=1
import json, sys
p = json.load(open(sys.argv[1]))
fits = {}
for d in set(p["devices"]):
    ranks = [r for r, dev in enumerate(p["devices"]) if dev == d]
    free = p["free_bytes"][ranks[0]]
    fixed = p["reserve_bytes"] + sum(p["rank_weight_bytes"][r] + p["rank_workspace_bytes"][r] for r in ranks)
    fits[d] = max(0, (free - fixed) // (len(ranks) * p["cache_bytes_per_position"]))
order = list(dict.fromkeys(p["devices"]))      # devices by their first rank: ties go to the first
tightest = min(order, key=lambda d: fits[d])
want = min(fits[tightest], p["max_position"])
ok = p["max_context_by_memory"] == fits[tightest] and p["max_context"] == want and p["tightest_device"] == tightest
print(("ok  " if ok else "FAIL") + " plan %s: context %d on device %d (recomputed %d on %d)"
      % (sys.argv[2], p["max_context"], p["tightest_device"], want, tightest))
sys.exit(0 if ok else 1)
PY
}

check_plan --tp 2 --device-memory 0.6
check_plan --tp 8 --device-memory 0.7 --devices 0
check_plan --tp 4 --device-memory 0.6 --devices 3,1,2,0
check_plan --tp 1 --device-memory 0.6
"$probe" plan --model "$model" --tp 2 --device-memory 0.6 >"$tmp/human" || { echo "FAIL plan (text)"; failed=1; }
grep -q "^max context" "$tmp/human" || { echo "FAIL plan (text) has no max context line"; failed=1; }

expect 2 "--tp 8 needs 8 devices, 2 visible; --devices 0 runs all 8 ranks on device 0" \
    "$probe" plan --model "$model" --tp 8 --device-memory 0.6,0.6
expect 2 "--devices 0,1: device 1 has" "$probe" plan --model "$model" --tp 2 --device-memory 0.6,0.7
expect 2 "--devices 0,1,1,2: device 1 is listed twice" \
    "$probe" plan --model "$model" --tp 4 --device-memory 0.6 --devices 0,1,1,2
expect 2 "--devices 0,5: device 5 is not visible" "$probe" plan --model "$model" --tp 2 --device-memory 0.6,0.6 --devices 0,5
expect 2 "--devices 0,1,2: 3 devices for --tp 8" "$probe" plan --model "$model" --tp 8 --device-memory 0.6 --devices 0,1,2
expect 2 "--devices 0,x: not a list of device ordinals" "$probe" plan --model "$model" --tp 2 --device-memory 0.6 --devices 0,x
expect 2 "--device-memory 0.6,,: not a list of sizes" "$probe" plan --model "$model" --tp 2 --device-memory 0.6,,
expect 2 "--tp 3" "$probe" plan --model "$model" --tp 3 --device-memory 0.6
expect 5 "device 0: the weights and workspace of its 8 ranks" \
    "$probe" plan --model "$model" --tp 8 --device-memory 0.52 --devices 0
exit $failed
