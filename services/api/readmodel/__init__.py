"""The API's read model: ``cronlog.run-events`` projected into an embedded store, and reads.

Listings and paging, the hot-window retention and its pruner, the metrics counted from the
events, and the lookup of archived runs.
"""
