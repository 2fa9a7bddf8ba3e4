#!/usr/bin/env bash
# with-device.sh GPU_PRESENT COMMAND...: run COMMAND when a CUDA device exists, else exit 77 so
# ctest reports the test as skipped (never passed).
present=$1
shift
"$present" || exit 77
exec "$@"
