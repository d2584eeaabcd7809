"""What paged ``cronlog`` list commands share: ``--cursor``/``--all`` and the "more" hint."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.common import err

CursorOpt = Annotated[
    str | None,
    typer.Option("--cursor", help="Continue after a previous page (the cursor it printed)."),
]
AllOpt = Annotated[
    bool, typer.Option("--all", help="Follow every page to the end (--limit is per page).")
]


def more(next_cursor: str | None, command: str) -> None:
    """Say on stderr how to get the next page, when there is one."""
    if next_cursor is not None:
        err.print(
            f"more: {command} --cursor {next_cursor}  (or --all for everything)",
            highlight=False,
            soft_wrap=True,
        )
