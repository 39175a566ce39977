//! The content of the `cluster-autoscaler-status` ConfigMap (docs/behaviour.md ST-101): a
//! structured report built from the cluster-state report, the backoff state and the scale-down
//! candidates, rendered as the YAML upstream writes into `data.status`.
//!
//! Every condition carries a probe time (this loop) and a transition time that only moves when the
//! condition's status value changes, so [`StatusReport::build`] takes the previous report.

use std::collections::BTreeMap;

use ferroscale_model::Timestamp;
use serde::{Serialize, Serializer};

use super::{ClusterStateReport, GroupState, ReadinessCounts};
use crate::backoff::NodeGroupBackoff;

/// `autoscalerStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum AutoscalerStatus {
    Running,
    /// Also the status of an empty report, before any loop ran.
    #[default]
    Initializing,
}

/// `health.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum HealthStatus {
    #[default]
    Healthy,
    Unhealthy,
}

/// `scaleUp.status`, in precedence order for a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ScaleUpStatus {
    InProgress,
    Unhealthy,
    Backoff,
    #[default]
    NoActivity,
}

/// `scaleDown.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ScaleDownStatus {
    CandidatesPresent,
    #[default]
    NoCandidates,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnreadyCounts {
    pub total: usize,
    pub resource_unready: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisteredCounts {
    pub total: usize,
    pub ready: usize,
    pub not_started: usize,
    pub suspended: usize,
    pub being_deleted: usize,
    pub unready: UnreadyCounts,
}

/// `nodeCounts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    pub registered: RegisteredCounts,
    pub long_unregistered: usize,
    pub unregistered: usize,
}

impl From<&ReadinessCounts> for NodeCounts {
    fn from(c: &ReadinessCounts) -> Self {
        NodeCounts {
            registered: RegisteredCounts {
                total: c.registered,
                ready: c.ready,
                not_started: c.not_started,
                suspended: c.suspended,
                being_deleted: c.being_deleted,
                unready: UnreadyCounts {
                    total: c.unready,
                    resource_unready: c.resource_unready,
                },
            },
            long_unregistered: c.long_unregistered,
            unregistered: c.unregistered,
        }
    }
}

/// Probe and transition times of one condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionTimes {
    #[serde(serialize_with = "rfc3339")]
    pub last_probe_time: Timestamp,
    #[serde(serialize_with = "rfc3339")]
    pub last_transition_time: Timestamp,
}

