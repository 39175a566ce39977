//! Peers built on the schema of upstream 1.34.x and older (docs/externalgrpc.md GRPC-34): what they
//! send is read through the fallbacks, and what the `with_legacy_fields` builders send is what they
//! read.
//!
//! The old peers are played by messages declared here with the old field numbers only, so the
//! tests do not depend on how this crate names its legacy fields.

use ferroscale_externalgrpc_proto::v1::{
    NodeGroupAutoscalingOptions, NodeGroupTemplateNodeInfoResponse, PricingNodePriceRequest,
    PricingPodPriceRequest,
};
use ferroscale_externalgrpc_proto::{decode_node, decode_pod, encode_node, encode_pod};
use ferroscale_model::{Node, Pod, Resources};
use prost::Message;
use prost_types::{Duration, Timestamp};

/// meta/v1 `Time`.
#[derive(Clone, Copy, PartialEq, Message)]
struct OldTime {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// meta/v1 `Duration`, in nanoseconds.
#[derive(Clone, Copy, PartialEq, Message)]
struct OldDuration {
    #[prost(int64, tag = "1")]
    duration: i64,
}

/// The old template answer: the Node embedded as field 1.
#[derive(Clone, PartialEq, Message)]
struct OldTemplateResponse {
    #[prost(bytes = "vec", tag = "1")]
    node_info: Vec<u8>,
}

/// The old options: the three durations as meta/v1 `Duration` in fields 3 to 5.
#[derive(Clone, PartialEq, Message)]
struct OldOptions {
    #[prost(double, tag = "1")]
    scale_down_utilization_threshold: f64,
    #[prost(message, optional, tag = "3")]
    scale_down_unneeded_time: Option<OldDuration>,
    #[prost(message, optional, tag = "4")]
    scale_down_unready_time: Option<OldDuration>,
    #[prost(message, optional, tag = "5")]
    max_node_provision_time: Option<OldDuration>,
}

/// The old pod-pricing request: the Pod embedded as field 1, times in fields 2 and 3.
#[derive(Clone, PartialEq, Message)]
struct OldPodPriceRequest {
    #[prost(bytes = "vec", tag = "1")]
    pod: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    start_time: Option<OldTime>,
    #[prost(message, optional, tag = "3")]
    end_time: Option<OldTime>,
}

/// The old node-pricing request: times in fields 2 and 3.
#[derive(Clone, PartialEq, Message)]
struct OldNodePriceRequest {
    #[prost(message, optional, tag = "2")]
    start_time: Option<OldTime>,
    #[prost(message, optional, tag = "3")]
    end_time: Option<OldTime>,
}

fn node() -> Node {
    Node::new("template-ng-1", Resources::new(2000, 8 << 30))
}

#[test]
fn template_answer_carrying_only_field_1_still_yields_the_node() {
    let old_answer = OldTemplateResponse {
        node_info: encode_node(&node()),
    }
    .encode_to_vec();
    let answer = NodeGroupTemplateNodeInfoResponse::decode(old_answer.as_slice()).unwrap();
    assert!(answer.node_bytes.is_empty());
    assert_eq!(decode_node(answer.template_node_bytes()).unwrap(), node());
}

#[test]
fn the_current_template_field_wins_over_the_legacy_one() {
    let current = Node::new("current", Resources::new(1000, 1 << 30));
    let answer = NodeGroupTemplateNodeInfoResponse {
        legacy_node_info: encode_node(&node()),
        node_bytes: encode_node(&current),
        ..Default::default()
    };
    assert_eq!(decode_node(answer.template_node_bytes()).unwrap(), current);
    assert!(
        NodeGroupTemplateNodeInfoResponse::default()
            .template_node_bytes()
            .is_empty()
    );
}

#[test]
fn an_old_client_reads_the_template_a_server_fills_for_it() {
    let answer = NodeGroupTemplateNodeInfoResponse {
        node_bytes: encode_node(&node()),
        ..Default::default()
    }
    .with_legacy_fields();
    let old = OldTemplateResponse::decode(answer.encode_to_vec().as_slice()).unwrap();
    assert_eq!(decode_node(&old.node_info).unwrap(), node());
}

#[test]
fn old_option_durations_are_read_as_fallbacks() {
    let old = OldOptions {
        scale_down_utilization_threshold: 0.5,
        scale_down_unneeded_time: Some(OldDuration {
            duration: 600_000_000_000,
        }),
        scale_down_unready_time: Some(OldDuration {
            duration: 1_500_000_000,
        }),
        max_node_provision_time: None,
    }
    .encode_to_vec();
    let options = NodeGroupAutoscalingOptions::decode(old.as_slice()).unwrap();
    assert_eq!(options.scale_down_unneeded_duration, None);
    assert_eq!(
        options.scale_down_unneeded_or_legacy(),
        Some(Duration {
            seconds: 600,
            nanos: 0
        })
    );
    assert_eq!(
        options.scale_down_unready_or_legacy(),
        Some(Duration {
            seconds: 1,
            nanos: 500_000_000
        })
    );
    assert_eq!(options.max_node_provision_or_legacy(), None);
}

#[test]
fn current_option_durations_win_and_old_clients_read_the_filled_ones() {
    let options = NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.6,
        scale_down_unneeded_duration: Some(Duration {
            seconds: 300,
            nanos: 0,
        }),
        scale_down_unready_duration: Some(Duration {
            seconds: 1200,
            nanos: 0,
        }),
        max_node_provision_duration: Some(Duration {
            seconds: 900,
            nanos: 250,
        }),
        ..Default::default()
    }
    .with_legacy_fields();
    assert_eq!(
        options.scale_down_unneeded_or_legacy(),
        options.scale_down_unneeded_duration
    );
    let old = OldOptions::decode(options.encode_to_vec().as_slice()).unwrap();
    assert_eq!(old.scale_down_utilization_threshold, 0.6);
    assert_eq!(
        old.scale_down_unneeded_time.map(|d| d.duration),
        Some(300_000_000_000)
    );
    assert_eq!(
        old.scale_down_unready_time.map(|d| d.duration),
        Some(1_200_000_000_000)
    );
    assert_eq!(
        old.max_node_provision_time.map(|d| d.duration),
        Some(900_000_000_250)
    );
}

