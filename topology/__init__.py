"""Kafka as data and glue: the wire format, Kafka's clients, the fold adapter, snapshots.

Four rooms: ``wire`` (codecs and the wire contract), ``kafka`` (Kafka as a client sees it),
``fold`` (the fold adapter and its stores) and ``snapshots`` (snapshots and replay). It
imports the core, never ``services/`` nor the SDK (tests/unit/test_rings.py).
"""
