# Minimal stand-in for the enumeration surfaces of vLLM 0.33.0 (tests only; no torch).


def FusedMoEFactory(**kwargs):
    return ("FusedMoEFactory", kwargs)
