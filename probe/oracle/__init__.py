"""vLLM as its own oracle: ``predicted`` evidence from the installed vLLM's own selection code.

Parent side (no torch / vLLM imports): :mod:`probe.oracle.queries` (targets x model profiles → typed
queries), :mod:`probe.oracle.collect` (runs the child in the image's Python, typed answers),
:mod:`probe.oracle.to_matrix` (answers → matrix cells, evidence ``predicted``, basis
``vllm_check``). Child side (imports vLLM, fakes the CUDA platform's capability per target):
:mod:`probe.oracle.child` with :mod:`~probe.oracle.child_attention` / :mod:`~probe.oracle.child_moe`.
Per-version access paths: :mod:`probe.versions` (``oracle_layout``).
"""
