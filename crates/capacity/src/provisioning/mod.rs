//! ProvisioningRequests in the engine (docs/provisioning-requests.md), the pure part: which
//! requests this instance handles, the virtual pods a request stands for, the conditions it is
//! given, when its booking ends or it expires, its retry backoff, and placing its pods in the
//! snapshot (a capacity check, or a booking). The loop step that reads and writes them is
//! `ferroscale_core::autoscaler`.

mod backoff;
mod pods;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::capacity::provisioning_conditions::{
    ACCEPTED, BOOKING_EXPIRED, FAILED, PROVISIONED,
};
use ferroscale_model::{
    ApiCondition, BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS, ConditionStatus, Pod,
    ProvisioningRequest, ProvisioningRequestStatus, Timestamp,
};
use ferroscale_scheduling::{Snapshot, find_node};

pub use backoff::RequestBackoff;
pub use pods::{
    DEPRECATED_CONSUME_ANNOTATION, MAX_REQUEST_PODS, RequestPodsError, consumed_request,
    pods_for_request,
};

/// How long capacity found or provisioned for a request stays booked when its pods do not come.
pub const BOOKING_TIME: Duration = Duration::from_secs(10 * 60);
/// How long a request may wait for its capacity before it fails as expired.
pub const EXPIRY_TIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most requests one loop marks as expired (booking or request), as upstream.
pub const MAX_EXPIRIES_PER_LOOP: usize = 20;
/// `parameters` key: `"true"` makes a check-capacity request fail instead of being retried.
pub const NO_RETRY_PARAMETER: &str = "noRetry";
/// `parameters` key naming the processor instance a check-capacity request is meant for.
pub const PROCESSOR_INSTANCE_PARAMETER: &str = "processorInstance";

/// Condition reasons, as upstream writes them (Kueue and other clients read them).
pub mod reasons {
    pub const ACCEPTED: &str = "Accepted";
    pub const CAPACITY_IS_FOUND: &str = "CapacityIsFound";
    pub const CAPACITY_IS_NOT_FOUND: &str = "CapacityIsNotFound";
    pub const CAPACITY_IS_PROVISIONED: &str = "CapacityIsProvisioned";
    pub const FAILED_TO_CREATE_PODS: &str = "FailedToCreatePods";
    pub const FAILED_TO_BOOK_CAPACITY: &str = "FailedToBookCapacity";
    pub const CAPACITY_RESERVATION_TIME_EXPIRED: &str = "CapacityReservationTimeExpired";
    pub const CAPACITY_BOOKING_CONSUMED: &str = "CapacityBookingConsumed";
    pub const EXPIRED: &str = "Expired";
}

/// Condition messages, as upstream writes them.
pub mod messages {
    pub const ACCEPTED: &str = "ProvisioningRequest is accepted by ClusterAutoscaler";
    pub const CAPACITY_IS_FOUND: &str = "Capacity is found in the cluster";
    /// Upstream gives a provisioned best-effort-atomic request the same message.
    pub const CAPACITY_IS_PROVISIONED: &str = "Capacity is found in the cluster";
    pub const CAPACITY_IS_NOT_FOUND_RETRY: &str =
        "Capacity is not found, CA will try to find it later.";
    pub const CAPACITY_IS_NOT_FOUND_NO_RETRY: &str = "CA could not find requested capacity";
    pub const CAPACITY_RESERVATION_TIME_EXPIRED: &str = "Capacity reservation time is expired";
    pub const CAPACITY_BOOKING_CONSUMED: &str =
        "Capacity booking is consumed: every pod of the request is scheduled";
    pub const EXPIRED: &str = "ProvisioningRequest is expired";
}

/// The classes the engine handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    CheckCapacity,
    BestEffortAtomic,
}

