//! `sluice bench bank`: sets the workload up (topics, accounts with a known total), starts K
//! processor processes, drives transfers at a fixed offered rate, optionally injects faults
//! (SIGKILL of processors, SIGKILL and restart of a local broker), waits for the workload to
//! drain, runs the checker and reports.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde::Serialize;

use crate::checker::{check, Verdict};
use crate::error::BankError;
use crate::generator::{GeneratorConfig, Rng};
use crate::kafka::{config, read_settled, send_waiting};
use crate::local_broker::LocalBroker;
use crate::record::{account_key, decode_account, decode_balance, partition_of, Record, Topics};

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub brokers: Option<String>,
    pub local_broker: Option<PathBuf>,
    pub rate: u64,
    pub duration: Duration,
    pub processors: Vec<u32>,
    pub accounts: u32,
    pub initial_balance: i64,
    pub partitions: i32,
    pub commit_ms: u64,
    pub commit_records: usize,
    pub faults: bool,
    pub seed: u64,
    pub drain_timeout: Duration,
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub avg: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[derive(Debug, Serialize)]
pub struct RunReport {
    pub processors: u32,
    pub offered_rate: u64,
    pub duration_s: f64,
    pub accounts: u32,
    pub partitions: i32,
    pub commit_ms: u64,
    pub transfers_sent: usize,
    pub sends_failed: usize,
    pub transfers_completed: u64,
    /// Completed transfers over the time from the first send to the last completion.
    pub transfers_per_sec: f64,
    /// Send to final credit visible to a read_committed consumer.
    pub latency_ms: Latency,
    /// Send to the debit visible (the saga's first step).
    pub debit_latency_ms: Latency,
    pub completed_per_second: Vec<u64>,
    pub max_latency_ms_per_second: Vec<u64>,
    pub drained: bool,
    pub faults: Vec<String>,
    pub processor_restarts: u32,
    /// With `--faults` and two processors or more: whether the kept-down processor's
    /// partitions were assigned to another processor while it was down.
    pub hand_over_seen: bool,
    pub checker: Verdict,
}

/// Runs the bench for each processor count; the reports, in order.
pub fn run(cfg: &BenchConfig, work: &Path) -> Result<Vec<RunReport>, BankError> {
    let mut reports = Vec::new();
    for (i, &k) in cfg.processors.iter().enumerate() {
        let run_dir = work.join(format!("run-{}-{k}p", i + 1));
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| BankError::Setup(format!("cannot create {}: {e}", run_dir.display())))?;
        let mut broker = match &cfg.local_broker {
            Some(dir) => Some(LocalBroker::start(&dir.join(format!("broker-{}", i + 1)))?),
            None => None,
        };
        let bootstrap = match (&broker, &cfg.brokers) {
            (Some(b), _) => b.bootstrap.clone(),
            (None, Some(b)) => b.clone(),
            (None, None) => {
                return Err(BankError::Setup("give --brokers or --local-broker".into()))
            }
        };
        let prefix = format!("bank-{}-{}", std::process::id(), i + 1);
        let report = run_once(cfg, k, &bootstrap, &prefix, broker.as_mut(), &run_dir)?;
        // Not eprintln!: a reader of stderr that is gone must not end the run with a panic.
        let _ = writeln!(
            std::io::stderr().lock(),
            "{k} processor(s): {:.0} transfers/s, latency ms avg {:.1} p50 {:.1} p99 {:.1}, checker {}",
            report.transfers_per_sec,
            report.latency_ms.avg,
            report.latency_ms.p50,
            report.latency_ms.p99,
            if report.checker.ok { "ok" } else { "FAILED" }
        );
        reports.push(report);
    }
    Ok(reports)
}

/// Fails with a clear message when no broker answers at `bootstrap`.
fn reachable(bootstrap: &str) -> Result<(), BankError> {
    let probe: BaseProducer = config(bootstrap)
        .create()
        .map_err(|e| BankError::kafka("creating a client", e))?;
    probe
        .client()
        .fetch_metadata(None, Duration::from_secs(10))
        .map(drop)
        .map_err(|e| BankError::Setup(format!("no Kafka broker answers at {bootstrap}: {e}")))
}

