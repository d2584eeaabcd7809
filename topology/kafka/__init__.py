"""Kafka as a client sees it: settings, topic specs, bootstrap, partitioning, retries, readers.

Also the topics' retention and replication rules, and the watchdog of calls that never return.
"""
