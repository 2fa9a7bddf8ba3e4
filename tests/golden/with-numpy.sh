#!/usr/bin/env bash
# Runs python3 with the given arguments, picking an interpreter that has numpy: Debian's
# python3-numpy lives beside /usr/bin/python3, which another python3 on PATH (pyenv, venv)
# may hide. Fails loudly when none has it: tests/install-deps.sh installs python3-numpy.
for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import numpy" 2>/dev/null; then
        exec "$candidate" "$@"
    fi
done
echo "FAIL: no python3 with numpy (install python3-numpy: tests/install-deps.sh)" >&2
exit 1
