//! The rules of docs/cloud-node-controller.md, one test (or a few) per statement.

use super::*;
use ferroscale_model::{Resources, Taint, TaintEffect};

const MINUTE: Duration = Duration::from_secs(60);

fn t(secs: i64) -> Timestamp {
    Timestamp::from_secs(secs)
}

fn node(name: &str, provider_id: &str, ready: bool) -> Node {
    let mut node = Node::new(name, Resources::new(4000, 16 << 30));
    node.provider_id = provider_id.to_string();
    if !ready {
        node.conditions.ready = Some(ConditionStatus::Unknown);
    }
    node
}

fn uninitialized(name: &str, provider_id: &str) -> Node {
    let mut node = node(name, provider_id, true);
    node.taints.push(Taint::new(
        UNINITIALIZED_TAINT,
        "true",
        TaintEffect::NoSchedule,
    ));
    node
}

fn group(id: &str, instances: &[&str]) -> GroupAnswers {
    GroupAnswers {
        id: id.to_string(),
        instances: Some(instances.iter().map(|i| i.to_string()).collect()),
        template: None,
    }
}

fn with_template(mut group: GroupAnswers, labels: &[(&str, &str)]) -> GroupAnswers {
    let mut map = Labels::new();
    for (k, v) in labels {
        map.insert(k.to_string(), v.to_string());
    }
    group.template = Some(Ok(map));
    group
}

fn answers(groups: Vec<GroupAnswers>, placements: &[(&str, Option<&str>)]) -> ProviderAnswers {
    ProviderAnswers {
        groups,
        placements: placements
            .iter()
            .map(|(n, g)| (n.to_string(), g.map(str::to_string)))
            .collect(),
        failures: Vec::new(),
    }
}

fn failure(call: &'static str, subject: &str) -> ProviderFailure {
    ProviderFailure {
        call,
        subject: subject.to_string(),
        error: "cloud provider temporarily unavailable: connection refused".to_string(),
    }
}

struct Run {
    memory: Memory,
    grace: Duration,
}

impl Run {
    fn new(grace: Duration) -> Run {
        Run {
            memory: Memory::default(),
            grace,
        }
    }

    fn pass(&mut self, now: Timestamp, nodes: &[Node], answers: &ProviderAnswers) -> Plan {
        let nodes: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
        decide(
            DecideInput {
                now,
                nodes: &nodes,
                answers,
                removal_grace_period: self.grace,
            },
            &mut self.memory,
        )
    }
}

fn deleted(plan: &Plan) -> Vec<&str> {
    plan.delete.iter().map(|d| d.node.as_str()).collect()
}

/// The machine of `gone` left group `pool`; the provider still places the node there.
fn gone_answers() -> ProviderAnswers {
    answers(vec![group("pool", &["p:live"])], &[("gone", Some("pool"))])
}

/// docs/cloud-node-controller.md CNC-101, CNC-102: an uninitialized node whose provider ID is an
/// instance of a group gets every cloud label of the group's template, current and legacy
/// names, in a fixed order; other template labels are not copied.
#[test]
fn a_recognised_uninitialized_node_gets_its_templates_cloud_labels() {
    let mut run = Run::new(MINUTE);
    let answers = answers(
        vec![with_template(
            group("metal", &["p:a"]),
            &[
                ("pool", "metal"),
                (INSTANCE_TYPE_BETA, "m.large"),
                (ZONE, "zone-a"),
                (INSTANCE_TYPE, "m.large"),
                (ZONE_BETA, "zone-a"),
            ],
        )],
        &[],
    );
    let plan = run.pass(t(0), &[uninitialized("a", "p:a")], &answers);
    assert_eq!(
        plan.initialize,
        vec![Initialization {
            node: "a".into(),
            uid: "uid-a".into(),
            provider_id: "p:a".into(),
            group: "metal".into(),
            template_labels: vec![
                (ZONE.into(), "zone-a".into()),
                (INSTANCE_TYPE.into(), "m.large".into()),
                (ZONE_BETA.into(), "zone-a".into()),
                (INSTANCE_TYPE_BETA.into(), "m.large".into()),
            ],
        }]
    );
    assert!(plan.events.is_empty() && plan.delete.is_empty());
}

/// CNC-101: a node without the taint is never initialized, even with labels missing.
#[test]
fn an_initialized_node_is_left_alone() {
    let mut run = Run::new(MINUTE);
    let answers = answers(
        vec![with_template(group("metal", &["p:a"]), &[(ZONE, "zone-a")])],
        &[],
    );
    let plan = run.pass(t(0), &[node("a", "p:a", true)], &answers);
    assert_eq!(plan, Plan::default());
}

