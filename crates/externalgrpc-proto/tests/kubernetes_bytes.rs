//! `nodeBytes` and `pod_bytes` (docs/externalgrpc.md GRPC-11, GRPC-35): model objects survive a
//! trip through the bytes, nodes encoded the way Go encodes them read the same as minimal ones, and
//! every kind of bad input is an error that says what is wrong, never a panic.

use std::collections::BTreeMap;

use ferroscale_externalgrpc_proto::{CodecError, decode_node, decode_pod, encode_node, encode_pod};
use ferroscale_model::{
    ConditionStatus, HostPort, LabelOperator, LabelRequirement, LabelSelector, Labels, Node,
    NodeConditions, NodeInclusionPolicy, NodeOperator, NodeRequirement, NodeSelector,
    NodeSelectorTerm, OwnerRef, Pod, PodAffinityTerm, PodCondition, PodPhase, Protocol, Resources,
    RestartPolicy, Taint, TaintEffect, Timestamp, Toleration, TolerationOperator,
    TopologySpreadConstraint, UnsatisfiableAction, Volume, VolumeSource, thin_vec,
};
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use proptest::prelude::*;
use prost::Message;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn template_node() -> Node {
    let mut allocatable = Resources::new(3920, 15 << 30);
    allocatable.pods = 110;
    allocatable.ephemeral_storage = 95 << 30;
    allocatable.set("nvidia.com/gpu", 1);
    allocatable.set("hugepages-2Mi", 4 << 20);
    let mut capacity = allocatable.clone();
    capacity.cpu_milli = 4000;
    capacity.memory = 16 << 30;
    Node {
        name: "template-ng-1".to_string(),
        uid: "0b6c5a3e-uid".to_string(),
        labels: labels(&[
            ("kubernetes.io/hostname", "template-ng-1"),
            ("node.kubernetes.io/instance-type", "g4dn.xlarge"),
            ("topology.kubernetes.io/zone", "eu-west-1a"),
        ]),
        annotations: labels(&[("example.com/owner", "team-a")]),
        taints: vec![
            Taint::new("nvidia.com/gpu", "present", TaintEffect::NoSchedule),
            Taint {
                time_added: Some(Timestamp::from_secs(1_714_557_600)),
                ..Taint::new("soft", "", TaintEffect::PreferNoSchedule)
            },
        ],
        capacity,
        allocatable,
        unschedulable: true,
        provider_id: "aws:///eu-west-1a/i-0123".to_string(),
        creation_time: Timestamp(1_714_557_000_250),
        conditions: NodeConditions {
            ready: Some(ConditionStatus::True),
            disk_pressure: true,
            network_unavailable: false,
            suspended: true,
            last_transition: Some(Timestamp::from_secs(1_714_557_500)),
        },
    }
}

#[test]
fn node_round_trip_keeps_everything_the_model_holds() {
    let node = template_node();
    assert_eq!(decode_node(&encode_node(&node)).unwrap(), node);

    let mut not_ready = Node::new("n2", Resources::new(1000, 1 << 30));
    not_ready.conditions.ready = Some(ConditionStatus::Unknown);
    not_ready.conditions.network_unavailable = true;
    assert_eq!(decode_node(&encode_node(&not_ready)).unwrap(), not_ready);
}

#[test]
fn node_quantities_are_written_as_kubernetes_quantity_strings() {
    let node: pb::Node = Message::decode(encode_node(&template_node()).as_slice()).unwrap();
    let status = node.status.unwrap();
    let text = |list: &BTreeMap<String, PbQuantity>, name: &str| {
        list.get(name).and_then(|q| q.string.clone()).unwrap()
    };
    assert_eq!(text(&status.capacity, "cpu"), "4");
    assert_eq!(text(&status.allocatable, "cpu"), "3920m");
    assert_eq!(text(&status.allocatable, "memory"), "15Gi");
    assert_eq!(text(&status.allocatable, "pods"), "110");
    assert_eq!(text(&status.allocatable, "nvidia.com/gpu"), "1");
}

fn s(text: &str) -> Option<String> {
    Some(text.to_string())
}

fn quantity(text: &str) -> PbQuantity {
    PbQuantity { string: s(text) }
}

