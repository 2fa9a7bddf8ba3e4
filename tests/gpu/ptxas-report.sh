#!/usr/bin/env bash
# ptxas-report.sh [OUT] [ARCHS...]: compile every kernels/cuda/*.cu for each architecture (device
# code only, the flags of kernels/cuda/CMakeLists.txt) with ptxas -v, and write one line per
# kernel and architecture: registers, stack frame, spill stores/loads, static shared memory.
# Fails (exit 1) when any kernel spills: every kernel here runs in the decode step's hot path.
# No GPU is needed. OUT defaults to stdout; ARCHS to "90 100 120". With KIMI_PTXAS_LOGS=DIR (the
# cuda_ptxas_report test: the build's kimi_kernels_cuda compiles through ptxas-capture.sh), a
# kernel file's lines come from DIR/NAME.cu.log, what the build's own ptxas said, when that log
# is newer than the file and every header under kernels/; otherwise the file is compiled here.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:--}"
shift || true
archs=("$@")
[[ ${#archs[@]} -gt 0 ]] || archs=(90 100 120)
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
filt="$(command -v c++filt || echo cat)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

report="$tmp/report"
{
    echo "# ptxas resource usage of the CUDA kernels ($("$nvcc" --version | grep -o 'release [0-9.]*'), --fmad=false)"
    echo "# smem: static shared memory in bytes. Dynamic on top: mla_partial_kernel 56,352 B, mla_prefill_kernel"
    echo "# 76,480 B and route_kernel 3,112 B at Kimi-K2.5's dims. stack without spills: fp32 sincosf's buffer for"
    echo "# huge arguments (kv_rope_cache, qkv_a: given angles within +-pi) and the all-reduce's by-value pointer table."
    printf '%-6s %-50s %5s %6s %7s %7s %7s\n' arch kernel regs stack spill_st spill_ld smem
} >"$report"
spills=0
logs="${KIMI_PTXAS_LOGS:-}"
from_build=0 compiled=0
for arch in "${archs[@]}"; do
    for cu in "$root"/kernels/cuda/*.cu; do
        log="$logs/$(basename "$cu").log"
        if [[ -n $logs && -f $log && ! $cu -nt $log &&
              -z "$(find "$root/kernels" -type f ! -name '*.cu' -newer "$log" -print -quit)" ]]; then
            cp "$log" "$tmp/ptxas.log"
            from_build=$((from_build + 1))
        else
            "$nvcc" -cubin -arch="sm_$arch" --fmad=false -std=c++17 -I"$root" -Xptxas -v -o "$tmp/out.cubin" "$cu" \
                2>"$tmp/ptxas.log"
            compiled=$((compiled + 1))
        fi
        # Blocks of: Compiling entry function 'NAME' for 'sm_ARCH' / N bytes stack frame, S bytes
        # spill stores, L bytes spill loads / Used R registers, ... B bytes smem; a build's log
        # holds every architecture's blocks, so those of other architectures are skipped.
        awk -v arch="$arch" -v file="$(basename "$cu" .cu)" '
            /Compiling entry function/ {
                name = ""
                if (index($0, "for '"'"'sm_" arch "'"'"'") == 0) next
                match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2); next
            }
            /bytes stack frame/ && name != "" { stack = $1; st = $5; ld = $9; next }
            /Used [0-9]+ registers/ && name != "" {
                regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
                smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
                print arch, file, name, regs, stack, st, ld, smem; name = ""
            }' "$tmp/ptxas.log" >>"$tmp/rows"
    done
done
while read -r arch file name regs stack st ld smem; do
    # void (anonymous namespace)::k<((anonymous namespace)::kind)1>(args) -> k<(kind)1>: the
    # template arguments name the instance (one kernel, several epilogues)
    short="$(echo "$name" | "$filt" | sed -E 's/\(anonymous namespace\):://g; s/^void //; s/^([^(<]+(<[^>]*>)?)\(.*/\1/; s/^[^<]*::([^:<]+)/\1/')"
    printf '%-6s %-50s %5s %6s %7s %7s %7s\n' "sm_$arch" "$file:$short" "$regs" "$stack" "$st" "$ld" "$smem" >>"$report"
    if [[ "$st" != 0 || "$ld" != 0 ]]; then
        spills=$((spills + 1))
    fi
done <"$tmp/rows"
echo "# kernels that spill: $spills" >>"$report"
echo "ptxas-report: $from_build compile(s) read from the build's ptxas logs, $compiled compiled here" >&2
if [[ "$out" == - ]]; then cat "$report"; else cp "$report" "$out"; cat "$report"; fi
[[ $spills -eq 0 ]] || { echo "ptxas-report: $spills kernel(s) spill registers" >&2; exit 1; }
