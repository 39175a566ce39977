//! The chaos soak: two replicas run the live cluster for a long time while workloads churn and
//! faults drawn at random from every kind the other fault tests inject come and go, and the
//! invariants are watched the whole time. It ends by printing a table — faults injected and
//! survived by kind, pods lost, wrong deletions, peak memory — and fails if any invariant broke.
//!
//! `FERROSCALE_SOAK_DURATION` (`90s`, `4m`, `1h`; default 4 minutes, what CI runs) and
//! `FERROSCALE_SOAK_SEED` (printed at the start, to replay a run) tune it;
//! `FERROSCALE_SOAK_REPORT` names a file the table is also written to. `scripts/chaos-soak.sh`
//! runs the hour-long version.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ferroscale_testing_faults::api_proxy::{Action, Matcher, PartitionMode, RequestClass, Rule};
use ferroscale_testing_faults::provider::{Fault, Injection, LostAnswer, Method};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::harness::{App, TO_BE_DELETED, has_taint};
use crate::rig::{Rig, RigOptions};

const DEFAULT_DURATION: Duration = Duration::from_secs(240);

/// Flags of both replicas: fast enough that a few minutes see scale-ups, drains and deletions,
/// with provisioning and backoff short enough to recover within a fault's lifetime.
const SOAK_FLAGS: &[&str] = &[
    "--scale-down-unneeded-time=15s",
    "--scale-down-delay-after-add=10s",
    "--scale-down-delay-after-delete=0s",
    "--scale-down-delay-after-failure=10s",
    "--node-delete-delay-after-taint=2s",
    "--unremovable-node-recheck-timeout=30s",
    "--max-node-provision-time=30s",
    "--initial-node-group-backoff-duration=20s",
    "--max-node-group-backoff-duration=60s",
    "--max-failing-time=5m",
];

/// The group's bounds: room for the largest workload mix below, with margin.
const POOL_MAX: usize = 12;

/// The churning workloads: name, CPU per pod, most replicas. At most 27 CPU in all, which
/// 4-CPU nodes hold within [`POOL_MAX`] whatever the packing.
const WORKLOADS: &[(&str, &str, i32)] = &[("api", "3", 5), ("batch", "1", 8), ("tiny", "500m", 8)];

/// Every kind of fault the soak draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKind {
    /// The leader's lists and watches answer 503, its watches cut.
    ApiErrors,
    /// Every request of the leader answers 429 with Retry-After.
    ApiThrottling,
    /// Every request of the leader waits 3 s for its answer.
    ApiSlow,
    /// The leader's connections are reset under its requests.
    ApiResets,
    /// Both replicas' watches are cut, repeatedly.
    WatchesDropped,
    /// The leader's pod watch goes silent.
    PodWatchStalled,
    /// The leader's API server goes silent for longer than the lease.
    LeaderCutOff,
    /// SIGKILL of the leader, restarted as a standby.
    LeaderKilled,
    /// SIGKILL of the leader while a node is tainted for deletion, if one is.
    LeaderKilledMidDeletion,
    /// kube-apiserver restarts.
    ApiServerRestart,
    /// kube-scheduler frozen.
    SchedulerPaused,
    /// IncreaseSize carried out, answer lost.
    IncreaseAnswerLost,
    /// DeleteNodes carried out, no answer before the deadline.
    DeleteAnswerLost,
    /// DeleteNodes deletes the first node of its batch and fails.
    PartialDelete,
    /// IncreaseSize answers past the client's deadline (not carried out).
    ProviderSlow,
    /// The provider's port closed.
    ProviderDown,
    /// New machines never become nodes.
    NeverRegister,
}

const ALL_FAULTS: &[FaultKind] = &[
    FaultKind::ApiErrors,
    FaultKind::ApiThrottling,
    FaultKind::ApiSlow,
    FaultKind::ApiResets,
    FaultKind::WatchesDropped,
    FaultKind::PodWatchStalled,
    FaultKind::LeaderCutOff,
    FaultKind::LeaderKilled,
    FaultKind::LeaderKilledMidDeletion,
    FaultKind::ApiServerRestart,
    FaultKind::SchedulerPaused,
    FaultKind::IncreaseAnswerLost,
    FaultKind::DeleteAnswerLost,
    FaultKind::PartialDelete,
    FaultKind::ProviderSlow,
    FaultKind::ProviderDown,
    FaultKind::NeverRegister,
];

/// `90s`, `4m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let number: u64 = number.parse().ok()?;
    match unit {
        "" | "s" => Some(Duration::from_secs(number)),
        "m" => Some(Duration::from_secs(number * 60)),
        "h" => Some(Duration::from_secs(number * 3600)),
        _ => None,
    }
}

