#!/usr/bin/env bash
# nccl_fault.sh KIMI_PROBE: the abort path of the CUDA backend under NCCL (ranks_abort), on the
# CPU emulation: rank 1's 40th collective fails (KIMI_EMU_NCCL_FAIL, tests/emu/nccl.cpp: its
# communicator reports an asynchronous error and the collective hangs, as a lost peer leaves
# it). kimi-probe verify must end (no rank left waiting) with an error naming rank 1.
probe=$1
out="$(KIMI_EMU_NCCL_FAIL=1:40 KIMI_CUDA_PREFILL=steps KIMI_CUDA_COMM=nccl KIMI_CUDA_GRAPHS=1 timeout 600 "$probe" \
         verify --model tests/golden/fixtures/tiny-k25 --backend cuda --tp 2 --devices 0,1 2>&1)"
rc=$?
echo "$out" | tail -n 3
if [[ $rc -eq 0 || $rc -eq 124 ]]; then
  echo "FAIL: exit $rc (want a failure, not a pass or a hang)"
  exit 1
fi
if ! grep -q 'rank 1 of 2 (device 1): NCCL: rank 1 (device 1): unhandled system error' <<<"$out"; then
  echo "FAIL: the error does not name rank 1's NCCL fault"
  exit 1
fi
echo "PASS: the failed rank is named and every rank stopped waiting"
