"""The CLI's HTTP client of the API (the standard library's urllib), and job files: YAML in,
API bodies out."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronlog.errors import CronlogError
from cronlog.time import iso

DEFAULT_API = f"http://127.0.0.1:{os.environ.get('CRONLOG_API_PORT', '8080')}"
"""The API's URL unless ``--api``/``CRONLOG_API_URL`` says otherwise (follows CRONLOG_API_PORT)."""


TOKEN_FILE = Path(__file__).resolve().parents[2] / "state" / "api-token"
"""Where ``cronlog up`` leaves the local admin token for the CLI (mode 0600): the checkout's
``state/api-token``, whatever the working directory, unless ``CRONLOG_API_TOKEN_FILE`` names
another file."""


def token_file() -> Path:
    """Return the file the CLI reads its token from (``CRONLOG_API_TOKEN_FILE`` or
    ``TOKEN_FILE``)."""
    return Path(os.environ.get("CRONLOG_API_TOKEN_FILE") or TOKEN_FILE)


def api_token() -> str | None:
    """Return the bearer token the CLI sends: ``CRONLOG_API_TOKEN``, else the first line of
    ``token_file()``, else None (the API answers 401)."""
    token = os.environ.get("CRONLOG_API_TOKEN")
    if token:
        return token.strip()
    try:
        return token_file().read_text().strip().splitlines()[0] or None
    except (OSError, IndexError):
        return None


class ApiError(CronlogError):
    """The API answered with an error status (or could not be reached: ``status`` 0)."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail

    def describe(self) -> str:
        """Return the error for a human: 422s as ``field: message`` lines."""
        if self.status == 0:
            return str(self.detail)
        if isinstance(self.detail, list):
            lines = []
            for err in self.detail:
                loc = [str(p) for p in err.get("loc", ()) if p != "body"]
                lines.append(f"{'.'.join(loc) or '(request)'}: {err.get('msg')}")
            return f"HTTP {self.status}\n  " + "\n  ".join(lines)
        return f"HTTP {self.status}: {self.detail}"


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status code, body bytes, headers (names as sent)."""

    status_code: int
    content: bytes
    headers: dict[str, str]

    @property
    def text(self) -> str:
        """The body as text (UTF-8; undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON. Raises ValueError when it is not."""
        return json.loads(self.content)


def _query(params: dict[str, Any] | None) -> str:
    """``params`` as a query string; None values left out, booleans as ``true``/``false``."""
    if not params:
        return ""
    pairs = [
        (k, ("true" if v else "false") if isinstance(v, bool) else v)
        for k, v in params.items()
        if v is not None
    ]
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""


