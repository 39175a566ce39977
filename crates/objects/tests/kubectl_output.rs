//! Real-looking `kubectl get -o yaml` output converts into the model; every class of bad value is
//! refused with an error naming the object, the field and the value.

use ferroscale_model::{
    ConditionStatus, IntOrPercent, LabelOperator, NodeInclusionPolicy, NodeOperator, PodPhase,
    Protocol, TaintEffect, TolerationOperator, VolumeSource,
};
use ferroscale_objects::{K8sObject, ObjectsError, parse_objects_yaml};

const DUMP: &str = r#"apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      node.alpha.kubernetes.io/ttl: "0"
    creationTimestamp: "2024-05-01T10:00:00Z"
    labels:
      kubernetes.io/hostname: ip-10-0-1-12
      topology.kubernetes.io/zone: eu-west-1a
      node.kubernetes.io/instance-type: m5.xlarge
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1:
        f:metadata:
          f:labels:
            .: {}
      manager: kubelet
      operation: Update
      time: "2024-05-01T10:00:00Z"
    name: ip-10-0-1-12
    resourceVersion: "123456"
    uid: 7c1a2b3d-0000-4000-8000-000000000001
  spec:
    providerID: aws:///eu-west-1a/i-0abc
    podCIDR: 10.244.1.0/24
    taints:
    - effect: NoSchedule
      key: dedicated
      value: batch
  status:
    addresses:
    - address: 10.0.1.12
      type: InternalIP
    allocatable:
      cpu: 3920m
      ephemeral-storage: "76043298691"
      memory: 15252428Ki
      pods: "58"
    capacity:
      cpu: "4"
      ephemeral-storage: 83873772Ki
      memory: 16100300Ki
      pods: "58"
    conditions:
    - lastHeartbeatTime: "2024-05-01T12:00:00Z"
      lastTransitionTime: "2024-05-01T10:01:00Z"
      message: kubelet is posting ready status
      reason: KubeletReady
      status: "True"
      type: Ready
    - lastHeartbeatTime: "2024-05-01T12:00:00Z"
      lastTransitionTime: "2024-05-01T10:00:30Z"
      reason: KubeletHasNoDiskPressure
      status: "False"
      type: DiskPressure
    nodeInfo:
      architecture: amd64
      kubeletVersion: v1.30.0
- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2024-05-01T11:00:00Z"
    generateName: web-7d9f8-
    labels:
      app: web
      pod-template-hash: 7d9f8
    name: web-7d9f8-abcde
    namespace: shop
    ownerReferences:
    - apiVersion: apps/v1
      blockOwnerDeletion: true
      controller: true
      kind: ReplicaSet
      name: web-7d9f8
      uid: 11111111-2222-3333-4444-555555555555
    uid: 99999999-0000-4000-8000-000000000002
  spec:
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - key: topology.kubernetes.io/zone
              operator: In
              values: [eu-west-1a, eu-west-1b]
            - key: cores
              operator: Gt
              values: ["2"]
            matchFields:
            - key: metadata.name
              operator: NotIn
              values: [bad-node]
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector:
            matchLabels: {app: web}
          matchLabelKeys: [pod-template-hash]
          topologyKey: kubernetes.io/hostname
    containers:
    - image: nginx:1.27
      name: web
      ports:
      - containerPort: 8080
        hostPort: 8080
        protocol: TCP
      - containerPort: 9090
        name: metrics
      resources:
        requests:
          cpu: 250m
          memory: 256Mi
    - image: envoy
      name: proxy
      resources:
        limits:
          cpu: 100m
          memory: 64Mi
    initContainers:
    - name: log-shipper
      image: fluent-bit
      restartPolicy: Always
      resources:
        requests: {cpu: 50m, memory: 32Mi}
    - name: migrate
      image: migrate
      resources:
        requests: {cpu: "1", memory: 128Mi}
    nodeName: ip-10-0-1-12
    nodeSelector:
      kubernetes.io/os: linux
    priority: 1000
    priorityClassName: shop-high
    restartPolicy: Always
    schedulerName: default-scheduler
    terminationGracePeriodSeconds: 30
    tolerations:
    - effect: NoExecute
      key: node.kubernetes.io/not-ready
      operator: Exists
      tolerationSeconds: 300
    - key: dedicated
      operator: Equal
      value: batch
    topologySpreadConstraints:
    - labelSelector:
        matchExpressions:
        - {key: app, operator: In, values: [web]}
      matchLabelKeys: [pod-template-hash]
      maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
    volumes:
    - name: cache
      emptyDir: {medium: Memory}
    - name: data
      persistentVolumeClaim: {claimName: web-data}
    - name: host
      hostPath: {path: /var/log}
    - name: token
      projected: {sources: []}
  status:
    conditions:
    - lastTransitionTime: "2024-05-01T11:00:05Z"
      status: "True"
      type: PodScheduled
    phase: Running
    qosClass: Burstable
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  maxUnavailable: 25%
  selector: {matchLabels: {app: web}}
