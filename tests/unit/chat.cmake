# Unit tests: chat.
