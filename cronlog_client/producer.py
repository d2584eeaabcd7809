"""Producing cronlog commands onto ``cronlog.commands`` the way cronlog's own services do.

Key: the UTF-8 bytes of ``job_id``. Partitioner: ``murmur2_random`` (the Java client's
murmur2, ``topology/kafka/partitioning.py``; DESIGN.md "Topics"). Value: a ``cronlog.Command`` in
Avro single-object encoding (``topology/wire/codec.py``, schemas/README.md). Every command carries
an idem_key: the fold applies a key once, so re-sending a command under the same key after a
timeout or a crash is safe (at-least-once delivery, exactly-once effect; docs/client.md).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from cronlog import commands as cmd
from cronlog.errors import InvalidDefinition
from cronlog.ids import (
    poll_idem_key,
    renew_idem_key,
    run_id_for_trigger,
)
from cronlog.model import JobSpec
from cronlog.tenants import PLATFORM_COMMANDS
from cronlog.validation import validate_spec
from cronlog.vocabulary import FailureKind
from cronlog_client.refs import CommandNotSent, RunRef, Sent, derived_key, new_idem_key
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics, ingress_topic
from topology.wire.codec import Codec, DecodeError, default_codec


class CommandProducer:
    """Produces cronlog commands, one acknowledged record each.

    Args:
        settings: where the cluster is, topic prefix and security (``KafkaSettings``: env
            ``KAFKA_BOOTSTRAP``, ``CRONLOG_TOPIC_PREFIX``, ``CRONLOG_KAFKA_*``). Default: read
            from the environment.
        tenant: the tenant the commands act for (``Envelope.tenant``); the fold refuses a
            command whose tenant does not own the job. Default ``"default"``. Kafka ACLs on
            the commands topic, not this field, decide who may produce (docs/client.md).
        ingress: produce to the tenant's ingress topic (``<prefix>cronlog.ingress.<tenant>``)
            instead of ``cronlog.commands``: on a secured cluster only cronlog's own services
            may write the commands topic, and a tenant's Kafka user may write its ingress
            topic only; the ingress relay forwards each command whose envelope is the
            tenant's (docs/security.md, "Who may send as which tenant"). Default False.
        codec: encodes the commands. Default: the shared single-object codec.
        producer_config: extra confluent-kafka producer settings (they override cronlog's,
            except that ``partitioner`` must stay ``murmur2_random``).

    Raises:
        ValueError: ``producer_config`` sets another partitioner, or ``ingress`` with a
            ``tenant`` that is not a tenant name.

    Thread safety: ``send`` may be called from several threads (confluent-kafka's producer is
    thread-safe; each call waits for its own acknowledgement).
    """

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        tenant: str = "default",
        ingress: bool = False,
        codec: Codec | None = None,
        producer_config: Mapping[str, object] | None = None,
    ) -> None:
        self.settings = settings or KafkaSettings()
        self.topics = Topics.of(self.settings)
        self.tenant = tenant
        self.ingress = ingress
        self.topic = ingress_topic(self.settings, tenant) if ingress else self.topics.commands
        """Where the commands go: the commands topic, or the tenant's ingress topic."""
        self._codec = codec or default_codec()
        conf = self.settings.producer_config(**dict(producer_config or {}))
        if conf["partitioner"] != "murmur2_random":
            raise ValueError(
                f"partitioner {conf['partitioner']!r}: cronlog's contract is murmur2_random "
                "(the Java client's murmur2; DESIGN.md, Topics)"
            )
        self._producer = Producer(conf)
        self._lock = threading.Lock()

    # -- the one way out ---------------------------------------------------------------------

    def send(
        self,
        job_id: str,
        command: cmd.Command,
        *,
        idem_key: str | None = None,
        timeout_s: float = 10.0,
        issued_at: datetime | None = None,
    ) -> Sent:
        """Produce one command for ``job_id`` and wait for the broker's acknowledgement.

        Args:
            job_id: the job it addresses (the record key; 1..128 characters).
            command: any command of ``cronlog.commands`` but ``Tick`` (the schedulers' own)
                and ``PollTasks`` (use ``poll``, which names a partition).
            idem_key: its deduplication key (at most 512 characters). None: derived for
                CompleteTask and ReleaseTask (one per lease, ``cronlog.ids``), else a fresh
                uuid4. A retry of the same logical command must pass the key of the first try.
            timeout_s: how long to wait for the acknowledgement, seconds.
            issued_at: when this logical command was first issued (aware UTC); a retry passes
                the first try's (``Sent.issued_at``, ``CommandNotSent.issued_at``). None: now,
                by this machine's clock, for a user command (a platform command carries
                none). The fold refuses a command issued longer ago than its dedupe horizon
                (``idem_key_expired``, 24 h by default: docs/client.md, "idem_keys and
                at-least-once").

        Returns:
            Where the command landed.

        Raises:
            ValueError: an empty job_id, a Tick or a PollTasks, a platform command (worker
                commands, ``UpstreamRunEnded``, ...) with ``ingress``, or a command the fold
                would refuse at decode (a field past its limit, named).
            EncodeError: a field cannot be written (a naive datetime, ...).
            CommandNotSent: no acknowledgement (re-send with its ``idem_key`` and
                ``issued_at``).

        Idempotency: two sends under one idem_key change state once (DESIGN.md invariant 5).
        """
        if not job_id:
            raise ValueError("job_id may not be empty")
        if isinstance(command, cmd.Tick | cmd.PollTasks):
            raise ValueError(
                f"{type(command).__name__} is not sent with send(); see docs/client.md"
            )
        if self.ingress and isinstance(command, PLATFORM_COMMANDS):
            raise ValueError(
                f"{type(command).__name__} is a platform command: a tenant's ingress topic "
                "takes user commands only (the relay would dead-letter it)"
            )
        key = idem_key or derived_key(command) or new_idem_key()
        if issued_at is None and not isinstance(command, PLATFORM_COMMANDS):
            issued_at = datetime.now(UTC)  # the sender's clock: not the fold's (DESIGN.md)
        env = cmd.Envelope(
            idem_key=key, job_id=job_id, command=command, tenant=self.tenant, issued_at=issued_at
        )
        try:
            partition, offset = self._produce(job_id.encode(), self._checked(env), None, timeout_s)
        except CommandNotSent as exc:
            exc.idem_key, exc.issued_at = key, issued_at
            raise
        return Sent(job_id, key, partition, offset, issued_at)

    def _checked(self, env: cmd.Envelope) -> bytes:
        """Return ``env`` encoded, after decoding it as the fold will.

        A command past a limit of ``cronlog/limits.py`` (an idem_key over 512 characters, a
        job_id the fold refuses) would be a dead letter, and its sender would wait for an
        answer that never comes (found by an adversarial run).

        Raises:
            ValueError: the fold would refuse it; the message names the field.
        """
        value = self._codec.encode_command(env)
        try:
            self._codec.decode_command(value)
        except DecodeError as exc:
            raise ValueError(f"the scheduler would refuse this command: {exc}") from exc
        return value

    def _produce(
        self, key: bytes | None, value: bytes, partition: int | None, timeout_s: float
    ) -> tuple[int, int]:
        done = threading.Event()
        result: list[KafkaError | Message | None] = [None, None]

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            result[0], result[1] = err, msg
            done.set()

        try:
            self._producer.produce(
                self.topic,
                key=key,
                value=value,
                # -1: librdkafka's RD_KAFKA_PARTITION_UA, the partitioner (murmur2) chooses
                partition=-1 if partition is None else partition,
                on_delivery=on_delivery,
            )
        except (BufferError, KafkaException) as exc:
            raise CommandNotSent(f"cannot produce to {self.topic}: {exc}") from exc
        self._producer.flush(timeout_s)  # serves the callbacks; returns once ours has run
        if not done.wait(0):
            raise CommandNotSent(f"no acknowledgement from the broker within {timeout_s} s")
        err, msg = result
        if err is not None or not isinstance(msg, Message):
            raise CommandNotSent(f"the broker refused the command: {err}")
        return int(msg.partition() or 0), int(msg.offset() or 0)

    # -- a job's life ------------------------------------------------------------------------

    def register(
        self, job_id: str, spec: JobSpec, *, idem_key: str | None = None, timeout_s: float = 10.0
    ) -> Sent:
        """Register ``job_id`` with ``spec`` (RegisterJob), checked first as the fold will.

        Raises:
            InvalidDefinition: ``spec`` is invalid, or names another tenant than this
                producer's, naming the field (nothing is sent).
            CommandNotSent: see ``send``.
        """
        self._check(job_id, spec)
        return self.send(job_id, cmd.RegisterJob(spec=spec), idem_key=idem_key, timeout_s=timeout_s)

    def update(
        self, job_id: str, spec: JobSpec, *, idem_key: str | None = None, timeout_s: float = 10.0
    ) -> Sent:
        """Replace ``job_id``'s definition (UpdateJob). Raises as ``register``."""
        self._check(job_id, spec)
        return self.send(job_id, cmd.UpdateJob(spec=spec), idem_key=idem_key, timeout_s=timeout_s)

    def _check(self, job_id: str, spec: JobSpec) -> None:
        validate_spec(spec, job_id=job_id)
        if spec.tenant != self.tenant:  # the fold would refuse it (wrong_tenant)
            raise InvalidDefinition(
                "tenant", f"is {spec.tenant!r}, but this producer sends for {self.tenant!r}"
            )

    def pause(self, job_id: str, *, idem_key: str | None = None, timeout_s: float = 10.0) -> Sent:
        """Stop ``job_id`` firing ticks (PauseJob). Raises CommandNotSent."""
        return self.send(job_id, cmd.PauseJob(), idem_key=idem_key, timeout_s=timeout_s)

    def resume(
        self,
        job_id: str,
        *,
        catchup: bool = False,
        idem_key: str | None = None,
        timeout_s: float = 10.0,
    ) -> Sent:
        """Fire ``job_id``'s ticks again (ResumeJob; ``catchup``: see the command).

        Raises:
            CommandNotSent: see ``send``.
        """
        return self.send(
            job_id, cmd.ResumeJob(catchup=catchup), idem_key=idem_key, timeout_s=timeout_s
        )

    def delete(self, job_id: str, *, idem_key: str | None = None, timeout_s: float = 10.0) -> Sent:
        """Delete ``job_id`` for good (DeleteJob); its history stays. Raises CommandNotSent."""
        return self.send(job_id, cmd.DeleteJob(), idem_key=idem_key, timeout_s=timeout_s)

    def cancel(
        self,
        job_id: str,
        run_id: str,
        *,
        task: str | None = None,
        idem_key: str | None = None,
        timeout_s: float = 10.0,
    ) -> Sent:
        """Cancel an active run, or one task of it (CancelRun). Raises CommandNotSent."""
        command = cmd.CancelRun(run_id=run_id, task=task)
        return self.send(job_id, command, idem_key=idem_key, timeout_s=timeout_s)

    def trigger(
        self,
        job_id: str,
        *,
        idem_key: str | None = None,
        timeout_s: float = 10.0,
        issued_at: datetime | None = None,
    ) -> RunRef:
        """Start one manual run of ``job_id`` now (TriggerJob).

        Args:
            job_id: the job.
            idem_key: the trigger's key; its run_id derives from it, so a re-send under the
                same key names the same run and starts it once. None: a fresh one.
            timeout_s: acknowledgement timeout, seconds.
            issued_at: see ``send``; a re-send passes the first try's.

        Returns:
            The run to follow (``EventStream.wait_for_outcome``).

        Raises:
            CommandNotSent: see ``send``; retry with its ``idem_key`` and ``issued_at``.
        """
        key = idem_key or new_idem_key()
        partition, offset = self._events_position(job_id, timeout_s)
        self.send(job_id, cmd.TriggerJob(), idem_key=key, timeout_s=timeout_s, issued_at=issued_at)
        return RunRef(job_id, str(run_id_for_trigger(job_id, key)), key, partition, offset)

    def _events_position(self, job_id: str, timeout_s: float) -> tuple[int, int]:
        topic = self.topics.run_events
        meta = self._producer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise CommandNotSent(f"topic {topic} is not there: {getattr(meta, 'error', None)}")
        partition = partition_for(job_id, len(meta.partitions))
        try:
            _low, high = self._watermarks(TopicPartition(topic, partition), timeout_s)
        except KafkaException as exc:
            raise CommandNotSent(f"cannot read the end of {topic}/{partition}: {exc}") from exc
        return partition, high

    def _watermarks(self, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
        # The producer has no watermark call: a throwaway consumer asks (no group is joined).
        consumer = Consumer(self.settings.consumer_config(f"cronlog-client-{new_idem_key()}"))
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            return int(low), int(high)
        finally:
            consumer.close()

    # -- custom workers ----------------------------------------------------------------------

    def claim(
        self,
        job_id: str,
        *,
        run_id: str,
        task: str,
        attempt: int,
        worker_id: str,
        lease_token: str = "",
        idem_key: str | None = None,
    ) -> Sent:
        """Ask for the lease on one attempt (ClaimTask); the grant is a TaskClaimed event.

        The built-in worker names its claims ``claim_idem_key(...)`` with a nonce per poll
        batch (``cronlog.ids``); a re-sent claim must reuse its key. Raises CommandNotSent.
        """
        command = cmd.ClaimTask(
            run_id=run_id, task=task, attempt=attempt, worker_id=worker_id, lease_token=lease_token
        )
        return self.send(job_id, command, idem_key=idem_key)

    def renew(
        self,
        job_id: str,
        *,
        run_id: str,
        task: str,
        attempt: int,
        epoch: int,
        worker_id: str,
        n: int,
        lease_token: str = "",
    ) -> Sent:
        """Renew a held lease (RenewLease), the ``n``-th renewal of this epoch's lease.

        Its idem_key is ``renew_idem_key(run_id, task, epoch, n)``: a re-send of the same
        renewal reuses it. Renew every ``lease_ttl / 6``. Raises CommandNotSent.
        """
        command = cmd.RenewLease(
            run_id=run_id,
            task=task,
            attempt=attempt,
            epoch=epoch,
            worker_id=worker_id,
            lease_token=lease_token,
        )
        return self.send(job_id, command, idem_key=renew_idem_key(run_id, task, epoch, n))

    def complete(
        self,
        job_id: str,
        *,
        run_id: str,
        task: str,
        attempt: int,
        epoch: int,
        worker_id: str,
        exit_code: int | None,
        started_at: datetime,
        finished_at: datetime,
        output_tail: str = "",
        failure_kind: FailureKind | None = None,
        lease_token: str = "",
    ) -> Sent:
        """Report an attempt's end (CompleteTask): succeeded when ``failure_kind`` is None.

        ``failure_kind`` None with a non-zero ``exit_code`` is taken as ``nonzero_exit``.
        Its idem_key is ``complete_idem_key(run_id, task, epoch)``: one completion per lease,
        so a re-sent completion is a no-op. Raises CommandNotSent.
        """
        if failure_kind is None and exit_code not in (0, None):
            failure_kind = FailureKind.NONZERO_EXIT
        command = cmd.CompleteTask(
            run_id=run_id,
            task=task,
            attempt=attempt,
            epoch=epoch,
            worker_id=worker_id,
            succeeded=failure_kind is None,
            exit_code=exit_code,
            failure_kind=failure_kind,
            output_tail=output_tail,
            started_at=started_at,
            finished_at=finished_at,
            lease_token=lease_token,
        )
        return self.send(job_id, command)

    def poll(
        self, partition: int, *, worker_id: str, slots: int, poll_id: str, lease_token: str = ""
    ) -> Sent:
        """Ask one commands partition for up to ``slots`` ready task instances (PollTasks).

        Sent without a key to ``partition`` (docs/dispatch.md); the grants are TaskClaimed
        events and a PollAnswered on the worker's replies. Raises CommandNotSent.
        """
        command = cmd.PollTasks(
            worker_id=worker_id, slots=slots, poll_id=poll_id, lease_token=lease_token
        )
        if self.ingress:
            raise ValueError("PollTasks is a platform command: not sent to an ingress topic")
        key = poll_idem_key(worker_id, poll_id)
        env = cmd.Envelope(idem_key=key, job_id="", command=command, tenant=self.tenant)
        p, offset = self._produce(None, self._checked(env), partition, 10.0)
        return Sent("", key, p, offset)

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is still queued (up to ``timeout_s`` seconds)."""
        self._producer.flush(timeout_s)

    def __enter__(self) -> CommandProducer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