/// The node of [`minimal_node`], written the way Go's `Node.Marshal` writes it: every plain string,
/// integer and boolean present even when empty, zero times as empty messages, plus the status parts
/// a real node has and the model ignores.
fn go_encoded_node() -> pb::Node {
    let empty_time = Some(pb_meta::Time::default());
    pb::Node {
        metadata: Some(pb_meta::ObjectMeta {
            name: s("ip-10-0-1-12"),
            generate_name: s(""),
            namespace: s(""),
            self_link: s(""),
            uid: s("6a1d-uid"),
            resource_version: s("4711"),
            generation: Some(0),
            creation_timestamp: Some(pb_meta::Time {
                seconds: Some(1_714_557_600),
                nanos: Some(0),
            }),
            labels: labels(&[
                ("kubernetes.io/hostname", "ip-10-0-1-12"),
                ("topology.kubernetes.io/zone", "eu-west-1a"),
            ])
            .into(),
            annotations: labels(&[("node.alpha.kubernetes.io/ttl", "0")]).into(),
            ..pb_meta::ObjectMeta::default()
        }),
        spec: Some(pb::NodeSpec {
            pod_cidr: s(""),
            external_id: s(""),
            provider_id: s("aws:///eu-west-1a/i-0abc"),
            unschedulable: Some(false),
            taints: vec![pb::Taint {
                key: s("dedicated"),
                value: s(""),
                effect: s("NoSchedule"),
                time_added: None,
            }],
            ..pb::NodeSpec::default()
        }),
        status: Some(pb::NodeStatus {
            capacity: [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), quantity(v)))
                .collect(),
            allocatable: [("cpu", "3920m"), ("memory", "15Gi"), ("pods", "110")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), quantity(v)))
                .collect(),
            phase: s(""),
            conditions: vec![
                pb::NodeCondition {
                    r#type: s("MemoryPressure"),
                    status: s("False"),
                    last_heartbeat_time: empty_time,
                    last_transition_time: empty_time,
                    reason: s(""),
                    message: s(""),
                },
                pb::NodeCondition {
                    r#type: s("Ready"),
                    status: s("True"),
                    last_heartbeat_time: empty_time,
                    last_transition_time: Some(pb_meta::Time {
                        seconds: Some(1_714_557_660),
                        nanos: Some(0),
                    }),
                    reason: s("KubeletReady"),
                    message: s("kubelet is posting ready status"),
                },
            ],
            addresses: vec![pb::NodeAddress {
                r#type: s("InternalIP"),
                address: s("10.0.1.12"),
            }],
            daemon_endpoints: Some(pb::NodeDaemonEndpoints::default()),
            node_info: Some(pb::NodeSystemInfo {
                machine_id: s(""),
                kubelet_version: s("v1.35.0"),
                operating_system: s("linux"),
                architecture: s("amd64"),
                ..pb::NodeSystemInfo::default()
            }),
            images: vec![pb::ContainerImage {
                names: vec!["registry.k8s.io/pause:3.10".to_string()],
                size_bytes: Some(320_000),
            }],
            ..pb::NodeStatus::default()
        }),
    }
}

fn minimal_node() -> Node {
    let mut capacity = Resources::new(4000, 16 << 30);
    capacity.pods = 110;
    let mut allocatable = Resources::new(3920, 15 << 30);
    allocatable.pods = 110;
    Node {
        name: "ip-10-0-1-12".to_string(),
        uid: "6a1d-uid".to_string(),
        labels: labels(&[
            ("kubernetes.io/hostname", "ip-10-0-1-12"),
            ("topology.kubernetes.io/zone", "eu-west-1a"),
        ]),
        annotations: labels(&[("node.alpha.kubernetes.io/ttl", "0")]),
        taints: vec![Taint::new("dedicated", "", TaintEffect::NoSchedule)],
        capacity,
        allocatable,
        unschedulable: false,
        provider_id: "aws:///eu-west-1a/i-0abc".to_string(),
        creation_time: Timestamp::from_secs(1_714_557_600),
        conditions: NodeConditions {
            ready: Some(ConditionStatus::True),
            last_transition: Some(Timestamp::from_secs(1_714_557_660)),
            ..NodeConditions::default()
        },
    }
}

#[test]
fn go_encoded_node_decodes_to_the_same_node_as_a_minimal_encoding() {
    let go_bytes = go_encoded_node().encode_to_vec();
    assert_eq!(go_bytes.first(), Some(&0x0a));
    let from_go = decode_node(&go_bytes).unwrap();
    assert_eq!(from_go, minimal_node());
    assert_eq!(decode_node(&encode_node(&minimal_node())).unwrap(), from_go);
}

