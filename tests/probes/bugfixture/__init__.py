"""Test-only cell targets for probe-bug attribution (tests/probes/test_probe_error.py)."""
