"""``cronlog up``: broker (unless KAFKA_BOOTSTRAP), topics, scheduler, worker, API, snapshotter,
ingress relay; isolated by default (``services/cli/up_access.py``).

Everything it starts it stops on exit (Ctrl-C, SIGTERM or ``--duration``): the services with
SIGTERM, then SIGKILL after a grace period; the broker only if this command started it. A service
that exits meanwhile is reported and restarted, at most RESTARTS times within RESTART_WINDOW_S
(then everything stops): ``Supervisor``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from rich.console import Console
from rich.text import Text

from cronlog.errors import CronlogError
from services.api.settings import ApiSettings
from services.cli import broker_access, render, up_access, watch
from services.cli.client import ApiClient, ApiError, load_job_file
from services.cli.tokens_cmd import METRICS_TOKEN_FILE, local_admin_token, local_metrics_token
from services.logging_setup import configure_logging
from topology.kafka.bootstrap import ensure_topics

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("scheduler", "worker", "api", "snapshotter", "ingress")
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 20.0
"""Seconds the services get between SIGTERM and SIGKILL at least; more when the worker's drain
needs more (``stop_grace_s``)."""
RESTARTS = 3
RESTART_WINDOW_S = 60.0
"""A service that exits is restarted, unless it already was RESTARTS times within this many
seconds: then everything stops (a crash loop is shown, not hidden)."""
# Off a terminal (a file, CI) rich would wrap at 80 columns, splitting URLs: 200 then.
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200)


@dataclass
class Service:
    """One started service process and its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    restarts: int = 0
    """How many times ``Supervisor`` restarted this service."""

    def state(self) -> Text:
        """Return ``running`` (with its restarts) or ``exited <rc>``, coloured."""
        rc = self.proc.poll()
        if rc is not None:
            return Text(f"exited {rc}", "bold red")
        if self.restarts:
            return Text(f"running (restarted {self.restarts}x)", "yellow")
        return Text("running", "green")


class Supervisor:
    """Watches the services ``up`` started and restarts one that exited, like a supervisor.

    Each exit is reported on the terminal (exit status and the last lines of the service's
    log). More than ``max_restarts`` restarts of one service within ``window_s`` seconds raise
    instead, and ``up`` stops everything.

    Args:
        services: the running services; a restarted one replaces its entry in place.
        respawn: starts a service again by name (its log is appended to).
        max_restarts, window_s: the restart budget per service.
        out: where the reports go.
    """

    def __init__(
        self,
        services: list[Service],
        respawn: Callable[[str], Service],
        *,
        max_restarts: int = RESTARTS,
        window_s: float = RESTART_WINDOW_S,
        out: Console | None = None,
    ) -> None:
        self.services, self.respawn = services, respawn
        self.max_restarts, self.window_s = max_restarts, window_s
        self.out = out or console
        self._restarted: dict[str, deque[float]] = {}

    def check(self) -> list[str]:
        """Restart every service that exited; return the names restarted.

        Raises:
            CronlogError: a service exited once more than its restart budget allows.
        """
        restarted = []
        for i, s in enumerate(self.services):
            rc = s.proc.poll()
            if rc is None:
                continue
            s.log_file.close()
            recent = self._restarted.setdefault(s.name, deque())
            now = time.monotonic()
            while recent and now - recent[0] > self.window_s:
                recent.popleft()
            report = f"{s.name} (pid {s.proc.pid}) exited with {rc}; last lines of {s.log_path}:"
            if len(recent) >= self.max_restarts:
                raise CronlogError(
                    f"{report}\n{_tail(s.log_path)}\n{s.name} exited {len(recent) + 1} times "
                    f"within {self.window_s:.0f} s: stopping everything"
                )
            self.out.print(f"[bold red]{report}[/bold red]", highlight=False)
            self.out.print(_tail(s.log_path), highlight=False, markup=False)
            recent.append(now)
            fresh = self.respawn(s.name)
            fresh.restarts = s.restarts + 1
            self.services[i] = fresh
            self.out.print(
                f"[yellow]restarted {s.name} (pid {fresh.proc.pid}), restart {len(recent)} of "
                f"at most {self.max_restarts} within {self.window_s:.0f} s[/yellow]",
                highlight=False,
            )
            restarted.append(s.name)
        return restarted