status:
  disruptionsAllowed: 1
  currentHealthy: 4
  desiredHealthy: 3
  expectedPods: 4
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}]}
"#;

fn parse(text: &str) -> Vec<K8sObject> {
    match parse_objects_yaml(text, "dump.yaml") {
        Ok(parsed) => parsed.objects,
        Err(e) => panic!("{e}"),
    }
}

fn parse_err(text: &str) -> ObjectsError {
    match parse_objects_yaml(text, "bad.yaml") {
        Ok(parsed) => panic!("expected an error, got {:?}", parsed.objects),
        Err(e) => e,
    }
}

#[test]
fn a_cluster_dump_converts_and_unused_kinds_are_reported() {
    let parsed = parse_objects_yaml(DUMP, "dump.yaml").unwrap();
    assert_eq!(parsed.objects.len(), 3);
    assert_eq!(parsed.warnings.len(), 1);
    assert!(
        parsed.warnings[0].contains("Service shop/web"),
        "{:?}",
        parsed.warnings
    );
}

#[test]
fn node_fields() {
    let objects = parse(DUMP);
    let K8sObject::Node(node) = &objects[0] else {
        panic!("expected a node")
    };
    assert_eq!(node.name, "ip-10-0-1-12");
    assert_eq!(node.provider_id, "aws:///eu-west-1a/i-0abc");
    assert_eq!(node.allocatable.cpu_milli, 3920);
    assert_eq!(node.allocatable.memory, 15_252_428 * 1024);
    assert_eq!(node.allocatable.pods, 58);
    assert_eq!(node.capacity.cpu_milli, 4000);
    assert_eq!(node.taints.len(), 1);
    assert_eq!(node.taints[0].effect, TaintEffect::NoSchedule);
    assert_eq!(node.taints[0].value, "batch");
    assert_eq!(node.conditions.ready, Some(ConditionStatus::True));
    assert!(!node.conditions.disk_pressure);
    assert!(node.is_ready());
    // The latest transition among the readiness conditions: Ready at 10:01.
    assert_eq!(
        node.conditions.last_transition.map(|t| t.secs()),
        Some(1_714_557_660)
    );
    assert_eq!(node.creation_time.secs(), 1_714_557_600);
    assert_eq!(
        node.label("topology.kubernetes.io/zone"),
        Some("eu-west-1a")
    );
}

#[test]
fn pod_fields() {
    let objects = parse(DUMP);
    let K8sObject::Pod(pod) = &objects[1] else {
        panic!("expected a pod")
    };
    assert_eq!(pod.key(), "shop/web-7d9f8-abcde");
    assert_eq!(pod.priority, Some(1000));
    assert_eq!(pod.phase, PodPhase::Running);
    assert_eq!(pod.node_name.as_deref(), Some("ip-10-0-1-12"));
    assert_eq!(
        pod.controller().map(|o| o.kind.as_str()),
        Some("ReplicaSet")
    );
    // Running: 250m + 100m (limit defaulted into request) + 50m sidecar = 400m; init peak:
    // 1000m + 50m sidecar = 1050m. Memory: 256+64+32 = 352Mi running, 128+32 = 160Mi init.
    assert_eq!(pod.requests.cpu_milli, 1050);
    assert_eq!(pod.requests.memory, 352 << 20);
    assert_eq!(pod.host_ports.len(), 1);
    assert_eq!(pod.host_ports[0].port, 8080);
    assert_eq!(pod.host_ports[0].protocol, Protocol::Tcp);
    assert_eq!(
        pod.node_selector
            .get("kubernetes.io/os")
            .map(String::as_str),
        Some("linux")
    );
    let affinity = pod.required_node_affinity.as_ref().unwrap();
    assert_eq!(
        affinity.terms[0].match_expressions[1].operator,
        NodeOperator::Gt
    );
    assert_eq!(
        affinity.terms[0].match_fields[0].operator,
        NodeOperator::NotIn
    );
    // matchLabelKeys became `pod-template-hash In [7d9f8]`.
    let anti = &pod.pod_anti_affinity[0];
    let selector = anti.label_selector.as_ref().unwrap();
    assert!(
        selector
            .match_expressions
            .iter()
            .any(|r| r.key == "pod-template-hash"
                && r.operator == LabelOperator::In
                && r.values == ["7d9f8"])
    );
    assert_eq!(pod.tolerations.len(), 2);
    assert_eq!(pod.tolerations[0].operator, TolerationOperator::Exists);
    assert_eq!(pod.tolerations[0].effect, Some(TaintEffect::NoExecute));
    let spread = &pod.topology_spread[0];
    assert_eq!(spread.node_affinity_policy, NodeInclusionPolicy::Honor);
    assert_eq!(spread.node_taints_policy, NodeInclusionPolicy::Ignore);
    assert_eq!(
        spread
            .label_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .len(),
        2
    );
    assert_eq!(
        pod.volumes[0].source,
        VolumeSource::EmptyDir {
            memory_medium: true
        }
    );
    assert_eq!(
        pod.volumes[1].source,
        VolumeSource::PersistentVolumeClaim {
            claim_name: "web-data".into()
        }
    );
    assert_eq!(pod.volumes[2].source, VolumeSource::HostPath);
    assert_eq!(pod.volumes[3].source, VolumeSource::Other);
    assert_eq!(
        pod.scheduled_condition.as_ref().unwrap().status,
        ConditionStatus::True
    );
    assert_eq!(pod.termination_grace_seconds, Some(30));
}