impl ConditionTimes {
    /// The transition time is kept from `previous` when the status did not change.
    fn new<S: PartialEq>(
        now: Timestamp,
        status: &S,
        previous: Option<(&S, ConditionTimes)>,
    ) -> Self {
        let last_transition_time = match previous {
            Some((old, times)) if old == status => times.last_transition_time,
            _ => now,
        };
        ConditionTimes {
            last_probe_time: now,
            last_transition_time,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealth {
    pub status: HealthStatus,
    pub node_counts: NodeCounts,
    #[serde(flatten)]
    pub times: ConditionTimes,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupHealth {
    pub status: HealthStatus,
    pub node_counts: NodeCounts,
    pub cloud_provider_target: usize,
    pub min_size: usize,
    pub max_size: usize,
    #[serde(flatten)]
    pub times: ConditionTimes,
}

/// `backoffInfo`: the last error that backed the group off (message at most 500 characters).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackoffInfo {
    pub error_code: String,
    pub error_message: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUpCondition {
    pub status: ScaleUpStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_info: Option<BackoffInfo>,
    #[serde(flatten)]
    pub times: ConditionTimes,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDownCondition {
    pub status: ScaleDownStatus,
    pub candidates: usize,
    #[serde(flatten)]
    pub times: ConditionTimes,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterWideStatus {
    pub health: ClusterHealth,
    pub scale_up: ScaleUpCondition,
    pub scale_down: ScaleDownCondition,
    /// Ferroscale's addition: the kinds it runs without because its identity may not read them,
    /// and what it does without each (docs/behaviour.md LOOP-123). Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_permissions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupStatus {
    pub name: String,
    pub health: GroupHealth,
    pub scale_up: ScaleUpCondition,
    pub scale_down: ScaleDownCondition,
}

/// The whole `data.status` document.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    #[serde(serialize_with = "go_time")]
    pub time: Timestamp,
    pub autoscaler_status: AutoscalerStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub cluster_wide: ClusterWideStatus,
    pub node_groups: Vec<NodeGroupStatus>,
}

/// What [`StatusReport::build`] reads.
pub struct StatusInput<'a> {
    pub now: Timestamp,
    pub cluster_state: &'a ClusterStateReport,
    pub backoff: &'a NodeGroupBackoff,
    /// Unneeded (scale-down candidate) nodes per group id.
    pub scale_down_candidates: &'a BTreeMap<String, usize>,
    /// `Initializing` with this message when the cluster is not actionable (docs/behaviour.md
    /// LOOP-108).
    pub initializing: Option<String>,
    /// The kinds left out for want of permission (docs/behaviour.md LOOP-123).
    pub missing_permissions: &'a [String],
    /// The report written by the previous loop, for transition times.
    pub previous: Option<&'a StatusReport>,
}

impl StatusReport {
    pub fn build(input: StatusInput<'_>) -> StatusReport {
        let now = input.now;
        let previous = input.previous;
        let state = input.cluster_state;
        let node_groups: Vec<NodeGroupStatus> = state
            .groups
            .iter()
            .map(|group| {
                let old =
                    previous.and_then(|p| p.node_groups.iter().find(|g| g.name == group.group_id));
                group_status(group, &input, old)
            })
            .collect();

        let health_status = if state.cluster_healthy {
            HealthStatus::Healthy
        } else {
            HealthStatus::Unhealthy
        };
        let old_wide = previous.map(|p| &p.cluster_wide);
        let scale_up_status = if node_groups
            .iter()
            .any(|g| g.scale_up.status == ScaleUpStatus::InProgress)
        {
            ScaleUpStatus::InProgress
        } else {
            ScaleUpStatus::NoActivity
        };
        let candidates: usize = input.scale_down_candidates.values().sum();
        let scale_down_status = scale_down_status(candidates);
        let cluster_wide = ClusterWideStatus {
            health: ClusterHealth {
                status: health_status,
                node_counts: NodeCounts::from(&state.total),
                times: ConditionTimes::new(
                    now,
                    &health_status,
                    old_wide.map(|w| (&w.health.status, w.health.times)),
                ),
            },
            scale_up: ScaleUpCondition {
                status: scale_up_status,
                backoff_info: None,
                times: ConditionTimes::new(
                    now,
                    &scale_up_status,
                    old_wide.map(|w| (&w.scale_up.status, w.scale_up.times)),
                ),
            },
            scale_down: ScaleDownCondition {
                status: scale_down_status,
                candidates,
                times: ConditionTimes::new(
                    now,
                    &scale_down_status,
                    old_wide.map(|w| (&w.scale_down.status, w.scale_down.times)),
                ),
            },
            missing_permissions: input.missing_permissions.to_vec(),
        };
        StatusReport {
            time: now,
            autoscaler_status: if input.initializing.is_some() {
                AutoscalerStatus::Initializing
            } else {
                AutoscalerStatus::Running
            },
            message: input.initializing.clone(),
            cluster_wide,
            node_groups,
        }
    }

    pub fn group(&self, name: &str) -> Option<&NodeGroupStatus> {
        self.node_groups.iter().find(|g| g.name == name)
    }
}

fn scale_down_status(candidates: usize) -> ScaleDownStatus {
    if candidates > 0 {
        ScaleDownStatus::CandidatesPresent
    } else {
        ScaleDownStatus::NoCandidates
    }
}

fn group_status(
    group: &GroupState,
    input: &StatusInput<'_>,
    old: Option<&NodeGroupStatus>,
) -> NodeGroupStatus {
    let now = input.now;
    let health_status = if group.healthy {
        HealthStatus::Healthy
    } else {
        HealthStatus::Unhealthy
    };
    let active_backoff = input.backoff.active(&group.group_id, now);
    let scale_up_status = if group.scaling_up && group.upcoming > 0 {
        ScaleUpStatus::InProgress
    } else if !group.healthy {
        ScaleUpStatus::Unhealthy
    } else if active_backoff.is_some() {
        ScaleUpStatus::Backoff
    } else {
        ScaleUpStatus::NoActivity
    };
    let backoff_info = active_backoff
        .filter(|_| scale_up_status == ScaleUpStatus::Backoff)
        .map(|entry| BackoffInfo {
            error_code: entry.reason.code.clone(),
            error_message: entry.reason.message.clone(),
        });
    let candidates = input
        .scale_down_candidates
        .get(&group.group_id)
        .copied()
        .unwrap_or(0);
    let scale_down = scale_down_status(candidates);
    NodeGroupStatus {
        name: group.group_id.clone(),
        health: GroupHealth {
            status: health_status,
            node_counts: NodeCounts::from(&group.counts),
            cloud_provider_target: group.target_size,
            min_size: group.min_size,
            max_size: group.max_size,
            times: ConditionTimes::new(
                now,
                &health_status,
                old.map(|o| (&o.health.status, o.health.times)),
            ),
        },
        scale_up: ScaleUpCondition {
            status: scale_up_status,
            backoff_info,
            times: ConditionTimes::new(
                now,
                &scale_up_status,
                old.map(|o| (&o.scale_up.status, o.scale_up.times)),
            ),
        },
        scale_down: ScaleDownCondition {
            status: scale_down,
            candidates,
            times: ConditionTimes::new(
                now,
                &scale_down,
                old.map(|o| (&o.scale_down.status, o.scale_down.times)),
            ),
        },
    }
}

/// Renders the report as the YAML of `data.status`.
pub fn render_status_yaml(report: &StatusReport) -> String {
    // Every field is a plain string, number or enum: serialisation cannot fail. Should it ever,
    // the error text is still a valid status body rather than a panic in the loop.
    serde_yaml_ng::to_string(report).unwrap_or_else(|e| format!("error: {e:?}\n"))
}

/// The `last-updated` annotation and the `time` field: Go's default time layout
/// `2006-01-02 15:04:05.999999999 -0700 MST`, in UTC (fraction without trailing zeros, omitted when
/// zero).
pub fn format_go_time(t: Timestamp) -> String {
    let (date, clock, millis) = split_utc(t);
    let fraction = if millis == 0 {
        String::new()
    } else {
        format!(".{millis:03}").trim_end_matches('0').to_string()
    };
    format!("{date} {clock}{fraction} +0000 UTC")
}

/// RFC 3339 in UTC with whole seconds, as Kubernetes writes `metav1.Time`.
pub fn format_rfc3339(t: Timestamp) -> String {
    let (date, clock, _) = split_utc(t);
    format!("{date}T{clock}Z")
}

fn go_time<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_go_time(*t))
}

fn rfc3339<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*t))
}

