#!/usr/bin/env bash
# Golden tokenizer conformance on a checkpoint with another vocabulary size: copies tiny-k25's
# tokenizer with SHIFT extra base tokens (byte pairs from 0xF8-0xFF, which valid UTF-8 never
# contains, so no text encodes differently) and every special id moved up by SHIFT, derives the
# expected ids of tokenizer_cases.jsonl by the same shift, and runs
# `kimi-probe golden --only tokenizer` on it: special ids must be found by name.
#   tokenizer_vocab_variant.sh KIMI_PROBE WORK_DIR SHIFT
set -euo pipefail

if [[ $# -ne 3 ]]; then
    echo "usage: $0 KIMI_PROBE WORK_DIR SHIFT" >&2
    exit 2
fi
probe=$1 work=$2 shift_by=$3
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "${work:?}"
mkdir -p "$work/model" "$work/reference"

python3 - "$here/fixtures/tiny-k25" "$here/reference/tiny-k25" "$work" "$shift_by" <<'PY'
import base64, json, sys
fixture, reference, work, shift = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lines = open(f"{fixture}/tiktoken.model").read().splitlines()
n_base = len(lines)
if not 0 < shift <= 64:
    sys.exit("SHIFT must be in 1..64")
with open(f"{work}/model/tiktoken.model", "w") as f:
    f.write("".join(line + "\n" for line in lines))
    for i in range(shift):
        f.write(f"{base64.b64encode(bytes([0xF8 + i // 8, 0xF8 + i % 8])).decode()} {n_base + i}\n")
def moved(i):
    return i + shift if i >= n_base else i
cfg = json.load(open(f"{fixture}/config.json"))
for section in (cfg, cfg.get("text_config", {})):
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "media_placeholder_token_id"):
        if isinstance(section.get(key), int):
            section[key] = moved(section[key])
    if "vocab_size" in section:
        section["vocab_size"] += shift
json.dump(cfg, open(f"{work}/model/config.json", "w"), indent=2)
tok = json.load(open(f"{fixture}/tokenizer_config.json"))
tok["added_tokens_decoder"] = {str(moved(int(k))): v for k, v in tok["added_tokens_decoder"].items()}
json.dump(tok, open(f"{work}/model/tokenizer_config.json", "w"), indent=2)
with open(f"{work}/reference/tokenizer_cases.jsonl", "w") as out:
    for line in open(f"{reference}/tokenizer_cases.jsonl", encoding="utf-8"):
        case = json.loads(line)
        case["ids"] = [moved(i) for i in case["ids"]]
        out.write(json.dumps(case, ensure_ascii=False) + "\n")
PY

"$probe" golden --model "$work/model" --reference "$work/reference" --only tokenizer
