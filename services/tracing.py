"""OpenTelemetry traces of a cronlog process: off by default, on through the standard ``OTEL_*``
environment variables.

``setup(service_name)`` runs first in each service's ``__main__``. It installs an SDK
``TracerProvider`` only when traces are asked for (``OTEL_TRACES_EXPORTER`` other than
``none``, or an OTLP endpoint variable set) and never when ``OTEL_SDK_DISABLED=true``; else the
API's no-op provider stays and the code's spans cost nothing (the fold does not even make them,
``topology/fold/spans.py``). The SDK reads the rest of the environment itself: the resource
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the OTLP exporter's endpoint, headers and
timeout, the batch processor's ``OTEL_BSP_*``. Spans and attributes: docs/architecture.md,
"Traces".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.environment_variables import OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_SDK_DISABLED,
)
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from cronlog.errors import CronlogError

log = logging.getLogger("cronlog.tracing")
EXPORTERS = ("otlp", "console")
"""The ``OTEL_TRACES_EXPORTER`` names understood (comma-separated; ``none`` exports nothing).
``otlp`` is OTLP over HTTP/protobuf, the one OTLP transport installed."""


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """Return the span exporters ``env`` asks for; empty: tracing stays off.

    Args:
        env: the process environment (``os.environ``).

    Returns:
        Names out of ``EXPORTERS``, in the order given. ``OTEL_SDK_DISABLED=true`` gives none;
        an unset ``OTEL_TRACES_EXPORTER`` gives ``["otlp"]`` only when an OTLP endpoint
        variable is set (the specification's default exporter is otlp, but cronlog does not
        trace unless asked to).

    Raises:
        CronlogError: an exporter name that is not in ``EXPORTERS``, or OTLP asked over a
            protocol other than http/protobuf; the message names the variable.
    """
    if env.get(OTEL_SDK_DISABLED, "").strip().lower() == "true":
        return []
    raw = env.get(OTEL_TRACES_EXPORTER, "").strip()
    if not raw:
        endpoint = env.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or env.get(
            OTEL_EXPORTER_OTLP_ENDPOINT
        )
        raw = "otlp" if endpoint else "none"
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in (*EXPORTERS, "none")]
    if unknown:
        raise CronlogError(
            f"{OTEL_TRACES_EXPORTER}: unknown span exporter {unknown[0]!r} "
            f"(known: {', '.join(EXPORTERS)}, none)"
        )
    names = [n for n in names if n != "none"]
    protocol = env.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) or env.get(OTEL_EXPORTER_OTLP_PROTOCOL)
    if "otlp" in names and protocol not in (None, "", "http/protobuf"):
        raise CronlogError(
            f"{OTEL_EXPORTER_OTLP_TRACES_PROTOCOL}/{OTEL_EXPORTER_OTLP_PROTOCOL}: {protocol!r} "
            "is not installed; cronlog exports OTLP over http/protobuf"
        )
    return names


def provider_from_env(service_name: str) -> TracerProvider | None:
    """Build (not install) the tracer provider the environment asks for.

    Args:
        service_name: ``service.name`` unless ``OTEL_SERVICE_NAME`` or
            ``OTEL_RESOURCE_ATTRIBUTES`` names one (e.g. ``cronlog-scheduler``).

    Returns:
        An SDK provider with one batch span processor per exporter, or None when tracing is
        off (``exporter_names`` is empty).

    Raises:
        CronlogError: as ``exporter_names``.
    """
    names = exporter_names(os.environ)
    if not names:
        return None
    named = SERVICE_NAME in OTELResourceDetector().detect().attributes
    resource = Resource.create() if named else Resource.create({SERVICE_NAME: service_name})
    provider = TracerProvider(resource=resource)  # shuts down (flushes) at exit by itself
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    # imported only when asked for: it pulls in requests and protobuf
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout, compression: OTEL_EXPORTER_OTLP_*


def setup(service_name: str) -> TracerProvider | None:
    """Install the provider ``provider_from_env`` builds as the global one, if tracing is on.

    Call once, first thing in a service's ``main`` (before anything asks for a tracer: the
    fold decides once, at construction, whether it makes spans at all).

    Args:
        service_name: the default ``service.name``.

    Returns:
        The installed provider (flushed and shut down at process exit by the SDK), or None:
        tracing is off and the API's no-op provider stays.

    Raises:
        CronlogError: as ``exporter_names``.
    """
    provider = provider_from_env(service_name)
    if provider is None:
        return None
    trace.set_tracer_provider(provider)
    log.info(
        "traces on",
        extra={
            "action": "tracing_on",
            "service_name": provider.resource.attributes.get(SERVICE_NAME),
            "exporters": ",".join(exporter_names(os.environ)),
        },
    )
    return provider
