//! The differential test: seeded random cases applied to a real kube-scheduler v1.36 on the test
//! control plane, each pending pod's outcome compared with Ferroscale's filters on the same
//! cluster state. One family runs the scheduler's default profile, one a non-default
//! KubeSchedulerConfiguration given to both sides, one adds storage and one DRA devices.
//!
//! `FERROSCALE_DIFF_CASES` (cases per family, default 30) and `FERROSCALE_DIFF_SEED` (default
//! fixed, so CI is reproducible) size and seed the run; `scripts/differential.sh` sets both. A
//! control plane that cannot start fails the test.

use std::time::Instant;

use ferroscale_scheduler_differential::{
    CONFIGURED_PROFILE, DEFAULT_PROFILE, DRA, Family, Runner, Tally, VOLUMES, generate_case,
    observation_yaml,
};
use ferroscale_testing_control_plane::{ControlPlane, Options};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

const DEFAULT_CASES: u32 = 30;
const DEFAULT_SEED: u64 = 14;

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        _ => default,
    }
}

async fn client_for(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    Client::try_from(config).expect("client")
}

/// Runs `cases` cases of `family` on a control plane of its own.
async fn run_family(family: Family, cases: u32, seed: u64) -> Tally {
    let options = Options {
        controller_manager: false,
        kwok: false,
        scheduler_config: family.scheduler_config.map(str::to_string),
        ..Options::default()
    };
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("start-up task")
        .expect("the control plane with kube-scheduler must start");
    let runner = Runner::new(client_for(&control_plane).await, family)
        .await
        .expect("shared objects");
    let mut tally = Tally::default();
    let started = Instant::now();
    for index in 0..cases {
        let case = generate_case(seed, index, family.settings);
        let result = runner.run(&case).await.unwrap_or_else(|error| {
            panic!("family {} seed {seed} case {index}: {error}", family.name)
        });
        tally.add(result);
    }
    eprintln!(
        "differential {}: seed {seed}: {} cases, {} pods ({} bound, {} unschedulable, {} not judged: \
         the scheduler decided before seeing the whole case), {} disagreements, {:.0?}",
        family.name,
        tally.cases,
        tally.pods,
        tally.bound,
        tally.unschedulable,
        tally.races,
        tally.disagreements.len(),
        started.elapsed(),
    );
    for (reason, count) in &tally.reasons {
        eprintln!("  {count:5}  {reason}");
    }
    control_plane.stop();
    tally
}

/// Every family, or the one `FERROSCALE_DIFF_FAMILY` names.
fn selected_families() -> Vec<Family> {
    let all = [DEFAULT_PROFILE, CONFIGURED_PROFILE, VOLUMES, DRA];
    match std::env::var("FERROSCALE_DIFF_FAMILY") {
        Ok(name) if !name.is_empty() => {
            let chosen: Vec<Family> = all.into_iter().filter(|f| f.name == name).collect();
            assert!(
                !chosen.is_empty(),
                "FERROSCALE_DIFF_FAMILY={name:?} names no family"
            );
            chosen
        }
        _ => all.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_scheduler_and_ferroscale_agree_on_every_pod() {
    let cases = env_number("FERROSCALE_DIFF_CASES", DEFAULT_CASES);
    let seed = env_number("FERROSCALE_DIFF_SEED", DEFAULT_SEED);
    let mut disagreements = Vec::new();
    let mut judged = 0;
    for family in selected_families() {
        let tally = run_family(family, cases, seed).await;
        judged += tally.pods - tally.races;
        disagreements.extend(tally.disagreements);
    }
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("the output directory");
    for (i, d) in disagreements.iter().enumerate() {
        let o = &d.observation;
        let file = out.join(format!(
            "disagreement-{}-seed{}-case{}-{i}.yaml",
            o.family, o.seed, o.case
        ));
        std::fs::write(&file, observation_yaml(o)).expect("write an observation");
    }
    for disagreement in &disagreements {
        eprintln!("{}", disagreement.report());
    }
    eprintln!(
        "differential: {} disagreements written to {}",
        disagreements.len(),
        out.display()
    );
    assert!(judged > 0, "no pod was judged");
    assert!(
        disagreements.is_empty(),
        "{} of {judged} judged pods disagree (seed {seed}); each is printed above with its objects",
        disagreements.len()
    );
}
