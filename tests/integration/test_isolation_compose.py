"""Issue 25, "isolation on by default", under docker-compose's settings, without Docker.

The test reads docker-compose.yml and runs what it says, in its order (``depends_on``): each
service's command with its environment, the one-shot set-up steps to success, the broker as
the apache/kafka image configures it (its mounted ``server.properties``, then its ``KAFKA_*``
variables turned into settings by the image's own rule, formatted with ``CLUSTER_ID``), and
the broker's healthcheck until it passes. Only what Docker would provide is stood in for:
host names and ports (``kafka:9092`` and ``:9093`` become free local ports, the API's 8080
and the metrics ports too), volumes (a directory each), the image's ``/app`` (the checkout on
``PYTHONPATH``) and its ``python``/``cronlog`` (this interpreter). Then the same assertions as
under ``./ops/up`` (tests/integration/isolation_checks.py): the compose file and this test
cannot drift apart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from services.cli.broker_access import admin_settings
from services.worker.sandbox import default_task_user
from tests.integration.harness import ROOT
from tests.integration.helpers import wait_for
from tests.integration.isolation_checks import (
    Deployment,
    check_isolation,
    clean_env,
    free_port_pair,
)
from topology.kafka.config import KafkaSettings

pytestmark = [
    pytest.mark.own_broker,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="the compose worker runs as root"),
]
COMPOSE = ROOT / "docker-compose.yml"
LIB = ROOT / ".cache" / "kafka" / "lib"
IMAGE_EXCLUDES = {
    "KAFKA_VERSION",
    "KAFKA_HEAP_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    "KAFKA_JMX_HOSTNAME",
}
"""Variables the apache/kafka image does not turn into settings (its KafkaDockerWrapper)."""


def image_property(name: str) -> str:
    """The setting the apache/kafka image makes of a ``KAFKA_*`` variable (KafkaDockerWrapper:
    drop ``KAFKA_``, lower case, ``_`` → ``.``, then ``...`` → ``-`` and ``..`` → ``_``)."""
    key = name.replace("KAFKA_", "").lower().replace("_", ".")
    return key.replace("...", "-").replace("..", "_")


def start_order(services: dict[str, Any]) -> list[str]:
    """The services in an order that starts each after what it ``depends_on``."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        deps = services[name].get("depends_on") or {}
        for dep in deps if isinstance(deps, list) else deps.keys():
            visit(dep)
        order.append(name)

    for name in services:
        visit(name)
    return order