class ApiClient:
    """A thin client of ``/api/v1``; every method returns the decoded JSON answer.

    202 answers (the effect not yet visible) are returned as-is, with ``status: accepted``.
    The standard library's urllib, not httpx: the CLI answers a command in a fraction of a
    second of CPU, and httpx's import alone costs ~0.15 s here (bench/cli_startup.py).
    """

    def __init__(
        self, base_url: str = DEFAULT_API, timeout_s: float = 30.0, token: str | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        token = token or api_token()
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to close: each request opens and closes its own connection."""

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request and return the JSON answer.

        Raises:
            ApiError: status >= 400 (with the API's ``detail``), or status 0 when the API
                cannot be reached.
        """
        r = self.send(method, path, **kwargs)
        return r.json() if r.content else None

    def send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> Answer:
        """Send a request and return the answer (status < 400).

        Args:
            method: the HTTP method.
            path: the path under the API's URL, e.g. ``/api/v1/jobs``.
            params: query parameters (None values left out).
            json: a body to send as JSON; None sends none.

        Raises:
            ApiError: status >= 400 (with the API's ``detail``), or status 0 when the API
                cannot be reached or the connection broke.
        """
        r = self._exchange(method, path, params, json)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            if r.status_code == 401 and "Authorization" not in self._headers:
                detail = (
                    f"{detail} (the CLI found no token: set CRONLOG_API_TOKEN, or "
                    f"CRONLOG_API_TOKEN_FILE; {token_file()} does not exist)"
                )
            raise ApiError(r.status_code, detail)
        return r

    def _exchange(self, method: str, path: str, params: dict[str, Any] | None, body: Any) -> Answer:
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        url = self.base_url + path + _query(params)
        req = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                return Answer(resp.status, resp.read(), dict(resp.headers.items()))
        except urllib.error.HTTPError as exc:  # an answer with status >= 400
            with exc:
                return Answer(exc.code, exc.read(), dict(exc.headers.items()))
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, f"cannot reach the API at {self.base_url}: {reason}") from exc

    def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """Return every job (optionally only those with ``status``), following every page."""
        params = {"status": status, "limit": 1000}
        jobs, _ = self.listing("/api/v1/jobs", "jobs", params, follow=True)
        return jobs

    def listing(
        self,
        path: str,
        key: str,
        params: dict[str, Any],
        *,
        cursor: str | None = None,
        follow: bool = False,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Return the rows of a paged listing and the cursor of the page after them.

        Args:
            path: the listing's path (``/api/v1/jobs/{job_id}/runs``, ...).
            key: the answer's list field (``runs``, ``jobs``, ``dead_letters``).
            params: query parameters (None values are left out).
            cursor: start at this ``next_cursor`` (None: the first page).
            follow: follow ``next_cursor`` to the end (all rows).

        Returns:
            ``(rows, next_cursor)``: ``next_cursor`` is None at the end (always with ``follow``).
        """
        rows: list[dict[str, Any]] = []
        while True:
            query = {k: v for k, v in {**params, "cursor": cursor}.items() if v is not None}
            answer = self.request("GET", path, params=query)
            rows += answer[key]
            cursor = answer.get("next_cursor")
            if cursor is None or not follow:
                return rows, cursor

    def job(self, job_id: str) -> dict[str, Any]:
        """Return one job."""
        job: dict[str, Any] = self.request("GET", f"/api/v1/jobs/{job_id}")
        return job

    def runs(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """Return a job's runs, newest first."""
        answer = self.request("GET", f"/api/v1/jobs/{job_id}/runs", params={"limit": limit})
        runs: list[dict[str, Any]] = answer["runs"]
        return runs

    def run(self, run_id: str) -> dict[str, Any]:
        """Return one run."""
        run: dict[str, Any] = self.request("GET", f"/api/v1/runs/{run_id}")
        return run

    def log(
        self, run_id: str, task: str, attempt: int, epoch: int | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """Return an attempt's kept output and its ``X-Cronlog-*`` headers, lower-case names
        without the prefix (``log-complete``, ``log-truncated``, ``log-bytes-total``, ...)."""
        r = self.send(
            "GET",
            f"/api/v1/runs/{run_id}/tasks/{task}/attempts/{attempt}/log",
            params={"epoch": epoch} if epoch is not None else None,
        )
        info = {
            k.lower().removeprefix("x-cronlog-"): v
            for k, v in r.headers.items()
            if k.lower().startswith("x-cronlog-")
        }
        return r.content, info

    def log_json(
        self, run_id: str, task: str, attempt: int, epoch: int | None = None
    ) -> dict[str, Any]:
        """Return an attempt's log as the API's JSON variant (``text`` and the totals)."""
        params: dict[str, Any] = {"format": "json"} | ({"epoch": epoch} if epoch else {})
        doc: dict[str, Any] = self.request(
            "GET", f"/api/v1/runs/{run_id}/tasks/{task}/attempts/{attempt}/log", params=params
        )
        return doc

    def ticks(self, job_id: str, count: int = 10, after: str | None = None) -> dict[str, Any]:
        """Return a job's next ticks ``{job_id, ticks: [{utc, local}]}`` (preview)."""
        params: dict[str, Any] = {"count": count} | ({"after": after} if after else {})
        answer: dict[str, Any] = self.request("GET", f"/api/v1/jobs/{job_id}/ticks", params=params)
        return answer

    def skipped(self, job_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """Return a job's skipped ticks ``[{scheduled_for, reason, at}]``, newest first."""
        answer = self.request("GET", f"/api/v1/jobs/{job_id}/skipped", params={"limit": limit})
        skipped: list[dict[str, Any]] = answer["skipped"]
        return skipped

    def patch(self, job_id: str, body: dict[str, Any]) -> Any:
        """PATCH a job (``{"paused": bool}`` and/or a merge-patch of its definition)."""
        return self.request("PATCH", f"/api/v1/jobs/{job_id}", json=body)

    def delete(self, job_id: str) -> Any:
        """Delete a job (its history stays readable)."""
        return self.request("DELETE", f"/api/v1/jobs/{job_id}")

    def trigger(self, job_id: str) -> Any:
        """Start one manual run of a job now."""
        return self.request("POST", f"/api/v1/jobs/{job_id}/trigger")

    def cancel(self, run_id: str, task: str | None = None) -> Any:
        """Cancel a run, or only its task ``task``; returns the run."""
        return self.request("POST", f"/api/v1/runs/{run_id}/cancel", json={"task": task})

    def rerun(self, run_id: str, task: str, downstream: bool = False) -> Any:
        """Run ``task`` of a run again (and everything downstream with ``downstream``)."""
        return self.request(
            "POST", f"/api/v1/runs/{run_id}/tasks/{task}/retry", json={"downstream": downstream}
        )

    def workers(self, include_lost: bool = False) -> list[dict[str, Any]]:
        """Return the workers that heartbeat, by worker_id (lost ones with ``include_lost``)."""
        params = {"include_lost": "true"} if include_lost else None
        workers: list[dict[str, Any]] = self.request("GET", "/api/v1/workers", params=params)[
            "workers"
        ]
        return workers

    def replay(self, body: dict[str, Any]) -> Any:
        """Replay dead letters (``{run_id, task}``, ``{job_id}`` or ``{since, until}``)."""
        return self.request("POST", "/api/v1/dead-letters/replay", json=body)

    def backfill(self, job_id: str, body: dict[str, Any]) -> Any:
        """Create runs for a job's ticks in (start, end] (``{start, end, reprocess, dry_run,
        max_runs}``), or list them with ``dry_run``."""
        return self.request("POST", f"/api/v1/jobs/{job_id}/backfill", json=body)

    def apply(self, body: dict[str, Any]) -> tuple[str, Any]:
        """Create a job, or replace the definition of the live job with the same job_id.

        Returns:
            ``("created", answer)`` or ``("updated", job)``; a 202 answer is returned as is.

        Idempotency: applying the same body twice leaves the job as the first apply did.
        """
        try:
            return "created", self.request("POST", "/api/v1/jobs", json=body)
        except ApiError as exc:
            if exc.status != 409 or not body.get("job_id"):
                raise
        return "updated", self.patch(body["job_id"], full_definition(body))


def full_definition(body: dict[str, Any]) -> dict[str, Any]:
    """Return ``body``'s definition as a merge-patch that replaces every field.

    Fields absent from ``body`` are sent as null, which resets them to their defaults (RFC
    7396), so ``apply`` is declarative: the job ends up exactly as the file says.
    """
    # the API's request models (pydantic), imported by the one command that needs them
    from services.api.shapes.definition import JobDefinition, RetryPolicyIn, ScheduleIn

    out: dict[str, Any] = {k: body.get(k) for k in JobDefinition.model_fields}
    nested = (("schedule", ScheduleIn.model_fields), ("retry_policy", RetryPolicyIn.model_fields))
    for name, fields in nested:
        if isinstance(out[name], dict):
            out[name] = {f: out[name].get(f) for f in fields} | out[name]
    return out


def load_job_file(path: Path, now: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Yield the API bodies of the jobs in a YAML file (one job per YAML document).

    ``schedule.run_in_s`` (CLI only) becomes ``schedule.run_at`` = now + run_in_s.

    Args:
        path: the YAML file.
        now: the instant ``run_in_s`` counts from; default: the wall clock, UTC.

    Raises:
        CronlogError: the file is not YAML or a document is not a mapping.
    """
    import yaml  # only the commands that read job files need it

    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise CronlogError(f"{path}: {exc}") from exc
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise CronlogError(f"{path}: a job must be a mapping, got {type(doc).__name__}")
        schedule = doc.get("schedule")
        if isinstance(schedule, dict) and "run_in_s" in schedule:
            start = now or datetime.now(UTC)
            schedule = dict(schedule)
            schedule["run_at"] = iso(start + timedelta(seconds=float(schedule.pop("run_in_s"))))
            doc = {**doc, "schedule": schedule}
        yield doc
