/* placeholder until its issue lands. */
#include "app/probe.h"
#include <stdio.h>
int probe_info(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kimi-probe: not built yet\n"); return 1; }
int probe_weights(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kimi-probe: not built yet\n"); return 1; }
