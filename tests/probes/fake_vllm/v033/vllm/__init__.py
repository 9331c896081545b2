# Minimal stand-in for the enumeration surfaces of vLLM 0.33.0 (tests only; no torch).
__version__ = "0.33.0"
