//! The protobuf test vectors of docs/externalgrpc.md (GRPC-33): every message decodes from the
//! bytes a Go peer sends, and encodes to exactly those bytes where the encoding is canonical.

use ferroscale_externalgrpc_proto::v1::instance_status::InstanceState;
use ferroscale_externalgrpc_proto::v1::{
    GetAvailableGpuTypesResponse, Instance, InstanceErrorInfo, InstanceStatus, NodeGroup,
    NodeGroupAutoscalingOptions, NodeGroupDecreaseTargetSizeRequest, NodeGroupForNodeResponse,
    NodeGroupIncreaseSizeRequest,
};
use ferroscale_externalgrpc_proto::{encode_node, encode_pod};
use ferroscale_model::{Node, Pod, Resources};
use prost::Message;
use prost_types::Duration;

fn hex(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .map(|byte| u8::from_str_radix(byte, 16).expect("test vector is hex"))
        .collect()
}

/// Decodes the vector into `expected`'s type and checks both directions.
fn assert_exact<M: Message + Default + PartialEq + std::fmt::Debug>(vector: &str, expected: M) {
    let bytes = hex(vector);
    assert_eq!(
        M::decode(bytes.as_slice()).unwrap(),
        expected,
        "decoding {vector}"
    );
    assert_eq!(expected.encode_to_vec(), bytes, "encoding {expected:?}");
}

#[test]
fn node_outside_every_group_is_an_empty_group_0a00() {
    let answer = NodeGroupForNodeResponse::not_autoscaled();
    assert_exact("0a 00", answer.clone());
    assert!(answer.owning_group().is_none());
}

#[test]
fn absent_group_also_means_not_autoscaled() {
    let answer = NodeGroupForNodeResponse::decode(&[][..]).unwrap();
    assert_eq!(answer.node_group, None);
    assert!(answer.owning_group().is_none());
    assert!(
        NodeGroupForNodeResponse::default()
            .encode_to_vec()
            .is_empty()
    );
}

#[test]
fn node_group_fields_and_numbers() {
    let group = NodeGroup {
        id: "ng-1".to_string(),
        min_size: 1,
        max_size: 10,
        debug: String::new(),
    };
    assert_exact("0a 04 6e 67 2d 31 10 01 18 0a", group.clone());
    let owned = NodeGroupForNodeResponse {
        node_group: Some(group.clone()),
    };
    assert_eq!(owned.owning_group(), Some(&group));
}

#[test]
fn increase_size_puts_delta_before_id() {
    assert_exact(
        "08 03 12 04 6e 67 2d 31",
        NodeGroupIncreaseSizeRequest {
            delta: 3,
            id: "ng-1".to_string(),
        },
    );
}

#[test]
fn negative_decrease_delta_is_a_ten_byte_varint() {
    assert_exact(
        "08 fe ff ff ff ff ff ff ff ff 01 12 04 6e 67 2d 31",
        NodeGroupDecreaseTargetSizeRequest {
            delta: -2,
            id: "ng-1".to_string(),
        },
    );
}

#[test]
fn gpu_types_from_a_go_server_are_read_as_a_set_of_names() {
    // Go writes the empty Any value explicitly (`12 00`).
    let go_bytes = hex("0a 13 0a 0f 6e 76 69 64 69 61 2d 74 65 73 6c 61 2d 74 34 12 00");
    let answer = GetAvailableGpuTypesResponse::decode(go_bytes.as_slice()).unwrap();
    assert_eq!(
        answer.type_names().collect::<Vec<_>>(),
        vec!["nvidia-tesla-t4"]
    );
    assert_eq!(
        answer,
        GetAvailableGpuTypesResponse::from_type_names(["nvidia-tesla-t4"])
    );
}

#[test]
fn gpu_types_we_send_carry_the_same_names() {
    let ours = GetAvailableGpuTypesResponse::from_type_names(["nvidia-tesla-t4", "nvidia-a100"]);
    let bytes = ours.encode_to_vec();
    let read = GetAvailableGpuTypesResponse::decode(bytes.as_slice()).unwrap();
    assert_eq!(
        read.type_names().collect::<Vec<_>>(),
        vec!["nvidia-a100", "nvidia-tesla-t4"]
    );
    // prost leaves the empty value out of the map entry; Go reads that as an empty Any too.
    let single = GetAvailableGpuTypesResponse::from_type_names(["nvidia-tesla-t4"]).encode_to_vec();
    assert_eq!(
        single,
        hex("0a 11 0a 0f 6e 76 69 64 69 61 2d 74 65 73 6c 61 2d 74 34")
    );
}

#[test]
fn instance_with_status_and_error_info() {
    assert_exact(
        "0a 15 61 77 73 3a 2f 2f 2f 75 73 2d 65 61 73 74 2d 31 61 2f 69 2d 31 \
         12 0d 08 02 12 09 0a 05 51 55 4f 54 41 18 01",
        Instance {
            id: "aws:///us-east-1a/i-1".to_string(),
            status: Some(InstanceStatus {
                instance_state: InstanceState::InstanceCreating as i32,
                error_info: Some(InstanceErrorInfo {
                    error_code: "QUOTA".to_string(),
                    error_message: String::new(),
                    instance_error_class: 1,
                }),
            }),
        },
    );
}

#[test]
fn autoscaling_options_with_upstream_defaults() {
    let seconds = |seconds| Some(Duration { seconds, nanos: 0 });
    assert_exact(
        "09 00 00 00 00 00 00 e0 3f 11 00 00 00 00 00 00 e0 3f \
         42 03 08 d8 04 4a 03 08 b0 09 52 03 08 84 07",
        NodeGroupAutoscalingOptions {
            scale_down_utilization_threshold: 0.5,
            scale_down_gpu_utilization_threshold: 0.5,
            zero_or_max_node_scaling: false,
            ignore_daemon_sets_utilization: false,
            scale_down_unneeded_duration: seconds(600),
            scale_down_unready_duration: seconds(1200),
            max_node_provision_duration: seconds(900),
            ..NodeGroupAutoscalingOptions::default()
        },
    );
}

#[test]
fn kubernetes_bytes_start_with_metadata_never_the_runtime_magic() {
    let nodes = [
        Node::default(),
        Node::new("n1", Resources::new(4000, 16 << 30)),
    ];
    for node in &nodes {
        let bytes = encode_node(node);
        assert_eq!(bytes.first(), Some(&0x0a), "{node:?}");
        assert!(!bytes.starts_with(b"k8s\0"));
    }
    let pods = [Pod::default(), Pod::new("default", "web-0")];
    for pod in &pods {
        assert_eq!(encode_pod(pod).first(), Some(&0x0a), "{pod:?}");
    }
}