@dataclass
class Compose:
    """docker-compose.yml's services run on this machine."""

    root: Path
    spec: dict[str, Any]
    port: int = field(default_factory=free_port_pair)
    api_port: int = field(default_factory=free_port_pair)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def volume(self, name: str) -> Path:
        path = self.root / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def mounts(self, service: str) -> list[tuple[str, Path]]:
        """(container path, host dir) of the service's volumes, longest path first."""
        pairs = []
        for entry in self.spec["services"][service].get("volumes", []):
            name, target = entry.split(":")[:2]
            pairs.append((target, self.volume(name)))
        return sorted(pairs, key=lambda p: -len(p[0]))

    def translate(self, service: str, text: str) -> str:
        """A container's path, host or port, as it is on this machine."""
        for target, host in self.mounts(service):
            text = text.replace(target, str(host))
        return (
            text.replace("kafka:9092", f"127.0.0.1:{self.port}")
            .replace("kafka:9093", f"127.0.0.1:{self.port + 1}")
            .replace("localhost:9092", f"127.0.0.1:{self.port}")
            .replace("://:9092", f"://127.0.0.1:{self.port}")
            .replace("://:9093", f"://127.0.0.1:{self.port + 1}")
        )

    def env(self, service: str) -> dict[str, str]:
        given = self.spec["services"][service].get("environment") or {}
        env = {k: self.translate(service, str(v)) for k, v in given.items()}
        # the image's ENV, its /app, and free metrics ports
        stand_ins = {"PYTHONUNBUFFERED": "1", "CRONLOG_METRICS_PORT": "0", "PYTHONPATH": str(ROOT)}
        if service == "api":
            stand_ins["CRONLOG_API_PORT"] = str(self.api_port)  # compose publishes 8080
        return clean_env(**env, **stand_ins)

    def argv(self, service: str) -> list[str]:
        command = [self.translate(service, a) for a in self.spec["services"][service]["command"]]
        head = {"python": [sys.executable], "cronlog": [sys.executable, "-m", "services.cli"]}
        return head[command[0]] + command[1:]

    def one_shot(self, service: str) -> bool:
        """Some service waits for this one to complete successfully."""
        for other in self.spec["services"].values():
            deps = other.get("depends_on") or {}
            if isinstance(deps, dict) and deps.get(service, {}).get("condition") == (
                "service_completed_successfully"
            ):
                return True
        return False

    def run(self, service: str) -> None:
        app = self.root / "app"  # the image's WORKDIR
        app.mkdir(mode=0o755, exist_ok=True)
        log = (self.root / f"{service}.log").open("ab")
        argv, env = self.argv(service), self.env(service)
        if self.one_shot(service):
            done = subprocess.run(argv, env=env, cwd=app, stdout=log, stderr=log, check=False)
            log.close()
            assert done.returncode == 0, (self.root / f"{service}.log").read_text()
            return
        self.procs.append(
            subprocess.Popen(argv, env=env, cwd=app, stdout=log, stderr=log, start_new_session=True)
        )
        log.close()

    def broker(self, service: str) -> None:
        """Configure, format and start the broker as the apache/kafka image does, then wait
        for its healthcheck."""
        (mounted,) = [h for t, h in self.mounts(service) if t == "/mnt/shared/config"]
        env = self.spec["services"][service]["environment"]
        props = [(mounted / "server.properties").read_text()]
        props += [
            f"{image_property(k)}={self.translate(service, str(v))}"
            for k, v in env.items()
            if k.startswith("KAFKA_") and k not in IMAGE_EXCLUDES
        ]
        data = self.root / "kafka-data"  # the image's default dir is the container's own
        props.append(f"log.dirs={data}")
        config = self.root / "kafka.properties"
        config.write_text("\n".join(props) + "\n")
        java = [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{LIB}/*"]
        cluster = f"--cluster-id={uuid.uuid4().hex[:22]}"  # CLUSTER_ID
        fmt = [*java, "kafka.tools.StorageTool", "format", cluster, "-c", str(config)]
        assert subprocess.run(fmt, capture_output=True, check=False).returncode == 0
        log = (self.root / "kafka.log").open("ab")
        self.procs.append(
            subprocess.Popen([*java, "kafka.Kafka", str(config)], stdout=log, stderr=log)
        )
        log.close()
        check = self.spec["services"][service]["healthcheck"]["test"][1]
        tool = f"{' '.join(java[:1])} -cp '{LIB}/*' org.apache.kafka.tools.BrokerApiVersionsCommand"
        check = self.translate(service, check).replace(
            "/opt/kafka/bin/kafka-broker-api-versions.sh", tool
        )
        wait_for(
            lambda: (
                subprocess.run(["sh", "-c", check], capture_output=True, check=False).returncode
                == 0
            ),
            150,
            f"the broker's healthcheck ({(self.root / 'kafka.log')})",
            every=2.0,
        )

    def up(self) -> None:
        for service in start_order(self.spec["services"]):
            image = self.spec["services"][service].get("image", "")
            if image.startswith("apache/kafka"):
                self.broker(service)
            else:
                self.run(service)

    def down(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def compose() -> Iterator[Compose]:
    if not (LIB / ".pom.sha256").exists():
        pytest.skip("the Kafka jars are not resolved yet (ops/kafka start does it)")
    root = Path(tempfile.mkdtemp(prefix="cronlog-compose-"))
    root.chmod(0o755)  # as /var/lib/docker/volumes is to a container: only a volume's own mode
    c = Compose(root, yaml.safe_load(COMPOSE.read_text()))
    yield c
    c.down()
    shutil.rmtree(root, ignore_errors=True)


def test_under_compose_settings_a_task_of_tenant_b_cannot_touch_tenant_a(
    compose: Compose,
) -> None:
    compose.up()

    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{compose.api_port}/readyz", timeout=5).is_success
        except httpx.TransportError:
            return False

    wait_for(ready, 180, "the API's /readyz")
    client_env = compose.env("worker")
    service = KafkaSettings.model_validate(
        {
            "bootstrap": client_env["KAFKA_BOOTSTRAP"],
            **{
                k.removeprefix("CRONLOG_").lower(): v
                for k, v in client_env.items()
                if k.startswith("CRONLOG_KAFKA_")
            },
        }
    )
    secrets = compose.volume("service-secrets")  # mounted in the worker's container
    admin_password = (compose.volume("broker-secrets") / "admin.password").read_text().strip()
    task_user = default_task_user(0)
    assert task_user is not None  # the Dockerfile makes cronlog-task; here: this machine's
    deployment = Deployment(
        api=f"http://127.0.0.1:{compose.api_port}",
        tokens_file=Path(compose.env("api")["CRONLOG_API_TOKENS_FILE"]),
        state=secrets,
        listeners=[f"127.0.0.1:{compose.port}", f"127.0.0.1:{compose.port + 1}"],
        service=service,
        admin=admin_settings(KafkaSettings(bootstrap=service.bootstrap), admin_password),
        task_uid=task_user.uid,
    )
    check_isolation(deployment)
