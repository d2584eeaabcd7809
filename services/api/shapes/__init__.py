"""The API's JSON shapes: request bodies, responses, and their mapping to the core's types."""
