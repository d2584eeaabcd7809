"""The HTTP API: commands out to ``cronlog.commands``, reads from a run-events projection."""
