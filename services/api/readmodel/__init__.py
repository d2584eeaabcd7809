"""The API's read model: ``cronlog.run-events`` projected into an embedded store, and reads."""
