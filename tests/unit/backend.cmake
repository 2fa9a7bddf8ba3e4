# Unit tests: backend.
kimi_unit_test(test_backend SOURCES test_backend.c DEPS kimi_backend m)