/// CNC-103: labels the node already has are never overwritten; the difference is reported.
#[test]
fn labels_the_node_has_are_kept_and_only_missing_ones_are_added() {
    let mut live = uninitialized("a", "p:a");
    live.labels.insert(ZONE.into(), "zone-b".into());
    live.labels.insert(REGION.into(), "eu".into());
    let (add, kept) = labels_to_write(
        &live,
        &[
            (ZONE.into(), "zone-a".into()),
            (REGION.into(), "eu".into()),
            (INSTANCE_TYPE.into(), "m.large".into()),
        ],
    );
    assert_eq!(
        add,
        vec![(INSTANCE_TYPE.to_string(), "m.large".to_string())]
    );
    assert_eq!(
        kept,
        vec![LabelKept {
            key: ZONE.into(),
            node_value: "zone-b".into(),
            template_value: "zone-a".into(),
        }]
    );
}

/// CNC-104: a node the provider does not recognise is left alone, with one event that says why
/// (not one per pass); a node without a provider ID likewise.
#[test]
fn an_unrecognised_node_is_left_alone_and_an_event_says_why_once() {
    let mut run = Run::new(MINUTE);
    let answers = answers(
        vec![with_template(group("metal", &["p:a"]), &[(ZONE, "zone-a")])],
        &[],
    );
    let nodes = [
        uninitialized("stranger", "p:stranger"),
        uninitialized("bare", ""),
    ];
    let first = run.pass(t(0), &nodes, &answers);
    assert!(first.initialize.is_empty());
    let messages: Vec<(&str, &str)> = first
        .events
        .iter()
        .map(|e| (e.reason, e.message.as_str()))
        .collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(first.events.iter().all(|e| e.warning));
    assert!(
        messages[0].0 == reasons::NOT_INITIALIZED
            && messages[0]
                .1
                .contains("\"p:stranger\" is not an instance of any node group"),
        "{messages:?}"
    );
    assert!(
        messages[1].1.contains("has no spec.providerID"),
        "{messages:?}"
    );
    let second = run.pass(t(10), &nodes, &answers);
    assert!(second.events.is_empty() && second.initialize.is_empty());
}

