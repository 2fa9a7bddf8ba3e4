# Unit tests: kernels.
kimi_unit_test(test_numeric SOURCES test_numeric.c DEPS kimi_kernels_cpu)
kimi_unit_test(test_linear SOURCES test_linear.c DEPS kimi_kernels_cpu m)
kimi_unit_test(test_half SOURCES test_half.c DEPS kimi_kernels_cpu)
kimi_unit_test(test_elementwise SOURCES test_elementwise.c DEPS kimi_kernels_cpu m)
kimi_unit_test(test_rope SOURCES test_rope.c DEPS kimi_kernels_cpu m)
kimi_unit_test(test_moe_routing SOURCES test_moe_routing.c DEPS kimi_kernels_cpu m)
kimi_unit_test(test_mla_attention SOURCES test_mla_attention.c DEPS kimi_kernels_cpu m)
kimi_unit_test(test_kv_format SOURCES test_kv_format.c DEPS m)
