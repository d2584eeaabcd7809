"""The wire format: Avro codec and mapping, limits, registry framing, the state codec, AsyncAPI."""
