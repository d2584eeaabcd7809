"""cronlog's pure core: every rule of the scheduler, and the job aggregate's decide/evolve.

Definitions, schedule maths (cron dialect, DST), DAG, lease, retry, priority and tenant rules,
id and time formats (docs/architecture.md, "The pure core", maps each module to its rules).
Nothing in this package performs I/O, reads a clock or draws randomness; time is always an
argument, supplied by the adapters in ``topology/`` and ``services/``. The client SDK other
services use to drive cronlog through Kafka is a package of its own, ``cronlog_client``
(docs/client.md): it does I/O, and no core module imports it (tests/unit/test_rings.py).
"""
