//! `sluice bench compare`: Apache Kafka and Sluice, same machine, same client, same sweep, one
//! after the other in one run, with durability set alike. Kafka is installed from Maven
//! Central (nothing else is downloaded) into a directory of the user's choosing and started in
//! single-node KRaft mode on loopback; every process started here is stopped at the end.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::connect;
use crate::e2e::E2eResult;
use crate::error::BenchError;
use crate::sweep::{self, SweepConfig};
use crate::throughput::{self, ProduceConfig, ThroughputResult};

/// Kafka's broker and tools jars are known to resolve from Maven Central at this version.
pub const DEFAULT_KAFKA_VERSION: &str = "4.3.1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// fsync every 100 ms: Sluice `flush.mode=interval`, Kafka `log.flush.interval.ms=100`.
    Interval,
    /// fsync before acknowledging: Sluice `flush.mode=sync`, Kafka `log.flush.interval.messages=1`.
    Sync,
    /// Each broker's own default: Sluice fsyncs every 100 ms, Kafka leaves it to the OS.
    Defaults,
}

impl Durability {
    pub fn parse(s: &str) -> Result<Durability, BenchError> {
        match s {
            "interval" => Ok(Durability::Interval),
            "sync" => Ok(Durability::Sync),
            "defaults" => Ok(Durability::Defaults),
            other => Err(BenchError::Setup(format!(
                "--durability must be interval, sync or defaults, not '{other}'"
            ))),
        }
    }

    fn kafka_properties(self) -> &'static str {
        match self {
            Durability::Interval => {
                "log.flush.interval.ms=100\nlog.flush.scheduler.interval.ms=100\n"
            }
            Durability::Sync => "log.flush.interval.messages=1\n",
            Durability::Defaults => "",
        }
    }

    fn sluice_flags(self) -> Vec<String> {
        match self {
            Durability::Sync => vec!["--log-flush-mode".into(), "sync".into()],
            _ => vec![
                "--log-flush-mode".into(),
                "interval".into(),
                "--log-flush-interval-ms".into(),
                "100".into(),
            ],
        }
    }
}

#[derive(Debug, Clone)]
pub struct CompareConfig {
    pub kafka_version: String,
    pub kafka_dir: PathBuf,
    /// The `sluice` executable to start as the second broker.
    pub sluice_exe: PathBuf,
    pub work_dir: PathBuf,
    pub sweep: SweepConfig,
    pub durability: Durability,
    pub throughput_sizes: Vec<usize>,
    pub throughput_seconds: f64,
    /// Seconds of load before measuring, so that the JVM has compiled its hot paths.
    pub warmup_run_s: f64,
    /// Nodes per broker: 1, or a cluster of 3 (KRaft Kafka; Sluice with `--cluster`) whose
    /// topics get `sweep.base.replication_factor` replicas.
    pub nodes: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrokerRun {
    pub broker: String,
    pub sweep: Vec<E2eResult>,
    pub throughput: Vec<ThroughputResult>,
}

/// The plan, in words, without doing any of it (`--dry-run`).
pub fn plan(config: &CompareConfig) -> Vec<String> {
    let libs = config.kafka_dir.join("libs");
    let installed = libs.join(".complete").exists();
    let mut steps = vec![if installed {
        format!(
            "use Apache Kafka {} already installed in {}",
            config.kafka_version,
            libs.display()
        )
    } else {
        format!(
            "install Apache Kafka {v}: mvn dependency:copy-dependencies of org.apache.kafka:kafka_2.13:{v} and kafka-tools:{v} \
             from Maven Central into {} (local repository {})",
            libs.display(),
            config.kafka_dir.join("m2").display(),
            v = config.kafka_version
        )
    }];
    steps.push(format!(
        "measure the floor (loopback round trip, append+fdatasync) in {}",
        config.work_dir.display()
    ));
    steps.push(format!(
        "start Kafka (KRaft, {}, loopback, heap 1 GiB each, {:?} durability: {}) with data in {}",
        nodes_in_words(config.nodes),
        config.durability,
        config
            .durability
            .kafka_properties()
            .trim()
            .replace('\n', ", "),
        config.work_dir.join("kafka-data").display()
    ));
    let runs: Vec<String> = config
        .sweep
        .sizes
        .iter()
        .map(|s| format!("{s} B"))
        .collect();
    let rates: Vec<String> = config
        .sweep
        .rates
        .iter()
        .map(|r| format!("{r:.0}"))
        .collect();
    let sweep = format!(
        "{} s warm-up load, then the sweep: sizes {} × rates {} msg/s ({} s each, acks={}, RF={}, stopping a size at the first rate not sustained); \
         then closed-loop produce throughput for {:?} B, {} s each",
        config.warmup_run_s,
        runs.join(", "),
        rates.join(", "),
        config.sweep.base.duration_s,
        config.sweep.base.acks,
        config.sweep.base.replication_factor,
        config.throughput_sizes,
        config.throughput_seconds
    );
    steps.push(format!("against Kafka: {sweep}"));
    steps.push("stop Kafka and delete its data".into());
    steps.push(format!(
        "start Sluice ({}; {} serve {}) with data in {}",
        nodes_in_words(config.nodes),
        config.sluice_exe.display(),
        config.durability.sluice_flags().join(" "),
        config.work_dir.join("sluice-data").display()
    ));
    steps.push(format!("against Sluice: the same {sweep}"));
    steps.push("stop Sluice and delete its data".into());
    if config.nodes > 1 {
        steps.push(format!(
            "start one Sluice node alone and measure its closed-loop produce throughput ({:?} B, RF=1), \
             the single-node figure the cluster's is compared with; stop it and delete its data",
            config.throughput_sizes
        ));
    }
    steps.push(
        "write the report (terminal table, JSON, HTML with both brokers and the ratio per cell)"
            .into(),
    );
    steps
}

fn nodes_in_words(nodes: usize) -> String {
    if nodes == 1 {
        "one node".into()
    } else {
        format!("{nodes} nodes as {nodes} processes")
    }
}

fn free_port() -> Result<u16, BenchError> {
    let l =
        TcpListener::bind("127.0.0.1:0").map_err(|e| BenchError::io("finding a free port", e))?;
    Ok(l.local_addr()
        .map_err(|e| BenchError::io("finding a free port", e))?
        .port())
}

/// A child process that is killed when dropped, whatever happens in between.
pub struct ChildGuard {
    child: Child,
    name: String,
}

impl std::fmt::Debug for ChildGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChildGuard({})", self.name)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ChildGuard {
    fn check_alive(&mut self, log: &Path) -> Result<(), BenchError> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = tail
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            return Err(BenchError::Setup(format!(
                "{} exited with {status}:\n{tail}",
                self.name
            )));
        }
        Ok(())
    }
}

