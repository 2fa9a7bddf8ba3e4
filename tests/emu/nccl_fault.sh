#!/usr/bin/env bash
# nccl_fault.sh KIMI_PROBE: the abort path of the CUDA backend under NCCL (ranks_abort), on the
# CPU emulation: one of rank 1's collectives fails (KIMI_EMU_NCCL_FAIL, tests/emu/nccl.cpp: its
# communicator reports an asynchronous error and the collective hangs, as a lost peer leaves
# it). kimi-probe verify must end (no rank left waiting) with an error naming rank 1: at its
# 40th collective, inside the warm-up at open (backend_cuda.c rank_warm_up_enqueue: an
# all-reduce and a gather send for each of 64 step sizes, 128 on rank 1), and at its 168th, the
# 40th of the steps (graphs replaying captured collectives).
probe=$1
for at in 40 168; do
  out="$(KIMI_EMU_NCCL_FAIL=1:$at KIMI_CUDA_PREFILL=steps KIMI_CUDA_COMM=nccl KIMI_CUDA_GRAPHS=1 timeout 600 "$probe" \
           verify --model tests/golden/fixtures/tiny-k25 --backend cuda --tp 2 --devices 0,1 2>&1)"
  rc=$?
  echo "$out" | tail -n 3
  if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    echo "FAIL: collective $at: exit $rc (want a failure, not a pass or a hang)"
    exit 1
  fi
  if ! grep -q 'rank 1 of 2 (device 1): NCCL: rank 1 (device 1): unhandled system error' <<<"$out"; then
    echo "FAIL: collective $at: the error does not name rank 1's NCCL fault"
    exit 1
  fi
done
echo "PASS: the failed rank is named and every rank stopped waiting, at open and mid-step"
