//! docs/behaviour.md SD-116 (the non-empty candidate limits of
//! `--scale-down-non-empty-candidates-count`, `--scale-down-candidates-pool-ratio` and
//! `--scale-down-candidates-pool-min-count`) and the two scale-down measurements OBS-120
//! (`--max-node-skip-eval-time-tracker-enabled`) and OBS-121
//! (`--node-removal-latency-tracking-enabled`), on the pure scale-down decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_down::{
    ControllerIndex, DeletionsInProgress, ScaleDownInput, ScaleDownPlan, ScaleDownState,
};
use ferroscale_core::scale_up::{NodeGroupView, ProviderFacts};
use ferroscale_model::{Node, OwnerRef, Pod, PodPhase, Resources, Timestamp};
use ferroscale_scheduling::Snapshot;

const GIB: i64 = 1 << 30;
const MINUTE: Duration = Duration::from_secs(60);

fn t0() -> Timestamp {
    Timestamp::from_secs(1_000_000)
}

/// One group `g` of `busy` nodes each running one small ReplicaSet pod (12.5 % of a 4-CPU node,
/// so every node is underutilized and every pod fits elsewhere) and `empty` empty nodes.
struct Cluster {
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    group: NodeGroupView,
    options: AutoscalingOptions,
}

impl Cluster {
    fn new(busy: usize, empty: usize) -> Cluster {
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        for i in 0..busy + empty {
            let name = format!("n{i:03}");
            let mut node = Node::new(&name, Resources::new(4000, 16 * GIB));
            node.allocatable.pods = 110;
            node.capacity.pods = 110;
            nodes.push(node);
            if i < busy {
                let mut pod = Pod::new("default", format!("web-{i:03}"));
                pod.owner_references.push(OwnerRef {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: "web".into(),
                    uid: "uid-web".into(),
                    controller: true,
                });
                pod.requests = Resources::new(500, GIB);
                pod.node_name = Some(name.into());
                pod.phase = PodPhase::Running;
                pods.push(pod);
            }
        }
        let count = nodes.len();
        let mut options = AutoscalingOptions::default();
        // Lift the search-stop rule (SD-105) so that only the limits under test apply.
        options.set("max-scale-down-parallelism", "1000").unwrap();
        Cluster {
            nodes,
            pods,
            group: NodeGroupView::new("g", 0, count, count, None),
            options,
        }
    }

    fn set(&mut self, flag: &str, value: &str) -> &mut Self {
        self.options.set(flag, value).unwrap();
        self
    }

    fn plan(&self, now: Timestamp, state: &ScaleDownState) -> ScaleDownPlan {
        let mut snapshot = Snapshot::new();
        for n in &self.nodes {
            snapshot.add_node(Arc::new(n.clone()));
        }
        for p in &self.pods {
            let id = snapshot.node_id(p.node_name.as_deref().unwrap()).unwrap();
            snapshot.add_pod(id, Arc::new(p.clone()));
        }
        let names: HashMap<String, usize> =
            self.nodes.iter().map(|n| (n.name.clone(), 0)).collect();
        let group_of = |node: &Node| names.get(node.name.as_str()).copied();
        let mut controllers = ControllerIndex::new();
        controllers.assume_owners_of(&self.pods);
        let provider = ProviderFacts {
            gpu_label: "",
            resource_limits: None,
            ..ProviderFacts::default()
        };
        ferroscale_core::scale_down::plan_scale_down(ScaleDownInput {
            now,
            snapshot: &mut snapshot,
            node_groups: std::slice::from_ref(&self.group),
            node_group_of: &group_of,
            pdbs: &[],
            controllers: &controllers,
            deletions_in_progress: &DeletionsInProgress::default(),
            state,
            options: &self.options,
            provider: &provider,
            scale_down_disabled_this_loop: false,
            workers: &ferroscale_core::parallel::Workers::sequential(),
            measure_memo: None,
        })
    }
}

fn non_empty_unneeded(plan: &ScaleDownPlan) -> usize {
    plan.unneeded.iter().filter(|u| !u.empty).count()
}

/// Checks docs/behaviour.md SD-116: with the default count (30) a first loop finds 30 non-empty
/// unneeded nodes and leaves the rest unsimulated, while empty nodes are all simulated; a count of
/// zero lifts the limit.
#[test]
fn non_empty_candidates_count_caps_new_non_empty_nodes_per_loop() {
    let mut cluster = Cluster::new(100, 5);
    let plan = cluster.plan(t0(), &ScaleDownState::new());
    assert_eq!(plan.unneeded.iter().filter(|u| u.empty).count(), 5);
    assert_eq!(non_empty_unneeded(&plan), 30);
    assert_eq!(plan.skipped.len(), 100 - 30);

    cluster.set("scale-down-non-empty-candidates-count", "0");
    let unlimited = cluster.plan(t0(), &ScaleDownState::new());
    assert!(non_empty_unneeded(&unlimited) > 30, "no limit with count 0");
    assert!(unlimited.skipped.is_empty());

    cluster.set("scale-down-non-empty-candidates-count", "-1");
    let negative = cluster.plan(t0(), &ScaleDownState::new());
    assert_eq!(
        non_empty_unneeded(&negative),
        non_empty_unneeded(&unlimited)
    );
}