/// The class of `request` if this instance handles it (upstream's rule): with no
/// `--check-capacity-processor-instance`, check-capacity requests without a `processorInstance`
/// parameter and every best-effort-atomic request; with one, check-capacity requests whose
/// parameter names it (or, without the parameter, whose class is the instance name followed by
/// the check-capacity class), and no best-effort-atomic request.
pub fn handled_class(request: &ProvisioningRequest, instance: &str) -> Option<RequestClass> {
    let class = request.class.as_str();
    if class == BEST_EFFORT_ATOMIC_CLASS {
        return instance
            .is_empty()
            .then_some(RequestClass::BestEffortAtomic);
    }
    let named = request
        .parameters
        .get(PROCESSOR_INSTANCE_PARAMETER)
        .map(String::as_str)
        .unwrap_or("");
    let handled = match (instance.is_empty(), named.is_empty()) {
        (true, true) => class == CHECK_CAPACITY_CLASS,
        (true, false) => false,
        (false, false) => named == instance && class == CHECK_CAPACITY_CLASS,
        (false, true) => class
            .strip_prefix(instance)
            .is_some_and(|rest| rest == CHECK_CAPACITY_CLASS),
    };
    handled.then_some(RequestClass::CheckCapacity)
}

fn is_true(status: &ProvisioningRequestStatus, type_: &str) -> bool {
    ferroscale_model::find_condition(&status.conditions, type_).is_some_and(ApiCondition::is_true)
}

/// Sets the condition of `type_`, replacing one of the same type in place (upstream always
/// moves the transition time, even when only the reason changes).
pub fn set_condition(
    status: &mut ProvisioningRequestStatus,
    condition: RequestCondition,
    generation: i64,
    now: Timestamp,
) {
    let new = ApiCondition {
        type_: condition.type_.to_string(),
        status: condition.status,
        reason: condition.reason.to_string(),
        message: condition.message.into_owned(),
        last_transition: now,
        observed_generation: generation,
    };
    match status.conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => *existing = new,
        None => status.conditions.push(new),
    }
}

/// One condition the engine sets on a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCondition {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: Cow<'static, str>,
}

impl RequestCondition {
    pub const ACCEPTED: RequestCondition = RequestCondition {
        type_: ACCEPTED,
        status: ConditionStatus::True,
        reason: reasons::ACCEPTED,
        message: Cow::Borrowed(messages::ACCEPTED),
    };
    pub const CAPACITY_FOUND: RequestCondition = RequestCondition {
        type_: PROVISIONED,
        status: ConditionStatus::True,
        reason: reasons::CAPACITY_IS_FOUND,
        message: Cow::Borrowed(messages::CAPACITY_IS_FOUND),
    };
    pub const CAPACITY_PROVISIONED: RequestCondition = RequestCondition {
        type_: PROVISIONED,
        status: ConditionStatus::True,
        reason: reasons::CAPACITY_IS_PROVISIONED,
        message: Cow::Borrowed(messages::CAPACITY_IS_PROVISIONED),
    };
    pub const CAPACITY_NOT_FOUND: RequestCondition = RequestCondition {
        type_: PROVISIONED,
        status: ConditionStatus::False,
        reason: reasons::CAPACITY_IS_NOT_FOUND,
        message: Cow::Borrowed(messages::CAPACITY_IS_NOT_FOUND_RETRY),
    };
    pub const CAPACITY_NOT_FOUND_NO_RETRY: RequestCondition = RequestCondition {
        type_: FAILED,
        status: ConditionStatus::True,
        reason: reasons::CAPACITY_IS_NOT_FOUND,
        message: Cow::Borrowed(messages::CAPACITY_IS_NOT_FOUND_NO_RETRY),
    };
    pub const BOOKING_TIME_EXPIRED: RequestCondition = RequestCondition {
        type_: BOOKING_EXPIRED,
        status: ConditionStatus::True,
        reason: reasons::CAPACITY_RESERVATION_TIME_EXPIRED,
        message: Cow::Borrowed(messages::CAPACITY_RESERVATION_TIME_EXPIRED),
    };
    pub const BOOKING_CONSUMED: RequestCondition = RequestCondition {
        type_: BOOKING_EXPIRED,
        status: ConditionStatus::True,
        reason: reasons::CAPACITY_BOOKING_CONSUMED,
        message: Cow::Borrowed(messages::CAPACITY_BOOKING_CONSUMED),
    };
    pub const EXPIRED: RequestCondition = RequestCondition {
        type_: FAILED,
        status: ConditionStatus::True,
        reason: reasons::EXPIRED,
        message: Cow::Borrowed(messages::EXPIRED),
    };

