//! Parsing of `--scheduler-config-file`: every supported field, and every refusal naming its field
//! (docs/behaviour.md SCHED-101, SCHED-102).

use ferroscale_model::labels::ZONE;

use super::*;

const HEAD: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn with_profile(profile: &str) -> String {
    format!("{HEAD}profiles:\n{profile}")
}

fn refusal(text: &str) -> String {
    match parse(text) {
        Ok(p) => panic!("accepted: {p:?}\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_file_without_profiles_is_the_default_profile() {
    assert_eq!(parse(HEAD).unwrap(), SchedulerProfile::default());
    assert_eq!(
        parse(&format!("{HEAD}profiles: []\n")).unwrap(),
        SchedulerProfile::default()
    );
    let p = parse(&with_profile("- schedulerName: my-scheduler\n")).unwrap();
    assert_eq!(p.scheduler_name, "my-scheduler");
    assert!(FilterPlugin::ALL.iter().all(|f| p.is_enabled(*f)));
}

#[test]
fn disabled_filters_by_name_at_filter_and_multi_point() {
    let p = parse(&with_profile(
        "- plugins:
    filter:
      disabled: [{name: TaintToleration}, {name: VolumeBinding}]
    multiPoint:
      disabled:
        - name: NodeAffinity
        - name: NodePorts
        - name: ImageLocality
",
    ))
    .unwrap();
    assert_eq!(
        p.disabled_filters(),
        vec![
            FilterPlugin::TaintToleration,
            FilterPlugin::NodeAffinity,
            FilterPlugin::NodePorts,
            FilterPlugin::VolumeBinding
        ]
    );
}

#[test]
fn star_disables_every_filter_and_enabled_entries_turn_some_back_on() {
    let p = parse(&with_profile(
        "- plugins:
    filter:
      disabled: [{name: '*'}]
      enabled: [{name: NodeResourcesFit}]
",
    ))
    .unwrap();
    let disabled = p.disabled_filters();
    assert_eq!(disabled.len(), FilterPlugin::ALL.len() - 1);
    assert!(p.is_enabled(FilterPlugin::NodeResourcesFit));

    // `*` at multiPoint takes every default plugin out of every point; enabling one at multiPoint
    // brings its PreFilter and Filter back.
    let p = parse(&with_profile(
        "- plugins:
    multiPoint:
      disabled: [{name: '*'}]
      enabled: [{name: NodeResourcesFit}, {name: DefaultBinder}, {name: PrioritySort}]
",
    ))
    .unwrap();
    assert_eq!(p.disabled_filters().len(), FilterPlugin::ALL.len() - 1);
    assert!(p.is_enabled(FilterPlugin::NodeResourcesFit));
}

#[test]
fn disabling_a_pre_filter_alone_is_a_no_op_or_refused_as_kube_scheduler_would_fail() {
    // NodeAffinity's Filter recomputes what its PreFilter would have; TaintToleration has none.
    let p = parse(&with_profile(
        "- plugins:
    preFilter:
      disabled: [{name: NodeAffinity}, {name: TaintToleration}]
",
    ))
    .unwrap();
    assert!(p.disabled_filters().is_empty());
    // Both points disabled: the filter is off.
    let p = parse(&with_profile(
        "- plugins:
    preFilter:
      disabled: [{name: InterPodAffinity}]
    filter:
      disabled: [{name: InterPodAffinity}]
",
    ))
    .unwrap();
    assert_eq!(p.disabled_filters(), vec![FilterPlugin::InterPodAffinity]);
    // Only the PreFilter of a plugin whose Filter needs it: every pod would fail there.
    let e = refusal(&with_profile(
        "- plugins:
    preFilter:
      disabled: [{name: PodTopologySpread}]
",
    ));
    assert!(
        e.starts_with("profiles[0].plugins.preFilter.disabled[0].name: \"PodTopologySpread\""),
        "{e}"
    );
    let e = refusal(&with_profile(
        "- plugins:
    preFilter:
      disabled: [{name: '*'}]
",
    ));
    assert!(
        e.contains("preFilter.disabled[0].name") && e.contains("NodePorts"),
        "{e}"
    );
}

#[test]
fn topology_spread_default_constraints_with_list_defaulting() {
    let p = parse(&with_profile(
        "- pluginConfig:
    - name: PodTopologySpread
      args:
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: PodTopologySpreadArgs
        defaultingType: List
        defaultConstraints:
          - maxSkew: 1
            topologyKey: topology.kubernetes.io/zone
            whenUnsatisfiable: DoNotSchedule
            minDomains: 3
            nodeAffinityPolicy: Ignore
            nodeTaintsPolicy: Honor
          - maxSkew: 2
            topologyKey: kubernetes.io/hostname
            whenUnsatisfiable: ScheduleAnyway
",
    ))
    .unwrap();
    assert_eq!(p.spread_defaulting, SpreadDefaulting::List);
    assert_eq!(p.default_constraints.len(), 2);
    let zone = &p.default_constraints[0];
    assert_eq!(
        (zone.max_skew, zone.topology_key.as_str(), zone.min_domains),
        (1, ZONE, Some(3))
    );
    assert_eq!(zone.node_affinity_policy, NodeInclusionPolicy::Ignore);
    assert_eq!(zone.node_taints_policy, NodeInclusionPolicy::Honor);
    assert_eq!(zone.label_selector, None);
    let hard: Vec<_> = p.hard_default_constraints().collect();
    assert_eq!(hard, vec![zone]);

    let p = parse(&with_profile(
        "- pluginConfig:
    - name: PodTopologySpread
      args: {defaultingType: System}
",
    ))
    .unwrap();
    assert_eq!(p.spread_defaulting, SpreadDefaulting::System);
    assert!(p.default_constraints.is_empty());
}

#[test]
fn node_resources_fit_ignored_resources_and_groups() {
    let p = parse(&with_profile(
        "- pluginConfig:
    - name: NodeResourcesFit
      args:
        kind: NodeResourcesFitArgs
        ignoredResources: [example.com/dongle]
        ignoredResourceGroups: [fpga.example.org]
",
    ))
    .unwrap();
    assert_eq!(p.ignored_resources, vec!["example.com/dongle"]);
    assert_eq!(p.ignored_resource_groups, vec!["fpga.example.org"]);
    assert!(p.ignores_resource("example.com/dongle"));
    assert!(p.ignores_resource("fpga.example.org/any"));
    assert!(!p.ignores_resource("example.com/other"));
    // Only extended resources can be ignored, as upstream.
    let p = parse(&with_profile(
        "- pluginConfig:
    - name: NodeResourcesFit
      args: {ignoredResources: [cpu, hugepages-2Mi], ignoredResourceGroups: [kubernetes.io]}
",
    ))
    .unwrap();
    assert!(!p.ignores_resource("cpu"));
    assert!(!p.ignores_resource("hugepages-2Mi"));
    assert!(!p.ignores_resource("kubernetes.io/anything"));
}

#[test]
fn every_refusal_names_the_field_and_the_value() {
    let cases: &[(&str, &str)] = &[
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
            "apiVersion: \"kubescheduler.config.k8s.io/v1beta3\"",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\n",
            "kind: null: required",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeProxyConfiguration\n",
            "kind: \"KubeProxyConfiguration\"",
        ),
        (
            &format!("{HEAD}percentageOfNodesToScore: 50\n"),
            "percentageOfNodesToScore: 50: not supported",
        ),
        (
            &format!("{HEAD}extenders:\n- urlPrefix: http://x\n"),
            "extenders: - urlPrefix: http://x: not supported",
        ),
        (
            &format!("{HEAD}leaderElection: {{leaderElect: true}}\n"),
            "leaderElection: leaderElect: true: not supported",
        ),
        (
            &with_profile("- schedulerName: a\n- schedulerName: b\n"),
            "profiles: 2 profiles: not supported",
        ),
        (
            &with_profile("- percentageOfNodesToScore: 10\n"),
            "profiles[0].percentageOfNodesToScore: 10: not supported",
        ),
        (
            &with_profile("- plugins:\n    score:\n      disabled: [{name: ImageLocality}]\n"),
            "profiles[0].plugins.score: disabled: - name: ImageLocality: not supported",
        ),
        (
            &with_profile("- plugins:\n    filtre: {}\n"),
            "profiles[0].plugins.filtre: {}: not a scheduler extension point",
        ),
        (
            &with_profile("- plugins:\n    filter:\n      enabled: [{name: MyCustomFilter}]\n"),
            "profiles[0].plugins.filter.enabled[0].name: \"MyCustomFilter\": not supported",
        ),
        (
            &with_profile(
                "- plugins:\n    multiPoint:\n      enabled: [{name: NodeAffinity, weight: 5}]\n",
            ),
            "profiles[0].plugins.multiPoint.enabled[0].weight: 5: not supported",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: InterPodAffinity\n    args: {hardPodAffinityWeight: 2}\n",
            ),
            "profiles[0].pluginConfig[0].name: \"InterPodAffinity\": not supported",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: MostAllocated}}\n",
            ),
            "profiles[0].pluginConfig[0].args.scoringStrategy: type: MostAllocated: not supported",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: NodeResourcesFit\n  - name: NodeResourcesFit\n",
            ),
            "profiles[0].pluginConfig[1].name: \"NodeResourcesFit\": configured twice",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: NodeResourcesFit\n    args: {kind: PodTopologySpreadArgs}\n",
            ),
            "profiles[0].pluginConfig[0].args.kind: \"PodTopologySpreadArgs\": must be NodeResourcesFitArgs",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: NodeResourcesFit\n    args: {ignoredResourceGroups: [example.com/x]}\n",
            ),
            "profiles[0].pluginConfig[0].args.ignoredResourceGroups[0]: \"example.com/x\": a resource group name has no '/'",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: NodeResourcesFit\n    args: {ignoredResources: [\"bad name\"]}\n",
            ),
            "profiles[0].pluginConfig[0].args.ignoredResources[0]: \"bad name\": must be a qualified name",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: Sometimes}\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultingType: \"Sometimes\": must be System or List",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultingType: \"System\": must be List when",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].maxSkew: 0: must be a positive integer",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].topologyKey: null: required",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Never}]\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].whenUnsatisfiable: \"Never\"",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].labelSelector: {}: default constraints must not have a selector",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: [app]}]\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].matchLabelKeys: - app: not supported",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n      - {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n",
            ),
            "profiles[0].pluginConfig[0].args.defaultConstraints[1]: {zone, DoNotSchedule}",
        ),
        (
            &with_profile(
                "- pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: List, extra: 1}\n",
            ),
            "profiles[0].pluginConfig[0].args.extra: 1: not supported",
        ),
        ("profiles: [\n", "not valid YAML"),
    ];
    for (text, expected) in cases {
        let e = refusal(text);
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
}

#[test]
fn a_file_over_the_size_limit_is_refused() {
    let mut text = HEAD.to_string();
    text.push('#');
    text.push_str(&"x".repeat(MAX_FILE_BYTES as usize));
    let e = refusal(&text);
    assert!(e.contains("larger than the 1048576 bytes"), "{e}");
}

#[test]
fn alias_bombs_and_deep_nesting_are_refused_without_expanding_them() {
    // Nine levels of ten aliases each would expand to a billion strings.
    let mut text = format!("{HEAD}a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = refusal(&text);
    assert!(e.contains("not valid YAML"), "{e}");

    let deep = format!(
        "{HEAD}profiles: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let e = refusal(&deep);
    assert!(e.contains("not valid YAML"), "{e}");
}
