"""The commit-message check (``ops/commit-msg``): the rules as data, then the hook and the
history check against a throwaway git repository."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ops" / "commit-msg"


def _load() -> ModuleType:
    loader = SourceFileLoader("commit_msg", str(SCRIPT))  # a script: no .py to import by
    spec = spec_from_loader("commit_msg", loader)
    assert spec is not None
    module = module_from_spec(spec)
    sys.modules["commit_msg"] = module  # dataclasses look their module up while they are made
    loader.exec_module(module)
    return module


commit_msg = _load()
Size = commit_msg.Size
SMALL = Size(files=1, lines=20)
"""The largest change that may say all in its subject."""
S72, S73 = "a" * 72, "b" * 73
NO_BLANK = "no blank line between the subject and the body"
TOO_LONG = "the subject has 73 characters, over 72"


def no_body(files: int, lines: int) -> str:
    return (
        f"no body: the commit changes {files} file(s), {lines} line(s);"
        " above 1 file or 20 lines a body says why"
    )


@pytest.mark.parametrize(
    ("message", "size", "expected"),
    [
        (S72, SMALL, []),
        (f"{S72}\n", SMALL, []),
        (S73, SMALL, [TOO_LONG]),
        (f"{S72}\n\nWhy it changes.\n", Size(9, 900), []),
        (f"{S73}\n\nWhy it changes.\n", Size(9, 900), [TOO_LONG]),
        ("Subject\nbody on the second line\n", SMALL, [NO_BLANK]),
        (f"{S73}\nbody on the second line\n", SMALL, [TOO_LONG, NO_BLANK]),
        ("", SMALL, ["the subject (first line) is empty"]),
        ("Two files, no body", Size(2, 2), [no_body(2, 2)]),
        ("Twenty-one lines, no body", Size(1, 21), [no_body(1, 21)]),
        ("Merge branch 'x'", None, []),
        ("Merge branch 'x'\nsecond line", None, [NO_BLANK]),
    ],
    ids=[
        "72 chars",
        "72 chars and a newline",
        "73 chars",
        "72 chars and a body",
        "73 chars and a body",
        "no blank line",
        "73 chars, no blank line",
        "empty",
        "2 files without a body",
        "21 lines without a body",
        "a merge without a body",
        "a merge without a blank line",
    ],
)
def test_the_rules(message: str, size: object, expected: list[str]) -> None:
    assert commit_msg.problems(message, size) == expected


def test_numstat_counts_files_and_lines_and_a_binary_as_no_lines() -> None:
    numstat = "3\t1\ta.py\n-\t-\timage.png\n10\t0\t{old => new}/b.py\n"
    assert commit_msg.numstat_size(numstat) == Size(files=3, lines=14)
    assert commit_msg.numstat_size("") == Size(files=0, lines=0)


# --- against a git repository ---------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty git repository, the working directory; no user or system git config."""
    monkeypatch.chdir(tmp_path)
    for name, value in {
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):  # set when run from a hook
        monkeypatch.delenv(name, raising=False)
    git("init", "-q", "-b", "main")
    return tmp_path


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def commit(message: str, **files: str) -> str:
    """Write ``files`` (name -> text), stage them and commit with ``message``; return the sha."""
    for name, text in files.items():
        Path(name).write_text(text)
    git("add", "-A")
    git("commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    return git("rev-parse", "HEAD").strip()


def run(*args: str) -> tuple[int, str, str]:
    """Run ops/commit-msg with ``args``; return its exit status, stdout and stderr."""
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def test_the_hook_reads_the_message_as_git_wrote_it_and_sizes_the_staged_change(
    repo: Path,
) -> None:
    commit("Start", a="1\n")
    Path("a").write_text("2\n")
    Path("b").write_text("new\n")
    git("add", "-A")
    message = repo / "COMMIT_EDITMSG"
    message.write_text(
        "Change a and add b\n# Please enter the commit message\n"
        "# ------------------------ >8 ------------------------\ndiff --git a/a b/a\n"
    )
    status, _, err = run(str(message))
    assert status == 1
    assert no_body(2, 3) in err
    message.write_text("Change a and add b\n\n# a comment\nb is needed by a.\n")
    assert run(str(message))[0] == 0
    message.write_text(f"fixup! {S72}\n")
    assert run(str(message))[0] == 0  # squashed before it lands


def test_history_checks_each_commit_since_the_base_and_merges_obey_too(repo: Path) -> None:
    base = commit(f"{S73}\n\nBefore the base: never checked.", a="1\n")
    commit("Small change", a="2\n")
    git("checkout", "-q", "-b", "side")
    bad = commit("Two files without a body", b="b\n", c="c\n")
    git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "--no-verify", "-m", "Merge branch 'side'", "side")
    status, out, err = run("--since", base)
    assert status == 1
    assert "messages checked: 3 commits, 1 problems" in out
    assert (
        err.splitlines()[0]
        == f"[commit-msg] {bad[:10]} 'Two files without a body': {no_body(2, 2)}"
    )


def test_a_shallow_clone_says_the_base_is_missing_and_checks_the_last_commit_only(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = commit("Base", a="1\n")
    commit(f"{S73}\n\nAn old habit, not the last commit.", b="b\n", c="c\n")
    commit("Small change", a="3\n")  # the clone's root: its diff against nothing is 3 files
    git("clone", "-q", "--depth", "1", f"file://{repo}", "shallow")
    monkeypatch.chdir(repo / "shallow")
    status, out, _ = run("--since", base)
    assert status == 0
    assert out.splitlines() == [
        f"[commit-msg] {base} is not in this clone (shallow?): checking HEAD only",
        "[commit-msg] messages checked: 1 commits, 0 problems",
    ]
    commit(S73, a="4\n")  # the last commit is still checked
    assert run("--since", base)[0] == 1


def test_a_base_that_is_not_an_ancestor_of_head_checks_the_last_commit_only(repo: Path) -> None:
    commit("Start", a="1\n")
    git("checkout", "-q", "-b", "side")
    elsewhere = commit("Elsewhere", b="1\n")
    git("checkout", "-q", "main")
    commit(f"{S73}\n\nAn old habit, not the last commit.", a="2\n")
    commit("Small change", a="3\n")
    status, out, _ = run("--since", elsewhere)
    assert status == 0
    assert f"{elsewhere} is not an ancestor of HEAD: checking HEAD only" in out


def test_outside_a_repository_it_cannot_check_and_ends_70(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-message"
    status, _, err = run(str(missing))
    assert status == 70
    assert err.startswith("[commit-msg] cannot check: ")
