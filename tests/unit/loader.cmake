# Unit tests: loader.
