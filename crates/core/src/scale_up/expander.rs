//! Expanders (docs/behaviour.md SU-29–SU-34): choosing among the scale-up options. Each expander
//! keeps the options it considers equally best; the chain stops once one option is left, and a
//! seeded random choice settles whatever remains.

use std::sync::Arc;

use ferroscale_model::{Pod, Resources};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::external::{ExternalAnswer, ExternalExpanderStep};
use super::priority::PriorityConfig;
use crate::cloud::NodeTemplate;
use crate::events::{Event, EventObject, reasons};
use crate::options::ExpanderName;

/// One way to help the pending pods: grow `group_id` by `node_count` nodes, placing `pods`.
#[derive(Debug, Clone)]
pub(super) struct ExpansionOption<'a> {
    pub group_id: &'a str,
    pub exists: bool,
    pub template: &'a NodeTemplate,
    pub price_per_hour: Option<f64>,
    pub node_count: usize,
    /// Indices into the candidate pods.
    pub pods: Vec<usize>,
}

/// What the expanders read besides the options.
pub(super) struct ExpanderContext<'a> {
    pub pods: &'a [Arc<Pod>],
    pub priority_config: Option<&'a PriorityConfig>,
    /// Nodes in the cluster, for the price expander's preferred node size.
    pub cluster_nodes: usize,
}

/// Reference prices for pods (and for nodes of groups without a price): per CPU-hour and per
/// GiB-hour, in the same currency as `pricePerHour`. Only ratios matter to the expander.
const CPU_HOUR_PRICE: f64 = 0.033174;
const GIB_HOUR_PRICE: f64 = 0.004446;
const GPU_HOUR_PRICE: f64 = 0.95;

fn resource_price(r: &Resources) -> f64 {
    let gpus: i64 = r
        .extended()
        .filter(|(n, _)| n.ends_with("/gpu"))
        .map(|(_, v)| v)
        .sum();
    r.cpu_milli as f64 / 1000.0 * CPU_HOUR_PRICE
        + r.memory as f64 / f64::from(1u32 << 30) * GIB_HOUR_PRICE
        + gpus as f64 * GPU_HOUR_PRICE
}

fn has_gpu(template: &NodeTemplate) -> bool {
    template
        .node
        .allocatable
        .extended()
        .any(|(n, v)| v > 0 && n.ends_with("/gpu"))
}

/// The node size (CPUs) the price expander prefers for a cluster of this many nodes.
fn preferred_cpus(cluster_nodes: usize) -> f64 {
    match cluster_nodes {
        0..=2 => 1.0,
        3..=6 => 2.0,
        7..=20 => 4.0,
        21..=60 => 8.0,
        61..=200 => 16.0,
        _ => 32.0,
    }
}

fn price_score(option: &ExpansionOption<'_>, ctx: &ExpanderContext<'_>) -> f64 {
    let count = option.node_count as f64;
    let node_price = option
        .price_per_hour
        .unwrap_or_else(|| resource_price(&option.template.node.capacity));
    let pods_price: f64 = option
        .pods
        .iter()
        .map(|&i| resource_price(&ctx.pods[i].requests))
        .sum();
    let stabiliser = resource_price(&Resources::new(500, 500 << 20));
    let unfitness = if has_gpu(option.template) {
        1000.0
    } else {
        let preferred = preferred_cpus(ctx.cluster_nodes);
        let cpus = (option.template.node.capacity.cpu_milli as f64 / 1000.0).max(0.001);
        (preferred / cpus).max(cpus / preferred)
    };
    let suppressed = (unfitness - 1.0) * (1.0 - ((count - 1.0) / 15.0).tanh()) + 1.0;
    let mut score = suppressed * (node_price * count + stabiliser) / (pods_price + stabiliser);
    if !option.exists {
        score *= 2.0;
    }
    score
}

fn waste_score(option: &ExpansionOption<'_>, ctx: &ExpanderContext<'_>) -> f64 {
    let count = option.node_count as f64;
    let capacity = &option.template.node.capacity;
    let (mut cpu, mut memory) = (0i64, 0i64);
    for &i in &option.pods {
        cpu += ctx.pods[i].requests.cpu_milli;
        memory += ctx.pods[i].requests.memory;
    }
    let fraction = |available: i64, used: i64| {
        let total = available as f64 * count;
        if total <= 0.0 {
            0.0
        } else {
            (total - used as f64) / total
        }
    };
    fraction(capacity.cpu_milli, cpu) + fraction(capacity.memory, memory)
}

