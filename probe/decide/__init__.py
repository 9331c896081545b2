"""The deciding verbs, above the matrix and the recommender: ``compare`` (what changed between two
matrices, the recommendations included), ``gate`` (fail CI on a regression).

Layering: ``probe.decide`` may import ``probe.matrix`` and ``probe.recommend``; neither imports it.
"""
