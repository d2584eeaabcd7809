# One image for the scheduler, worker and API (docker-compose.yml picks the module).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cronlog cronlog
COPY topology topology
COPY services services
COPY schemas schemas
COPY examples examples
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
CMD ["python", "-m", "services.scheduler"]