/// Deletes a stopped broker's data and lets the disk settle before anything is measured
/// again: a sweep leaves tens of GB, and on a filesystem mounted with `discard` deleting them
/// keeps the device busy for a while (measured: ~30 ms stalls in the next runs otherwise).
pub fn discard_data(dir: &Path) {
    if !dir.exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    let _ = Command::new("sync").status();
    std::thread::sleep(Duration::from_secs(5));
}

/// Installs Kafka's jars into `<dir>/libs` with Maven (skipped when already there).
pub fn install_kafka(version: &str, dir: &Path) -> Result<PathBuf, BenchError> {
    let libs = dir.join("libs");
    if libs.join(".complete").exists() {
        return Ok(libs);
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))?;
    let pom = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `sluice bench compare` to fetch Apache Kafka's runtime from Maven Central. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sluice</groupId><artifactId>kafka-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{version}</version></dependency>
  </dependencies>
</project>
"#
    );
    std::fs::write(dir.join("pom.xml"), pom).map_err(|e| BenchError::io("writing pom.xml", e))?;
    let status = Command::new("mvn")
        .current_dir(dir)
        .args([
            "-q",
            "-B",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
        ])
        .arg(format!("-DoutputDirectory={}", libs.display()))
        .arg(format!("-Dmaven.repo.local={}", dir.join("m2").display()))
        .arg("-Dstyle.color=never")
        // Maven's output goes to stderr: stdout is the libs directory alone, which scripts read
        // (its colour resets on stdout once put "\x1b[0m" before the path).
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| BenchError::io("running mvn (is Maven installed?)", e))?;
    if !status.success() {
        return Err(BenchError::Setup(format!(
            "mvn failed ({status}) fetching Kafka {version}"
        )));
    }
    std::fs::write(libs.join(".complete"), version)
        .map_err(|e| BenchError::io("marking the install complete", e))?;
    Ok(libs)
}

