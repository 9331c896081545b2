"""``probe recommend``: vLLM flags for a model on a GPU, from measured / predicted / reported evidence."""
