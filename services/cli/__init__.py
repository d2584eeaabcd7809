"""The ``cronlog`` command line (typer): jobs and runs through the API, and ``cronlog up``."""
