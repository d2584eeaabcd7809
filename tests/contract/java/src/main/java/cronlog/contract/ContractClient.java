package cronlog.contract;

import cronlog.Command;
import cronlog.JobPaused;
import cronlog.JobRegistered;
import cronlog.JobSpec;
import cronlog.PauseJob;
import cronlog.RegisterJob;
import cronlog.RunEvent;
import cronlog.RunScheduled;
import cronlog.RunSucceeded;
import cronlog.Schedule;
import cronlog.TaskClaimed;
import cronlog.TaskReady;
import cronlog.TaskSucceeded;
import cronlog.TriggerJob;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.function.Predicate;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

/**
 * Drives a running cronlog (scheduler + worker) the way another team's service would: with
 * Avro's own single-object encoder over classes generated from schemas/*.avsc, and the Kafka
 * Java client's default partitioner (murmur2 of the key, the job_id).
 *
 * <p>Registers a command job ({@code echo hi}, manual schedule), triggers it, pauses it, and
 * reads the job's run-events (read_committed) until the triggered run's RunSucceeded, checking
 * ids, keys, partitions and the order of the event types. Exit 0: the contract holds; 1: a
 * check failed (the reason on stderr); anything thrown (an unknown fingerprint, a timeout) also
 * exits non-zero. The last stdout line is {@code RESULT job_id=J run_id=R partition=P
 * events=T1,T2,...} for the caller to cross-check.
 *
 * <p>Usage: {@code ContractClient BOOTSTRAP TOPIC_PREFIX [TIMEOUT_S]}.
 */
public final class ContractClient {
  // The generated classes' own encoder and decoder (BinaryMessageEncoder/Decoder over their
  // SpecificData model, which carries the timestamp-millis conversions): a decoder built on
  // SpecificData.get() has none and fails on the first timestamp (Long is not an Instant).
  private static final BinaryMessageEncoder<Command> COMMANDS = Command.getEncoder();
  private static final BinaryMessageDecoder<RunEvent> EVENTS = RunEvent.getDecoder();

  private final String commandsTopic;
  private final String runEventsTopic;
  private final String jobId;
  private final long deadline;
  private final KafkaProducer<String, byte[]> producer;
  private final KafkaConsumer<byte[], byte[]> consumer;
  private final List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>();
  private final List<RunEvent> events = new ArrayList<>();

