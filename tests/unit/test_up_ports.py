"""``cronlog up`` picks the services' metrics ports so that a second ``up`` on one machine
does not end its scheduler on a taken port."""

from __future__ import annotations

import contextlib
import socket

from services.cli.up import METRICS_PORTS, _metrics_ports


def test_free_defaults_are_used_and_a_taken_one_is_replaced_by_a_free_port() -> None:
    with socket.socket() as held:
        with contextlib.suppress(OSError):  # taken by something else already: the same case
            held.bind(("127.0.0.1", METRICS_PORTS["scheduler"]))
        ports = _metrics_ports({})
    assert set(ports) == {"scheduler", "worker", "ingress"}
    assert ports["scheduler"] != METRICS_PORTS["scheduler"]
    assert all(p > 0 for p in ports.values())
    assert len(set(ports.values())) == 3


def test_an_explicit_port_is_the_schedulers_and_the_next_ones_the_worker_and_relay() -> None:
    assert _metrics_ports({"CRONLOG_METRICS_PORT": "19464"}) == {
        "scheduler": 19464,
        "worker": 19465,
        "ingress": 19466,
    }
    assert _metrics_ports({"CRONLOG_METRICS_PORT": "0"}) == {}  # a free one each
    assert _metrics_ports({"CRONLOG_METRICS_PORT": "-1"}) == {}  # off
