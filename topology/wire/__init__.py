"""The wire format: Avro codec and mapping, field limits, registry framing, the state codec.

Also the heartbeat and log-chunk records, and the generator of docs/asyncapi.yaml.
"""
