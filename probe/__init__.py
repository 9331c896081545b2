"""probe: which vLLM / FlashInfer kernel backends load and run on which NVIDIA GPU.

The package is split into layers; a module imports only its own layer and the ones below it
(``tests/test_layers.py`` checks every import, those inside functions included):

1. core — ``probe.outcomes`` (the outcome vocabulary), ``probe.errors`` (one exception hierarchy, exit
   codes), ``probe.versions`` (vLLM versions and where each release keeps things; standard library
   only), ``probe.cell_params`` (a cell's kind and typed parameters), ``probe.cells`` (cell spec and
   record).
2. ``probe.catalog`` — the packaged data (GPU catalog, backend catalog, model profiles, failure
   signatures, field reports) read by one cached reader (``catalog.datafiles``), validated at load.
3. ``probe.arch`` — static analysis of compiled extensions (ELF, fatbin, cubin, wheels, images); the
   only place that imports pyelftools (``probe.arch.elf``).
   ``probe.sandbox`` — process isolation, the journal, the crash classifier.
   ``probe.probes`` — the dynamic probes; torch / vLLM / FlashInfer are imported only inside the
   sandboxed child.
4. ``probe.matrix`` — the published matrix: schema, build, rendering, merge.
5. ``probe.oracle`` — vLLM's own selection code asked per GPU (``probe predict``);
   ``probe.recommend`` — flags and env for a model on a GPU, from the evidence;
   ``probe.run`` — a whole run as a library call.
6. ``probe.decide`` — the deciding verbs: compare (diff), gate.
7. ``probe.cli`` — argument parsing, one module per verb.
"""

__version__ = "0.1.0"
