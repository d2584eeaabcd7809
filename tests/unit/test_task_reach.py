"""What a task can reach (services/worker/reach.py): its environment, user, modules, addresses."""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cronlog.model import HttpTask, Isolation, TaskKind, TaskSpec
from cronlog.vocabulary import FailureKind
from services.worker.kinds import PythonPool
from services.worker.reach import (
    SECRET_NAME,
    AddressPolicy,
    Reach,
    address_refusal,
    check_env_pass,
    check_python_modules,
    module_allowed,
    python_refusal,
    task_env,
)
from services.worker.sandbox import resolve_task_user
from services.worker.settings import WorkerSettings
from tests.unit.task_runs import CONTEXT, run_task

WORKER_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "HOME": "/root",
    "CRONLOG_KAFKA_SASL_PASSWORD": "s3cret-x",
    "CRONLOG_KAFKA_SASL_USERNAME": "cronlog",
    "KAFKA_BOOTSTRAP": "broker:9092",
    "FOO_TOKEN": "abc",
    "AWS_SECRET_ACCESS_KEY": "k",
    "DB_PASSWORD": "p",
    "MY_SETTING": "m",
    "HTTP_PROXY": "http://proxy:3128",
}
BASE = TaskSpec("main", ("true",))
TASKS = "tests.unit.tasks_for_tests"


# -- environment ---------------------------------------------------------------------------------


def test_task_env_keeps_only_harmless_names_and_the_context() -> None:
    assert task_env(WORKER_ENV, CONTEXT) == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "HOME": "/root",
        **CONTEXT,
    }


def test_task_env_passes_the_deployments_names_but_never_a_secret() -> None:
    env = task_env(WORKER_ENV, CONTEXT, ("MY_SETTING", "FOO_TOKEN", "NOT_SET"))
    assert env["MY_SETTING"] == "m"
    assert "FOO_TOKEN" not in env and "NOT_SET" not in env


def test_task_env_of_a_task_user_and_without_path() -> None:
    user = resolve_task_user("nobody", euid=0)
    env = task_env({"HOME": "/root", "USER": "root"}, CONTEXT, user=user)
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (user.home, "nobody", "nobody")
    assert env["PATH"] == os.defpath


_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)


@given(
    worker=st.dictionaries(_NAMES, st.text(max_size=5), max_size=30),
    passed=st.lists(_NAMES, max_size=5),
)
def test_task_env_never_holds_a_secret_like_name_of_the_worker(
    worker: dict[str, str], passed: list[str]
) -> None:
    env = task_env(worker, CONTEXT, passed)
    from_worker = set(env) - set(CONTEXT) - {"PATH"}
    assert not any(SECRET_NAME.search(name) for name in from_worker)
    allowed = {"PATH", "LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", *passed}
    assert all(name in allowed or name.startswith("LC_") for name in from_worker)
    assert all(env[name] == worker[name] for name in from_worker)
    assert {k: env[k] for k in CONTEXT} == CONTEXT


@pytest.mark.parametrize("bad", ["FOO_TOKEN", "CRONLOG_X", "kafka_url", "API_KEY", "1ABC", "A-B"])
def test_env_pass_refuses_secret_like_and_bad_names(bad: str) -> None:
    with pytest.raises(ValueError, match="CRONLOG_TASK_ENV_PASS"):
        check_env_pass(f"OK_NAME,{bad}")
    with pytest.raises(ValidationError, match="task_env_pass"):
        WorkerSettings(task_env_pass=bad)


def test_env_pass_parses_a_comma_list() -> None:
    assert check_env_pass(" A, B_2 ,,") == ("A", "B_2")


def test_python_pool_processes_do_not_hold_the_workers_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in WORKER_ENV.items():
        monkeypatch.setenv(name, value)
    pool = PythonPool(1, Reach(env_pass=("MY_SETTING",)))
    try:
        spec = replace(BASE, kind=TaskKind.PYTHON, command=(), callable=f"{TASKS}:environment")
        out = run_task(spec, pool, Reach())
    finally:
        pool.shutdown()
    assert out.failure_kind is None, out.output_tail
    names = set(json.loads(out.output_tail))
    assert "MY_SETTING" in names and "PATH" in names
    assert not {"CRONLOG_KAFKA_SASL_PASSWORD", "FOO_TOKEN", "KAFKA_BOOTSTRAP"} & names


# -- user ----------------------------------------------------------------------------------------


def test_task_user_needs_a_root_worker_and_an_unprivileged_user() -> None:
    with pytest.raises(ValueError, match="not root"):
        resolve_task_user("nobody", euid=1000)
    with pytest.raises(ValueError, match="no user 'no-such-user-x'"):
        resolve_task_user("no-such-user-x", euid=0)
    with pytest.raises(ValueError, match="is root"):
        resolve_task_user("root", euid=0)
    with pytest.raises(ValidationError, match="task_user"):
        WorkerSettings(task_user="no-such-user-x")


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a task as another user needs root")
def test_shell_task_runs_as_the_task_user_without_groups(pool: PythonPool) -> None:
    reach = Reach(user=resolve_task_user("nobody", euid=0))
    spec = replace(BASE, kind=TaskKind.SHELL, command=(), shell="id -u; id -G; echo $HOME")  # noqa: S604
    out = run_task(spec, pool, reach)
    nobody = resolve_task_user("nobody", euid=0)
    assert out.output_tail == f"{nobody.uid}\n{nobody.gid}\n{nobody.home}\n"
    assert WorkerSettings(task_user="nobody").reach().user == nobody


# -- python modules ------------------------------------------------------------------------------


