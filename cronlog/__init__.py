"""cronlog's pure core: models, schedule maths, and the job aggregate's decide/evolve.

Nothing in this package performs I/O, reads a clock or draws randomness; time is always an
argument. The adapters in ``topology/`` and ``services/`` supply it.
"""
