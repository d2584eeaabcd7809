"""``bench/compare.py``'s arithmetic without running anything: the /proc stat parser, the CPU
of a process tree over a window, the peer's figures renamed, and the table's medians and ratios.
No timing: every number here is made up and checked exactly."""

from __future__ import annotations

import os

import pytest

from bench import proc_cpu
from bench.compare import peer_figures
from bench.compare_report import TIMES, cpu_ms_per_task, ratio, table, windows_growing

# proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
# utime stime cutime cstime ...; a comm may hold spaces and parentheses
LINE = "4242 (celery (worker) x) S 7 4242 4242 0 -1 4194560 10 0 0 0 250 50 30 20 20 0 9 0 1"


def test_a_stat_line_is_read_after_the_last_parenthesis_in_clock_ticks() -> None:
    s = proc_cpu.parse_stat(LINE, tick_s=0.01)
    assert (s.pid, s.comm, s.ppid) == (4242, "celery (worker) x", 7)
    assert (s.own, s.reaped) == (pytest.approx(3.0), pytest.approx(0.5))


def test_a_line_that_is_not_a_stat_line_is_refused() -> None:
    with pytest.raises(ValueError, match="not a /proc"):
        proc_cpu.parse_stat("4242 (short) S 1 2")


def test_this_process_reads_its_own_stat() -> None:
    s = proc_cpu.read_stat(os.getpid())
    assert s is not None and s.pid == os.getpid() and s.ppid == os.getppid()


def stat(pid: int, ppid: int, own: float, reaped: float = 0.0) -> proc_cpu.Stat:
    return proc_cpu.Stat(pid, "p", ppid, own, 0.0, reaped, 0.0)


def test_the_driver_counts_alone_and_each_child_counts_with_its_pool() -> None:
    stats = {
        1: stat(1, 0, 100.0),  # not ours
        10: stat(10, 1, 2.0, reaped=50.0),  # driver: its reaped children are not its own
        11: stat(11, 10, 3.0),  # redis-server
        12: stat(12, 10, 4.0, reaped=1.0),  # celery worker, one pool process replaced
        13: stat(13, 12, 5.0),  # its prefork children
        14: stat(14, 12, 6.0),
        99: stat(99, 1, 7.0),  # the broker, started elsewhere
    }
    assert proc_cpu.units(10, {"broker": 99}, stats) == {10: 2.0, 11: 3.0, 12: 16.0, 99: 7.0}


def test_a_window_interpolates_between_samples_and_counts_a_late_unit_from_zero() -> None:
    samples: list[proc_cpu.Sample] = [
        (100.0, {10: 1.0}),
        (102.0, {10: 3.0, 11: 4.0}),
        (104.0, {10: 7.0, 11: 6.0}),
    ]
    assert proc_cpu.window_cpu(samples, 101.0, 103.0) == {10: 3.0, 11: 5.0}
    assert proc_cpu.window_cpu(samples, 99.0, 110.0) == {10: 7.0, 11: 6.0}


def test_a_window_grows_when_its_p99_rises_by_a_second_and_by_half() -> None:
    assert windows_growing([0.2, 0.3, 0.25, 0.4, 0.3, 0.2]) == 0
    assert windows_growing([0.2, 1.5, 4.0, 9.0, None, 9.5]) == 3


def test_ratios_are_of_medians_and_missing_runs_leave_them_out() -> None:
    assert ratio([12.0, 14.0, None], [5.0, 7.0]) == pytest.approx(13.0 / 6.0)
    assert str(ratio([1.0], [])) == "nan"
    assert cpu_ms_per_task({"scheduler": 1.5, "workers": 2.5}, 1000) == pytest.approx(4.0)


def test_the_peer_figures_take_cronlog_bench_names() -> None:
    run = {
        "summary": {"lag_p50_s": 0.1, "lag_p99_s": 0.5, "lag_max_s": 2.0, "missing": 1},
        "lag_timeline": [{"p99_s": 0.2}, {"p99_s": 1.5}],
    }
    got = peer_figures("sustained", run)
    assert got == {
        "lag_p50_s": 0.1,
        "lag_p99_s": 0.5,
        "lag_max_s": 2.0,
        "missing": 1,
        "duplicates": 0,
        "window_p99_s": [0.2, 1.5],
        "windows_growing": 1,
    }


def run(system: str, last: float, cpu: float, load: float) -> dict[str, object]:
    return {
        "system": system,
        "workload": "burst5k",
        "load_at_start": [load, 0.0, 0.0],
        "tasks": 1000,
        "figures": {"last_started_s": last, "lag_p99_s": last / 2, "missing": 0, "duplicates": 0},
        "cpu_s": {"driver": cpu / 2, "broker": cpu / 2},
    }


def test_the_table_shows_each_run_the_ratio_the_loads_and_the_cpu_per_process() -> None:
    runs = [run("cronlog", 12.0, 4.0, 1.2), run("celery", 6.0, 1.0, 0.9)]
    runs += [run("cronlog", 14.0, 4.4, 1.5), run("celery", 7.0, 1.2, 1.1)]
    rows = table(runs, {"burst5k": "burst"}).splitlines()  # type: ignore[arg-type]
    assert rows[2] == (
        "| burst5k | last task started, s after the due second | 12.00, 14.00 | 6.00, 7.00 "
        f"| 2.00{TIMES} | A 1.2 B 0.9 A 1.5 B 1.1 |  |"
    )
    assert rows[-1] == (
        f"|  | CPU ms/task, every process | 4.00, 4.40 | 1.00, 1.20 | 3.82{TIMES} |  "
        "| cronlog: broker 2.10, driver 2.10; Celery + Redis: broker 0.55, driver 0.55 |"
    )
