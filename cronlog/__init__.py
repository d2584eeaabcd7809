"""cronlog's pure core: models, schedule maths, and the job aggregate's decide/evolve.

Nothing in this package performs I/O, reads a clock or draws randomness; time is always an
argument. The adapters in ``topology/`` and ``services/`` supply it. The client SDK other
services use to drive cronlog through Kafka is a package of its own, ``cronlog_client``
(docs/client.md): it does I/O, and no core module imports it (tests/unit/test_rings.py).
"""
