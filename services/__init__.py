"""cronlog's processes, a subpackage each: scheduler, worker, api, snapshotter, archive, cli.

``tracing`` (OpenTelemetry set-up) and ``metrics_http`` (the Prometheus server of the
scheduler and the worker) are shared by them.
"""