    /// `Failed=True` with this reason and a message naming what went wrong.
    pub fn failed(reason: &'static str, message: String) -> RequestCondition {
        RequestCondition {
            type_: FAILED,
            status: ConditionStatus::True,
            reason,
            message: Cow::Owned(message),
        }
    }

    /// Whether a client should hear about it as a warning.
    pub fn is_warning(&self) -> bool {
        self.type_ == FAILED || (self.type_ == PROVISIONED && self.status == ConditionStatus::False)
    }
}

/// What a check-capacity request that did not fit is told: retried later, or failed at once when
/// its `noRetry` parameter is `"true"`.
pub fn not_found_condition(request: &ProvisioningRequest) -> RequestCondition {
    match request
        .parameters
        .get(NO_RETRY_PARAMETER)
        .map(String::as_str)
    {
        Some("true") => RequestCondition::CAPACITY_NOT_FOUND_NO_RETRY,
        _ => RequestCondition::CAPACITY_NOT_FOUND,
    }
}

/// A request whose booking or whose wait is over at `now`: `BookingExpired` ten minutes after
/// it was provisioned, `Failed` (expired) seven days after it was created without being
/// provisioned. Requests already failed or whose booking already ended are left alone; at most
/// [`MAX_EXPIRIES_PER_LOOP`] are returned, bookings first.
pub fn expiry(
    request: &ProvisioningRequest,
    status: &ProvisioningRequestStatus,
    now: Timestamp,
) -> Option<RequestCondition> {
    if is_true(status, BOOKING_EXPIRED) || is_true(status, FAILED) {
        return None;
    }
    match ferroscale_model::find_condition(&status.conditions, PROVISIONED) {
        Some(provisioned) if provisioned.is_true() => (now
            > provisioned.last_transition + BOOKING_TIME)
            .then_some(RequestCondition::BOOKING_TIME_EXPIRED),
        _ => (now > request.creation_time + EXPIRY_TIME).then_some(RequestCondition::EXPIRED),
    }
}

/// Whether the capacity of a request is booked: provisioned, and neither failed nor expired.
pub fn is_booked(status: &ProvisioningRequestStatus) -> bool {
    is_true(status, PROVISIONED) && !is_true(status, FAILED) && !is_true(status, BOOKING_EXPIRED)
}

/// Whether the request is still waiting for capacity at all (not provisioned, not failed).
pub fn is_waiting(status: &ProvisioningRequestStatus) -> bool {
    !is_true(status, PROVISIONED) && !is_true(status, FAILED)
}

/// Places every pod where it fits, one after the other, and keeps them placed (a booking:
/// best effort, pods that fit nowhere are skipped). Returns how many were placed.
pub fn place_where_they_fit(snapshot: &mut Snapshot, pods: &[Arc<Pod>]) -> usize {
    let mut placed = 0;
    for pod in pods {
        if let Some(id) = find_node(snapshot, pod, 0) {
            snapshot.add_pod(id, pod.clone());
            placed += 1;
        }
    }
    placed
}

/// The capacity check: places all the pods in the snapshot as they are, with no new node, or
/// none of them. Returns whether they all fit (and then stay placed).
pub fn place_all_or_none(snapshot: &mut Snapshot, pods: &[Arc<Pod>]) -> bool {
    let mut branch = snapshot.branch();
    for pod in pods {
        match find_node(&mut branch, pod, 0) {
            Some(id) => branch.add_pod(id, pod.clone()),
            None => return false,
        }
    }
    branch.commit();
    true
}

#[cfg(test)]
mod tests;
