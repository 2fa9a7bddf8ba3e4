#!/usr/bin/env python3
"""test_targets.py BUILD_DIR CTEST_ARGS...: the build targets that the tests ctest selects with
CTEST_ARGS (e.g. -L gpu) run, one a line, so that CI's emulated stage builds those and not the
whole tree again (tests/run-all.sh). A target counts when a test's command names a file in the
build tree that is a target's output (the tests pass their programs as $<TARGET_FILE:...>, also
to the scripts they run); a test that names none (a plain script) adds nothing. Fails when the
selection is empty, or names no target, so that a change of the tests' layout cannot silently
build nothing."""
import json
import os
import re
import subprocess
import sys


def targets_of(build_dir):
    """Every target of the build tree: each has a CMakeFiles/NAME.dir folder."""
    names = set()
    for root, dirs, _ in os.walk(build_dir):
        if os.path.basename(root) == "CMakeFiles":
            names.update(d[:-4] for d in dirs if d.endswith(".dir"))
            dirs[:] = []
    return names


def commands_of(build_dir):
    """Each test's command as the CTestTestfile.cmake files of the build tree write it (ctest's
    own listing leaves out the command of a program not built yet)."""
    commands = {}
    for root, _, files in os.walk(build_dir):
        if "CTestTestfile.cmake" not in files:
            continue
        with open(os.path.join(root, "CTestTestfile.cmake")) as f:
            for line in f:
                m = re.match(r'add_test\(\[=\[(.*?)\]=\] (.*)\)$', line.strip())
                if m:
                    commands[m.group(1)] = [re.sub(r'\\(.)', r'\1', a)
                                            for a in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))]
    return commands


def main():
    if len(sys.argv) < 2:
        print("usage: test_targets.py BUILD_DIR CTEST_ARGS...", file=sys.stderr)
        return 2
    build_dir = os.path.realpath(sys.argv[1])
    shown = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"] + sys.argv[2:],
                           check=True, capture_output=True, text=True).stdout
    names = [t["name"] for t in json.loads(shown)["tests"]]
    if not names:
        print("test_targets.py: no test selected by %s" % " ".join(sys.argv[2:]), file=sys.stderr)
        return 1
    known = targets_of(build_dir)
    commands = commands_of(build_dir)
    wanted = set()
    for name in names:
        for arg in commands.get(name, []):
            path = os.path.realpath(arg)
            target = os.path.basename(path)
            if path.startswith(build_dir + os.sep) and target in known:
                wanted.add(target)
    if not wanted:
        print("test_targets.py: the %d selected tests name no target of %s" % (len(names), build_dir),
              file=sys.stderr)
        return 1
    print("\n".join(sorted(wanted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
