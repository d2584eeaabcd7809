"""Kafka as a client sees it: settings, topic specs, bootstrap, partitioning, retries, readers."""