#[test]
fn pdb_fields() {
    let objects = parse(DUMP);
    let K8sObject::PodDisruptionBudget(pdb) = &objects[2] else {
        panic!("expected a PDB")
    };
    assert_eq!(pdb.max_unavailable, Some(IntOrPercent::Percent(25)));
    assert_eq!(pdb.disruptions_allowed, Some(1));
    assert!(pdb.selector.is_some());
}

#[test]
fn priority_comes_from_the_named_class_or_the_global_default() {
    let text = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch-low}
value: -100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: everyone}
value: 50
globalDefault: true
---
apiVersion: v1
kind: Pod
metadata: {name: a}
spec: {priorityClassName: batch-low, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec: {containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: c}
spec: {priorityClassName: system-node-critical, containers: [{name: c}]}
"#;
    let priorities: Vec<Option<i32>> = parse(text)
        .into_iter()
        .filter_map(|o| match o {
            K8sObject::Pod(p) => Some(p.priority),
            _ => None,
        })
        .collect();
    assert_eq!(priorities, [Some(-100), Some(50), Some(2_000_001_000)]);
    let no_default = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n";
    let K8sObject::Pod(pod) = &parse(no_default)[0] else {
        panic!()
    };
    assert_eq!(pod.priority, None);
    assert_eq!(pod.namespace, "default");
    assert_eq!(pod.scheduler_name, "default-scheduler");
}

#[test]
fn daemonset_template_becomes_an_owned_pod() {
    let text = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-exporter, namespace: monitoring, uid: ds-1}
spec:
  selector: {matchLabels: {app: node-exporter}}
  template:
    metadata: {labels: {app: node-exporter}}
    spec:
      containers:
      - name: exporter
        resources: {requests: {cpu: 100m, memory: 50Mi}}
      tolerations: [{operator: Exists}]
"#;
    let K8sObject::DaemonSet(ds) = &parse(text)[0] else {
        panic!("expected a DaemonSet")
    };
    assert_eq!(ds.pod_template.requests.cpu_milli, 100);
    assert_eq!(ds.pod_template.namespace, "monitoring");
    assert!(ds.pod_template.is_daemonset_pod());
}