def _sigterm_as_interrupt(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _ops_kafka(action: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    # argv is fixed: the project's own script and a literal action.
    return subprocess.run(  # noqa: S603
        [str(ROOT / "ops" / "kafka"), action],
        text=True,
        check=False,
        **kwargs,
    )


METRICS_PORTS = {"scheduler": 9464, "worker": 9465, "ingress": 9466}
"""The scheduler's, worker's and ingress relay's default ``CRONLOG_METRICS_PORT``."""


def _metrics_ports(env: dict[str, str]) -> dict[str, int]:
    """Each service's metrics port (a taken port would end the service: exit 70).

    ``CRONLOG_METRICS_PORT`` N > 0: the scheduler N, the worker N + 1, the ingress relay N + 2;
    0 (a free port each) or
    -1 (off): left to the services ({} returned). Unset: the defaults when free, else a free
    port each (another ``up`` on this machine has the defaults).
    """
    given = env.get("CRONLOG_METRICS_PORT", "").strip()
    if given:
        base = int(given) if given.lstrip("-").isdigit() else 0
        return {n: base + i for i, n in enumerate(METRICS_PORTS)} if base > 0 else {}
    ports: dict[str, int] = {}
    for name, port in METRICS_PORTS.items():
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.bind(("127.0.0.1", 0))
            ports[name] = s.getsockname()[1]
    return ports


def home() -> Path:
    """Return the directory of ``state/`` and ``.cache/logs``: ``CRONLOG_UP_HOME``, else the
    checkout. The services run there (their default state dirs are ``state/…``)."""
    return Path(os.environ.get("CRONLOG_UP_HOME") or ROOT).resolve()


def _spawn(name: str, env: dict[str, str], logs: Path, *, append: bool = False) -> Service:
    log_path = logs / f"{name}.log"
    log_file = log_path.open("ab" if append else "wb")
    # argv is fixed (this interpreter, a module of ours); own session: Ctrl-C reaches only us.
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", f"services.{name}"],
        cwd=logs.parent.parent,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Service(name, proc, log_path, log_file)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_ready(client: ApiClient, supervisor: Supervisor, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with console.status(f"waiting for {client.base_url}/readyz …"):
        while time.monotonic() < deadline:
            supervisor.check()
            try:
                client.request("GET", "/readyz")
                return
            except ApiError:
                time.sleep(0.5)
    raise CronlogError(f"the API was not ready within {timeout_s:.0f} s")


def _apply_examples(client: ApiClient) -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for body in load_job_file(path):
            action, answer = client.apply(body)
            console.print(f"{path.name}: {render.applied(body, action, answer)}")


def _show_live(client: ApiClient, supervisor: Supervisor, duration_s: float | None) -> None:
    def caption() -> Text:
        return Text("  ").join(Text.assemble(f"{s.name} ", s.state()) for s in supervisor.services)

    watch.watch(
        client,
        console,
        duration_s=duration_s,
        note=", Ctrl-C stops everything",
        check=supervisor.check,
        caption=caption,
    )


def _say_isolation(access: up_access.BrokerAccess) -> None:
    """Print what isolation is on (and, in yellow, what is off)."""
    broker_ok = access.secure
    tasks_ok, tasks = up_access.task_summary()
    for ok, line in ((broker_ok, access.summary), (tasks_ok, tasks)):
        style = "green" if ok else "yellow"
        console.print(f"[{style}]isolation[/{style}] {line}", highlight=False)


def stop_grace_s(env: dict[str, str]) -> float:
    """Seconds between SIGTERM and SIGKILL for the services of ``env``: at least STOP_GRACE_S
    and at least the worker's ``stop_budget_s()`` (its ``CRONLOG_DRAIN_S`` plus what a stop
    takes beyond it), so that a draining worker is never SIGKILLed mid-drain (issue 25: 20 s
    against a 30 s drain).

    Raises:
        CronlogError: the worker's settings in ``env`` are not valid (naming the field).
    """
    from pydantic import ValidationError

    from services.worker.settings import WorkerSettings

    drain = env.get("CRONLOG_DRAIN_S")
    try:
        # from this mapping alone (model_validate reads no environment)
        worker = WorkerSettings.model_validate({} if drain is None else {"drain_s": drain})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"])
        raise CronlogError(f"the worker's setting {field}: {err['msg']}") from exc
    return max(STOP_GRACE_S, worker.stop_budget_s())


def _stop(services: list[Service], grace_s: float) -> None:
    for s in reversed(services):  # api, worker, then scheduler
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for s in reversed(services):
        try:
            s.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            console.print(f"{s.name} did not stop within {grace_s:.0f} s: SIGKILL")
            os.killpg(s.proc.pid, signal.SIGKILL)
            s.proc.wait()
        s.log_file.close()
        console.print(f"{s.name} {_stopped(s.proc.returncode)}; log: {s.log_path}")


def _stopped(code: int | None) -> str:
    """Say how a service ended after our SIGTERM: 0 and death by that SIGTERM (uvicorn exits
    by the signal after its clean shutdown) are a clean stop; anything else is shown as is."""
    if code in (0, -signal.SIGTERM):
        return "stopped"
    return f"stopped with status {code}"


def run_up(examples: bool, duration_s: float | None, api_url: str | None) -> int:
    """Start the whole system, show runs until Ctrl-C/SIGTERM/``duration_s``, stop it all.

    Args:
        examples: apply ``examples/*.yaml`` once the API is ready.
        duration_s: stop by itself after this many seconds (None: until interrupted).
        api_url: the URL the API answers on; default ``http://CRONLOG_API_HOST:PORT``.

    Returns:
        The exit status: 0 after a clean run, 1 if something failed to start.
    """
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    services: list[Service] = []
    broker_started, status, grace_s = False, 0, STOP_GRACE_S
    top = home()
    up_access.lock_down(top)  # state/ and .cache/logs: the services' user's alone
    logs = top / ".cache" / "logs"
    # this process's own log lines (the topic bootstrap's: one broker, no redundancy) go to a
    # file like the services' lines: the terminal shows only the text written for people.
    # Warnings and worse unless CRONLOG_LOG_LEVEL says otherwise (httpx logs every request
    # of the live table at info).
    up_log = (logs / "up.log").open("a", encoding="utf-8")
    configure_logging("up", stream=up_log, default_level="warning", uncaught=False)
    try:
        access = up_access.broker_access(top, _ops_kafka, console.print)
        broker_started = access.started_here
        os.environ["KAFKA_BOOTSTRAP"] = access.bootstrap
        created = ensure_topics(access.admin)
        if access.secure:
            broker_access.grant_service(access.admin, access.service_password)
        console.print(
            f"Kafka at {access.bootstrap}; topics created: {', '.join(created) or 'none'}"
        )
        _say_isolation(access)
        token = local_admin_token(top / "state")
        metrics_token = local_metrics_token(top / "state")
        console.print(
            f"API token (tenant default, admin): {token}\n"
            "  the CLI reads it from state/api-token; other tools send it as "
            "'Authorization: Bearer …' (docs/tenants.md)\n"
            f"metrics token (platform tenant '*', viewer; for Prometheus): {metrics_token}\n"
            f"  kept in state/{METRICS_TOKEN_FILE}: /metrics takes no other tenant's token",
            highlight=False,
        )
        env = {**os.environ, **access.service_env}
        # the services run in `top`; their python tasks' modules (tests.unit.tasks_for_tests
        # by default) are the checkout's
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env.setdefault("CRONLOG_API_TOKENS_FILE", str(top / "state" / "api-tokens.json"))
        # A stable static-membership id: a restarted `up` takes over the previous scheduler's
        # group membership at once instead of waiting out its session timeout.
        env.setdefault("CRONLOG_INSTANCE_ID", "local-scheduler")
        ports = _metrics_ports(env)
        envs = {
            n: {**env, "CRONLOG_METRICS_PORT": str(ports[n])} if n in ports else env
            for n in SERVICES
        }
        grace_s = stop_grace_s(envs["worker"])  # >= the worker's drain, read from its settings
        for name in SERVICES:
            services.append(_spawn(name, envs[name], logs))
        console.print(
            f"started {', '.join(f'{s.name} (pid {s.proc.pid})' for s in services)}; logs in {logs}"
        )
        supervisor = Supervisor(services, lambda name: _spawn(name, envs[name], logs, append=True))
        settings = ApiSettings()
        host = "127.0.0.1" if settings.api_host in ("0.0.0.0", "::") else settings.api_host  # noqa: S104
        client = ApiClient(api_url or f"http://{host}:{settings.api_port}", token=token)
        _wait_ready(client, supervisor, READY_TIMEOUT_S)
        console.print(
            f"web console: {client.base_url}/ (sign in with the token above); metrics: "
            f"{client.base_url}/metrics (with the metrics token), "
            + (
                ", ".join(f"{n} http://127.0.0.1:{p}/metrics" for n, p in ports.items())
                if ports
                else "scheduler and worker: "
                + (
                    "off"
                    if env["CRONLOG_METRICS_PORT"].strip() == "-1"
                    else "free ports (their logs' action=metrics_serving line)"
                )
            )
            + " (docs/metrics.md)",
            highlight=False,
        )
        if examples:
            _apply_examples(client)
        _show_live(client, supervisor, duration_s)
    except KeyboardInterrupt:
        console.print("\nstopping …")
    except (CronlogError, ApiError) as exc:
        console.print(f"\n[red]error[/red] {exc}", highlight=False)
        status = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan them
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stop(services, grace_s)
        if broker_started:
            _ops_kafka("stop")
    return status
