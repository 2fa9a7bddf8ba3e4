#!/bin/sh
# test_probe_loader: kimi-probe info / weights on tiny-k25 (the numbers of issue 2) and on broken
# copies of it: each failure is one stderr line naming the file or flag, exit 3 (checkpoint) or
# 2 (usage). Usage: test_probe_loader.sh PATH-TO-kimi-probe (run from the repository root).
probe=$1
model=tests/golden/fixtures/tiny-k25
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect CODE NEEDLE COMMAND...: exit status CODE, exactly one stderr line containing NEEDLE.
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

"$probe" info --model "$model" --json >"$tmp/info.json" || { echo "FAIL info --json"; failed=1; }
for field in '"layers":4' '"dense_layers":1' '"experts":16' '"nvfp4":156' '"kv_bytes_per_token":640' '"tp":1'; do
    grep -qF "$field" "$tmp/info.json" || { echo "FAIL info --json lacks $field"; failed=1; }
done
# tp 2 halves 8 heads, the 512-wide dense MLP, the 128-wide experts and shared expert, 2304 vocab rows
"$probe" info --model "$model" --tp 2 --json >"$tmp/info2.json" || { echo "FAIL info --tp 2 --json"; failed=1; }
grep -qF '"shards":[{"heads":[0,4],"dense_inter":[0,256],"moe_inter":[0,64],"shared_inter":[0,64],"vocab":[0,1152]' "$tmp/info2.json" &&
    grep -qF '{"heads":[4,8],"dense_inter":[256,512],"moe_inter":[64,128],"shared_inter":[64,128],"vocab":[1152,2304]' "$tmp/info2.json" ||
    { echo "FAIL info --tp 2 shard ranges"; failed=1; }
"$probe" info --model "$model" --tp 8 --mem-gib 1 >"$tmp/info.txt" || { echo "FAIL info --tp 8"; failed=1; }
grep -q "budget  *1 GiB per rank" "$tmp/info.txt" || { echo "FAIL info does not state the budget"; failed=1; }
# 1 GiB would fit 1,674,108 positions: capped at max_position_embeddings
grep -q "max context   262144 positions: max_position_embeddings (memory would fit 1674108)" "$tmp/info.txt" ||
    { echo "FAIL info --mem-gib 1 max context"; failed=1; }
# 0.01 GiB = 10,737,418 B beside 2,312,144 B of weights per rank at 640 B per position: 13,164
"$probe" info --model "$model" --tp 8 --mem-gib 0.01 | grep -q "max context   13164 positions fit" ||
    { echo "FAIL info --mem-gib 0.01 max context"; failed=1; }
grep -qF '"max_context":262144' "$tmp/info.json" || { echo "FAIL info --json max_context not capped at max_position"; failed=1; }

fresh() { rm -rf "$tmp/m"; cp -r "$model" "$tmp/m"; }

fresh
head -c 1000000 "$model/model-00003-of-00003.safetensors" >"$tmp/m/model-00003-of-00003.safetensors"
expect 3 "model-00003-of-00003.safetensors" "$probe" info --model "$tmp/m"
fresh
printf '\377\377\377\377\377\000\000\000{}' >"$tmp/m/model-00001-of-00003.safetensors"
expect 3 "runs past the end" "$probe" info --model "$tmp/m"
fresh
sed 's/"num_attention_heads": 8/"num_attention_heads": "8"/' "$model/config.json" >"$tmp/m/config.json"
expect 3 "text_config.num_attention_heads must be an integer" "$probe" info --model "$tmp/m"
fresh
sed 's/model-00002-of-00003/model-00007-of-00003/' "$model/model.safetensors.index.json" >"$tmp/m/model.safetensors.index.json"
expect 3 "model-00007-of-00003.safetensors" "$probe" weights --model "$tmp/m" --linear x --rows 0 --out "$tmp/w"
expect 3 "config.json" "$probe" info --model "$tmp/nowhere"

expect 2 "num_attention_heads" "$probe" info --model "$model" --tp 3
expect 2 "--bogus" "$probe" info --model "$model" --bogus
expect 2 "--mem-gib" "$probe" info --model "$model" --mem-gib -4
# --dcp: the cache sharded over N ranks holds N times the context in the same budget
"$probe" info --model "$model" --tp 8 --dcp 8 --mem-gib 0.01 >"$tmp/dcp.txt" || { echo "FAIL info --dcp 8"; failed=1; }
grep -q "max context   105312 positions fit" "$tmp/dcp.txt" && grep -qF "replicated    13164 positions fit by memory with the cache on every rank (dcp 1); dcp 8: 105312 (8.00x)" "$tmp/dcp.txt" &&
    grep -q "dcp 8: position p on rank p % 8 of each group of 8 ranks, 80 B per position per rank" "$tmp/dcp.txt" ||
    { echo "FAIL info --dcp 8 --mem-gib 0.01"; cat "$tmp/dcp.txt"; failed=1; }
for bad in "--tp 8 --dcp 3" "--tp 2 --dcp 4" "--dcp 0" "--dcp -1" "--dcp x" "--tp 8 --dcp 16"; do
    # shellcheck disable=SC2086
    expect 2 "--dcp" "$probe" info --model "$model" $bad
done
expect 2 "--dcp 3: must divide --tp 8" "$probe" golden --model "$model" --reference tests/golden/reference/tiny-k25 --tp 8 --dcp 3
expect 2 "--dcp 2: must divide --tp 1" "$probe" kv --model "$model" --tokens 1,2 --dcp 2 --out "$tmp/kv.f16"
expect 2 "no linear named" "$probe" weights --model "$model" --linear language_model.model.layers.9.mlp.gate_proj --rows 0 --out "$tmp/w"
expect 2 "outside [0, 512)" "$probe" weights --model "$model" --linear language_model.model.layers.0.mlp.gate_proj --rows 0,512 --out "$tmp/w"
expect 2 "--rows" "$probe" weights --model "$model" --linear language_model.model.layers.0.mlp.gate_proj --rows 1,x --out "$tmp/w"
[ ! -e "$tmp/w" ] || { echo "FAIL a refused weights command wrote its output"; failed=1; }

exit $failed