#[test]
fn typed_lists_give_their_items_a_kind() {
    let text =
        "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n";
    let names: Vec<String> = parse(text)
        .into_iter()
        .map(|o| match o {
            K8sObject::Node(n) => n.name,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn bad_quantity_names_object_field_value_and_line() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  containers:\n  - name: a\n  - name: b\n    resources:\n      requests:\n        cpu: 100m\n        memory: 12QQ\n";
    let e = parse_err(text);
    assert_eq!(e.field, "spec.containers[1].resources.requests.memory");
    assert_eq!(e.line, Some(11));
    assert!(e.message.contains("Pod shop/web"), "{e}");
    assert!(e.message.contains("12QQ"), "{e}");
    assert!(e.to_string().starts_with("bad.yaml:11: "), "{e}");
}

#[test]
fn bad_quantity_in_a_later_document_counts_lines_from_the_file_start() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  allocatable:\n    cpu: lots\n";
    let e = parse_err(text);
    assert_eq!(e.line, Some(10));
    assert_eq!(e.field, "status.allocatable.cpu");
    assert!(
        e.message.contains("Node n") && e.message.contains("lots"),
        "{e}"
    );
}

#[test]
fn bad_taint_effect() {
    let text = "kind: NodeList\napiVersion: v1\nitems:\n- metadata: {name: ok}\n- metadata: {name: n2}\n  spec:\n    taints:\n    - {key: a, effect: NoScheduleX}\n";
    let e = parse_err(text);
    assert_eq!(e.field, "items[1].spec.taints[0].effect");
    assert_eq!(e.line, Some(8));
    assert!(
        e.message.contains("Node n2") && e.message.contains("NoScheduleX"),
        "{e}"
    );
}

#[test]
fn bad_operators() {
    let node_affinity = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: a, operator: Near}]\n";
    let e = parse_err(node_affinity);
    assert!(
        e.field
            .ends_with("nodeSelectorTerms[0].matchExpressions[0].operator"),
        "{e}"
    );
    assert!(e.message.contains("Near"));
    let selector = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p}\nspec:\n  selector: {matchExpressions: [{key: a, operator: Gt, values: ['1']}]}\n";
    let e = parse_err(selector);
    assert_eq!(e.field, "spec.selector.matchExpressions[0].operator");
    let toleration = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n  tolerations: [{key: a, operator: Maybe}]\n";
    let e = parse_err(toleration);
    assert_eq!(e.field, "spec.tolerations[0].operator");
    assert_eq!(e.line, Some(6));
}

#[test]
fn bad_ports() {
    for (port, field) in [
        ("hostPort: 70000, containerPort: 80", "hostPort"),
        ("hostPort: -1, containerPort: 80", "hostPort"),
        ("containerPort: 0", "containerPort"),
    ] {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    ports: [{{{port}}}]\n"
        );
        let e = parse_err(&text);
        assert_eq!(e.field, format!("spec.containers[0].ports[0].{field}"));
        assert_eq!(e.line, Some(7));
    }
}

#[test]
fn wrong_types_and_syntax_errors_carry_the_line() {
    let e =
        parse_err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: {a: [}\n");
    assert_eq!(e.line, Some(5), "{e}");
    let e = parse_err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: 5\n");
    assert_eq!(e.field, "spec.containers");
    assert_eq!(e.line, Some(5), "{e}");
    let e = parse_err("apiVersion: v1\nmetadata: {name: p}\n");
    assert!(e.message.contains("kind"));
    let e =
        parse_err("apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: p}\n");
    assert!(e.message.contains("policy/v1beta1"), "{e}");
}

#[test]
fn unknown_priority_class_is_an_error() {
    let e = parse_err(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priorityClassName: nope, containers: []}\n",
    );
    assert_eq!(e.field, "spec.priorityClassName");
    assert!(e.message.contains("nope"));
}

#[test]
fn negative_quantities_are_refused_naming_the_field() {
    let e = parse_err(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    resources:\n      requests: {cpu: -100m}\n",
    );
    assert_eq!(e.field, "spec.containers[0].resources.requests.cpu");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("must not be negative"), "{e}");
    assert!(e.message.contains("-100m"), "{e}");
    let e = parse_err(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  capacity: {cpu: \"4\", memory: -1Gi}\n",
    );
    assert_eq!(e.field, "status.capacity.memory");
    assert!(e.message.contains("Node n"), "{e}");
}

#[test]
fn unknown_fields_are_refused_as_kubectl_validate_strict_does() {
    let e = parse_err(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelektor: {disk: ssd}\n  containers: [{name: a}]\n",
    );
    assert_eq!(e.field, "spec.nodeSelektor");
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.message.contains("unknown field `nodeSelektor`"), "{e}");
    let e = parse_err(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p, namespace: a}\nspec: {minAvailabel: 1}\n",
    );
    assert_eq!(e.field, "spec.minAvailabel");
}

/// When the priority classes cannot be read (docs/behaviour.md LOOP-123), a class name not known
/// is no error: the pod takes the global default, or no priority.
#[test]
fn an_unknown_priority_class_is_no_error_when_the_classes_cannot_be_read() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"priorityClassName": "team-high", "containers": []}
    }))
    .unwrap();
    let known = ferroscale_objects::PriorityClasses::default();
    assert!(ferroscale_objects::pod_from_k8s(&pod, &known).is_err());
    let unreadable = known.incomplete();
    let converted = ferroscale_objects::pod_from_k8s(&pod, &unreadable).unwrap();
    assert_eq!(converted.priority, None);
    // The built-in classes are still known.
    let mut critical = pod.clone();
    critical.spec.as_mut().unwrap().priority_class_name = Some("system-node-critical".into());
    let converted = ferroscale_objects::pod_from_k8s(&critical, &unreadable).unwrap();
    assert_eq!(converted.priority, Some(2_000_001_000));
}