/// Checks docs/behaviour.md SD-116: only the first max(ceil(ratio × nodes), min-count) additional
/// candidates are simulated.
#[test]
fn the_pool_of_additional_candidates_is_ratio_of_nodes_or_min_count() {
    let mut cluster = Cluster::new(100, 0);
    // ceil(100 × 0.1) = 10 > min-count 5.
    cluster.set("scale-down-candidates-pool-min-count", "5");
    assert_eq!(
        non_empty_unneeded(&cluster.plan(t0(), &ScaleDownState::new())),
        10
    );
    // min-count 20 > ceil(100 × 0.1).
    cluster.set("scale-down-candidates-pool-min-count", "20");
    assert_eq!(
        non_empty_unneeded(&cluster.plan(t0(), &ScaleDownState::new())),
        20
    );
    // ceil(100 × 0.25) = 25.
    cluster.set("scale-down-candidates-pool-ratio", "0.25");
    assert_eq!(
        non_empty_unneeded(&cluster.plan(t0(), &ScaleDownState::new())),
        25
    );
}

/// Checks docs/behaviour.md SD-116: the previous loop's unneeded nodes are all simulated again,
/// and additional candidates only make up what they leave short of the count.
#[test]
fn previous_unneeded_nodes_come_first_and_additional_ones_fill_up_to_the_count() {
    let mut cluster = Cluster::new(100, 0);
    cluster.set("scale-down-non-empty-candidates-count", "20");
    let first = cluster.plan(t0(), &ScaleDownState::new());
    assert_eq!(non_empty_unneeded(&first), 20);

    // Raising the count: the 20 found before are kept and 15 more are added.
    cluster.set("scale-down-non-empty-candidates-count", "35");
    let second = cluster.plan(t0() + MINUTE, &first.next_state);
    assert_eq!(non_empty_unneeded(&second), 35);
    for node in &first.unneeded {
        assert!(
            second.unneeded.iter().any(|u| u.node == node.node),
            "{} stays unneeded",
            node.node
        );
    }

    // Lowering it below the previous count adds nothing but keeps every previous node.
    cluster.set("scale-down-non-empty-candidates-count", "10");
    let third = cluster.plan(t0() + 2 * MINUTE, &second.next_state);
    assert_eq!(non_empty_unneeded(&third), 35);
}

/// Checks docs/behaviour.md OBS-120: with the tracker on, the plan reports how long the longest
/// skipped candidate has gone unsimulated; without it, nothing.
#[test]
fn max_node_skip_eval_time_grows_while_a_node_stays_skipped() {
    let mut cluster = Cluster::new(100, 0);
    cluster.set("scale-down-non-empty-candidates-count", "10");
    let off = cluster.plan(t0(), &ScaleDownState::new());
    assert_eq!(off.max_node_skip_eval, None);

    cluster.set("max-node-skip-eval-time-tracker-enabled", "true");
    let first = cluster.plan(t0(), &ScaleDownState::new());
    assert_eq!(first.max_node_skip_eval, Some(Duration::ZERO));
    let second = cluster.plan(t0() + MINUTE, &first.next_state);
    assert_eq!(second.max_node_skip_eval, Some(MINUTE));
    let third = cluster.plan(t0() + 2 * MINUTE, &second.next_state);
    assert_eq!(third.max_node_skip_eval, Some(2 * MINUTE));
}

/// Checks docs/behaviour.md OBS-121: a node unneeded for longer than its threshold when its
/// deletion starts is reported with the time beyond the threshold.
#[test]
fn removal_latency_is_time_unneeded_beyond_the_threshold() {
    let mut cluster = Cluster::new(0, 1);
    cluster.set("node-removal-latency-tracking-enabled", "true");
    let first = cluster.plan(t0(), &ScaleDownState::new());
    assert!(first.removal_latencies.is_empty());
    // Deleted 12 minutes later: 2 minutes beyond the 10-minute unneeded time.
    let later = cluster.plan(t0() + 12 * MINUTE, &first.next_state);
    assert_eq!(later.nodes_to_delete().count(), 1);
    assert_eq!(later.removal_latencies.len(), 1);
    let latency = &later.removal_latencies[0];
    assert!(latency.deleted);
    assert_eq!(latency.delay_reason, "none");
    assert_eq!(latency.latency, 2 * MINUTE);

    cluster.set("node-removal-latency-tracking-enabled", "false");
    let first = cluster.plan(t0(), &ScaleDownState::new());
    let later = cluster.plan(t0() + 12 * MINUTE, &first.next_state);
    assert!(later.removal_latencies.is_empty());
}
