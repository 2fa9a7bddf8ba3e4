/* placeholder until its issue lands. */
#include "app/probe.h"
#include <stdio.h>
int probe_logits(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kimi-probe: not built yet\n"); return 1; }
int probe_kv(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kimi-probe: not built yet\n"); return 1; }
