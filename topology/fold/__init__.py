"""The fold adapter: a batch of command records through the pure core, the stores behind it.

Partition stores, their restore and the state cache; the due index, dead letters, record
limits, the tenant ledger's fold, and the fold's spans.
"""