/// Keeps the options with the best (lowest) key; exact ties stay.
fn keep_min<'a>(
    options: Vec<ExpansionOption<'a>>,
    key: impl Fn(&ExpansionOption<'a>) -> f64,
) -> Vec<ExpansionOption<'a>> {
    let keys: Vec<f64> = options.iter().map(&key).collect();
    let best = keys.iter().copied().fold(f64::INFINITY, f64::min);
    options
        .into_iter()
        .zip(keys)
        .filter(|(_, k)| *k == best)
        .map(|(o, _)| o)
        .collect()
}

fn by_priority<'a>(
    options: Vec<ExpansionOption<'a>>,
    ctx: &ExpanderContext<'_>,
    events: &mut Vec<Event>,
) -> Vec<ExpansionOption<'a>> {
    let Some(config) = ctx.priority_config else {
        return options;
    };
    if let Some(error) = config.error() {
        events.push(Event::warning(
            EventObject::PriorityConfigMap,
            reasons::PRIORITY_CONFIG_MAP_INVALID,
            error.to_string(),
        ));
        return options;
    }
    let ranked: Vec<Option<i64>> = options
        .iter()
        .map(|o| config.priority_of(o.group_id).ok().flatten())
        .collect();
    let Some(top) = ranked.iter().flatten().max().copied() else {
        events.push(Event::warning(
            EventObject::PriorityConfigMap,
            reasons::PRIORITY_CONFIG_MAP_NO_GROUP_MATCHED,
            "Priority expander: no node group matched any pattern",
        ));
        return options;
    };
    for (o, rank) in options.iter().zip(&ranked) {
        if rank.is_none() {
            events.push(Event::warning(
                EventObject::PriorityConfigMap,
                reasons::PRIORITY_CONFIG_MAP_NOT_MATCHED_GROUP,
                format!(
                    "Priority expander: node group {} does not match any pattern",
                    o.group_id
                ),
            ));
        }
    }
    options
        .into_iter()
        .zip(ranked)
        .filter(|(_, r)| *r == Some(top))
        .map(|(o, _)| o)
        .collect()
}

fn pick_random<'a>(
    mut options: Vec<ExpansionOption<'a>>,
    rng: &mut ChaCha8Rng,
) -> Vec<ExpansionOption<'a>> {
    if options.len() <= 1 {
        return options;
    }
    let i = rng.random_range(0..options.len());
    vec![options.swap_remove(i)]
}

/// How the chain ended.
pub(super) enum ChainOutcome<'a> {
    /// The chosen option, or `None` when the chain left nothing.
    Chosen(Option<ExpansionOption<'a>>),
    /// The chain reached `grpc` with [`ExternalExpanderStep::Ask`]: these options go to the
    /// external expander.
    AskExternal(Vec<ExpansionOption<'a>>),
}

/// What `grpc` keeps of the options, given the service's answer (docs/grpc-expander.md GX-103,
/// GX-104): the options it named, in its order; every option when the call failed or it named
/// none of them; nothing when it answered an empty list.
fn by_external<'a>(
    options: Vec<ExpansionOption<'a>>,
    answer: &ExternalAnswer,
) -> Vec<ExpansionOption<'a>> {
    let ids = match answer {
        ExternalAnswer::Failed(_) => return options,
        ExternalAnswer::Options(ids) if ids.is_empty() => return Vec::new(),
        ExternalAnswer::Options(ids) => ids,
    };
    let mut slots: Vec<Option<ExpansionOption<'a>>> = options.into_iter().map(Some).collect();
    let mut kept = Vec::new();
    for id in ids {
        if let Some(slot) = slots
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|o| o.group_id == id))
        {
            kept.extend(slot.take());
        }
    }
    if kept.is_empty() {
        return slots.into_iter().flatten().collect();
    }
    kept
}

