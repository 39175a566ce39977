//! Talking to peers built on the schema of upstream 1.34.x and older (docs/externalgrpc.md
//! GRPC-34).
//!
//! Those peers put templates, option durations, pricing times and the priced pod in fields that
//! the current schema no longer declares; this crate keeps them as `legacy_*` fields. The readers
//! here take the current field and fall back to the legacy one; the `with_legacy_fields` builders
//! fill the legacy fields from the current ones, which current Go peers skip as unknown. None of
//! this is needed to talk to peers of upstream 1.35 or later.

use prost_types::{Duration, Timestamp};

use crate::v1::{
    LegacyKubernetesDuration, LegacyKubernetesTime, NodeGroupAutoscalingOptions,
    NodeGroupTemplateNodeInfoResponse, PricingNodePriceRequest, PricingPodPriceRequest,
};

const NANOS_PER_SECOND: i64 = 1_000_000_000;

impl NodeGroupTemplateNodeInfoResponse {
    /// The template node's bytes: `nodeBytes`, or else the legacy `nodeInfo` (the same bytes on
    /// the wire). Empty when the server sent neither, which means "no template".
    pub fn template_node_bytes(&self) -> &[u8] {
        if self.node_bytes.is_empty() {
            &self.legacy_node_info
        } else {
            &self.node_bytes
        }
    }

    /// The same template also in the legacy field, for clients of upstream 1.34.x and older. It
    /// doubles the size of the answer.
    pub fn with_legacy_fields(mut self) -> NodeGroupTemplateNodeInfoResponse {
        self.legacy_node_info = self.node_bytes.clone();
        self
    }
}

impl NodeGroupAutoscalingOptions {
    /// `scaleDownUnneededDuration`, or else the legacy `scaleDownUnneededTime`.
    pub fn scale_down_unneeded_or_legacy(&self) -> Option<Duration> {
        current_or_legacy(
            self.scale_down_unneeded_duration,
            self.legacy_scale_down_unneeded_time,
        )
    }

    /// `scaleDownUnreadyDuration`, or else the legacy `scaleDownUnreadyTime`.
    pub fn scale_down_unready_or_legacy(&self) -> Option<Duration> {
        current_or_legacy(
            self.scale_down_unready_duration,
            self.legacy_scale_down_unready_time,
        )
    }

    /// `MaxNodeProvisionDuration`, or else the legacy `MaxNodeProvisionTime`.
    pub fn max_node_provision_or_legacy(&self) -> Option<Duration> {
        current_or_legacy(
            self.max_node_provision_duration,
            self.legacy_max_node_provision_time,
        )
    }

    /// The three durations also in their legacy fields (nanoseconds), for clients of upstream
    /// 1.34.x and older.
    pub fn with_legacy_fields(mut self) -> NodeGroupAutoscalingOptions {
        self.legacy_scale_down_unneeded_time =
            self.scale_down_unneeded_duration.map(legacy_duration);
        self.legacy_scale_down_unready_time = self.scale_down_unready_duration.map(legacy_duration);
        self.legacy_max_node_provision_time = self.max_node_provision_duration.map(legacy_duration);
        self
    }
}

impl PricingNodePriceRequest {
    /// `startTimestamp`, or else the legacy `startTime`.
    pub fn start_or_legacy(&self) -> Option<Timestamp> {
        self.start_timestamp
            .or(self.legacy_start_time.map(timestamp))
    }

    /// `endTimestamp`, or else the legacy `endTime`.
    pub fn end_or_legacy(&self) -> Option<Timestamp> {
        self.end_timestamp.or(self.legacy_end_time.map(timestamp))
    }

    /// Both times also in their legacy fields, for servers of upstream 1.34.x and older.
    pub fn with_legacy_fields(mut self) -> PricingNodePriceRequest {
        self.legacy_start_time = self.start_timestamp.map(legacy_time);
        self.legacy_end_time = self.end_timestamp.map(legacy_time);
        self
    }
}

impl PricingPodPriceRequest {
    /// The pod's bytes: `pod_bytes`, or else the legacy `pod` (the same bytes on the wire).
    pub fn pod_bytes_or_legacy(&self) -> &[u8] {
        if self.pod_bytes.is_empty() {
            &self.legacy_pod
        } else {
            &self.pod_bytes
        }
    }

    /// `startTimestamp`, or else the legacy `startTime`.
    pub fn start_or_legacy(&self) -> Option<Timestamp> {
        self.start_timestamp
            .or(self.legacy_start_time.map(timestamp))
    }

    /// `endTimestamp`, or else the legacy `endTime`.
    pub fn end_or_legacy(&self) -> Option<Timestamp> {
        self.end_timestamp.or(self.legacy_end_time.map(timestamp))
    }

    /// The pod and both times also in their legacy fields, for servers of upstream 1.34.x and
    /// older. It doubles the size of the pod on the wire.
    pub fn with_legacy_fields(mut self) -> PricingPodPriceRequest {
        self.legacy_pod = self.pod_bytes.clone();
        self.legacy_start_time = self.start_timestamp.map(legacy_time);
        self.legacy_end_time = self.end_timestamp.map(legacy_time);
        self
    }
}

fn current_or_legacy(
    current: Option<Duration>,
    legacy: Option<LegacyKubernetesDuration>,
) -> Option<Duration> {
    current.or_else(|| {
        legacy.map(|legacy| Duration {
            // Truncating division keeps seconds and nanos of the same sign, as Duration requires.
            seconds: legacy.duration / NANOS_PER_SECOND,
            nanos: (legacy.duration % NANOS_PER_SECOND) as i32,
        })
    })
}

/// Saturates instead of overflowing: a duration beyond ±292 years means "forever" either way.
fn legacy_duration(duration: Duration) -> LegacyKubernetesDuration {
    let nanos =
        i128::from(duration.seconds) * i128::from(NANOS_PER_SECOND) + i128::from(duration.nanos);
    LegacyKubernetesDuration {
        duration: nanos.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
    }
}

fn timestamp(time: LegacyKubernetesTime) -> Timestamp {
    Timestamp {
        seconds: time.seconds,
        nanos: time.nanos,
    }
}

/// Old servers read whole seconds, as meta/v1 `Time` does.
fn legacy_time(time: Timestamp) -> LegacyKubernetesTime {
    LegacyKubernetesTime {
        seconds: time.seconds,
        nanos: 0,
    }
}
