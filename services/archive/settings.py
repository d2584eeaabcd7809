"""Settings of the archive exporter and of ``cronlog history`` (env prefix ``CRONLOG_``)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, SecretStr, field_validator

from topology.kafka.config import KafkaSettings


class ArchiveSettings(KafkaSettings):
    """Where the archive lives, what counts as old enough, how files are cut.

    Attributes:
        archive_dest: a local directory, or ``s3://bucket/prefix`` for an S3-compatible
            bucket (env ``CRONLOG_ARCHIVE_DEST``). Default ``state/archive``.
        archive_hot_window: how long run-events stay only on the topic before they are
            archived; a number of seconds or an ISO-8601 duration (``P30D``). Default 30
            days (the topic's retention must be longer: docs/history.md). Tests use seconds.
        archive_interval: between two exports of ``python -m services.archive``. Default 1 h.
        archive_file_rows: most rows per Parquet file; a (day, tenant) with more gets more
            files. Default 1,000,000.
        archive_row_group_rows: rows per Parquet row group (the unit a reader skips by its
            statistics). Default 100,000.
        archive_s3_endpoint: the S3-compatible server, e.g. ``http://127.0.0.1:9000``
            (pyarrow's ``endpoint_override``; the scheme picks http or https). Empty: AWS.
        archive_s3_region: the bucket's region. Default ``us-east-1``.
        archive_s3_access_key, archive_s3_secret_key: credentials; empty: pyarrow's default
            chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profile, instance role).
            The secret is never logged or shown in a repr.
    """

    archive_dest: str = "state/archive"
    archive_hot_window: timedelta = timedelta(days=30)
    archive_interval: timedelta = timedelta(hours=1)
    archive_file_rows: int = Field(default=1_000_000, ge=1)
    archive_row_group_rows: int = Field(default=100_000, ge=1)
    archive_s3_endpoint: str = ""
    archive_s3_region: str = "us-east-1"
    archive_s3_access_key: str = ""
    archive_s3_secret_key: SecretStr = SecretStr("")

    @field_validator("archive_hot_window", "archive_interval", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        # an environment variable is a string: "5" means 5 seconds, as a number would
        if isinstance(value, str):
            try:
                return timedelta(seconds=float(value))
            except ValueError:
                return value
        return value

    @field_validator("archive_hot_window", "archive_interval")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError(f"must be positive, got {value}")
        return value

    @field_validator("archive_dest")
    @classmethod
    def _dest(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("archive_dest is empty: give a directory or s3://bucket/prefix")
        if value.startswith("s3://") and not value.removeprefix("s3://").strip("/"):
            raise ValueError(f"archive_dest {value!r} names no bucket")
        return value