/// CNC-104: while a group's instances are unknown, an unlisted node might be one of them: no
/// event, no initialization; a node listed by a group that answered is still initialized.
#[test]
fn with_a_groups_instances_unknown_nothing_is_said_about_unlisted_nodes() {
    let mut run = Run::new(MINUTE);
    let mut broken = group("other", &[]);
    broken.instances = None;
    let mut answers = answers(
        vec![
            with_template(group("metal", &["p:a"]), &[(ZONE, "zone-a")]),
            broken,
        ],
        &[],
    );
    answers.failures.push(failure("Nodes", "node group other"));
    let plan = run.pass(
        t(0),
        &[uninitialized("a", "p:a"), uninitialized("b", "p:b")],
        &answers,
    );
    assert_eq!(
        plan.initialize.iter().map(|i| &i.node).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(plan.events.is_empty(), "{:?}", plan.events);
}

/// CNC-104: a template that cannot be read leaves the node as it is, and the event names the
/// group and the reason.
#[test]
fn a_template_that_cannot_be_read_leaves_the_node_tainted() {
    let mut run = Run::new(MINUTE);
    let mut metal = group("metal", &["p:a"]);
    metal.template = Some(Err("Not implemented".into()));
    let plan = run.pass(
        t(0),
        &[uninitialized("a", "p:a")],
        &answers(vec![metal], &[]),
    );
    assert!(plan.initialize.is_empty());
    assert_eq!(plan.events.len(), 1);
    assert!(
        plan.events[0]
            .message
            .contains("node a of node group metal is left uninitialized: the group's template cannot be read: Not implemented"),
        "{}",
        plan.events[0].message
    );
}

/// CNC-105, CNC-106: a node gone on one refresh only is not deleted; on the second, once the
/// grace period has passed since the first, it is.
#[test]
fn a_node_gone_on_two_consecutive_passes_and_past_the_grace_period_is_deleted() {
    let mut run = Run::new(MINUTE);
    let nodes = [node("gone", "p:gone", false), node("live", "p:live", true)];
    let first = run.pass(t(0), &nodes, &gone_answers());
    assert!(first.delete.is_empty());
    assert_eq!(
        first.waiting,
        vec![Waiting {
            node: "gone".into(),
            group: "pool".into(),
            streak: GoneStreak {
                since: t(0),
                passes: 1
            },
            not_before: t(60),
        }]
    );
    let second = run.pass(t(61), &nodes, &gone_answers());
    assert_eq!(
        second.delete,
        vec![Deletion {
            node: "gone".into(),
            uid: "uid-gone".into(),
            provider_id: "p:gone".into(),
            group: "pool".into(),
            streak: GoneStreak {
                since: t(0),
                passes: 2
            },
        }]
    );
}

/// CNC-106: gone on one pass only, however long ago, is not enough.
#[test]
fn one_pass_is_never_enough_whatever_the_time() {
    let mut run = Run::new(Duration::ZERO);
    let plan = run.pass(t(0), &[node("gone", "p:gone", false)], &gone_answers());
    assert!(plan.delete.is_empty());
    assert_eq!(plan.waiting.len(), 1);
}

/// CNC-106: two passes within the grace period are not enough; the passes in between keep the
/// streak's start.
#[test]
fn the_grace_period_counts_from_the_first_pass_that_found_the_node_gone() {
    let mut run = Run::new(MINUTE);
    let nodes = [node("gone", "p:gone", false)];
    for at in [0, 10, 20, 59] {
        let plan = run.pass(t(at), &nodes, &gone_answers());
        assert!(plan.delete.is_empty(), "at {at}s");
        assert_eq!(plan.waiting[0].streak.since, t(0));
    }
    assert_eq!(deleted(&run.pass(t(60), &nodes, &gone_answers())), ["gone"]);
}

/// CNC-105: a Ready node is never deleted, however long its instance has been gone; and a node
/// that turns Ready starts its streak again.
#[test]
fn a_ready_node_is_never_deleted() {
    let mut run = Run::new(MINUTE);
    for at in [0, 100, 200, 300] {
        let plan = run.pass(t(at), &[node("gone", "p:gone", true)], &gone_answers());
        assert!(plan.delete.is_empty() && plan.waiting.is_empty());
    }
    let not_ready = [node("gone", "p:gone", false)];
    run.pass(t(400), &not_ready, &gone_answers());
    run.pass(t(500), &[node("gone", "p:gone", true)], &gone_answers());
    let plan = run.pass(t(600), &not_ready, &gone_answers());
    assert!(plan.delete.is_empty());
    assert_eq!(
        plan.waiting[0].streak,
        GoneStreak {
            since: t(600),
            passes: 1
        }
    );
}

/// CNC-105: `Ready=False` and a missing `Ready` condition count as not Ready; pressure
/// conditions do not make a Ready node deletable.
#[test]
fn not_ready_is_anything_but_ready_true() {
    let mut missing = node("n", "p:n", true);
    missing.conditions.ready = None;
    let mut false_ = node("n", "p:n", true);
    false_.conditions.ready = Some(ConditionStatus::False);
    let mut pressured = node("n", "p:n", true);
    pressured.conditions.disk_pressure = true;
    assert!(is_not_ready(&missing) && is_not_ready(&false_));
    assert!(!is_not_ready(&pressured));
}

/// CNC-107: a node the provider places in no group is never deleted; nor is one whose group is
/// not among the provider's groups, nor one without a provider ID.
#[test]
fn a_node_outside_every_group_is_never_deleted() {
    let mut run = Run::new(Duration::ZERO);
    let nodes = [
        node("outside", "p:outside", false),
        node("unknown-group", "p:unknown-group", false),
        node("bare", "", false),
    ];
    let answers = answers(
        vec![group("pool", &["p:live"])],
        &[("outside", None), ("unknown-group", Some("vanished"))],
    );
    for at in 0..10 {
        let plan = run.pass(t(at * 600), &nodes, &answers);
        assert_eq!(plan, Plan::default(), "at pass {at}");
    }
}

/// CNC-107: a node that another group still lists is not gone, whatever NodeGroupForNode says.
#[test]
fn a_node_another_group_lists_is_not_gone() {
    let mut run = Run::new(Duration::ZERO);
    let answers = answers(
        vec![group("pool", &[]), group("other", &["p:moved"])],
        &[("moved", Some("pool"))],
    );
    for at in [0, 60, 120] {
        let plan = run.pass(t(at), &[node("moved", "p:moved", false)], &answers);
        assert!(plan.delete.is_empty() && plan.waiting.is_empty());
    }
}

/// CNC-108: with any provider answer failing, nothing is deleted, the reason is given, and the
/// passes before no longer count: two fresh passes are needed once the provider answers again.
#[test]
fn a_failing_provider_deletes_nothing_and_restarts_the_count() {
    let mut run = Run::new(MINUTE);
    let nodes = [node("gone", "p:gone", false)];
    run.pass(t(0), &nodes, &gone_answers());
    for (at, failing) in [
        (
            100,
            ProviderAnswers::failed(failure("NodeGroups", "the cloud provider")),
        ),
        (200, {
            let mut partial = gone_answers();
            partial
                .failures
                .push(failure("NodeGroupForNode", "node other"));
            partial
        }),
    ] {
        let plan = run.pass(t(at), &nodes, &failing);
        assert!(
            plan.delete.is_empty() && plan.waiting.is_empty(),
            "at {at}s"
        );
        let held = plan.deletions_held.expect("a reason");
        assert!(
            held.contains("failed: cloud provider temporarily unavailable"),
            "{held}"
        );
        assert_eq!(run.memory.streak("gone", "uid-gone"), None);
    }
    let after = run.pass(t(300), &nodes, &gone_answers());
    assert!(after.delete.is_empty());
    assert_eq!(
        after.waiting[0].streak,
        GoneStreak {
            since: t(300),
            passes: 1
        }
    );
    assert_eq!(
        deleted(&run.pass(t(360), &nodes, &gone_answers())),
        ["gone"]
    );
}

/// A Node deleted and registered again under the same name is a new node: its streak starts
/// over; streaks and reports of nodes that left are forgotten.
#[test]
fn a_node_registered_again_under_the_same_name_starts_afresh() {
    let mut run = Run::new(MINUTE);
    run.pass(t(0), &[node("gone", "p:gone", false)], &gone_answers());
    let mut again = node("gone", "p:gone", false);
    again.uid = "uid-gone-2".into();
    let plan = run.pass(t(120), &[again], &gone_answers());
    assert!(plan.delete.is_empty());
    assert_eq!(plan.waiting[0].streak.since, t(120));
    assert_eq!(run.memory.streak("gone", "uid-gone"), None);
}

/// Only unlisted, not Ready nodes with a provider ID are looked up; only groups listing an
/// uninitialized node have their template read.
#[test]
fn only_possible_candidates_are_looked_up_and_only_needed_templates_read() {
    let groups = vec![group("a", &["p:1", "p:2"]), group("b", &["p:3"])];
    let index = InstanceIndex::new(&groups);
    let nodes: Vec<Arc<Node>> = [
        node("listed-not-ready", "p:1", false),
        uninitialized("listed-tainted", "p:3"),
        node("unlisted-ready", "p:9", true),
        node("unlisted-not-ready", "p:8", false),
        node("bare-not-ready", "", false),
        uninitialized("unlisted-tainted", "p:7"),
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    let asked: Vec<&str> = nodes_to_place(&nodes, &index)
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(asked, ["unlisted-not-ready"]);
    assert_eq!(
        templates_to_read(&nodes, &index)
            .into_iter()
            .collect::<Vec<_>>(),
        ["b"]
    );
}

/// CNC-104, CNC-109: the last look at the Node read back from the API server.
#[test]
fn the_node_read_back_must_still_be_the_one_decided_about() {
    let planned = Deletion {
        node: "gone".into(),
        uid: "uid-gone".into(),
        provider_id: "p:gone".into(),
        group: "pool".into(),
        streak: GoneStreak {
            since: t(0),
            passes: 2,
        },
    };
    assert_eq!(
        check_before_deleting(&node("gone", "p:gone", false), &planned),
        Ok(())
    );
    let mut replaced = node("gone", "p:gone", false);
    replaced.uid = "other".into();
    let moved = node("gone", "p:elsewhere", false);
    let back = node("gone", "p:gone", true);
    for (live, why) in [
        (replaced, "was replaced"),
        (moved, "provider ID changed"),
        (back, "is Ready again"),
    ] {
        let refusal = check_before_deleting(&live, &planned).expect_err(why);
        assert!(refusal.contains(why), "{refusal}");
    }

    let init = Initialization {
        node: "a".into(),
        uid: "uid-a".into(),
        provider_id: "p:a".into(),
        group: "g".into(),
        template_labels: Vec::new(),
    };
    assert_eq!(
        check_before_initializing(&uninitialized("a", "p:a"), &init),
        Ok(())
    );
    let done = check_before_initializing(&node("a", "p:a", true), &init).expect_err("untainted");
    assert!(done.contains("no longer has"), "{done}");
}