def test_module_prefixes_match_on_dots() -> None:
    prefixes = check_python_modules("examples., myteam")
    assert prefixes == ("examples", "myteam")
    assert module_allowed("myteam", prefixes) and module_allowed("myteam.jobs.a", prefixes)
    assert not module_allowed("myteamx", prefixes) and not module_allowed("os", prefixes)
    assert check_python_modules("") == ()
    with pytest.raises(ValueError, match="CRONLOG_PYTHON_MODULES"):
        check_python_modules("ok,not-a-module")
    with pytest.raises(ValidationError, match="python_modules"):
        WorkerSettings(python_modules="a..b")


def test_python_refusal_names_the_module_and_the_setting() -> None:
    why = python_refusal("os:system", (TASKS,))
    assert why == (
        "python task module 'os' is outside the modules this worker runs "
        f"(CRONLOG_PYTHON_MODULES: {TASKS})"
    )
    assert python_refusal(f"{TASKS}:noop", (TASKS,)) is None
    assert "python tasks are off" in str(python_refusal(f"{TASKS}:noop", ()))


@pytest.mark.parametrize("isolation", [Isolation.PROCESS, Isolation.THREAD])
def test_python_task_outside_the_modules_fails_as_spawn_error(
    pool: PythonPool, isolation: Isolation
) -> None:
    spec = replace(BASE, kind=TaskKind.PYTHON, command=(), callable="os:getcwd")
    out = run_task(replace(spec, isolation=isolation), pool, Reach())
    assert (out.exit_code, out.failure_kind) == (None, FailureKind.SPAWN_ERROR)
    assert "python task module 'os'" in out.output_tail
    assert "CRONLOG_PYTHON_MODULES" in out.output_tail


@pytest.mark.parametrize("isolation", [Isolation.PROCESS, Isolation.THREAD])
def test_a_function_re_exported_from_another_module_is_not_called(
    pool: PythonPool, isolation: Isolation
) -> None:
    spec = replace(BASE, kind=TaskKind.PYTHON, command=(), callable=f"{TASKS}:reexported")
    out = run_task(replace(spec, isolation=isolation), pool, Reach())
    assert out.failure_kind is FailureKind.NONZERO_EXIT
    assert "PermissionError" in out.output_tail
    assert "names a function of module 'posix'" in out.output_tail


# -- http destinations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "what"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address to judge, not to bind
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not globally routable"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_address_refusal_names_what_the_address_is(address: str, what: str | None) -> None:
    assert address_refusal(ipaddress.ip_address(address)) == what


NOT_PUBLIC = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
]


@given(st.ip_addresses())
def test_no_address_of_a_non_public_network_passes(ip: ipaddress._BaseAddress) -> None:
    plain = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip
    if any(plain in net for net in NOT_PUBLIC):
        assert address_refusal(ip) is not None  # type: ignore[arg-type]


@given(st.ip_addresses(v=4, network="10.0.0.0/8") | st.ip_addresses(v=4, network="127.0.0.0/8"))
def test_an_allowed_network_lets_its_addresses_through(ip: ipaddress.IPv4Address) -> None:
    policy = AddressPolicy.parse("10.0.0.0/8, 127.0.0.0/8")
    assert policy.refusal(str(ip), ip) is None
    assert AddressPolicy().refusal(str(ip), ip) is not None
    mapped = ipaddress.IPv6Address(f"::ffff:{ip}")
    assert policy.refusal(str(mapped), mapped) is None


def test_allow_list_parses_cidrs_and_host_names() -> None:
    policy = AddressPolicy.parse("127.0.0.1/32, 10.0.0.0/8 , Hooks.Internal.")
    assert policy.networks == (
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("10.0.0.0/8"),
    )
    assert policy.hosts == frozenset({"hooks.internal"})
    loop = ipaddress.ip_address("127.0.0.2")
    assert policy.refusal("HOOKS.internal", loop) is None
    assert policy.refusal("other", loop) == (
        "http destination other (127.0.0.2) is loopback; allow it with CRONLOG_HTTP_ALLOW"
    )
    for bad in ("10.0.0.0/33", "not a host", "1.2.3"):
        with pytest.raises(ValueError, match="CRONLOG_HTTP_ALLOW"):
            AddressPolicy.parse(bad)
    with pytest.raises(ValidationError, match="http_allow"):
        WorkerSettings(http_allow="10.0.0.0/33")


class _Hook(BaseHTTPRequestHandler):
    hits: list[str] = []  # noqa: RUF012 - the test server's request log

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


def test_http_task_to_loopback_fails_with_the_reason_and_sends_nothing(
    pool: PythonPool, port: int
) -> None:
    for url, named in [
        (f"http://127.0.0.1:{port}/a", "127.0.0.1"),
        (f"http://localhost:{port}/b", "localhost (127.0.0.1)"),
    ]:
        out = run_task(
            replace(BASE, kind=TaskKind.HTTP, command=(), http=HttpTask(url)), pool, Reach()
        )
        assert (out.exit_code, out.failure_kind) == (None, FailureKind.SPAWN_ERROR)
        assert out.output_tail == (
            f"http destination {named} is loopback; allow it with CRONLOG_HTTP_ALLOW"
        )
    assert _Hook.hits == []
    allowed = Reach(http=AddressPolicy.parse("localhost"))
    task = HttpTask(f"http://localhost:{port}/c")
    out = run_task(replace(BASE, kind=TaskKind.HTTP, command=(), http=task), pool, allowed)
    assert (out.failure_kind, out.output_tail) == (None, "HTTP 200\nok")
    assert _Hook.hits == ["/c"]


# -- helpers -------------------------------------------------------------------------------------
