# Unit tests: kernels.
