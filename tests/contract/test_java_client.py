"""The wire contract, driven by a client we did not write (issue 17).

``tests/contract/java`` is a small Maven module: Apache Avro's own single-object encoder and
decoder (``org.apache.avro.message.BinaryMessage{En,De}coder``) over classes generated from
``schemas/*.avsc`` by avro-maven-plugin, and kafka-clients with its default partitioner
(murmur2 of the key). Against a running cronlog (scheduler + worker) it registers a command
job, triggers it, pauses it and reads the job's run-events (read_committed) to the run's
RunSucceeded (``ContractClient.java`` says what it checks). This test builds it (once per
change of its inputs, into ``.cache/contract-java``), runs it, and cross-checks from Python:
the partition it reported is ``topology.kafka.partitioning.partition_for(job_id)``, and cronlog's
own codec reads the commands the Java client wrote, field for field.

Needs Java 17 (a JDK: javac) and Maven; ``ops/test`` installs them where missing. The first
build resolves Avro, its Maven plugin and kafka-clients (~2.5 minutes on the project's machine).
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import ScheduleKind, main_task
from tests.integration.harness import Cluster, EventLog
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.wire.codec import decode_command

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "tests" / "contract" / "java"
BUILD = ROOT / ".cache" / "contract-java"
"""The module's build directory (its pom's ``<directory>``): sources, classes, jars."""
STAMP = BUILD / ".inputs.sha256"
MAIN = "cronlog.contract.ContractClient"
PARTITIONS = 4


def _inputs_digest() -> str:
    """Hash of everything the build reads: the pom, the Java sources, the current schemas."""
    h = hashlib.sha256()
    files = [MODULE / "pom.xml", *sorted(p for p in (MODULE / "src").rglob("*") if p.is_file())]
    files += sorted((ROOT / "schemas").glob("*.avsc"))
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _build() -> str:
    """Build the module unless its inputs are unchanged since the last build; return the
    classpath to run it with."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the Java contract test needs {', '.join(missing)} (ops/test installs them)")
    BUILD.mkdir(parents=True, exist_ok=True)
    with (BUILD.parent / ".contract-java.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs of one checkout build once
        digest = _inputs_digest()
        if not (STAMP.exists() and STAMP.read_text() == digest):
            STAMP.unlink(missing_ok=True)
            done = subprocess.run(
                [
                    "mvn",
                    "-B",
                    "-q",
                    "-Dstyle.color=never",
                    "-f",
                    str(MODULE / "pom.xml"),
                    "package",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=540,
                check=False,
            )
            if done.returncode != 0:
                pytest.fail(
                    f"mvn package failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
                )
            STAMP.write_text(digest)
    return f"{BUILD / 'classes'}:{BUILD / 'lib'}/*"


@pytest.fixture(scope="module")
def classpath() -> str:
    return _build()


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Cluster]:
    """A scheduler and a worker on their own topics (a fresh prefix), stopped at the end."""
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap,
        topic_prefix=f"t{uuid.uuid4().hex[:8]}.",
        partitions=PARTITIONS,
    )
    ensure_topics(settings)
    c = Cluster(settings, tmp_path)
    c.scheduler()
    c.worker()
    yield c
    c.stop_all()


def _commands_of(settings: KafkaSettings, job_id: str, want: int) -> list[cmd.Envelope]:
    """Read the commands topic until ``want`` records keyed ``job_id`` that the Java client
    wrote (idem_key ``java-contract:...``; the worker's claims and completions share the key);
    decode them."""
    topic = f"{settings.topic_prefix}cronlog.commands"
    consumer = Consumer(settings.consumer_config(f"reader-{uuid.uuid4().hex}"))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        found: list[cmd.Envelope] = []
        for _ in range(200):
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error() and msg.key() == job_id.encode():
                envelope = decode_command(msg.value() or b"")
                if envelope.idem_key.startswith("java-contract:"):
                    found.append(envelope)
                if len(found) == want:
                    break
        return found
    finally:
        consumer.close()


def test_java_client_registers_triggers_pauses_and_reads_the_run(
    classpath: str, cluster: Cluster
) -> None:
    settings = cluster.settings
    done = subprocess.run(
        ["java", "-cp", classpath, MAIN, settings.bootstrap, settings.topic_prefix, "120"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    if done.returncode != 0:
        logs = "\n".join(f"----- {p.name} -----\n{p.log_tail()}" for p in cluster.procs)
        pytest.fail(f"the Java client exited {done.returncode}\n{output}\n{logs}")
    result = re.search(
        r"^RESULT job_id=(\S+) run_id=(\S+) partition=(\d+) events=(\S+)$", done.stdout, re.M
    )
    assert result, output
    job_id, run_id, partition = result[1], result[2], int(result[3])
    assert partition == partition_for(job_id, PARTITIONS)
    assert result[4].split(",")[0] == "JobRegistered"

    # What the Java client wrote is what cronlog's own codec reads.
    sent = _commands_of(settings, job_id, 3)
    assert [type(e.command) for e in sent] == [cmd.RegisterJob, cmd.TriggerJob, cmd.PauseJob]
    assert {e.tenant for e in sent} == {"default"}
    assert {e.job_id for e in sent} == {job_id}
    register = sent[0].command
    assert isinstance(register, cmd.RegisterJob)
    # the Java client writes the definition's old shape (the task at job level): it is upcast
    assert register.spec.task_specs == main_task(("echo", "hi"))
    assert register.spec.schedule.kind is ScheduleKind.MANUAL

    # And the run the Java client saw succeed is the one cronlog's codec reads.
    log = EventLog(settings)
    try:
        assert log.wait_until(lambda lg: bool(lg.of_type(ev.RunSucceeded, job_id)), 30)
        (succeeded,) = log.of_type(ev.RunSucceeded, job_id)
        assert isinstance(succeeded.event, ev.RunSucceeded)
        assert succeeded.event.run_id == run_id
        assert [type(e.event) for e in log.of_type(ev.JobPaused, job_id)] == [ev.JobPaused]
    finally:
        log.close()
