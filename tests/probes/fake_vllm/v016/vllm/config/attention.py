# Minimal stand-in for the enumeration surfaces of vLLM 0.16.0 (tests only; no torch).
from typing import Literal


class AttentionConfig:
    flash_attn_version: Literal[2, 3] | None = None
