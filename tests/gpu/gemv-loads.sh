#!/usr/bin/env bash
# gemv-loads.sh: the memory access pattern of the decode GEMVs, read from the PTX nvcc emits for
# sm_90 (no GPU needed; what a GPU would show as bandwidth, issue 20). In every streaming GEMV
# kernel the activations reach the chunk loop through shared memory as 16-byte loads
# (ld.shared.v4.f32, staged once per block), never as 4-byte loads through the read-only cache
# (ld.global.nc.f32: a warp's 32 lanes 128 bytes apart, 32 cache lines a load), and no weight or
# scale is read a byte at a time (ld.global.nc.u8: the NVFP4 scale pair is one 2-byte load). The
# W_UK absorption reads its weights as 16-byte chunks (ld.global.nc.v4.u32), no byte loads.
# Exits 1 naming each kernel and rule that fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# count FILE KERNEL PATTERN: lines of kernel KERNEL's body (mangled name contains KERNEL) that
# hold the instruction PATTERN (a literal prefix such as ld.global.nc.f32).
count() {
    awk -v kernel="$2" -v pattern="$3" '
        /^\.(visible |weak )?\.?entry / { inside = index($0, kernel) > 0; next }
        /^\.(visible |weak )?\.func / { inside = 0; next }
        inside && index($0, pattern " ") > 0 { n++ }
        END { print n + 0 }' "$1"
}

failures=0
fail() {
    echo "gemv-loads: $1" >&2
    failures=$((failures + 1))
}

for cu in linear ops; do
    "$nvcc" -ptx -arch=sm_90 --fmad=false -std=c++17 -I"$root" -o "$tmp/$cu.ptx" "$root/kernels/cuda/$cu.cu"
done

# streaming GEMVs: file, a substring of the mangled kernel name
for kernel in "linear gemv_kernelILi1E" "linear gemv_kernelILi8E" "ops mlp_gate_up_kernel" "ops mlp_down_kernel" \
    "ops mlp_gate_up_grouped_kernel" "ops mlp_down_grouped_kernel"; do
    read -r file name <<<"$kernel"
    ptx="$tmp/$file.ptx"
    [[ $(grep -c "entry .*$name" "$ptx") -ge 1 ]] || { fail "$file.cu: no kernel $name"; continue; }
    n=$(count "$ptx" "$name" ld.global.nc.f32)
    [[ $n -eq 0 ]] || fail "$name: $n 4-byte activation loads through the read-only cache (ld.global.nc.f32)"
    n=$(($(count "$ptx" "$name" ld.global.nc.u8) + $(count "$ptx" "$name" ld.global.u8)))
    [[ $n -eq 0 ]] || fail "$name: $n byte loads of weights or scales (ld.global.u8)"
    n=$(count "$ptx" "$name" ld.shared.v4.f32)
    [[ $n -gt 0 ]] || fail "$name: no 16-byte loads of staged activations (ld.shared.v4.f32)"
done

name=absorb_q_kernel
n=$(count "$tmp/linear.ptx" $name ld.global.nc.v4.u32)
[[ $n -gt 0 ]] || fail "$name: no 16-byte weight loads (ld.global.nc.v4.u32)"
n=$(($(count "$tmp/linear.ptx" $name ld.global.nc.u8) + $(count "$tmp/linear.ptx" $name ld.global.u8)))
[[ $n -eq 0 ]] || fail "$name: $n byte loads of weights or scales"

[[ $failures -eq 0 ]] || exit 1
echo "gemv-loads: the GEMV kernels stage their activations (16-byte loads) and load no bytes"
