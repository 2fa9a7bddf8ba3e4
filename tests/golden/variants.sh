#!/usr/bin/env bash
# Golden conformance on checkpoints of other shapes: generates one small checkpoint with
# kimi-mkmodel, its expected outputs with the independent float64 reference
# (tests/golden/reference.py), then runs `kimi-probe golden --only kv,model` at every TP (1, 2, 4,
# 8) the head count allows.
#   variants.sh KIMI_PROBE KIMI_MKMODEL WORK_DIR VARIANT
# Environment: KIMI_GOLDEN_BACKEND (cpu, the default, or cuda), KIMI_GOLDEN_TPS (default "1 2 4 8"),
# KIMI_GOLDEN_DEVICES (cuda: --devices, e.g. 0 to run every rank on device 0).
# VARIANT: groups | k26 | mscale | shape (see the case below).
set -euo pipefail

if [[ $# -ne 4 ]]; then
    echo "usage: $0 KIMI_PROBE KIMI_MKMODEL WORK_DIR groups|k26|mscale|shape" >&2
    exit 2
fi
probe=$1 mkmodel=$2 work=$3 variant=$4
here="$(cd "$(dirname "$0")" && pwd)"

python="$here/with-numpy.sh"
"$python" -c "import numpy" || { echo "FAIL $variant: python3-numpy is missing" >&2; exit 1; }
for tool in "$probe" "$mkmodel"; do
    if [[ ! -x "$tool" ]]; then
        echo "FAIL $variant: $tool is missing (build it first)" >&2
        exit 1
    fi
done

# Every variant stays small (hidden <= 256, 3 layers, 40 prompt tokens, 8 greedy steps) so
# all of them run in seconds; each has its own seed so its weights differ from tiny-k25's.
common=(--hidden 256 --layers 3 --dense-layers 1 --heads 8 --experts 16 --top-k 4)
case "$variant" in
    groups) shape=("${common[@]}" --n-group 4 --topk-group 2 --seed 1) ;;
    k26)    shape=("${common[@]}" --recipe k26 --router-bias-dtype f32 --seed 2) ;;
    mscale) shape=("${common[@]}" --rope-factor 32 --mscale 1.0 --mscale-all-dim 0.707 --seed 3) ;;
    shape)  shape=(--hidden 192 --layers 3 --dense-layers 1 --heads 4 --q-lora 96 --kv-lora 48 --nope 24
                   --rope 8 --v-head 16 --experts 8 --top-k 2 --moe-inter 64 --inter 384 --shared 2
                   --vocab 3000 --single-file --seed 4) ;;
    *) echo "$0: unknown variant '$variant' (groups, k26, mscale, shape)" >&2; exit 2 ;;
esac

model="$work/$variant/model"
reference="$work/$variant/reference"
rm -rf "${work:?}/$variant"
mkdir -p "$work/$variant"
"$mkmodel" "${shape[@]}" --out "$model"
"$python" "$here/reference.py" --model "$model" --out "$reference" --prompt-tokens 40 --greedy 8

heads=$("$python" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("text_config", c)["num_attention_heads"])' "$model/config.json")
backend="${KIMI_GOLDEN_BACKEND:-cpu}"
devices=()
[[ -n "${KIMI_GOLDEN_DEVICES:-}" ]] && devices=(--devices "$KIMI_GOLDEN_DEVICES")
failed=0
for tp in ${KIMI_GOLDEN_TPS:-1 2 4 8}; do
    (( heads % tp == 0 )) || continue
    echo "== $variant: kimi-probe golden --only kv,model --backend $backend --tp $tp"
    "$probe" golden --model "$model" --reference "$reference" --only kv,model --backend "$backend" --tp "$tp" \
        "${devices[@]}" || failed=1
done
exit $failed