  private ContractClient(String bootstrap, String prefix, String jobId, long timeoutS) {
    this.commandsTopic = prefix + "cronlog.commands";
    this.runEventsTopic = prefix + "cronlog.run-events";
    this.jobId = jobId;
    this.deadline = System.nanoTime() + Duration.ofSeconds(timeoutS).toNanos();
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    // No partitioner.class: the default one, murmur2 of the key for a keyed record.
    this.producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
    Properties c = new Properties();
    c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    this.consumer =
        new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2 || args.length > 3) {
      System.err.println("usage: ContractClient BOOTSTRAP TOPIC_PREFIX [TIMEOUT_S]");
      System.exit(2);
    }
    long timeoutS = args.length == 3 ? Long.parseLong(args[2]) : 120;
    String jobId = "java-contract-" + UUID.randomUUID().toString().substring(0, 8);
    ContractClient client = new ContractClient(args[0], args[1], jobId, timeoutS);
    try {
      client.run();
    } catch (ContractBroken e) {
      System.err.println("CONTRACT BROKEN: " + e.getMessage());
      System.err.println("events seen: " + client.describe());
      System.exit(1);
    } finally {
      client.producer.close(Duration.ofSeconds(5));
      client.consumer.close(Duration.ofSeconds(5));
    }
  }

  private void run() throws Exception {
    List<PartitionInfo> partitions = consumer.partitionsFor(runEventsTopic, Duration.ofSeconds(30));
    List<TopicPartition> all = new ArrayList<>();
    for (PartitionInfo info : partitions) {
      all.add(new TopicPartition(runEventsTopic, info.partition()));
    }
    consumer.assign(all);
    consumer.seekToBeginning(all);

    String run = UUID.randomUUID().toString();
    String registerKey = "java-contract:" + run + ":register";
    String triggerKey = "java-contract:" + run + ":trigger";
    String pauseKey = "java-contract:" + run + ":pause";

    Schedule manual = Schedule.newBuilder().setKind("manual").build();
    JobSpec spec =
        JobSpec.newBuilder()
            .setName("java contract test")
            .setSchedule(manual)
            .setCommand(List.of("echo", "hi"))
            .build();
    int partition = send(registerKey, new RegisterJob(spec));
    int commandPartitions = producer.partitionsFor(commandsTopic).size();
    int murmur2 =
        Utils.toPositive(Utils.murmur2(jobId.getBytes(StandardCharsets.UTF_8))) % commandPartitions;
    check(partition == murmur2, "RegisterJob went to partition " + partition
        + ", murmur2(job_id) says " + murmur2);
    RunEvent registered = await(e -> registerKey.equals(e.getIdemKey()), "the RegisterJob's events");
    check(registered.getBody() instanceof JobRegistered,
        "RegisterJob answered " + typeOf(registered) + ", expected JobRegistered");

    check(send(triggerKey, new TriggerJob()) == partition, "TriggerJob went to another partition");
    RunEvent scheduled = await(e -> triggerKey.equals(e.getIdemKey()), "the TriggerJob's events");
    check(scheduled.getBody() instanceof RunScheduled,
        "TriggerJob answered " + typeOf(scheduled) + ", expected RunScheduled");
    RunScheduled rs = (RunScheduled) scheduled.getBody();
    String runId = rs.getRunId();
    check(runId != null && !runId.isEmpty(), "RunScheduled has no run_id");
    check("manual".equals(rs.getTrigger()), "RunScheduled.trigger is " + rs.getTrigger());

    check(send(pauseKey, new PauseJob()) == partition, "PauseJob went to another partition");
    RunEvent paused = await(e -> pauseKey.equals(e.getIdemKey()), "the PauseJob's events");
    check(paused.getBody() instanceof JobPaused,
        "PauseJob answered " + typeOf(paused) + ", expected JobPaused");

    RunEvent done = await(e -> e.getBody() instanceof RunSucceeded s && runId.equals(s.getRunId()),
        "RunSucceeded of run " + runId);
    check(done.getJobId().equals(jobId), "RunSucceeded names job " + done.getJobId());

    // Every event of the job: keyed by its job_id, on the commands' partition, in this order.
    List<String> runTypes = new ArrayList<>();
    for (int i = 0; i < events.size(); i++) {
      RunEvent e = events.get(i);
      ConsumerRecord<byte[], byte[]> r = records.get(i);
      check(r.partition() == partition, typeOf(e) + " is on run-events partition "
          + r.partition() + ", the commands went to " + partition);
      check(e.getJobId().equals(jobId), typeOf(e) + " names job " + e.getJobId());
      if (belongsTo(e.getBody(), runId) || e.getBody() instanceof JobRegistered
          || e.getBody() instanceof JobPaused) {
        runTypes.add(typeOf(e));
      }
    }
    List<String> expected = List.of("JobRegistered", "RunScheduled", "TaskReady", "TaskClaimed",
        "TaskSucceeded", "RunSucceeded");
    check(isSubsequence(expected, runTypes), "event types " + runTypes
        + " do not hold " + expected + " in this order");
    check(runTypes.indexOf("JobPaused") > runTypes.indexOf("RunScheduled"),
        "JobPaused came before the trigger's RunScheduled: " + runTypes);
    TaskSucceeded ok = null;
    for (RunEvent e : events) {
      if (e.getBody() instanceof TaskSucceeded t && runId.equals(t.getRunId())) {
        ok = t;
      }
    }
    check(ok != null && ok.getExitCode() == 0,
        "TaskSucceeded of run " + runId + " has exit code " + (ok == null ? "-" : ok.getExitCode()));
    check(ok.getOutputTail().contains("hi"), "the task's output tail is " + ok.getOutputTail());

    System.out.println("RESULT job_id=" + jobId + " run_id=" + runId + " partition=" + partition
        + " events=" + String.join(",", runTypes));
  }

  private static boolean belongsTo(Object body, String runId) {
    return (body instanceof RunScheduled b && runId.equals(b.getRunId()))
        || (body instanceof TaskReady b2 && runId.equals(b2.getRunId()))
        || (body instanceof TaskClaimed b3 && runId.equals(b3.getRunId()))
        || (body instanceof TaskSucceeded b4 && runId.equals(b4.getRunId()))
        || (body instanceof RunSucceeded b5 && runId.equals(b5.getRunId()));
  }

  private static boolean isSubsequence(List<String> want, List<String> got) {
    int i = 0;
    for (String g : got) {
      if (i < want.size() && want.get(i).equals(g)) {
        i++;
      }
    }
    return i == want.size();
  }

  /** Produces one command for the job, keyed by job_id; returns the partition it went to. */
  private int send(String idemKey, Object body) throws Exception {
    Command command =
        Command.newBuilder().setIdemKey(idemKey).setJobId(jobId).setTenant("default")
            .setBody(body).build();
    ByteBuffer buf = COMMANDS.encode(command);
    byte[] value = new byte[buf.remaining()];
    buf.get(value);
    RecordMetadata md =
        producer.send(new ProducerRecord<>(commandsTopic, jobId, value)).get();
    System.out.println("sent " + body.getClass().getSimpleName() + " idem_key=" + idemKey
        + " partition=" + md.partition() + " offset=" + md.offset());
    return md.partition();
  }

  /** Polls run-events until an event of the job matches {@code want}; returns it. */
  private RunEvent await(Predicate<RunEvent> want, String what) throws ContractBroken {
    for (RunEvent e : events) {
      if (want.test(e)) {
        return e;
      }
    }
    while (System.nanoTime() < deadline) {
      for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
        if (r.key() == null || !jobId.equals(new String(r.key(), StandardCharsets.UTF_8))) {
          continue;
        }
        RunEvent e;
        try {
          e = EVENTS.decode(r.value());
        } catch (Exception exc) {
          throw new ContractBroken("Avro's BinaryMessageDecoder cannot read the run-event at "
              + r.topic() + "/" + r.partition() + "@" + r.offset() + ": " + exc);
        }
        records.add(r);
        events.add(e);
        System.out.println("event " + typeOf(e) + " idem_key=" + e.getIdemKey()
            + " index=" + e.getIndex() + " partition=" + r.partition() + "@" + r.offset());
      }
      for (RunEvent e : events) {
        if (want.test(e)) {
          return e;
        }
      }
    }
    throw new ContractBroken("timed out waiting for " + what);
  }

  private static String typeOf(RunEvent e) {
    return e.getBody().getClass().getSimpleName();
  }

  private String describe() {
    List<String> out = new ArrayList<>();
    for (RunEvent e : events) {
      out.add(typeOf(e) + "(" + e.getIdemKey() + ")");
    }
    return String.join(", ", out);
  }

  private static void check(boolean ok, String failure) throws ContractBroken {
    if (!ok) {
      throw new ContractBroken(failure);
    }
  }

  /** A check of the contract failed. */
  static final class ContractBroken extends Exception {
    ContractBroken(String message) {
      super(message);
    }
  }

}
