"""The API's JSON shapes: request bodies, responses, and their mapping to the core's types.

Also the record-size budget a definition is checked against before it is registered.
"""
