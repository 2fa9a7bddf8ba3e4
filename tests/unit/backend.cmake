# Unit tests: backend.
