"""probe: which vLLM / FlashInfer kernel backends load and run on which NVIDIA GPU.

The package is split by concern:

- ``probe.arch``      static analysis of compiled extensions (ELF, fatbin, cubin); the only
                      place that imports pyelftools (``probe.arch.elf``).
- ``probe.catalog``   packaged data files (GPU catalog, backend catalog, model profiles,
                      failure signatures), validated at load.
- ``probe.sandbox``   process isolation, journal, crash classifier.
- ``probe.probes``    the dynamic probes; torch / vllm / flashinfer are imported only inside
                      the sandboxed child.
- ``probe.matrix``    the published matrix: schema, rendering, merge, diff, gate.
- ``probe.recommend`` flags and env for a model on a GPU, from the evidence.
- ``probe.cli``       argument parsing, one module per verb.
"""

__version__ = "0.1.0"
