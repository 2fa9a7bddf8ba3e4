#!/usr/bin/env bash
# ptxas-capture.sh LOG_DIR COMPILER ARGS...: the CUDA compiler launcher of kimi_kernels_cuda
# (tests/gpu/CMakeLists.txt). Runs the compile with ptxas -v and keeps ptxas's resource lines of
# the source in LOG_DIR/NAME.cu.log (every architecture the build compiles for), so that
# ptxas-report.sh reads what the build's ptxas said instead of compiling every kernel again (about
# 100 CPU seconds for three architectures). The resource lines are left out of the build's output;
# everything else the compiler says, and its exit status, pass through.
set -uo pipefail
log_dir=$1
shift
source=
prev=
for arg in "$@"; do
    [[ $prev == -c ]] && source=$arg
    prev=$arg
done
mkdir -p "$log_dir"
stderr="$(mktemp)"
trap 'rm -f "$stderr"' EXIT
"$@" -Xptxas=-v 2>"$stderr"
status=$?
resource='^ptxas info    : |^    [0-9]+ bytes stack frame, '
grep -Ev "$resource" "$stderr" >&2
if [[ -n $source ]]; then
    log="$log_dir/$(basename "$source").log"
    if [[ $status -eq 0 ]]; then
        grep -E "$resource" "$stderr" >"$log.tmp" && mv "$log.tmp" "$log"
    else
        rm -f "$log" "$log.tmp"
    fi
fi
exit $status
