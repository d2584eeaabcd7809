"""What a task can reach: its environment, its user, its python modules, its http destinations.

Any tenant may register a task, and every task runs on a worker that holds Kafka credentials
and sits inside the deployment's network. This module is the worker's policy for the four
ways a task could reach further than its tenant may (issue 14, item 6; docs/security.md,
"What a task can reach"):

- exec/shell tasks get a clean environment (``task_env``): a few harmless variables of the
  worker's, the deployment's ``CRONLOG_TASK_ENV_PASS`` names, and the task's own context;
- exec/shell tasks run as an unprivileged user in a private directory of their own
  (``services/worker/sandbox.py``: ``TaskUser``, ``TaskDirs``);
- python tasks run only from modules under ``CRONLOG_PYTHON_MODULES`` (``python_refusal``);
- http tasks reach only globally routable addresses, or what ``CRONLOG_HTTP_ALLOW`` lists
  (``AddressPolicy``, ``checked_address``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.worker.sandbox import TaskDirs, TaskUser

HARMLESS_ENV = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR"})
"""Variables of the worker's environment every exec/shell task gets (and ``LC_*``)."""
SECRET_NAME = re.compile(
    r"^CRONLOG_|KAFKA|SASL|PASSW|SECRET|TOKEN|KEY|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE
)
"""Names never passed from the worker to a task, whatever the settings say."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_PYTHON_MODULES = "tests.unit.tasks_for_tests"
"""The default of ``CRONLOG_PYTHON_MODULES``: only the repository's harmless test functions
(what the tests, the benches and the chaos runs call); a deployment names its own."""
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def split_list(text: str) -> tuple[str, ...]:
    """Return the non-empty, stripped items of a comma-separated setting."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


# -- environment --------------------------------------------------------------------------------


def check_env_pass(text: str) -> tuple[str, ...]:
    """Parse ``CRONLOG_TASK_ENV_PASS``: variable names a deployment passes to its tasks.

    Raises:
        ValueError: a name that is not a variable name, or one that looks like a secret or
            like cronlog's own (``SECRET_NAME``): those never reach a task.
    """
    names = split_list(text)
    for name in names:
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"CRONLOG_TASK_ENV_PASS: {name!r} is not a variable name")
        if SECRET_NAME.search(name):
            raise ValueError(
                f"CRONLOG_TASK_ENV_PASS: {name!r} looks like a secret or a cronlog setting; "
                "every tenant's tasks would get it (docs/security.md, 'What a task can reach')"
            )
    return names


def task_env(
    worker_env: Mapping[str, str],
    context: Mapping[str, str],
    passed: Iterable[str] = (),
    user: TaskUser | None = None,
) -> dict[str, str]:
    """Return the environment of an exec/shell task.

    Args:
        worker_env: the worker's environment (``os.environ``).
        context: the task's ``CRONLOG_*`` context variables (always set, last).
        passed: more names taken from ``worker_env`` (``CRONLOG_TASK_ENV_PASS``).
        user: the task's user, if it runs as one: ``HOME``, ``USER`` and ``LOGNAME`` are its.

    Returns:
        ``HARMLESS_ENV`` and ``LC_*`` and ``passed`` from ``worker_env`` except any name
        matching ``SECRET_NAME``, ``PATH`` (``os.defpath`` when the worker has none), then
        ``context``.
    """
    wanted = HARMLESS_ENV | set(passed)
    env = {
        name: value
        for name, value in worker_env.items()
        if (name in wanted or name.startswith("LC_")) and not SECRET_NAME.search(name)
    }
    env.setdefault("PATH", os.defpath)
    if user is not None:
        env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    return {**env, **context}


# -- python modules ----------------------------------------------------------------------------


def check_python_modules(text: str) -> tuple[str, ...]:
    """Parse ``CRONLOG_PYTHON_MODULES``: module prefixes python tasks may come from.

    ``myteam.`` and ``myteam`` both allow the module ``myteam`` and every ``myteam.*``; not
    ``myteamx``. Empty: no python task runs.

    Raises:
        ValueError: an entry that is not a dotted module name.
    """
    prefixes = tuple(p.rstrip(".") for p in split_list(text))
    for prefix in prefixes:
        if not _MODULE.fullmatch(prefix):
            raise ValueError(f"CRONLOG_PYTHON_MODULES: {prefix!r} is not a module name")
    return prefixes