fn create_topics(bootstrap: &str, topics: &Topics, partitions: i32) -> Result<(), BankError> {
    let admin: AdminClient<DefaultClientContext> = config(bootstrap)
        .create()
        .map_err(|e| BankError::kafka("creating an admin client", e))?;
    // The broker's default replication factor (-1).
    let new = [
        NewTopic::new(&topics.commands, partitions, TopicReplication::Fixed(-1)),
        NewTopic::new(&topics.events, partitions, TopicReplication::Fixed(-1)),
        NewTopic::new(&topics.balances, partitions, TopicReplication::Fixed(-1))
            .set("cleanup.policy", "compact"),
    ];
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics(&new, &options))
        .map_err(|e| BankError::kafka("creating the topics", e))?;
    for r in results {
        if let Err((topic, code)) = r {
            return Err(BankError::Setup(format!(
                "cannot create topic {topic}: {code}"
            )));
        }
    }
    Ok(())
}

/// The admin client's futures need no runtime: a plain thread-parking executor.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// Every account's opening balance, as its first snapshot.
fn open_accounts(bootstrap: &str, topics: &Topics, cfg: &BenchConfig) -> Result<(), BankError> {
    let producer: BaseProducer<Failures> = config(bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(Failures::default())
        .map_err(|e| BankError::kafka("creating the account opener", e))?;
    let value = cfg.initial_balance.to_be_bytes();
    for account in 0..cfg.accounts {
        let key = account_key(account);
        let record = BaseRecord::<[u8], [u8]>::to(&topics.balances)
            .partition(partition_of(account, cfg.partitions))
            .key(&key[..])
            .payload(&value[..]);
        send_waiting(&producer, record, Duration::from_secs(60))
            .map_err(|e| BankError::kafka("opening the accounts", e))?;
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| BankError::kafka("opening the accounts", e))?;
    let failed = producer.context().0.load(Ordering::SeqCst);
    if failed > 0 {
        return Err(BankError::Setup(format!(
            "{failed} opening balances were not written"
        )));
    }
    Ok(())
}

/// Counts records the broker did not take.
#[derive(Default)]
struct Failures(std::sync::atomic::AtomicU64);

impl rdkafka::ClientContext for Failures {}

impl rdkafka::producer::ProducerContext for Failures {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILLed and started again at once (within its session timeout: it takes its
    /// partitions back).
    Processor,
    /// SIGKILLed and kept down past its session timeout, so its partitions move to the other
    /// processors, which rebuild them while its last transaction may still be open.
    ProcessorHandOver,
    Broker,
}

/// How long a processor stays down in a hand-over fault: the processors' session timeout
/// (10 s) plus time for the group to move its partitions and the others to work them. A
/// broker restart meanwhile starts the session timer again (the coordinator reloads the
/// group), so it starts this time again too.
const HAND_OVER_DOWN: Duration = Duration::from_secs(16);

struct Processors {
    exe: PathBuf,
    bootstrap: String,
    prefix: String,
    commit_ms: u64,
    commit_records: usize,
    dir: PathBuf,
    children: Vec<Option<Child>>,
    /// Processors kept down until then (a hand-over fault).
    down_until: Vec<Option<std::time::Instant>>,
    /// A processor kept down, the partitions it held, and how many `ASSIGNED` lines each
    /// processor's log had when it went down.
    handed: Option<(usize, Vec<i32>, Vec<usize>)>,
    /// Whether another processor was assigned one of the kept-down processor's partitions.
    hand_over_seen: bool,
    /// The commands topic's partition count.
    partitions: usize,
    restarts: u32,
}

impl Processors {
    fn spawn(&mut self, index: usize) -> Result<(), BankError> {
        let out =
            crate::local_broker::append_log(&self.dir.join(format!("processor-{index}.log")))?;
        let err = out
            .try_clone()
            .map_err(|e| BankError::Setup(format!("processor log: {e}")))?;
        let child = Command::new(&self.exe)
            .args([
                "processor",
                "--bootstrap",
                &self.bootstrap,
                "--prefix",
                &self.prefix,
            ])
            .args(["--index", &index.to_string()])
            .args(["--commit-ms", &self.commit_ms.to_string()])
            .args(["--commit-records", &self.commit_records.to_string()])
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| BankError::Setup(format!("starting a processor: {e}")))?;
        self.children[index] = Some(child);
        Ok(())
    }

    /// Restarts processors that ended on their own (an error; they are meant to run), and
    /// those whose time down is over.
    fn supervise(&mut self) -> Result<(), BankError> {
        let now = crate::clock::now();
        for i in 0..self.children.len() {
            match self.down_until[i] {
                Some(until) if now < until => continue,
                Some(_) => {
                    // Whatever the others were assigned meanwhile is in their logs.
                    self.watch_hand_over();
                    self.down_until[i] = None;
                }
                None => {}
            }
            let ended = match self.children[i].as_mut() {
                Some(c) => matches!(c.try_wait(), Ok(Some(_))),
                None => true,
            };
            if ended {
                self.restarts += 1;
                self.spawn(i)?;
            }
        }
        Ok(())
    }

    fn kill(&mut self, index: usize) {
        if let Some(mut c) = self.children[index].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILLs a processor and keeps it down for `down`, watching for its partitions to be
    /// assigned to another processor.
    fn kill_for(&mut self, index: usize, down: Duration) {
        self.kill(index);
        self.down_until[index] = Some(crate::clock::now() + down);
        let held = self.assignments(index).pop().unwrap_or_default();
        let seen = (0..self.children.len())
            .map(|i| self.assignments(i).len())
            .collect();
        self.handed = Some((index, held, seen));
    }

    /// Keeps a processor that is kept down down for `down` from now (the broker restarted:
    /// its session starts again).
    fn hold_again(&mut self, down: Duration) {
        let until = crate::clock::now() + down;
        for d in self.down_until.iter_mut().flatten() {
            *d = (*d).max(until);
        }
    }

    /// The partition lists of a processor's `ASSIGNED` lines, oldest first.
    fn assignments(&self, index: usize) -> Vec<Vec<i32>> {
        let log = std::fs::read_to_string(self.dir.join(format!("processor-{index}.log")))
            .unwrap_or_default();
        log.lines()
            .filter_map(|l| l.strip_prefix("ASSIGNED ["))
            .map(|rest| {
                rest.trim_end_matches(']')
                    .split(',')
                    .filter_map(|p| p.trim().parse().ok())
                    .collect()
            })
            .collect()
    }

    /// Notes whether another processor has been assigned a partition of the one kept down.
    fn watch_hand_over(&mut self) {
        let Some((victim, held, seen)) = &self.handed else {
            return;
        };
        let taken = (0..self.children.len()).filter(|i| i != victim).any(|i| {
            self.assignments(i)
                .iter()
                .skip(seen.get(i).copied().unwrap_or(0))
                .any(|parts| parts.iter().any(|p| held.contains(p)))
        });
        self.hand_over_seen |= taken;
    }

    /// Whether the processor kept down (if any) has been assigned partitions since it
    /// returned (or, with more processors than partitions, assigned at all: it may get none).
    fn kept_down_one_reassigned(&self) -> bool {
        let more_processors = self.children.len() > self.partitions;
        self.handed.as_ref().is_none_or(|(victim, _, seen)| {
            self.assignments(*victim)
                .iter()
                .skip(seen.get(*victim).copied().unwrap_or(0))
                .any(|parts| !parts.is_empty() || more_processors)
        })
    }

    /// Whether no processor is being kept down.
    fn all_up(&self) -> bool {
        self.down_until.iter().all(Option::is_none)
    }

    fn kill_all(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }

    fn assigned_lines(&self) -> usize {
        (0..self.children.len())
            .filter(|&i| !self.assignments(i).is_empty())
            .count()
    }
}

impl Drop for Processors {
    fn drop(&mut self) {
        self.kill_all();
    }
}

fn run_once(
    cfg: &BenchConfig,
    k: u32,
    bootstrap: &str,
    prefix: &str,
    mut broker: Option<&mut LocalBroker>,
    dir: &Path,
) -> Result<RunReport, BankError> {
    let topics = Topics::new(prefix);
    reachable(bootstrap)?;
    create_topics(bootstrap, &topics, cfg.partitions)?;
    open_accounts(bootstrap, &topics, cfg)?;
    let exe = std::env::current_exe()
        .map_err(|e| BankError::Setup(format!("cannot find this executable: {e}")))?;
    let mut procs = Processors {
        exe,
        bootstrap: bootstrap.to_string(),
        prefix: prefix.to_string(),
        commit_ms: cfg.commit_ms,
        commit_records: cfg.commit_records,
        dir: dir.to_path_buf(),
        children: (0..k).map(|_| None).collect(),
        down_until: vec![None; k as usize],
        handed: None,
        hand_over_seen: false,
        partitions: usize::try_from(cfg.partitions).unwrap_or(0),
        restarts: 0,
    };
    for i in 0..k as usize {
        // A reused work directory must not hold an old run's "ASSIGNED".
        let _ = std::fs::remove_file(dir.join(format!("processor-{i}.log")));
        procs.spawn(i)?;
    }
    let ready_by = crate::clock::now() + Duration::from_secs(60);
    while procs.assigned_lines() < k as usize {
        if crate::clock::now() > ready_by {
            return Err(BankError::Setup(format!(
                "the processors did not all join their group; see {}",
                dir.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let the group settle (the last join moves partitions once more).
    std::thread::sleep(Duration::from_secs(2));

    let stop = Arc::new(AtomicBool::new(false));
    let observed = Arc::new(Mutex::new(crate::monitor::observed()?));
    let monitor = {
        let (b, p, o, s) = (
            bootstrap.to_string(),
            prefix.to_string(),
            Arc::clone(&observed),
            Arc::clone(&stop),
        );
        let partitions = cfg.partitions;
        std::thread::spawn(move || crate::monitor::run(&b, &p, partitions, &o, &s))
    };
    // The monitor's first fetch before the first transfer.
    std::thread::sleep(Duration::from_secs(1));
    let gen_cfg = GeneratorConfig {
        bootstrap: bootstrap.to_string(),
        prefix: prefix.to_string(),
        partitions: cfg.partitions,
        accounts: cfg.accounts,
        rate: cfg.rate,
        duration: cfg.duration,
        seed: cfg.seed,
    };
    let generator = std::thread::spawn(move || crate::generator::run(&gen_cfg));

    // Faults at random moments of the run: two processor SIGKILLs and, with a local broker,
    // one broker SIGKILL and restart. With two processors or more the first killed one stays
    // down past its session timeout (a hand-over: the others take its partitions under load,
    // and give them back when it returns). A fault still due when the load ends (a slow
    // restart delayed the plan) is made then, so every run has all of them.
    let start = crate::clock::now();
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);
    let mut plan: Vec<(Duration, Fault)> = Vec::new();
    if cfg.faults {
        let at = |rng: &mut Rng, lo: f64, hi: f64| {
            cfg.duration
                .mul_f64(lo + (hi - lo) * (rng.below(1000) as f64 / 1000.0))
        };
        let first = if k >= 2 {
            Fault::ProcessorHandOver
        } else {
            Fault::Processor
        };
        plan.push((at(&mut rng, 0.15, 0.35), first));
        if broker.is_some() {
            plan.push((at(&mut rng, 0.4, 0.6), Fault::Broker));
        }
        plan.push((at(&mut rng, 0.65, 0.85), Fault::Processor));
    }
    let mut faults = Vec::new();
    loop {
        let load_ended = generator.is_finished();
        if let Some(&(when, fault)) = plan.first() {
            if load_ended || start.elapsed() >= when {
                plan.remove(0);
                let t = start.elapsed().as_secs_f64();
                match (fault, broker.as_deref_mut()) {
                    (Fault::Broker, Some(b)) => {
                        b.crash_and_restart(Duration::from_millis(500))?;
                        procs.hold_again(HAND_OVER_DOWN);
                        faults.push(format!(
                            "{t:.1}s: broker SIGKILLed, back after {:.1}s",
                            start.elapsed().as_secs_f64() - t
                        ));
                    }
                    (Fault::Broker, None) => {}
                    (Fault::Processor, _) => {
                        // One that is running (not the one a hand-over keeps down).
                        let up: Vec<usize> = (0..k as usize)
                            .filter(|&i| procs.down_until[i].is_none())
                            .collect();
                        let pick = rng.below(up.len().max(1) as u64) as usize;
                        let victim = up.get(pick).copied().unwrap_or(0);
                        procs.kill(victim);
                        faults.push(format!("{t:.1}s: processor {victim} SIGKILLed"));
                    }
                    (Fault::ProcessorHandOver, _) => {
                        let victim = rng.below(u64::from(k)) as usize;
                        procs.kill_for(victim, HAND_OVER_DOWN);
                        faults.push(format!(
                            "{t:.1}s: processor {victim} SIGKILLed, kept down {}s past its \
                             last broker restart (its partitions move to the others)",
                            HAND_OVER_DOWN.as_secs()
                        ));
                    }
                }
            }
        } else if load_ended {
            break;
        }
        procs.supervise()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let generated = generator
        .join()
        .map_err(|_| BankError::Setup("the load generator panicked".into()))??;
    let acknowledged: Vec<u64> = generated
        .sent
        .iter()
        .filter(|(_, s)| s.acknowledged)
        .map(|(id, _)| *id)
        .collect();
    // Drain: every acknowledged transfer finished (refused, or debited and credited).
    let drain_by = crate::clock::now() + cfg.drain_timeout;
    let drained = loop {
        let done = {
            let o = observed
                .lock()
                .map_err(|_| BankError::Setup("the monitor's state was poisoned".into()))?;
            acknowledged.iter().all(|id| o.first_steps.contains(id))
                && o.debited.iter().all(|id| o.credited.contains(id))
        };
        // A processor kept down is back, and assigned again, before the run ends.
        if done && procs.all_up() && procs.kept_down_one_reassigned() {
            break true;
        }
        if crate::clock::now() > drain_by {
            break false;
        }
        procs.supervise()?;
        std::thread::sleep(Duration::from_millis(50));
    };
    let restarts = procs.restarts;
    procs.watch_hand_over();
    let hand_over_seen = procs.hand_over_seen;
    procs.kill_all();
    stop.store(true, Ordering::SeqCst);
    match monitor.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(BankError::Setup("the monitor panicked".into())),
    }
    let observed = Arc::try_unwrap(observed)
        .map_err(|_| BankError::Setup("the monitor still runs".into()))?
        .into_inner()
        .map_err(|_| BankError::Setup("the monitor's state was poisoned".into()))?;

    // The checker reads what the topics hold.
    let deadline = crate::clock::now() + Duration::from_secs(120);
    let all: Vec<i32> = (0..cfg.partitions).collect();
    let mut events = Vec::new();
    read_settled(bootstrap, &topics.events, &all, deadline, |_, _, v| {
        events.push(Record::decode(v)?);
        Ok(())
    })?;
    let mut snapshots = BTreeMap::new();
    read_settled(bootstrap, &topics.balances, &all, deadline, |_, k, v| {
        snapshots.insert(decode_account(k)?, decode_balance(v)?);
        Ok(())
    })?;
    let mut verdict = check(
        cfg.accounts,
        cfg.initial_balance,
        &generated.sent,
        &events,
        &snapshots,
    );
    if !drained {
        verdict.ok = false;
        verdict.violations.insert(
            0,
            format!("the workload did not drain within {:?}", cfg.drain_timeout),
        );
    }
    let end = observed.last_completion.unwrap_or(generated.finished);
    let elapsed = end
        .saturating_duration_since(generated.started)
        .as_secs_f64();
    let latency = |h: &hdrhistogram::Histogram<u64>| {
        let ms = |us: f64| us / 1000.0;
        Latency {
            avg: ms(h.mean()),
            p50: ms(h.value_at_quantile(0.5) as f64),
            p90: ms(h.value_at_quantile(0.9) as f64),
            p99: ms(h.value_at_quantile(0.99) as f64),
            p999: ms(h.value_at_quantile(0.999) as f64),
            max: ms(h.max() as f64),
        }
    };
    Ok(RunReport {
        processors: k,
        offered_rate: cfg.rate,
        duration_s: cfg.duration.as_secs_f64(),
        accounts: cfg.accounts,
        partitions: cfg.partitions,
        commit_ms: cfg.commit_ms,
        transfers_sent: generated.sent.len(),
        sends_failed: generated.failed_sends,
        transfers_completed: observed.completed(),
        transfers_per_sec: if elapsed > 0.0 {
            observed.completed() as f64 / elapsed
        } else {
            0.0
        },
        latency_ms: latency(&observed.latency_us),
        debit_latency_ms: latency(&observed.debit_latency_us),
        completed_per_second: observed.per_second.clone(),
        max_latency_ms_per_second: observed.max_latency_ms_per_second.clone(),
        drained,
        faults,
        processor_restarts: restarts,
        hand_over_seen,
        checker: verdict,
    })
}

/// Where runs keep their processors' and broker's logs when no directory is given.
pub fn default_work_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sluice-bank-{}", std::process::id()))
}

/// The JSON report: the first run's figures at the top level, every run under `runs`.
pub fn report_json(reports: &[RunReport]) -> serde_json::Value {
    let mut out = reports
        .first()
        .and_then(|r| serde_json::to_value(r).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    out.insert(
        "runs".into(),
        serde_json::to_value(reports).unwrap_or(serde_json::Value::Null),
    );
    out.insert(
        "all_checkers_ok".into(),
        serde_json::Value::Bool(reports.iter().all(|r| r.checker.ok)),
    );
    serde_json::Value::Object(out)
}