#[test]
fn unknown_fields_from_newer_kubernetes_versions_are_skipped() {
    let mut bytes = go_encoded_node().encode_to_vec();
    // Field 99, length-delimited, three bytes: a field no current Node message declares.
    bytes.extend_from_slice(&[0x9a, 0x06, 0x03, 0x01, 0x02, 0x03]);
    assert_eq!(decode_node(&bytes).unwrap(), minimal_node());
}

#[test]
fn runtime_serializer_prefix_is_refused_with_an_explanation() {
    let mut bytes = b"k8s\0".to_vec();
    bytes.extend(encode_node(&minimal_node()));
    let error = decode_node(&bytes).unwrap_err();
    assert_eq!(error, CodecError::RuntimeSerializerPrefix { kind: "Node" });
    let message = error.to_string();
    assert!(message.contains("runtime protobuf serializer"), "{message}");
    assert!(
        message.contains("plain protobuf encoding of k8s.io.api.core.v1.Node"),
        "{message}"
    );

    let mut pod_bytes = b"k8s\0".to_vec();
    pod_bytes.extend(encode_pod(&Pod::new("default", "p")));
    assert_eq!(
        decode_pod(&pod_bytes).unwrap_err(),
        CodecError::RuntimeSerializerPrefix { kind: "Pod" }
    );
}

#[test]
fn empty_bytes_are_not_a_node() {
    assert_eq!(decode_node(&[]), Err(CodecError::Empty { kind: "Node" }));
    assert_eq!(decode_pod(&[]), Err(CodecError::Empty { kind: "Pod" }));
}

#[test]
fn truncated_bytes_name_the_message_and_show_the_bytes() {
    // metadata (field 1) announces 5 bytes but only one follows.
    let error = decode_node(&[0x0a, 0x05, 0x01]).unwrap_err();
    let CodecError::Malformed {
        kind,
        length,
        prefix,
        ..
    } = &error
    else {
        panic!("expected a malformed-bytes error, got {error:?}");
    };
    assert_eq!((*kind, *length, prefix.as_str()), ("Node", 3, "0a 05 01"));
    assert!(error.to_string().contains("k8s.io.api.core.v1.Node"));
}

#[test]
fn a_malformed_quantity_names_the_field_and_the_value() {
    for bad in ["four", ""] {
        let mut node = go_encoded_node();
        if let Some(status) = node.status.as_mut() {
            status.allocatable.insert("cpu".to_string(), quantity(bad));
        }
        let CodecError::Invalid(error) = decode_node(&node.encode_to_vec()).unwrap_err() else {
            panic!("expected a conversion error for {bad:?}");
        };
        assert_eq!(error.object, "Node ip-10-0-1-12");
        assert_eq!(error.field, "status.allocatable.cpu");
        assert_eq!(error.value, bad);
    }
}

#[test]
fn a_quantity_without_its_string_is_zero_as_in_go() {
    let mut node = go_encoded_node();
    if let Some(status) = node.status.as_mut() {
        status.allocatable.insert(
            "example.com/dongle".to_string(),
            PbQuantity { string: None },
        );
    }
    let decoded = decode_node(&node.encode_to_vec()).unwrap();
    assert_eq!(decoded.allocatable.get("example.com/dongle"), 0);
}

#[test]
fn an_unknown_taint_effect_names_the_field() {
    let mut node = go_encoded_node();
    if let Some(spec) = node.spec.as_mut() {
        spec.taints[0].effect = s("Sometimes");
    }
    let CodecError::Invalid(error) = decode_node(&node.encode_to_vec()).unwrap_err() else {
        panic!("expected a conversion error");
    };
    assert_eq!(error.field, "spec.taints[0].effect");
    assert_eq!(error.value, "Sometimes");
}

