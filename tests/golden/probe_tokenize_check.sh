#!/usr/bin/env bash
# kimi-probe tokenize on the tiny checkpoint: the texts of tokenizer_cases.jsonl in, exactly the
# reference ids out; --no-special keeps special-token text as plain text; bad input lines and
# bad flags are one-line errors with their exit codes (input 6, usage 2, model 3).
#   probe_tokenize_check.sh KIMI_PROBE
set -euo pipefail
probe=$1
here="$(cd "$(dirname "$0")" && pwd)"
model="$here/fixtures/tiny-k25" cases="$here/reference/tiny-k25/tokenizer_cases.jsonl"

python3 -c 'import json,sys; [print(json.dumps({"text": json.loads(l)["text"]})) for l in open(sys.argv[1], encoding="utf-8")]' "$cases" |
    "$probe" tokenize --model "$model" |
    python3 -c '
import json, sys
want = [json.loads(l)["ids"] for l in open(sys.argv[1], encoding="utf-8")]
got = [json.loads(l)["ids"] for l in sys.stdin]
bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
if len(got) != len(want) or bad:
    sys.exit(f"probe tokenize: {len(got)} results for {len(want)} cases, differing at {bad[:5]}")
print(f"probe tokenize: {len(got)} cases match")' "$cases"

plain=$(echo '{"text": "<|im_end|>"}' | "$probe" tokenize --model "$model" --no-special)
special=$(echo '{"text": "<|im_end|>"}' | "$probe" tokenize --model "$model")
im_end=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["added_tokens_decoder"]; print([k for k,v in d.items() if v["content"]=="<|im_end|>"][0])' "$model/tokenizer_config.json")
[[ "$special" == "{\"ids\": [$im_end]}" ]] || { echo "special text: got $special"; exit 1; }
[[ "$plain" != "$special" && "$plain" != *"$im_end"* ]] || { echo "--no-special: got $plain"; exit 1; }

expect_exit() {
    local want=$1 input=$2; shift 2
    local rc=0
    printf '%s' "$input" | "$probe" tokenize "$@" >/dev/null 2>&1 || rc=$?
    [[ $rc -eq $want ]] || { echo "tokenize $* with input '$input': exit $rc, want $want"; exit 1; }
}
expect_exit 6 'not json' --model "$model"
expect_exit 6 '{"text": 5}' --model "$model"
expect_exit 2 '' --model "$model" --bogus
expect_exit 2 '' --model "$model" --no-special yes
expect_exit 2 ''
expect_exit 3 '' --model "$here/no-such-model"
echo "probe tokenize: errors OK"