def module_allowed(module: str, prefixes: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``prefixes`` or inside one of them (on dots)."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def python_refusal(ref: str, prefixes: tuple[str, ...]) -> str | None:
    """Return why the python task ``module:function`` may not run here, or None if it may."""
    module = ref.partition(":")[0]
    if module_allowed(module, prefixes):
        return None
    allowed = ", ".join(prefixes) if prefixes else "none: python tasks are off"
    return (
        f"python task module {module!r} is outside the modules this worker runs "
        f"(CRONLOG_PYTHON_MODULES: {allowed})"
    )


def callable_refusal(obj: object, ref: str, prefixes: tuple[str, ...]) -> str | None:
    """Return why the object ``ref`` names may not be called, or None.

    The module of the ``ref`` is allowed (``python_refusal``), but it may re-export a function
    of another module (``from os import system``): the object's own ``__module__`` must be
    allowed too.
    """
    home = getattr(obj, "__module__", None)
    if isinstance(home, str) and module_allowed(home, prefixes):
        return None
    return (
        f"python task {ref!r} names a function of module {home!r}, outside the modules this "
        f"worker runs (CRONLOG_PYTHON_MODULES: {', '.join(prefixes)})"
    )


# -- http destinations -------------------------------------------------------------------------


class DestinationRefused(Exception):
    """An http task's destination is one this worker may not reach."""


def address_refusal(ip: IPAddress) -> str | None:
    """Return what makes ``ip`` a destination tasks may not reach by default, or None.

    An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) is judged as its IPv4 address.
    """
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for what in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):
        if getattr(ip, f"is_{what}"):
            return what.replace("_", "-")
    if not ip.is_global:
        return "not globally routable"
    return None


def _parse_allow_entry(entry: str) -> IPNetwork | str:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        if _HOST.fullmatch(entry) and not entry.replace(".", "").isdigit():
            return entry.lower().rstrip(".")
        raise ValueError(
            f"CRONLOG_HTTP_ALLOW: {entry!r} is neither a CIDR (10.0.0.0/8) nor a host name"
        ) from None


@dataclass(frozen=True)
class AddressPolicy:
    """Where http tasks may connect: globally routable addresses, plus the allowed ones.

    Attributes:
        networks: networks allowed even if loopback, private, … (``CRONLOG_HTTP_ALLOW``).
        hosts: host names (lower case) allowed whatever they resolve to.
    """

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, text: str) -> AddressPolicy:
        """Parse ``CRONLOG_HTTP_ALLOW`` (``127.0.0.1/32,10.0.0.0/8,hooks.internal``).

        Raises:
            ValueError: an entry that is neither a CIDR nor a host name.
        """
        entries = [_parse_allow_entry(e) for e in split_list(text)]
        return cls(
            tuple(e for e in entries if not isinstance(e, str)),
            frozenset(e for e in entries if isinstance(e, str)),
        )

    def refusal(self, host: str, ip: IPAddress) -> str | None:
        """Return why ``host`` resolved to ``ip`` may not be reached, or None."""
        if host.lower().rstrip(".") in self.hosts:
            return None
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if any(ip in net or (mapped is not None and mapped in net) for net in self.networks):
            return None
        what = address_refusal(ip)
        if what is None:
            return None
        named = str(ip) if host == str(ip) else f"{host} ({ip})"
        return f"http destination {named} is {what}; allow it with CRONLOG_HTTP_ALLOW"


async def checked_addresses(host: str, port: int, policy: AddressPolicy) -> list[str]:
    """Resolve ``host`` and return its addresses (resolver order), every one checked.

    The request then goes to these addresses (not to the name again), so a second DNS answer
    cannot differ from the checked one (DNS rebinding).

    Raises:
        DestinationRefused: the name does not resolve, or any of its addresses is refused.
    """
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
    except OSError as exc:
        raise DestinationRefused(f"cannot resolve http destination {host!r}: {exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
    if not addresses:
        raise DestinationRefused(f"http destination {host!r} resolves to no address")
    for address in addresses:
        why = policy.refusal(host, ipaddress.ip_address(address))
        if why is not None:
            raise DestinationRefused(why)
    return addresses


# -- all of it ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """A worker's whole task policy (``Reach.of(settings)``); the defaults are the strict ones.

    Attributes:
        env_pass: ``CRONLOG_TASK_ENV_PASS`` names.
        user: the user exec/shell tasks run as (``CRONLOG_TASK_USER``, or the default one of
            an isolated root worker); None: the worker's user.
        dirs: the attempts' private working directories; None: tasks run in the worker's
            working directory (isolation off).
        python_modules: ``CRONLOG_PYTHON_MODULES`` prefixes.
        http: ``CRONLOG_HTTP_ALLOW``.
    """

    env_pass: tuple[str, ...] = ()
    user: TaskUser | None = None
    dirs: TaskDirs | None = None
    python_modules: tuple[str, ...] = (DEFAULT_PYTHON_MODULES,)
    http: AddressPolicy = field(default_factory=AddressPolicy)

    def task_env(self, context: Mapping[str, str]) -> dict[str, str]:
        """Return the environment of an exec/shell task with ``context`` (``task_env``)."""
        return task_env(os.environ, context, self.env_pass, self.user)