#[test]
fn a_time_out_of_range_names_the_field() {
    let mut node = go_encoded_node();
    if let Some(metadata) = node.metadata.as_mut() {
        metadata.creation_timestamp = Some(pb_meta::Time {
            seconds: Some(i64::MAX),
            nanos: Some(0),
        });
    }
    let CodecError::Invalid(error) = decode_node(&node.encode_to_vec()).unwrap_err() else {
        panic!("expected a conversion error");
    };
    assert_eq!(error.field, "metadata.creationTimestamp");
    assert!(error.value.contains(&i64::MAX.to_string()));
}

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: labels(&[(key, value)]),
        match_expressions: vec![LabelRequirement {
            key: "tier".to_string(),
            operator: LabelOperator::NotIn,
            values: vec!["batch".to_string()],
        }],
    }
}

fn rich_pod() -> Pod {
    let mut requests = Resources::new(1250, 3 << 30);
    requests.ephemeral_storage = 1 << 30;
    requests.set("nvidia.com/gpu", 1);
    Pod {
        namespace: "shop".into(),
        name: "web-7d4f-abcde".into(),
        uid: "pod-uid-1".into(),
        labels: labels(&[("app", "web")]),
        annotations: labels(&[("cluster-autoscaler.kubernetes.io/safe-to-evict", "true")]),
        owner_references: thin_vec![OwnerRef {
            api_version: "apps/v1".to_string(),
            kind: "ReplicaSet".to_string(),
            name: "web-7d4f".to_string(),
            uid: "rs-uid".to_string(),
            controller: true,
        }],
        priority: Some(1000),
        scheduler_name: "default-scheduler".into(),
        node_name: None,
        nominated_node_name: Some("n3".into()),
        phase: PodPhase::Pending,
        restart_policy: RestartPolicy::OnFailure,
        scheduled_condition: Some(Box::new(PodCondition {
            status: ConditionStatus::False,
            reason: "Unschedulable".to_string(),
            last_transition: Some(Timestamp::from_secs(1_714_557_700)),
        })),
        creation_time: Timestamp::from_secs(1_714_557_600),
        deletion_time: Some(Timestamp::from_secs(1_714_558_000)),
        termination_grace_seconds: Some(45),
        requests,
        node_selector: labels(&[("kubernetes.io/os", "linux")]),
        required_node_affinity: Some(Box::new(NodeSelector {
            terms: vec![
                NodeSelectorTerm {
                    match_expressions: vec![NodeRequirement {
                        key: "topology.kubernetes.io/zone".to_string(),
                        operator: NodeOperator::In,
                        values: vec!["eu-west-1a".to_string(), "eu-west-1b".to_string()],
                    }],
                    match_fields: vec![],
                },
                NodeSelectorTerm {
                    match_expressions: vec![],
                    match_fields: vec![NodeRequirement {
                        key: "metadata.name".to_string(),
                        operator: NodeOperator::NotIn,
                        values: vec!["n1".to_string()],
                    }],
                },
            ],
        })),
        pod_affinity: thin_vec![PodAffinityTerm {
            label_selector: Some(LabelSelector::default()),
            namespaces: vec!["shop".to_string(), "cache".to_string()],
            namespace_selector: None,
            topology_key: "topology.kubernetes.io/zone".to_string(),
        }],
        pod_anti_affinity: thin_vec![PodAffinityTerm {
            label_selector: Some(selector("app", "web")),
            namespaces: vec![],
            namespace_selector: Some(LabelSelector::default()),
            topology_key: "kubernetes.io/hostname".to_string(),
        }],
        tolerations: thin_vec![
            Toleration {
                key: "nvidia.com/gpu".to_string(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: Some(TaintEffect::NoSchedule),
            },
            Toleration {
                key: "dedicated".to_string(),
                operator: TolerationOperator::Equal,
                value: "web".to_string(),
                effect: None,
            },
        ],
        host_ports: thin_vec![
            HostPort {
                port: 8080,
                protocol: Protocol::Tcp,
                host_ip: String::new(),
            },
            HostPort {
                port: 53,
                protocol: Protocol::Udp,
                host_ip: "10.0.0.5".to_string(),
            },
        ],
        topology_spread: thin_vec![TopologySpreadConstraint {
            max_skew: 2,
            topology_key: "topology.kubernetes.io/zone".to_string(),
            when_unsatisfiable: UnsatisfiableAction::ScheduleAnyway,
            label_selector: Some(selector("app", "web")),
            min_domains: Some(3),
            node_affinity_policy: NodeInclusionPolicy::Ignore,
            node_taints_policy: NodeInclusionPolicy::Honor,
        }],
        volumes: thin_vec![
            Volume {
                name: "host".to_string(),
                source: VolumeSource::HostPath,
            },
            Volume {
                name: "scratch".to_string(),
                source: VolumeSource::EmptyDir {
                    memory_medium: true,
                },
            },
            Volume {
                name: "data".to_string(),
                source: VolumeSource::PersistentVolumeClaim {
                    claim_name: "data-web-0".to_string(),
                },
            },
            Volume {
                name: "config".to_string(),
                source: VolumeSource::Other,
            },
        ],
        resource_claims: thin_vec![],
        resource_claim_statuses: thin_vec![],
    }
}

#[test]
fn pod_round_trip_keeps_everything_the_model_holds() {
    let pod = rich_pod();
    assert_eq!(decode_pod(&encode_pod(&pod)).unwrap(), pod);
    let bare = Pod::new("default", "bare");
    assert_eq!(decode_pod(&encode_pod(&bare)).unwrap(), bare);
}

fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> pb::Container {
    let list = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), quantity(v)))
            .collect()
    };
    pb::Container {
        name: s(name),
        image: s("registry.example/app:1"),
        resources: Some(pb::ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..pb::ResourceRequirements::default()
        }),
        ..pb::Container::default()
    }
}

