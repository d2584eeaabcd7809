"""``python -m services.cli``: the same as the ``cronlog`` console script."""

from services.cli.main import app

app()
