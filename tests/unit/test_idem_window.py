"""The idem_key window's limit, from the adversarial run (exp8): a command re-delivered after
its key left the job record's marker window is applied again (DESIGN.md invariant 5 says
it must be a no-op). Open: the record remembers only the last 128 user commands' keys."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.ids import run_id_for_trigger
from cronlog.job import MAX_APPLIED_MARKERS, JobState
from tests.builders import JOB, SPEC, T0, at, claim, complete, given, registered


def _send(
    state: JobState | None, key: str, command: cmd.Command
) -> tuple[JobState | None, list[ev.Event]]:
    return handle(state, cmd.Envelope(idem_key=key, job_id=JOB, command=command), at(minutes=1))


@pytest.mark.xfail(
    strict=True,
    reason="open: dedupe markers are bounded (MAX_APPLIED_MARKERS user commands per job); an "
    "older re-delivered command is applied again and re-uses its event_ids with new content",
)
def test_a_trigger_re_delivered_after_the_marker_window_is_a_no_op() -> None:
    state: JobState | None = given(registered(SPEC), clock=T0)
    state, events = _send(state, "trigger-first", cmd.TriggerJob())
    run_id = run_id_for_trigger(JOB, "trigger-first")
    assert any(isinstance(e, ev.RunScheduled) for e in events)
    state, _ = _send(state, "claim", claim(run_id=run_id))
    state, _ = _send(state, "done", replace(complete(), run_id=run_id))
    assert state is not None and state.run(run_id) is None  # the run ended
    for i in range(MAX_APPLIED_MARKERS):
        command = cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob()
        state, _ = _send(state, f"op-{i}", command)
    _, again = _send(state, "trigger-first", cmd.TriggerJob())
    assert again == []