#[test]
fn pod_from_a_go_client_gets_effective_requests_as_the_scheduler_computes_them() {
    let pod = pb::Pod {
        metadata: Some(pb_meta::ObjectMeta {
            name: s("batch-1"),
            namespace: s("jobs"),
            uid: s(""),
            creation_timestamp: Some(pb_meta::Time::default()),
            ..pb_meta::ObjectMeta::default()
        }),
        spec: Some(pb::PodSpec {
            containers: vec![
                container("main", &[("cpu", "500m"), ("memory", "1Gi")], &[]),
                // A limit without a request requests the limit.
                container("sidecar", &[], &[("cpu", "250m")]),
            ],
            init_containers: vec![container("setup", &[("cpu", "2")], &[])],
            overhead: [("cpu".to_string(), quantity("10m"))].into_iter().collect(),
            priority_class_name: s(""),
            scheduler_name: s("default-scheduler"),
            node_name: s(""),
            restart_policy: s("Never"),
            ..pb::PodSpec::default()
        }),
        status: Some(pb::PodStatus {
            phase: s("Pending"),
            nominated_node_name: s(""),
            ..pb::PodStatus::default()
        }),
    };
    let decoded = decode_pod(&pod.encode_to_vec()).unwrap();
    assert_eq!(decoded.namespace, "jobs");
    // max(500m + 250m, 2000m init) + 10m overhead
    assert_eq!(decoded.requests.cpu_milli, 2010);
    assert_eq!(decoded.requests.memory, 1 << 30);
    assert_eq!(decoded.node_name, None);
    assert_eq!(decoded.restart_policy, RestartPolicy::Never);
    assert_eq!(decoded.creation_time, Timestamp::default());
}

#[test]
fn pod_with_an_unresolved_unknown_priority_class_is_refused_by_name() {
    let pod = pb::Pod {
        metadata: Some(pb_meta::ObjectMeta {
            name: s("p"),
            namespace: s("default"),
            ..pb_meta::ObjectMeta::default()
        }),
        spec: Some(pb::PodSpec {
            priority_class_name: s("gold"),
            ..pb::PodSpec::default()
        }),
        status: None,
    };
    let CodecError::Invalid(error) = decode_pod(&pod.encode_to_vec()).unwrap_err() else {
        panic!("expected a conversion error");
    };
    assert_eq!(error.object, "Pod default/p");
    assert_eq!(error.field, "spec.priorityClassName");
    assert_eq!(error.value, "gold");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_node(&bytes);
        let _ = decode_pod(&bytes);
    }

    /// Damage to a valid encoding reaches deeper into the decoders than random bytes do.
    #[test]
    fn damaged_encodings_never_panic_the_decoders(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        for mut bytes in [encode_node(&template_node()), encode_pod(&rich_pod())] {
            for (index, value) in &edits {
                let at = index.index(bytes.len());
                bytes[at] = *value;
            }
            let _ = decode_node(&bytes);
            let _ = decode_pod(&bytes);
            let kept = cut.index(bytes.len());
            let _ = decode_node(&bytes[..kept]);
            let _ = decode_pod(&bytes[..kept]);
        }
    }
}
