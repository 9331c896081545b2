import flashinfer  # noqa: F401  (absent: the backend cannot import)
