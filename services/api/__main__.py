"""``python -m services.api``: serve the API with uvicorn on CRONLOG_API_HOST:CRONLOG_API_PORT."""

from __future__ import annotations

import logging
from types import FrameType

import uvicorn

from services import tracing
from services.api import console
from services.api.app import create_app
from services.api.settings import ApiSettings
from services.logging_setup import configure_logging
from topology.kafka.bootstrap import ensure_topics_retrying


def main() -> None:
    """Run the API until SIGTERM/SIGINT (uvicorn handles both gracefully)."""
    configure_logging("api")  # the settings line is the lifespan's (action=api.start)
    settings = ApiSettings()
    tracing.setup("cronlog-api")  # off unless OTEL_* asks for traces
    ensure_topics_retrying(settings)  # idempotent; any service may start first
    app = create_app(settings)
    # log_config=None: uvicorn's loggers keep no handler of their own, so their lines go
    # through the one set-up above like every other
    config = uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,
        log_level=logging.getLogger().level,
    )
    server = uvicorn.Server(config)
    exit_server = server.handle_exit

    def handle_exit(sig: int, frame: FrameType | None) -> None:
        console.shutdown_streams(app)  # open SSE streams end, so the graceful exit does not wait
        exit_server(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    server.run()


if __name__ == "__main__":
    main()