/// Runs the chain and returns the chosen option, or `None` when the chain left nothing.
pub(super) fn choose<'a>(
    options: Vec<ExpansionOption<'a>>,
    chain: &[ExpanderName],
    ctx: &ExpanderContext<'_>,
    external: ExternalExpanderStep<'_>,
    rng: &mut ChaCha8Rng,
    events: &mut Vec<Event>,
) -> ChainOutcome<'a> {
    let mut remaining = options;
    for expander in chain {
        if remaining.len() <= 1 {
            break;
        }
        remaining = match expander {
            ExpanderName::Random => pick_random(remaining, rng),
            ExpanderName::MostPods => keep_min(remaining, |o| -(o.pods.len() as f64)),
            ExpanderName::LeastWaste => keep_min(remaining, |o| waste_score(o, ctx)),
            ExpanderName::LeastNodes => {
                let nonzero: Vec<_> = remaining.into_iter().filter(|o| o.node_count > 0).collect();
                keep_min(nonzero, |o| o.node_count as f64)
            }
            ExpanderName::Price => keep_min(remaining, |o| price_score(o, ctx)),
            ExpanderName::Priority => by_priority(remaining, ctx, events),
            ExpanderName::Grpc => match external {
                ExternalExpanderStep::Skip => remaining,
                ExternalExpanderStep::Ask => return ChainOutcome::AskExternal(remaining),
                ExternalExpanderStep::Answer(answer) => by_external(remaining, answer),
            },
        };
    }
    ChainOutcome::Chosen(pick_random(remaining, rng).pop())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Node;
    use rand::SeedableRng;

    fn template(cpu: i64, memory_gib: i64) -> NodeTemplate {
        NodeTemplate {
            node: Node::new("t", Resources::new(cpu, memory_gib << 30)),
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        }
    }

    fn pods(n: usize, cpu: i64, memory_gib: i64) -> Vec<Arc<Pod>> {
        (0..n)
            .map(|i| {
                let mut p = Pod::new("default", format!("p{i}"));
                p.requests = Resources::new(cpu, memory_gib << 30);
                Arc::new(p)
            })
            .collect()
    }

    fn option<'a>(
        id: &'a str,
        t: &'a NodeTemplate,
        nodes: usize,
        pods: std::ops::Range<usize>,
    ) -> ExpansionOption<'a> {
        ExpansionOption {
            group_id: id,
            exists: true,
            template: t,
            price_per_hour: None,
            node_count: nodes,
            pods: pods.collect(),
        }
    }

    fn run(
        chain: &[ExpanderName],
        options: Vec<ExpansionOption<'_>>,
        ctx: &ExpanderContext<'_>,
        seed: u64,
    ) -> String {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut events = Vec::new();
        match choose(
            options,
            chain,
            ctx,
            ExternalExpanderStep::Skip,
            &mut rng,
            &mut events,
        ) {
            ChainOutcome::Chosen(o) => o.map(|o| o.group_id.to_string()).unwrap_or_default(),
            ChainOutcome::AskExternal(_) => "asked".to_string(),
        }
    }

    /// docs/behaviour.md SU-29.
    #[test]
    fn s29_most_pods_picks_the_option_fitting_more_pods() {
        let t = template(4000, 16);
        let ps = pods(10, 1000, 1);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 3,
        };
        for seed in 0..10 {
            let chosen = run(
                &[ExpanderName::MostPods],
                vec![option("few", &t, 1, 0..3), option("many", &t, 2, 0..8)],
                &ctx,
                seed,
            );
            assert_eq!(chosen, "many");
        }
    }

    /// docs/behaviour.md SU-30.
    #[test]
    fn s30_least_waste_uses_cpu_plus_memory_waste_of_capacity() {
        let small = template(4000, 16);
        let big = template(16000, 64);
        let ps = pods(4, 1000, 4);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 3,
        };
        // 4 pods of 1 CPU / 4 GiB: exactly one small node (no waste) vs a quarter of a big one.
        let chosen = run(
            &[ExpanderName::LeastWaste],
            vec![
                option("big", &big, 1, 0..4),
                option("small", &small, 1, 0..4),
            ],
            &ctx,
            1,
        );
        assert_eq!(chosen, "small");
    }

    /// docs/behaviour.md SU-31.
    #[test]
    fn s31_priority_prefers_the_highest_matching_priority() {
        let t = template(4000, 16);
        let ps = pods(2, 1000, 1);
        let config = PriorityConfig::parse("10:\n  - .*small.*\n50:\n  - .*big.*\n");
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: Some(&config),
            cluster_nodes: 3,
        };
        for seed in 0..10 {
            let chosen = run(
                &[ExpanderName::Priority],
                vec![
                    option("pool-small", &t, 1, 0..2),
                    option("pool-big-1", &t, 1, 0..2),
                    option("other", &t, 1, 0..2),
                ],
                &ctx,
                seed,
            );
            assert_eq!(chosen, "pool-big-1");
        }
    }

    /// docs/behaviour.md SU-32.
    #[test]
    fn s32_missing_or_invalid_priority_config_falls_back_to_random_among_all() {
        let t = template(4000, 16);
        let ps = pods(2, 1000, 1);
        for text in [None, Some("not: [valid"), Some("10: ['(unclosed']")] {
            let config = text.map(PriorityConfig::parse);
            let ctx = ExpanderContext {
                pods: &ps,
                priority_config: config.as_ref(),
                cluster_nodes: 3,
            };
            let mut seen = std::collections::BTreeSet::new();
            for seed in 0..40 {
                seen.insert(run(
                    &[ExpanderName::Priority],
                    vec![option("a", &t, 1, 0..2), option("b", &t, 1, 0..2)],
                    &ctx,
                    seed,
                ));
            }
            assert_eq!(seen.len(), 2, "both options get chosen for {text:?}");
        }
        // An invalid config is reported.
        let invalid = PriorityConfig::parse("x: y: z");
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: Some(&invalid),
            cluster_nodes: 3,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut events = Vec::new();
        choose(
            vec![option("a", &t, 1, 0..2), option("b", &t, 1, 0..2)],
            &[ExpanderName::Priority],
            &ctx,
            ExternalExpanderStep::Skip,
            &mut rng,
            &mut events,
        );
        assert_eq!(events[0].reason, reasons::PRIORITY_CONFIG_MAP_INVALID);
    }

    /// Two loops with the same ConfigMap: Gather parsed it once, and neither loop parses it
    /// again; a malformed one is still reported by each loop that runs the expander.
    #[test]
    fn the_priority_config_is_parsed_once_not_per_loop() {
        use crate::scale_up::priority::PARSES;
        let t = template(4000, 16);
        let ps = pods(2, 1000, 1);
        let parses_before = PARSES.with(|n| n.get());
        let good = PriorityConfig::parse("10:\n  - .*small.*\n50:\n  - .*big.*\n");
        let bad = PriorityConfig::parse("10: ['(unclosed']");
        for _loop in 0..2 {
            let options = || {
                vec![
                    option("pool-small", &t, 1, 0..2),
                    option("pool-big", &t, 1, 0..2),
                ]
            };
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            let mut events = Vec::new();
            let ctx = ExpanderContext {
                pods: &ps,
                priority_config: Some(&good),
                cluster_nodes: 3,
            };
            let chosen = choose(
                options(),
                &[ExpanderName::Priority],
                &ctx,
                ExternalExpanderStep::Skip,
                &mut rng,
                &mut events,
            );
            let ChainOutcome::Chosen(chosen) = chosen else {
                panic!("no grpc in the chain");
            };
            assert_eq!(chosen.map(|o| o.group_id), Some("pool-big"));
            assert!(events.is_empty(), "{events:?}");

            let ctx = ExpanderContext {
                priority_config: Some(&bad),
                ..ctx
            };
            choose(
                options(),
                &[ExpanderName::Priority],
                &ctx,
                ExternalExpanderStep::Skip,
                &mut rng,
                &mut events,
            );
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].reason, reasons::PRIORITY_CONFIG_MAP_INVALID);
            assert!(
                events[0]
                    .message
                    .starts_with("priority 10: pattern \"(unclosed\": "),
                "{}",
                events[0].message
            );
        }
        assert_eq!(
            PARSES.with(|n| n.get()) - parses_before,
            2,
            "one parse per text"
        );
    }

    /// docs/behaviour.md SU-33.
    #[test]
    fn s33_priority_ties_are_broken_by_least_waste() {
        let small = template(4000, 16);
        let big = template(16000, 64);
        let ps = pods(4, 1000, 4);
        let config = PriorityConfig::parse("50:\n  - pool-.*\n");
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: Some(&config),
            cluster_nodes: 3,
        };
        for seed in 0..10 {
            let chosen = run(
                &[ExpanderName::Priority, ExpanderName::LeastWaste],
                vec![
                    option("pool-big", &big, 1, 0..4),
                    option("pool-small", &small, 1, 0..4),
                    option("unlisted", &small, 1, 0..4),
                ],
                &ctx,
                seed,
            );
            assert_eq!(chosen, "pool-small");
        }
    }

    #[test]
    fn least_nodes_and_price() {
        let small = template(2000, 8);
        let big = template(8000, 32);
        let ps = pods(8, 1000, 1);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 10,
        };
        let chosen = run(
            &[ExpanderName::LeastNodes],
            vec![
                option("small", &small, 4, 0..8),
                option("big", &big, 1, 0..8),
            ],
            &ctx,
            0,
        );
        assert_eq!(chosen, "big");
        // Same shape, one group much cheaper: price picks it.
        let mut cheap = option("cheap", &big, 1, 0..8);
        cheap.price_per_hour = Some(0.1);
        let mut dear = option("dear", &big, 1, 0..8);
        dear.price_per_hour = Some(1.0);
        assert_eq!(
            run(&[ExpanderName::Price], vec![dear, cheap], &ctx, 0),
            "cheap"
        );
    }

    #[test]
    fn random_choice_is_reproducible_from_the_seed() {
        let t = template(4000, 16);
        let ps = pods(2, 1000, 1);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 3,
        };
        let opts = || {
            vec![
                option("a", &t, 1, 0..2),
                option("b", &t, 1, 0..2),
                option("c", &t, 1, 0..2),
            ]
        };
        let first = run(&[ExpanderName::Random], opts(), &ctx, 7);
        for _ in 0..5 {
            assert_eq!(run(&[ExpanderName::Random], opts(), &ctx, 7), first);
        }
    }

    fn grpc_chain(
        options: Vec<ExpansionOption<'_>>,
        ctx: &ExpanderContext<'_>,
        answer: &ExternalAnswer,
    ) -> Option<String> {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut events = Vec::new();
        match choose(
            options,
            &[ExpanderName::Grpc, ExpanderName::MostPods],
            ctx,
            ExternalExpanderStep::Answer(answer),
            &mut rng,
            &mut events,
        ) {
            ChainOutcome::Chosen(o) => o.map(|o| o.group_id.to_string()),
            ChainOutcome::AskExternal(_) => panic!("answered plans do not ask"),
        }
    }

    /// docs/grpc-expander.md GX-102: with `Ask`, the chain stops at `grpc` and hands over the
    /// options the expanders before it kept.
    #[test]
    fn gx102_the_chain_stops_at_grpc_to_ask() {
        let t = template(4000, 16);
        let ps = pods(8, 1000, 1);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 3,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut events = Vec::new();
        let outcome = choose(
            vec![
                option("few", &t, 1, 0..2),
                option("many-a", &t, 2, 0..8),
                option("many-b", &t, 2, 0..8),
            ],
            &[ExpanderName::MostPods, ExpanderName::Grpc],
            &ctx,
            ExternalExpanderStep::Ask,
            &mut rng,
            &mut events,
        );
        let ChainOutcome::AskExternal(asked) = outcome else {
            panic!("the chain should ask");
        };
        let ids: Vec<&str> = asked.iter().map(|o| o.group_id).collect();
        assert_eq!(ids, vec!["many-a", "many-b"]);
    }

    /// docs/grpc-expander.md GX-103: the options the service names are kept, and the expanders
    /// after `grpc` choose among them only.
    #[test]
    fn gx103_the_answer_filters_the_options_for_the_next_expanders() {
        let t = template(4000, 16);
        let ps = pods(8, 1000, 1);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 3,
        };
        let options = || {
            vec![
                option("few", &t, 1, 0..2),
                option("some", &t, 1, 0..4),
                option("many", &t, 2, 0..8),
            ]
        };
        let answer = ExternalAnswer::Options(vec!["few".into(), "some".into()]);
        assert_eq!(
            grpc_chain(options(), &ctx, &answer).as_deref(),
            Some("some")
        );
        let unknown_ignored = ExternalAnswer::Options(vec!["gone".into(), "few".into()]);
        assert_eq!(
            grpc_chain(options(), &ctx, &unknown_ignored).as_deref(),
            Some("few")
        );
    }

    /// docs/grpc-expander.md GX-104: a failed call, or an answer naming none of the options, keeps
    /// every option; an empty answer keeps none.
    #[test]
    fn gx104_failures_keep_every_option_and_an_empty_answer_keeps_none() {
        let t = template(4000, 16);
        let ps = pods(8, 1000, 1);
        let ctx = ExpanderContext {
            pods: &ps,
            priority_config: None,
            cluster_nodes: 3,
        };
        let options = || vec![option("few", &t, 1, 0..2), option("many", &t, 2, 0..8)];
        let failed = ExternalAnswer::Failed("deadline exceeded".into());
        assert_eq!(
            grpc_chain(options(), &ctx, &failed).as_deref(),
            Some("many")
        );
        let unknown = ExternalAnswer::Options(vec!["gone".into()]);
        assert_eq!(
            grpc_chain(options(), &ctx, &unknown).as_deref(),
            Some("many")
        );
        let empty = ExternalAnswer::Options(Vec::new());
        assert_eq!(grpc_chain(options(), &ctx, &empty), None);
    }
}
