#!/usr/bin/env python3
"""census_layers.py KIMI_PROBE KIMI_MKMODEL WORK_DIR: issue 20's launch budget per layer, measured
on the CPU emulation of CUDA (tests/emu): two tiny models (kimi-mkmodel --preset tiny) that differ
only in their number of MoE layers (one dense layer each), the decode-step census of each at TP 8
(kimi-probe bench --census --json), and the launches one MoE layer adds: their difference over
the difference in layers, free of what a step spends once (embedding, final norm, lm_head,
sampling). Fails when a MoE layer takes more than MOE_LAYER_LAUNCHES launches, what the decode
step reaches now (10: qkv_a, q_b, absorb_q_rope, attention partial and merge, W_UV, o_proj with
the peer all-reduce + residual + norm in its last block, router, gate_up, down + combine with
the same in its last block); lower it as fusions land."""
import json
import os
import subprocess
import sys

MOE_LAYER_LAUNCHES = 10

probe, mkmodel, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)


def census(layers):
    model = os.path.join(work, 'tiny-%d-layers' % layers)
    made = subprocess.run([mkmodel, '--preset', 'tiny', '--layers', str(layers), '--dense-layers', '1',
                           '--out', model], capture_output=True, text=True, timeout=600)
    if made.returncode != 0:
        sys.exit('FAIL kimi-mkmodel --layers %d: exit %d: %s' % (layers, made.returncode, made.stderr.strip()))
    out = subprocess.run([probe, 'bench', '--census', '--json', '--backend', 'cuda', '--tp', '8',
                          '--devices', '0,1,2,3,4,5,6,7', '--model', model],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit('FAIL kimi-probe bench --census (%d layers): exit %d: %s' %
                 (layers, out.returncode, out.stderr.strip()))
    c = json.loads([l for l in out.stdout.splitlines() if l.strip()][-1])
    if c['layers'] != layers:
        sys.exit('FAIL the census counted %d layers of a %d-layer model' % (c['layers'], layers))
    return c['launches_per_token']


few, many = 2, 4
launches_few, launches_many = census(few), census(many)
per_layer = (launches_many - launches_few) / (many - few)
print('launches per token: %d at %d layers, %d at %d layers: %g per MoE layer' %
      (launches_few, few, launches_many, many, per_layer))
if per_layer > MOE_LAYER_LAUNCHES:
    sys.exit('FAIL %g launches per MoE layer, above %d' % (per_layer, MOE_LAYER_LAUNCHES))
print('PASS %g launches per MoE layer <= %d' % (per_layer, MOE_LAYER_LAUNCHES))
