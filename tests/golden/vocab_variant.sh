#!/usr/bin/env bash
# Golden tokenizer and chat conformance on a checkpoint with another vocabulary size: copies
# tiny-k25's files with SHIFT extra base tokens (byte pairs from 0xF8-0xFF, which valid UTF-8
# never contains, so no text encodes differently) and every special id moved up by SHIFT,
# derives the expected ids of tokenizer_cases.jsonl and chat_cases.jsonl by the same shift, and
# runs `kimi-probe golden --only tokenizer,chat` on it: special ids must be found by name.
#   vocab_variant.sh KIMI_PROBE WORK_DIR SHIFT
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
import base64, json, shutil, sys
fixture, reference, work, shift = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if not 0 < shift <= 64:
    sys.exit("SHIFT must be in 1..64")
lines = open(f"{fixture}/tiktoken.model").read().splitlines()
n_base = len(lines)
with open(f"{work}/model/tiktoken.model", "w") as f:
    f.write("".join(line + "\n" for line in lines))
    for i in range(shift):
        token = bytes([0xF8 + i // 8, 0xF8 + i % 8])
        f.write(f"{base64.b64encode(token).decode()} {n_base + i}\n")

def moved(i):
    return i + shift if isinstance(i, int) and i >= n_base else i

cfg = json.load(open(f"{fixture}/config.json"))
for section in (cfg, cfg["text_config"]):
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "media_placeholder_token_id"):
        if key in section:
            section[key] = moved(section[key])
cfg["text_config"]["vocab_size"] += shift
json.dump(cfg, open(f"{work}/model/config.json", "w"), indent=2)
gen = json.load(open(f"{fixture}/generation_config.json"))
gen["eos_token_id"] = moved(gen["eos_token_id"])
json.dump(gen, open(f"{work}/model/generation_config.json", "w"), indent=2)
tok = json.load(open(f"{fixture}/tokenizer_config.json"))
tok["added_tokens_decoder"] = {str(moved(int(k))): v for k, v in tok["added_tokens_decoder"].items()}
json.dump(tok, open(f"{work}/model/tokenizer_config.json", "w"), indent=2)
for name in ("hf_quant_config.json", "chat_template.jinja"):
    shutil.copy(f"{fixture}/{name}", f"{work}/model/{name}")
for name, keys in (("tokenizer_cases.jsonl", ("ids",)), ("chat_cases.jsonl", ("ids", "ids_literal"))):
    with open(f"{work}/reference/{name}", "w") as out:
        for line in open(f"{reference}/{name}", encoding="utf-8"):
            case = json.loads(line)
            for key in keys:
                case[key] = [moved(i) for i in case[key]]
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
PY

"$probe" golden --model "$work/model" --reference "$work/reference" --only tokenizer,chat
