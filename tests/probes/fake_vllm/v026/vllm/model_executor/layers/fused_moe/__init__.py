# Minimal stand-in for the enumeration surfaces of vLLM 0.26.0 (tests only; no torch).


def FusedMoE(**kwargs):
    return ("FusedMoE", kwargs)