#[test]
fn old_pod_pricing_request_is_read_as_a_fallback() {
    let pod = Pod::new("default", "web-0");
    let old = OldPodPriceRequest {
        pod: encode_pod(&pod),
        start_time: Some(OldTime {
            seconds: 1_714_557_600,
            nanos: 0,
        }),
        end_time: Some(OldTime {
            seconds: 1_714_561_200,
            nanos: 0,
        }),
    }
    .encode_to_vec();
    let request = PricingPodPriceRequest::decode(old.as_slice()).unwrap();
    assert_eq!(decode_pod(request.pod_bytes_or_legacy()).unwrap(), pod);
    assert_eq!(
        request.start_or_legacy(),
        Some(Timestamp {
            seconds: 1_714_557_600,
            nanos: 0
        })
    );
    assert_eq!(
        request.end_or_legacy().map(|t| t.seconds),
        Some(1_714_561_200)
    );
}

#[test]
fn an_old_server_reads_the_pricing_requests_a_client_fills_for_it() {
    let start = Timestamp {
        seconds: 1_714_557_600,
        nanos: 999,
    };
    let end = Timestamp {
        seconds: 1_714_561_200,
        nanos: 0,
    };
    let pod = Pod::new("default", "web-0");
    let request = PricingPodPriceRequest {
        pod_bytes: encode_pod(&pod),
        start_timestamp: Some(start),
        end_timestamp: Some(end),
        ..Default::default()
    }
    .with_legacy_fields();
    let old = OldPodPriceRequest::decode(request.encode_to_vec().as_slice()).unwrap();
    assert_eq!(decode_pod(&old.pod).unwrap(), pod);
    // Old servers read whole seconds.
    assert_eq!(
        old.start_time,
        Some(OldTime {
            seconds: start.seconds,
            nanos: 0
        })
    );

    let node_request = PricingNodePriceRequest {
        start_timestamp: Some(start),
        end_timestamp: Some(end),
        ..Default::default()
    }
    .with_legacy_fields();
    let old = OldNodePriceRequest::decode(node_request.encode_to_vec().as_slice()).unwrap();
    assert_eq!(old.end_time.map(|t| t.seconds), Some(end.seconds));
    assert_eq!(node_request.start_or_legacy(), Some(start));
}