fn soak_duration() -> Duration {
    match std::env::var("FERROSCALE_SOAK_DURATION") {
        Ok(text) => parse_duration(&text).unwrap_or_else(|| {
            panic!("FERROSCALE_SOAK_DURATION={text:?}: expected 90s, 4m, 1h or seconds")
        }),
        Err(_) => DEFAULT_DURATION,
    }
}

fn soak_seed() -> u64 {
    match std::env::var("FERROSCALE_SOAK_SEED") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("FERROSCALE_SOAK_SEED={text:?}: expected a number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
    }
}

/// What the soak counts.
#[derive(Debug, Default)]
struct Tally {
    injected: BTreeMap<FaultKind, usize>,
    /// Faults after which no invariant broke (checked once the system had time to react).
    survived: BTreeMap<FaultKind, usize>,
    /// The highest peak resident memory of any replica process, in KiB.
    peak_memory_kib: u64,
    workload_changes: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_holds_every_invariant() {
    let duration = soak_duration();
    let seed = soak_seed();
    eprintln!("chaos soak: {duration:?}, seed {seed} (FERROSCALE_SOAK_SEED={seed} replays it)");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rig = Rig::start(RigOptions {
        replicas: 2,
        flags: SOAK_FLAGS,
        pool_max: POOL_MAX,
        ..RigOptions::default()
    })
    .await;
    for (name, cpu, _) in WORKLOADS {
        rig.cluster.create_app(App::new(name, 1, cpu)).await;
    }
    let mut tally = Tally::default();
    let started = Instant::now();
    // Every kind once in a shuffled round before any comes again, so that even a short soak
    // sees many kinds and a long one sees them all about equally often.
    let mut round: Vec<FaultKind> = Vec::new();
    while started.elapsed() < duration {
        if round.is_empty() {
            round = ALL_FAULTS.to_vec();
            round.shuffle(&mut rng);
        }
        let kind = round.pop().expect("a fault of the round");
        let lasting = Duration::from_secs(rng.random_range(8..=30));
        let before = violations(&rig).len();
        // Before the fault: a killed replica's memory is gone with it.
        sample_memory(&rig, &mut tally);
        *tally.injected.entry(kind).or_default() += 1;
        eprintln!(
            "chaos soak +{:>4} s: {kind:?} for {lasting:?}",
            started.elapsed().as_secs()
        );
        let undo = inject(&mut rig, kind, &mut rng).await;
        churn_for(&rig, lasting, &mut rng, &mut tally).await;
        undo.apply(&mut rig).await;
        revive_dead_replicas(&mut rig);
        // Time for the system to react before the fault is judged.
        churn_for(&rig, Duration::from_secs(15), &mut rng, &mut tally).await;
        sample_memory(&rig, &mut tally);
        let after = violations(&rig);
        if after.len() == before {
            *tally.survived.entry(kind).or_default() += 1;
        } else {
            eprintln!("chaos soak: {kind:?} broke: {:?}", &after[before..]);
        }
    }

    // Every fault gone: the workloads settle at a size the group holds, and every invariant
    // holds at the end.
    revive_dead_replicas(&mut rig);
    for (name, _, most) in WORKLOADS {
        rig.cluster.scale_app(name, (*most).min(3)).await;
    }
    sample_memory(&rig, &mut tally);
    let settled = rig
        .invariants
        .wait_settled(&rig.cluster, crate::harness::WAIT_LIMIT * 2)
        .await;
    sample_memory(&rig, &mut tally);
    let report = report(&rig, &tally, duration, seed, started.elapsed());
    eprintln!("{report}");
    if let Ok(path) = std::env::var("FERROSCALE_SOAK_REPORT") {
        std::fs::write(&path, &report).expect("write the soak report");
    }
    if let Err(why) = settled {
        panic!("the cluster did not settle once the faults were gone: {why}");
    }
    let broken = violations(&rig);
    assert!(broken.is_empty(), "invariants broken: {broken:#?}");
}

fn violations(rig: &Rig) -> Vec<String> {
    rig.violations()
}

/// Changes one workload's size every few seconds for `lasting`.
async fn churn_for(rig: &Rig, lasting: Duration, rng: &mut ChaCha8Rng, tally: &mut Tally) {
    let until = Instant::now() + lasting;
    while Instant::now() < until {
        let (name, _, most) = WORKLOADS[rng.random_range(0..WORKLOADS.len())];
        let replicas = rng.random_range(0..=most);
        rig.cluster.scale_app(name, replicas).await;
        tally.workload_changes += 1;
        let pause = Duration::from_secs(rng.random_range(3..=8));
        tokio::time::sleep(pause.min(until.saturating_duration_since(Instant::now()))).await;
    }
}

/// The replica that holds the Lease, or the first one while nobody does.
async fn leader_or_first(rig: &Rig) -> usize {
    rig.leader().await.unwrap_or(0)
}

/// How to end a fault.
enum Undo {
    Nothing,
    ApiRule {
        replica: usize,
        rule: ferroscale_testing_faults::api_proxy::RuleId,
    },
    Stall {
        replica: usize,
        stall: ferroscale_testing_faults::api_proxy::StallId,
    },
    Heal {
        replica: usize,
    },
    Injection(ferroscale_testing_faults::provider::InjectionId),
    Scheduler,
    Provider,
}

impl Undo {
    async fn apply(self, rig: &mut Rig) {
        match self {
            Undo::Nothing => {}
            Undo::ApiRule { replica, rule } => {
                rig.replicas[replica].proxy.faults().remove_rule(rule);
            }
            Undo::Stall { replica, stall } => {
                rig.replicas[replica].proxy.faults().resume(stall);
            }
            Undo::Heal { replica } => rig.replicas[replica].proxy.faults().heal(),
            Undo::Injection(id) => {
                rig.provider.remove(id);
            }
            Undo::Scheduler => {
                let control_plane = &rig.cluster.control_plane;
                tokio::task::block_in_place(|| control_plane.resume_scheduler())
                    .expect("resume kube-scheduler");
            }
            Undo::Provider => rig.served.start_again().await.expect("serve again"),
        }
    }
}

/// Injects one fault; returns how to end it.
async fn inject(rig: &mut Rig, kind: FaultKind, rng: &mut ChaCha8Rng) -> Undo {
    let leader = leader_or_first(rig).await;
    let faults = rig.replicas[leader].proxy.faults();
    let provider = rig.provider.clone();
    let once = |method: Method, fault: Fault| {
        Undo::Injection(
            provider
                .inject(Injection::new(method, fault).times(1))
                .expect("a valid injection"),
        )
    };
    match kind {
        FaultKind::ApiErrors => {
            let rule = faults.add_rule(Rule::new(
                Matcher::any()
                    .class(RequestClass::List)
                    .class(RequestClass::Watch),
                Action::respond(503),
            ));
            faults.drop_watches(&Matcher::any());
            Undo::ApiRule {
                replica: leader,
                rule,
            }
        }
        FaultKind::ApiThrottling => Undo::ApiRule {
            replica: leader,
            rule: faults.add_rule(Rule::new(
                Matcher::any(),
                Action::Respond {
                    status: 429,
                    retry_after: Some(1),
                },
            )),
        },
        FaultKind::ApiSlow => Undo::ApiRule {
            replica: leader,
            rule: faults.add_rule(Rule::new(
                Matcher::any(),
                Action::Delay(Duration::from_secs(3)),
            )),
        },
        FaultKind::ApiResets => Undo::ApiRule {
            replica: leader,
            rule: faults.add_rule(Rule::new(Matcher::any(), Action::Reset)),
        },
        FaultKind::WatchesDropped => {
            for replica in &rig.replicas {
                replica.proxy.faults().drop_watches(&Matcher::any());
            }
            Undo::ApiRule {
                replica: leader,
                rule: faults.add_rule(Rule::new(
                    Matcher::any().class(RequestClass::Watch),
                    Action::CutWatchAfter(Duration::from_secs(rng.random_range(2..=6))),
                )),
            }
        }
        FaultKind::PodWatchStalled => Undo::Stall {
            replica: leader,
            stall: faults.stall_watches(Matcher::any().class(RequestClass::Watch).resource("pods")),
        },
        FaultKind::LeaderCutOff => {
            faults.partition(PartitionMode::Silent);
            Undo::Heal { replica: leader }
        }
        FaultKind::LeaderKilled => {
            rig.kill(leader);
            Undo::Nothing
        }
        FaultKind::LeaderKilledMidDeletion => {
            let deleting = rig
                .cluster
                .pool_nodes()
                .await
                .iter()
                .any(|n| has_taint(n, TO_BE_DELETED));
            if deleting {
                rig.kill(leader);
            } else {
                // Nothing is being deleted: make something deletable and kill the leader as
                // soon as it starts.
                rig.cluster.scale_app("api", 0).await;
                let until = Instant::now() + Duration::from_secs(60);
                while Instant::now() < until {
                    let tainted = rig
                        .cluster
                        .pool_nodes()
                        .await
                        .iter()
                        .any(|n| has_taint(n, TO_BE_DELETED));
                    if tainted {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let leader = leader_or_first(rig).await;
                rig.kill(leader);
            }
            Undo::Nothing
        }
        FaultKind::ApiServerRestart => {
            let control_plane = &rig.cluster.control_plane;
            tokio::task::block_in_place(|| control_plane.restart_apiserver())
                .expect("restart kube-apiserver");
            Undo::Nothing
        }
        FaultKind::SchedulerPaused => {
            let control_plane = &rig.cluster.control_plane;
            tokio::task::block_in_place(|| control_plane.pause_scheduler())
                .expect("pause kube-scheduler");
            Undo::Scheduler
        }
        FaultKind::IncreaseAnswerLost => once(
            Method::IncreaseSize,
            Fault::AnswerLost {
                answer: LostAnswer::Error,
            },
        ),
        FaultKind::DeleteAnswerLost => once(
            Method::DeleteNodes,
            Fault::AnswerLost {
                answer: LostAnswer::Timeout,
            },
        ),
        FaultKind::PartialDelete => once(Method::DeleteNodes, Fault::PartialDelete { deleted: 1 }),
        FaultKind::ProviderSlow => once(
            Method::IncreaseSize,
            Fault::Delay(crate::rig::GRPC_TIMEOUT + Duration::from_secs(2)),
        ),
        FaultKind::ProviderDown => {
            rig.served.stop().await;
            Undo::Provider
        }
        FaultKind::NeverRegister => Undo::Injection(
            provider
                .inject(Injection::new(Method::IncreaseSize, Fault::NeverRegister))
                .expect("a valid injection"),
        ),
    }
}

/// Replicas that were killed or exited (a leader that lost its Lease exits) start again, as
/// their Deployment would restart them.
fn revive_dead_replicas(rig: &mut Rig) {
    for index in 0..rig.replicas.len() {
        let dead = rig.replicas[index]
            .process
            .as_mut()
            .is_none_or(|process| !process.is_running());
        if dead {
            rig.kill(index);
            rig.start_replica(index);
        }
    }
}

/// The peak resident memory (`VmHWM`) of every running replica.
fn sample_memory(rig: &Rig, tally: &mut Tally) {
    for replica in &rig.replicas {
        let Some(pid) = replica.process.as_ref().and_then(|p| p.pid()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let peak = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            });
        if let Some(peak) = peak {
            tally.peak_memory_kib = tally.peak_memory_kib.max(peak);
        }
    }
}

/// The soak's table, in Markdown.
fn report(rig: &Rig, tally: &Tally, duration: Duration, seed: u64, took: Duration) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nChaos soak: {} min of faults (asked {duration:?}), seed {seed}, {} workload changes\n",
        took.as_secs() / 60,
        tally.workload_changes
    );
    let _ = writeln!(text, "| fault | injected | survived |");
    let _ = writeln!(text, "| --- | --- | --- |");
    for kind in ALL_FAULTS {
        let injected = tally.injected.get(kind).copied().unwrap_or(0);
        let survived = tally.survived.get(kind).copied().unwrap_or(0);
        let _ = writeln!(text, "| {kind:?} | {injected} | {survived} |");
    }
    let total: usize = tally.injected.values().sum();
    let survived: usize = tally.survived.values().sum();
    let _ = writeln!(text, "| **all** | **{total}** | **{survived}** |\n");
    let _ = writeln!(text, "| outcome | value |");
    let _ = writeln!(text, "| --- | --- |");
    let _ = writeln!(text, "| pods lost | {} |", rig.invariants.stranded_pods());
    let _ = writeln!(
        text,
        "| wrong deletions (nodes deleted with pods on them) | {} |",
        rig.invariants.wrong_deletions()
    );
    let _ = writeln!(text, "| invariants broken | {} |", violations(rig).len());
    let _ = writeln!(
        text,
        "| nodes deleted by scale-down | {} |",
        rig.invariants.deleted_nodes().len()
    );
    let _ = writeln!(
        text,
        "| most nodes at once | {} (max {POOL_MAX}) |",
        rig.invariants.peak_nodes()
    );
    let _ = writeln!(
        text,
        "| cloud calls (mutating) | {} ({}) |",
        rig.provider.call_log().records().len(),
        rig.provider
            .call_log()
            .records()
            .iter()
            .filter(|c| c.is_mutating())
            .count()
    );
    let _ = writeln!(
        text,
        "| peak memory of a replica | {:.1} MiB |",
        tally.peak_memory_kib as f64 / 1024.0
    );
    text
}

#[test]
fn soak_durations_read_as_an_operator_writes_them() {
    assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("4m"), Some(Duration::from_secs(240)));
    assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
    assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
    assert_eq!(parse_duration("1d"), None);
    assert_eq!(parse_duration("m"), None);
}
