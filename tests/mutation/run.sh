#!/usr/bin/env bash
# tests/mutation/run.sh: how many behaviour-changing mutants the suite kills. Copies the working
# tree (tracked and untracked, not ignored files) to a scratch folder, builds it there once, then
# for each mutant of the list (tests/mutation/mutants.txt: FILE @@ ORIGINAL @@ REPLACEMENT @@
# CTEST REGEX) applies it, rebuilds what its tests need, runs those tests and puts the file back.
# A mutant is killed when a test fails, survives when all pass; one that does not build, or whose
# ORIGINAL is not exactly once in FILE, is reported and left out of the score. Not part of ctest
# or CI (tens of minutes on two cores); the repository itself is never modified.
# Usage: tests/mutation/run.sh [MUTANTS-FILE]   (KIMI_MUTATION_DIR=DIR keeps and reuses a scratch
# folder, so a second run rebuilds only what changed; KIMI_MUTATION_JOBS=N: build jobs, default 2)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
list=$(realpath "${1:-$root/tests/mutation/mutants.txt}")
jobs=${KIMI_MUTATION_JOBS:-2}
if [ -n "${KIMI_MUTATION_DIR:-}" ]; then
    scratch=$KIMI_MUTATION_DIR
    mkdir -p "$scratch"
else
    scratch=$(mktemp -d /tmp/kimi-mutation.XXXXXX)
    trap 'rm -rf "$scratch"' EXIT
fi
src=$scratch/src build=$scratch/build log=$scratch/log
mkdir -p "$src" "$log"

# The working tree as it is, uncommitted edits included. A file already in a reused scratch copy
# is replaced only where its content differs, so the build there stays incremental; a file a run
# was stopped with a mutant in is touched, so it is compiled again.
(cd "$root" && git ls-files -z --cached --others --exclude-standard) | python3 -c '
import filecmp, os, shutil, sys
root, src = sys.argv[1], sys.argv[2]
for name in sys.stdin.read().split("\0"):
    if not name or not os.path.isfile(os.path.join(root, name)):
        continue
    a, b = os.path.join(root, name), os.path.join(src, name)
    if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
        os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copy(a, b)' "$root" "$src"
if [ -f "$scratch/applied" ]; then
    touch "$src/$(cat "$scratch/applied")"
    rm -f "$scratch/applied"
fi

echo "mutation: scratch $scratch"
if ! cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKIMI_CUDA=OFF >"$log/configure.txt" 2>&1; then
    echo "mutation: configure failed (see $log/configure.txt)"
    exit 1
fi

# Mutants: FILE, ORIGINAL, REPLACEMENT, REGEX per line (fields split at ' @@ ').
mapfile -t lines < <(grep -v '^#' "$list" | grep -v '^[[:space:]]*$')
n=${#lines[@]}
[ "$n" -gt 0 ] || { echo "mutation: no mutants in $list"; exit 1; }

# The build targets behind a test regex: each matching test's own name (a unit test's target),
# replay_X for fuzz_replay_X, and the executables under the build folder that the tests run or
# pass as arguments (ctest lists a test's command only once its executable exists).
targets_for() {
    ctest --test-dir "$build" -R "$1" --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, sys
build, names = sys.argv[1], set()
for t in json.load(sys.stdin).get("tests", []):
    names.add(t["name"])
    if t["name"].startswith("fuzz_replay_"):
        names.add(t["name"][len("fuzz_"):])
    for arg in t.get("command", []):
        if arg.startswith(build + "/"):
            names.add(os.path.basename(arg))
print(" ".join(sorted(names)))' "$build"
}
build_for() {    # REGEX LOGFILE: builds the targets of the regex's tests that the build knows
    local known wanted t before="" round
    known=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
    : >"$2"
    # a test's arguments (a helper executable) show once its own executable is built: again until
    # no new target appears
    for round in 1 2 3; do
        wanted=""
        for t in $(targets_for "$1"); do
            grep -qx -- "$t" <<<"$known" && wanted="$wanted $t"
        done
        [ -n "$wanted" ] || { echo "no build targets for $1" >>"$2"; return 1; }
        [ "$wanted" != "$before" ] || return 0
        # shellcheck disable=SC2086
        cmake --build "$build" -j"$jobs" --target $wanted >>"$2" 2>&1 || return 1
        before=$wanted
    done
}
field() { python3 -c 'import sys; print(sys.argv[1].split(" @@ ")[int(sys.argv[2])].strip(), end="")' "$1" "$2"; }

# The unmutated tree must build and pass every regex, or no result means anything.
all=""
for ((i = 0; i < n; i++)); do
    all="$all${all:+|}$(field "${lines[$i]}" 3)"
done
echo "mutation: building and running the unmutated tests"
if ! build_for "$all" "$log/baseline-build.txt" ||
   ! ctest --test-dir "$build" -R "$all" -j"$jobs" >"$log/baseline-tests.txt" 2>&1; then
    echo "mutation: the unmutated tree fails its own tests (see $log/baseline-*.txt)"
    exit 1
fi

killed=0 survived=0 other=0
report=$scratch/report.txt
: >"$report"
for ((i = 0; i < n; i++)); do
    line=${lines[$i]}
    file=$(field "$line" 0) regex=$(field "$line" 3)
    # apply: exactly one occurrence, replaced in place; the original is kept beside the log
    printf '%s' "$file" >"$scratch/applied"
    if ! python3 - "$src/$file" "$line" "$log/original.$i" <<'PY'
import shutil, sys
path, line, keep = sys.argv[1:4]
parts = [p.strip() for p in line.split(" @@ ")]
if len(parts) != 4:
    sys.exit("not four fields")
text = open(path).read()
if text.count(parts[1]) != 1:
    sys.exit("%d occurrences" % text.count(parts[1]))
shutil.copy2(path, keep)
open(path, "w").write(text.replace(parts[1], parts[2]))
PY
    then
        verdict="NOT APPLIED"
        other=$((other + 1))
    elif ! build_for "$regex" "$log/build.$i.txt"; then
        verdict="NO BUILD"
        other=$((other + 1))
    elif ctest --test-dir "$build" -R "$regex" -j"$jobs" >"$log/tests.$i.txt" 2>&1; then
        verdict="SURVIVED"
        survived=$((survived + 1))
    else
        verdict="killed"
        killed=$((killed + 1))
    fi
    # put the file back (newer than the mutant's objects, so the next build recompiles it)
    if [ -f "$log/original.$i" ]; then
        cp "$log/original.$i" "$src/$file"
        touch "$src/$file"
    fi
    rm -f "$scratch/applied"
    printf '%-11s %s: %s -> %s  [%s]\n' "$verdict" "$file" "$(field "$line" 1)" "$(field "$line" 2)" "$regex" |
        tee -a "$report"
done
scored=$((killed + survived))
[ "$scored" -gt 0 ] || { echo "mutation: no mutant could be scored"; exit 1; }
printf 'mutation score: %d of %d killed (%d%%), %d survived, %d not scored\n' "$killed" "$scored" \
    $((100 * killed / scored)) "$survived" "$other" | tee -a "$report"
[ -z "${KIMI_MUTATION_DIR:-}" ] || echo "mutation: report in $report"
