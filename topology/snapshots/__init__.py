"""Snapshots of the fold's state and the replay of the commands log (``cronlog replay``)."""
