"""Serve one process's Prometheus registry over HTTP (prometheus_client's own server).

Shared by the scheduler and the worker (``services/*/metrics.py``): port ``-1`` serves nothing,
``0`` an ephemeral port; the bound URL is logged ``action=metrics_serving url=...`` so that
people and tests find it. A port that cannot be bound ends the process (``fatal``): metrics
that silently went missing would look like a healthy, idle process.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

from topology.kafka.retrying import fatal

log = logging.getLogger("cronlog.metrics")
OFF = -1
"""The port setting that serves no metrics."""


def metrics_url(host: str, port: int) -> str:
    """Return the scrape URL of ``host``:``port`` (an IPv6 literal in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/metrics"


def serve(registry: CollectorRegistry, port: int, host: str) -> str | None:
    """Serve ``registry`` at ``http://host:port/metrics`` in a daemon thread.

    Args:
        registry: what to expose.
        port: TCP port; 0 picks an ephemeral one, -1 (``OFF``) serves nothing.
        host: the interface to bind (``127.0.0.1``: this machine only).

    Returns:
        The URL served (with the bound port), or None when ``port`` is -1.

    Raises:
        ValueError: ``port`` is below -1 or above 65535 (the settings refuse those first).

    The process exits (``topology.kafka.retrying.fatal``, exit 70) when the port cannot be bound.
    """
    if port == OFF:
        log.info("CRONLOG_METRICS_PORT is -1", extra={"action": "metrics_off"})
        return None
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics_port: {port} is not a TCP port, 0 (ephemeral) or -1 (off)")
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        fatal("metrics", f"cannot serve metrics on {host}:{port}: {exc}")
    url = metrics_url(host, server.server_port)
    log.info("serving metrics", extra={"action": "metrics_serving", "url": url})
    return url
