"""The http task kind: one request (httpx, asyncio) to a checked address.

Timeout or revoke cancels the request. Before it is sent, the URL's host is resolved and every
address checked against the worker's ``AddressPolicy`` (``services/worker/reach.py``): a
loopback, link-local, private, reserved, multicast or otherwise not globally routable
destination fails the attempt (``spawn_error``, the reason as its output) unless
``CRONLOG_HTTP_ALLOW`` lists it. The request then goes to the checked address itself (the
``Host`` header and, for https, the TLS server name and certificate check stay the URL's
host), so a second DNS answer cannot point it elsewhere (DNS rebinding). Redirects are not
followed, and no proxy or ``.netrc`` of the worker's environment is used (``trust_env`` off).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import httpx

from cronlog.model import HttpTask
from cronlog.vocabulary import FailureKind
from services.worker.execute import DISCARD, Outcome, Output, tail
from services.worker.reach import AddressPolicy, DestinationRefused, checked_addresses

DEFAULT_PORTS = {"http": 80, "https": 443}


class HttpExecution:
    """An http task: one request; success when the status is in the task's success set."""

    def __init__(
        self,
        task: HttpTask,
        context_headers: dict[str, str],
        timeout_s: float,
        output: Output = DISCARD,
        policy: AddressPolicy | None = None,
    ) -> None:
        self.task, self.context_headers, self.timeout_s = task, context_headers, timeout_s
        self.output = output
        self.policy = policy or AddressPolicy()
        """Where the request may go; default: globally routable addresses only."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._request: asyncio.Task[Any] | None = None
        self._killed = False

    def kill(self) -> None:
        """Cancel the request."""
        with self._lock:
            self._killed = True
            if self._loop is not None and self._request is not None:
                self._loop.call_soon_threadsafe(self._request.cancel)

    def run(self) -> Outcome:
        """Send the request and return the outcome. Blocks."""
        started = datetime.now(UTC)
        try:
            response = asyncio.run(self._send())
        except TimeoutError:
            return self._failed(
                FailureKind.TIMEOUT, f"no response within {self.timeout_s:g} s", started
            )
        except asyncio.CancelledError:
            return self._failed(FailureKind.NONZERO_EXIT, "request cancelled", started)
        except DestinationRefused as exc:
            return self._failed(FailureKind.SPAWN_ERROR, str(exc), started)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return self._failed(FailureKind.SPAWN_ERROR, f"{type(exc).__name__}: {exc}", started)
        codes = self.task.success_codes
        ok = response.status_code in codes if codes else 200 <= response.status_code < 300
        # The log: the status line, then the body's bytes (the sink keeps its head, up to the cap).
        self.output.write(
            f"{response.http_version} {response.status_code} {response.reason_phrase}\n".encode()
        )
        self.output.write(response.content)
        output = tail(f"HTTP {response.status_code}\n{response.text}")
        return Outcome(
            0 if ok else response.status_code,
            None if ok else FailureKind.NONZERO_EXIT,
            output,
            started,
            datetime.now(UTC),
        )

    def _failed(self, kind: FailureKind, why: str, started: datetime) -> Outcome:
        self.output.write(why.encode())
        return Outcome(None, kind, why, started, datetime.now(UTC))

    async def _send(self) -> httpx.Response:
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._request = asyncio.current_task()
            if self._killed:
                raise asyncio.CancelledError
        return await asyncio.wait_for(self._checked_request(), self.timeout_s)

    async def _checked_request(self) -> httpx.Response:
        """Resolve and check the destination, then send the request to its first address
        that accepts a connection (resolver order)."""
        url = httpx.URL(self.task.url)
        host = url.raw_host.decode("ascii")  # IDNA-encoded; an IPv6 literal without brackets
        port = url.port or DEFAULT_PORTS.get(url.scheme, 80)
        addresses = await checked_addresses(host, port, self.policy)
        headers = [(h.name, h.value) for h in self.task.headers]
        if not any(name.lower() == "host" for name, _ in headers):
            headers.insert(0, ("Host", url.netloc.decode("ascii")))
        headers += list(self.context_headers.items())
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
            for address in addresses[:-1]:
                try:
                    return await self._request_to(client, url, address, headers)
                except httpx.ConnectError:
                    continue  # the next address (no request was sent)
            return await self._request_to(client, url, addresses[-1], headers)

    async def _request_to(
        self,
        client: httpx.AsyncClient,
        url: httpx.URL,
        address: str,
        headers: list[tuple[str, str]],
    ) -> httpx.Response:
        return await client.request(
            self.task.method,
            url.copy_with(host=address),
            headers=headers,
            content=None if self.task.body is None else self.task.body.encode(),
            extensions={"sni_hostname": url.raw_host.decode("ascii")}
            if url.scheme == "https"
            else {},
        )
