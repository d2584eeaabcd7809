"""What a newcomer reads first says what is true (issue 24): the README's two commands, how long
they take, its /metrics call with the token ``./ops/up`` keeps, and one broker port in the docs."""

from __future__ import annotations

import re
from pathlib import Path

from services.cli.tokens_cmd import METRICS_TOKEN_FILE

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_opens_with_its_two_commands_and_says_how_long_they_take() -> None:
    lines = README.splitlines()
    assert lines[2].startswith("    ./ops/up      # install everything, start broker")
    assert lines[3].startswith("    ./ops/test    # install everything, start a broker")
    assert re.search(r"`\./ops/test` takes\s+about \d+ minutes", README)
    assert len(lines) <= 250


def test_the_readmes_metrics_call_uses_the_token_up_keeps() -> None:
    call = f'curl -H "Authorization: Bearer $(cat state/{METRICS_TOKEN_FILE})"'
    assert call + " http://127.0.0.1:8080/metrics" in README


def test_no_page_names_a_local_broker_on_port_9092() -> None:
    """The local broker answers on 19092 (``ops/kafka``); 9092 is compose's ``kafka:9092``."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = [
        f"{page.relative_to(ROOT)}: {m.group(0)}"
        for page in pages
        for m in re.finditer(r"(127\.0\.0\.1|localhost):9092\b", page.read_text(encoding="utf-8"))
    ]
    assert wrong == []