/// (`YYYY-MM-DD`, `hh:mm:ss`, milliseconds) of a timestamp in UTC.
fn split_utc(t: Timestamp) -> (String, String, i64) {
    let millis = t.millis().rem_euclid(1000);
    let secs = t.secs();
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = date_of_day_number(days);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!(
            "{:02}:{:02}:{:02}",
            of_day / 3600,
            (of_day / 60) % 60,
            of_day % 60
        ),
        millis,
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01, via 400-year eras (146,097 days
/// each) counted from 0000-03-01 so that the leap day falls at the end of a year.
fn date_of_day_number(days: i64) -> (i64, i64, i64) {
    let from_march_0000 = days + 719_468;
    let era = from_march_0000.div_euclid(146_097);
    let day_of_era = from_march_0000.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kinds the identity may not read are listed under clusterWide (docs/behaviour.md
    /// LOOP-123); the field is absent when there are none, so upstream's readers see upstream's
    /// document.
    #[test]
    fn missing_permissions_are_listed_cluster_wide_only_when_there_are_some() {
        let state = crate::cluster_state::ClusterStateReport::default();
        let backoff = crate::backoff::NodeGroupBackoff::default();
        let candidates = BTreeMap::new();
        let missing =
            vec!["list/watch priorityclasses.scheduling.k8s.io: pods count with ...".to_string()];
        let build = |missing_permissions: &[String]| {
            render_status_yaml(&StatusReport::build(StatusInput {
                now: Timestamp::from_secs(1_795_238_494),
                cluster_state: &state,
                backoff: &backoff,
                scale_down_candidates: &candidates,
                initializing: None,
                missing_permissions,
                previous: None,
            }))
        };
        let with = build(&missing);
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&with).unwrap();
        assert_eq!(
            parsed["clusterWide"]["missingPermissions"][0].as_str(),
            Some(missing[0].as_str()),
            "{with}"
        );
        assert!(!build(&[]).contains("missingPermissions"));
    }

    #[test]
    fn times_print_in_go_and_rfc3339_layouts() {
        // 2026-11-21 05:21:34 UTC.
        let t = Timestamp::from_secs(1_795_238_494);
        assert_eq!(format_go_time(t), "2026-11-21 05:21:34 +0000 UTC");
        assert_eq!(format_rfc3339(t), "2026-11-21T05:21:34Z");
        assert_eq!(
            format_go_time(Timestamp(t.millis() + 120)),
            "2026-11-21 05:21:34.12 +0000 UTC"
        );
        assert_eq!(format_rfc3339(Timestamp(0)), "1970-01-01T00:00:00Z");
        // A leap day and the day after.
        assert_eq!(
            format_rfc3339(Timestamp::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339(Timestamp::from_secs(951_868_800)),
            "2000-03-01T00:00:00Z"
        );
    }
}
