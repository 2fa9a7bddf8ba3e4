#!/usr/bin/env bash
# peer_fault.sh KIMI_PROBE: the abort path of the CUDA backend with the peer all-reduce
# (engine/backend/cuda_peer.h), on the CPU emulation: rank 1's device faults at the K-th run of a
# kernel that runs the all-reduce (KIMI_EMU_KERNEL_FAULT, tests/emu/runtime.cpp: the kernel does
# not run, so it never raises its flags, and nothing more runs on device 1), while rank 0's kernel
# waits for those flags on its device. kimi-probe verify must end (rank 0's wait stopped by the
# host's stop word, not left spinning) with an error naming rank 1's fault. The cases: the first
# peer_allreduce_norm_kernel, the self-check at open (the open fails, naming KIMI_CUDA_COMM=peer
# and device 1); the first o_proj launch with the all-reduce in its last block, the first
# decode step's first all-reduce (the step's graph captured, then launched); the 14th MoE down
# launch with it, the second layer's in the fourth decode step of tiny-k25's four layers (a
# replayed graph).
probe=$1
for fault in 'peer_allreduce_norm_kernel:1' 'gemv_residual_kernel<kPeerAllReduceNorm>:1' \
             'mlp_down_combine_kernel<kPeerAllReduceNorm>:14'; do
  out="$(KIMI_EMU_KERNEL_FAULT=1:$fault KIMI_CUDA_COMM=peer KIMI_CUDA_GRAPHS=1 timeout 600 \
           "$probe" verify --model tests/golden/fixtures/tiny-k25 --backend cuda --tp 2 --devices 0,1 2>&1)"
  rc=$?
  echo "$out" | tail -n 3
  if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    echo "FAIL: fault at $fault: exit $rc (want a failure, not a pass or a hang)"
    exit 1
  fi
  if [[ $fault == peer_allreduce_norm_kernel:1 ]]; then
    want='KIMI_CUDA_COMM=peer: CUDA: peer all-reduce: the self-check.s call on device 1: unspecified launch failure'
  else
    want='rank 1 of 2 \(device 1\): CUDA: step: unspecified launch failure'
  fi
  if ! grep -Eq "$want" <<<"$out"; then
    echo "FAIL: fault at $fault: the error does not name rank 1's fault (want /$want/)"
    exit 1
  fi
done
echo "PASS: the failed rank is named and no rank was left waiting for it, at open and mid-step"