/// Waits until the broker at `addr` answers Metadata.
fn wait_ready(addr: &str, guard: &mut ChildGuard, log: &Path) -> Result<(), BenchError> {
    let clock = crate::clock::RunClock::start();
    let deadline = Duration::from_secs(90).as_nanos() as u64;
    loop {
        guard.check_alive(log)?;
        // A broker answers ApiVersions (inside `connect`) once it serves requests.
        if connect(addr).is_ok() {
            return Ok(());
        }
        if clock.now_ns() > deadline {
            return Err(BenchError::Setup(format!(
                "{} did not come up on {addr} within 90 s",
                guard.name
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Starts Kafka in KRaft mode, `nodes` combined broker+controller processes on loopback (every
/// node a voter); returns the processes and the bootstrap list once every node is registered.
pub fn start_kafka(
    libs: &Path,
    work: &Path,
    durability: Durability,
    nodes: usize,
) -> Result<(Vec<ChildGuard>, String), BenchError> {
    let data = work.join("kafka-data");
    let _ = std::fs::remove_dir_all(&data);
    let ports: Vec<(u16, u16)> = (0..nodes)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<Result<_, BenchError>>()?;
    let voters: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, controller))| format!("{}@127.0.0.1:{controller}", i + 1))
        .collect();
    // Internal topics as replicated as the benchmark's; a write needs a majority in sync.
    let (rf, min_isr) = (nodes, nodes / 2 + 1);
    let classpath = format!("{}/*", libs.display());
    let cluster_id = "c2x1aWNlYmVuY2hrYWZrYQ";
    let mut guards = Vec::new();
    let mut addrs = Vec::new();
    for (i, (port, controller)) in ports.iter().enumerate() {
        let id = i + 1;
        let dir = data.join(format!("node-{id}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::io("creating Kafka's data dir", e))?;
        let properties = format!(
            "process.roles=broker,controller\nnode.id={id}\ncontroller.quorum.voters={}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\nlog.dirs={}\nnum.partitions=1\n\
             offsets.topic.replication.factor={rf}\ntransaction.state.log.replication.factor={rf}\n\
             transaction.state.log.min.isr={min_isr}\ngroup.initial.rebalance.delay.ms=0\n{}",
            voters.join(","),
            dir.display(),
            durability.kafka_properties()
        );
        let config = work.join(format!("kafka-server-{id}.properties"));
        std::fs::write(&config, properties)
            .map_err(|e| BenchError::io("writing server.properties", e))?;
        let log = work.join(if nodes == 1 {
            "kafka.log".to_string()
        } else {
            format!("kafka-{id}.log")
        });
        let log_file =
            || std::fs::File::create(&log).map_err(|e| BenchError::io("creating Kafka's log", e));
        let status = Command::new("java")
            .args([
                "-cp",
                &classpath,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
            ])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log_file()?)
            .status()
            .map_err(|e| BenchError::io("running java (is a JDK installed?)", e))?;
        if !status.success() {
            return Err(BenchError::Setup(format!(
                "formatting Kafka's storage failed; see {}",
                log.display()
            )));
        }
        let child = Command::new("java")
            .args([
                "-Xms1g",
                "-Xmx1g",
                "-XX:+UseG1GC",
                "-cp",
                &classpath,
                "kafka.Kafka",
            ])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log_file()?)
            .spawn()
            .map_err(|e| BenchError::io("starting Kafka", e))?;
        guards.push((
            ChildGuard {
                child,
                name: format!("Kafka node {id}"),
            },
            log,
        ));
        addrs.push(format!("127.0.0.1:{port}"));
    }
    // A KRaft node serves only once a quorum of controllers is up: start all, then wait.
    for ((guard, log), addr) in guards.iter_mut().zip(&addrs) {
        wait_ready(addr, guard, log)?;
    }
    crate::cluster::wait_for_brokers(&addrs[0], nodes)?;
    Ok((
        guards.into_iter().map(|(g, _)| g).collect(),
        addrs.join(","),
    ))
}

/// Starts Sluice: one node, or `nodes` processes forming a cluster (`--node-id`, `--cluster`);
/// returns the processes and the bootstrap list once every node is registered.
pub fn start_sluice(
    exe: &Path,
    work: &Path,
    durability: Durability,
    nodes: usize,
) -> Result<(Vec<ChildGuard>, String), BenchError> {
    let data = work.join("sluice-data");
    let _ = std::fs::remove_dir_all(&data);
    let ports: Vec<(u16, u16, u16)> = (0..nodes)
        .map(|_| Ok((free_port()?, free_port()?, free_port()?)))
        .collect::<Result<_, BenchError>>()?;
    let voters: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, _, internal))| format!("{}@127.0.0.1:{internal}", i + 1))
        .collect();
    let mut guards = Vec::new();
    let mut addrs = Vec::new();
    for (i, (port, admin, _)) in ports.iter().enumerate() {
        let id = i + 1;
        let (dir, log) = if nodes == 1 {
            (data.clone(), work.join("sluice.log"))
        } else {
            (
                data.join(format!("node-{id}")),
                work.join(format!("sluice-{id}.log")),
            )
        };
        let mut command = Command::new(exe);
        command
            .arg("serve")
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--admin-listen",
                &format!("127.0.0.1:{admin}"),
            ])
            .arg("--data-dir")
            .arg(&dir)
            .args(["--log-level", "warn"])
            .args(durability.sluice_flags());
        if nodes > 1 {
            command
                .args(["--node-id", &id.to_string()])
                .args(["--cluster", &voters.join(",")]);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(&log)
                    .map_err(|e| BenchError::io("creating Sluice's log", e))?,
            )
            .spawn()
            .map_err(|e| BenchError::io(format!("starting {}", exe.display()), e))?;
        guards.push((
            ChildGuard {
                child,
                name: if nodes == 1 {
                    "Sluice".into()
                } else {
                    format!("Sluice node {id}")
                },
            },
            log,
        ));
        addrs.push(format!("127.0.0.1:{port}"));
    }
    for ((guard, log), addr) in guards.iter_mut().zip(&addrs) {
        wait_ready(addr, guard, log)?;
    }
    crate::cluster::wait_for_brokers(&addrs[0], nodes)?;
    Ok((
        guards.into_iter().map(|(g, _)| g).collect(),
        addrs.join(","),
    ))
}

