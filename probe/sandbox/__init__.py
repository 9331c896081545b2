"""Process isolation, the run journal and the crash classifier.

Public API (see docs/sandbox.md)::

    from probe.sandbox.runner import RunnerConfig, run_cells
    from probe.sandbox.journal import Journal
    from probe.sandbox.classifier import classify_text, classify_stream

This package must stay light at import time (no torch, no pydantic-heavy work beyond the models).
"""
