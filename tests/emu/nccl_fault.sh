#!/usr/bin/env bash
# nccl_fault.sh KIMI_PROBE: the abort path of the CUDA backend under NCCL (ranks_abort), on the
# CPU emulation: one of rank 1's collectives fails (KIMI_EMU_NCCL_FAIL, tests/emu/nccl.cpp: its
# communicator reports an asynchronous error and the collective hangs, as a lost peer leaves
# it). kimi-probe verify must end (no rank left waiting) with an error naming rank 1. Rank 1
# makes 128 collectives in the warm-up at open (backend_cuda.c rank_warm_up_enqueue: an
# all-reduce and a gather send for each of 64 step sizes), so the cases are: its 40th, inside
# the warm-up; its 168th, the 40th of the step prefill (graphs replaying captured collectives);
# and its 130th, the second all-reduce of the first GEMM prefill step, after which both ranks'
# hosts wait for their streams to read the expert counts of the next MoE layer
# (rank_stream_wait_in_step) while those streams wait in a collective that cannot complete.
probe=$1
for case in steps:40 steps:168 gemm:130; do
  prefill=${case%%:*} at=${case##*:}
  out="$(KIMI_EMU_NCCL_FAIL=1:$at KIMI_CUDA_PREFILL=$prefill KIMI_CUDA_COMM=nccl KIMI_CUDA_GRAPHS=1 timeout 600 \
           "$probe" verify --model tests/golden/fixtures/tiny-k25 --backend cuda --tp 2 --devices 0,1 2>&1)"
  rc=$?
  echo "$out" | tail -n 3
  if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    echo "FAIL: $prefill prefill, collective $at: exit $rc (want a failure, not a pass or a hang)"
    exit 1
  fi
  if ! grep -q 'rank 1 of 2 (device 1): NCCL: rank 1 (device 1): unhandled system error' <<<"$out"; then
    echo "FAIL: $prefill prefill, collective $at: the error does not name rank 1's NCCL fault"
    exit 1
  fi
done
echo "PASS: the failed rank is named and every rank stopped waiting, at open, mid-step and mid-prefill"