/// Runs everything against one broker at `addr`.
pub fn measure(
    broker: &str,
    addr: &str,
    config: &CompareConfig,
    mut on_run: impl FnMut(&str, &E2eResult),
) -> Result<BrokerRun, BenchError> {
    let mut base = config.sweep.base.clone();
    base.bootstrap = addr.to_string();
    if config.warmup_run_s > 0.0 {
        let warm = crate::e2e::E2eConfig {
            topic: format!("{}-warmup", base.topic),
            duration_s: config.warmup_run_s,
            warmup_s: 0.0,
            rate_per_s: 20_000.0,
            ..base.clone()
        };
        crate::e2e::run(&warm, false)?;
    }
    let sweep_config = SweepConfig {
        base: base.clone(),
        ..config.sweep.clone()
    };
    let sweep = sweep::run(&sweep_config, |r| on_run(broker, r))?;
    let throughput = measure_throughput(addr, config, &base)?;
    Ok(BrokerRun {
        broker: broker.to_string(),
        sweep,
        throughput,
    })
}

/// Closed-loop produce throughput at each of `config.throughput_sizes`, with `base`'s acks,
/// batching, replication factor and topic configs.
pub fn measure_throughput(
    addr: &str,
    config: &CompareConfig,
    base: &crate::e2e::E2eConfig,
) -> Result<Vec<ThroughputResult>, BenchError> {
    let mut throughput = Vec::new();
    for &size in &config.throughput_sizes {
        throughput.push(throughput::produce(&ProduceConfig {
            bootstrap: addr.to_string(),
            topic: format!("{}-max-{size}", base.topic),
            record_bytes: size,
            duration_s: config.throughput_seconds,
            producers: 1,
            partitions: 1,
            replication_factor: base.replication_factor,
            acks: base.acks,
            batch_bytes: base.batch_bytes,
            max_in_flight: base.max_in_flight,
            compression: base.compression.clone(),
            topic_configs: base.topic_configs.clone(),
        })?);
    }
    Ok(throughput)
}

/// One line per (size, rate) both brokers ran: Kafka's latency over Sluice's, per percentile.
pub fn ratio_table(kafka: &BrokerRun, sluice: &BrokerRun) -> String {
    let mut out = String::from("size   offered      AVG    P50    P90    P95    P99  P99.9   (Kafka latency ÷ Sluice latency; both sustained)\n");
    for s in &sluice.sweep {
        let Some(k) = kafka.sweep.iter().find(|k| {
            k.config.record_bytes == s.config.record_bytes
                && k.offered_rate_per_s == s.offered_rate_per_s
        }) else {
            continue;
        };
        let (a, b) = (&k.latency, &s.latency);
        let both = k.sustained() && s.sustained();
        out.push_str(&format!(
            "{:>5} {:>8.0} {:>8.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1}{}\n",
            s.config.record_bytes,
            s.offered_rate_per_s,
            a.avg_us / b.avg_us,
            a.p50_us / b.p50_us,
            a.p90_us / b.p90_us,
            a.p95_us / b.p95_us,
            a.p99_us / b.p99_us,
            a.p999_us / b.p999_us,
            if both { "" } else { "   (not both sustained)" }
        ));
    }
    for s in &sluice.throughput {
        if let Some(k) = kafka.throughput.iter().find(|k| k.what == s.what) {
            out.push_str(&format!(
                "max throughput, {}: Sluice {:.0} msg/s, Kafka {:.0} msg/s, Sluice ÷ Kafka = {:.2}\n",
                s.what,
                s.msg_per_s,
                k.msg_per_s,
                s.msg_per_s / k.msg_per_s
            ));
        }
    }
    out
}
