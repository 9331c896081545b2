"""Probe functions run inside the sandboxed child (torch / vLLM imported lazily there)."""
