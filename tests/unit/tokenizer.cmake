# Unit tests: tokenizer.
