# One image for the scheduler, worker, API, snapshotter, ingress relay and the set-up steps
# (docker-compose.yml picks the command).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cronlog cronlog
COPY cronlog_client cronlog_client
COPY topology topology
COPY services services
COPY schemas schemas
COPY examples examples
RUN pip install --no-cache-dir .
# The unprivileged user the worker (root) starts exec/shell tasks as (docs/security.md).
RUN useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    --user-group cronlog-task
ENV PYTHONUNBUFFERED=1
CMD ["python", "-m", "services.scheduler"]
