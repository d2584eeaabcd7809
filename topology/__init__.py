"""Kafka as data and glue: topics, the Avro codec, the fold adapter, stores and readers."""
