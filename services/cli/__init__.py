"""The ``cronlog`` command line (typer): jobs and runs through the API, and ``cronlog up``.

``replay``, ``snapshot`` and ``history`` read Kafka and the archive directly; ``tokens``
writes the API's tokens file.
"""
