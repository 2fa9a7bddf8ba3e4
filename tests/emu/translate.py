#!/usr/bin/env python3
"""translate.py IN.cu OUT.cpp NAME: the mechanical rewrite of a CUDA source into host C++ for the
CPU emulation (tests/emu). Launches `k<<<g, b, s, st>>>(args)` become
`emu::make_launcher(k, "k", __FILE__, __LINE__, g, b, s, st)(args)`, `extern __shared__ T x[];`
becomes a pointer to the running block's dynamic shared memory, and <cuda_runtime.h> is included
first (nvcc does so implicitly). Nothing else changes: the line count is kept and a #line names
the original, so diagnostics and the emulator's reports point into kernels/cuda/."""
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_][\w:]*(?:\s*<[^<>;()]*>)?)\s*<<<(.*?)>>>', re.S)
EXTERN_SHARED = re.compile(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+(?:\s*\*)?)\s+(\w+)\s*\[\s*\]\s*;')


def translate(text):
    def launch(m):
        name = m.group(1)
        return 'emu::make_launcher(%s, "%s", __FILE__, __LINE__, %s)' % (name, re.sub(r'\s+', '', name), m.group(2))

    def shared(m):
        return '%s *const %s = emu::dynamic_shared_as<%s>();' % (m.group(1), m.group(2), m.group(1))

    text = EXTERN_SHARED.sub(shared, text)
    return LAUNCH.sub(launch, text)


def main():
    source, target, name = sys.argv[1:4]
    with open(source) as f:
        text = f.read()
    out = translate(text)
    if out.count('\n') != text.count('\n'):
        sys.exit('translate.py: %s: the line count changed' % source)
    if '<<<' in out or re.search(r'extern\s+__shared__', out):
        sys.exit('translate.py: %s: a launch or extern __shared__ array was not recognised' % source)
    with open(target, 'w') as f:
        f.write('#include <cuda_runtime.h>\n#line 1 "%s"\n' % name + out)


if __name__ == '__main__':
    main()
