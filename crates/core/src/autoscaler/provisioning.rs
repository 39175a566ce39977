//! The loop's ProvisioningRequest step (docs/provisioning-requests.md), with
//! `--enable-provisioning-requests`. Before scale-up, every loop: requests whose booking or wait
//! is over are marked so; pods that consume a request leave the pending pods; the capacity of
//! provisioned requests is booked in the snapshot (so ordinary pods, this loop's scale-up and
//! scale-down see it used) until their pods are scheduled. Then loops alternate, as upstream's,
//! between the ordinary pending pods and the requests: on a request turn, a batch of
//! check-capacity requests is checked against the cluster as it is, or one best-effort-atomic
//! request gets a scale-up plan for all its pods or none, which the loop executes like any
//! other and [`Autoscaler::finish_requests_turn`] then reports on the request.
//!
//! Statuses are written through [`ClusterApi::update_provisioning_request_status`], never in
//! dry-run; every condition set is also an event on the request and an entry of
//! [`LoopOutcome::provisioning_requests`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferroscale_model::{
    ApiCondition, Pod, ProvisioningRequest, ProvisioningRequestStatus, Timestamp,
};
use ferroscale_scheduling::Snapshot;

use super::gather::Gathered;
use super::{Autoscaler, DecideTimer, LoopOutcome};
use crate::act::scale_up::ScaleUpExecution;
use crate::events::{Event, EventObject, reasons};
use crate::kubernetes::ClusterApi;
use crate::options::AutoscalingOptions;
use crate::scale_up::{
    ExternalExpanderStep, NodeGroupView, ProviderFacts, ScaleUpInput, ScaleUpPlan, ScaleUpStatus,
    plan_scale_up,
};
use ferroscale_capacity::provisioning::{
    MAX_EXPIRIES_PER_LOOP, RequestBackoff, RequestClass, RequestCondition, consumed_request,
    expiry, handled_class, is_booked, not_found_condition, place_all_or_none, place_where_they_fit,
    pods_for_request, reasons as request_reasons,
};

/// What the loop remembers about requests between iterations.
#[derive(Debug, Clone)]
pub(super) struct ProvisioningState {
    backoff: RequestBackoff,
    /// The next loop with both requests and ordinary pods serves the requests.
    requests_next: bool,
}

impl ProvisioningState {
    pub(super) fn new(options: &AutoscalingOptions) -> ProvisioningState {
        ProvisioningState {
            backoff: RequestBackoff::new(
                options.provisioning_request_initial_backoff_time,
                options.provisioning_request_max_backoff_time,
                options.provisioning_request_max_backoff_cache_size,
            ),
            requests_next: false,
        }
    }
}

/// One condition set on a request in this iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestUpdate {
    /// `namespace/name`.
    pub request: String,
    pub condition: ApiCondition,
    /// The status write failed (never set in dry-run, where nothing is written).
    pub write_error: Option<String>,
}

/// A request turn: the plan the loop executes instead of the ordinary one.
pub(super) struct RequestsTurn {
    plan: Option<ScaleUpPlan>,
    /// The best-effort-atomic request the plan scales up for, with its status so far.
    atomic: Option<(Arc<ProvisioningRequest>, ProvisioningRequestStatus)>,
    /// Keys of the request's virtual pods: no event names them.
    virtual_pods: HashSet<String>,
}

impl RequestsTurn {
    /// The plan to execute in place of the ordinary scale-up (once).
    pub(super) fn take_plan(&mut self) -> ScaleUpPlan {
        self.plan
            .take()
            .unwrap_or_else(|| ScaleUpPlan::empty(ScaleUpStatus::NotTried))
    }
}

/// What the step reads besides the snapshot and the pending pods.
pub(super) struct RequestsInput<'a> {
    pub(super) gathered: &'a Gathered,
    pub(super) views: &'a [NodeGroupView],
    pub(super) provider: ProviderFacts<'a>,
    pub(super) now: Timestamp,
    pub(super) seed: u64,
}

/// The requests picked for a turn.
enum Picked {
    CheckCapacity(Vec<(Arc<ProvisioningRequest>, Vec<Arc<Pod>>)>),
    Atomic(Arc<ProvisioningRequest>, Vec<Arc<Pod>>),
}

/// Where the conditions of one iteration go: the cluster (not in dry-run), the events and the
/// outcome.
struct StatusWriter<'a> {
    cluster: &'a dyn ClusterApi,
    dry_run: bool,
    now: Timestamp,
    outcome: &'a mut LoopOutcome,
    events: &'a mut Vec<Event>,
}

impl StatusWriter<'_> {
    /// Sets a condition, writes the status (not in dry-run), and reports it.
    async fn set(
        &mut self,
        request: &ProvisioningRequest,
        status: &mut ProvisioningRequestStatus,
        condition: RequestCondition,
    ) {
        let StatusWriter {
            cluster,
            dry_run,
            now,
            ..
        } = *self;
        let (outcome, events) = (&mut *self.outcome, &mut *self.events);
        let warning = condition.is_warning();
        let (type_, reason) = (condition.type_, condition.reason);
        ferroscale_capacity::provisioning::set_condition(
            status,
            condition,
            request.generation,
            now,
        );
        let Some(set) = status.conditions.iter().find(|c| c.type_ == type_).cloned() else {
            return;
        };
        let write_error = if dry_run {
            None
        } else {
            cluster
                .update_provisioning_request_status(&request.namespace, &request.name, status)
                .await
                .err()
                .map(|e| e.to_string())
        };
        let object = EventObject::ProvisioningRequest(request.key());
        events.push(if warning {
            Event::warning(object, reason, set.message.clone())
        } else {
            Event::normal(object, reason, set.message.clone())
        });
        outcome.provisioning_requests.push(RequestUpdate {
            request: request.key(),
            condition: set,
            write_error,
        });
    }
}

impl Autoscaler {
    /// The step before scale-up; returns the turn when this loop serves requests.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn provisioning_requests(
        &mut self,
        cluster: &dyn ClusterApi,
        input: RequestsInput<'_>,
        base: &mut Snapshot,
        pending: &mut Vec<Arc<Pod>>,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Option<RequestsTurn> {
        if !self.options.enable_provisioning_requests {
            return None;
        }
        let RequestsInput {
            gathered,
            views,
            provider,
            now,
            seed,
        } = input;
        let mut writer = StatusWriter {
            cluster,
            dry_run: self.options.dry_run,
            now,
            outcome,
            events,
        };
        let capacity = &gathered.objects.capacity;
        let instance = self.options.check_capacity_processor_instance.as_str();
        let handled: Vec<(Arc<ProvisioningRequest>, RequestClass)> = capacity
            .provisioning_requests
            .iter()
            .filter(|r| !r.deleting)
            .filter_map(|r| handled_class(r, instance).map(|c| (r.clone(), c)))
            .collect();

        // Bookings and waits that are over.
        let mut expired = 0;
        let mut current: Vec<(
            Arc<ProvisioningRequest>,
            RequestClass,
            ProvisioningRequestStatus,
        )> = Vec::with_capacity(handled.len());
        for (request, class) in handled {
            let mut status = request.status.clone();
            if expired < MAX_EXPIRIES_PER_LOOP
                && let Some(condition) = expiry(&request, &status, now)
            {
                expired += 1;
                writer.set(&request, &mut status, condition).await;
            }
            current.push((request, class, status));
        }

        // Pods that consume a request are not ordinary pending pods: the request's capacity is
        // theirs.
        pending.retain(|pod| {
            let Some(name) = consumed_request(pod) else {
                return true;
            };
            writer.events.push(Event::normal(
                EventObject::Pod(pod.key()),
                reasons::NOT_TRIGGER_SCALE_UP,
                format!(
                    "pod consumes ProvisioningRequest {}/{name}: it waits for the request's capacity and does not trigger a scale-up of its own",
                    pod.namespace
                ),
            ));
            false
        });

        // Booking: the capacity of provisioned requests is kept in the snapshot for the pods
        // not scheduled yet; once they all are, the booking has been consumed.
        let mut scheduled: HashMap<String, usize> = HashMap::new();
        for pod in gathered.objects.pods.iter() {
            if pod.node_name.is_some()
                && !pod.is_terminal()
                && let Some(name) = consumed_request(pod)
            {
                *scheduled
                    .entry(format!("{}/{name}", pod.namespace))
                    .or_default() += 1;
            }
        }
        for (request, _, status) in &mut current {
            if !is_booked(status) {
                continue;
            }
            let done = scheduled.get(&request.key()).copied().unwrap_or(0);
            let total: usize = request.pod_sets.iter().map(|s| s.count as usize).sum();
            if done >= total {
                let condition = RequestCondition::BOOKING_CONSUMED;
                writer.set(request, status, condition).await;
                continue;
            }
            match pods_for_request(request, capacity) {
                Ok(pods) => {
                    place_where_they_fit(base, pods.get(done..).unwrap_or_default());
                }
                Err(e) => {
                    let condition = RequestCondition::failed(
                        request_reasons::FAILED_TO_BOOK_CAPACITY,
                        format!("Couldn't create pods, err: {e}"),
                    );
                    writer.set(request, status, condition).await;
                }
            }
        }

        // Which requests a request turn would serve.
        let picked = self.pick(&mut current, capacity, &mut writer).await;

        // Alternation: with both requests and ordinary pods, loops take turns; with only one
        // kind, every loop serves it.
        let mut requests_turn = self.provisioning.requests_next;
        if picked.is_none() {
            requests_turn = false;
        } else if pending.is_empty() {
            requests_turn = true;
        }
        self.provisioning.requests_next = !requests_turn;
        let picked = picked.filter(|_| requests_turn)?;

        // The ordinary pods wait for their own turn, but those that fit where they are (or on
        // nodes coming up) take that room first and count there for scale-down, as on any
        // loop; bookings came before them.
        let waiting: Vec<Arc<Pod>> = pending
            .iter()
            .filter(|p| p.is_marked_unschedulable() && p.nominated_node_name.is_none())
            .cloned()
            .collect();
        place_where_they_fit(base, &waiting);

        let mut turn = RequestsTurn {
            plan: None,
            atomic: None,
            virtual_pods: HashSet::new(),
        };
        let status_now = |request: &ProvisioningRequest,
                          current: &mut Vec<(
            Arc<ProvisioningRequest>,
            RequestClass,
            ProvisioningRequestStatus,
        )>| {
            current
                .iter_mut()
                .find(|(r, _, _)| r.uid == request.uid)
                .map(|(_, _, s)| std::mem::take(s))
                .unwrap_or_default()
        };
        match picked {
            Picked::CheckCapacity(batch) => {
                let batched = self.options.check_capacity_batch_processing;
                let timebox = self
                    .options
                    .check_capacity_provisioning_request_batch_timebox
                    .as_secs_f64()
                    * 1000.0;
                let started = timer.stopwatch.elapsed_millis();
                for (request, pods) in batch {
                    let mut status = status_now(&request, &mut current);
                    self.provisioning.backoff.available(&request, &status, now);
                    writer
                        .set(&request, &mut status, RequestCondition::ACCEPTED)
                        .await;
                    let fits = timer.time("scaleUp", || place_all_or_none(base, &pods));
                    let condition = if fits {
                        RequestCondition::CAPACITY_FOUND
                    } else {
                        not_found_condition(&request)
                    };
                    writer.set(&request, &mut status, condition).await;
                    if batched && timer.stopwatch.elapsed_millis() - started > timebox {
                        break;
                    }
                }
                turn.plan = Some(ScaleUpPlan::empty(ScaleUpStatus::NotNeeded));
            }
            Picked::Atomic(request, pods) => {
                let mut status = status_now(&request, &mut current);
                self.provisioning.backoff.available(&request, &status, now);
                writer
                    .set(&request, &mut status, RequestCondition::ACCEPTED)
                    .await;
                turn.virtual_pods = pods.iter().map(|p| p.key()).collect();
                // The plan is made on a branch: only its increases matter, and the request's
                // pods are booked from the next loop on, on the nodes it brings.
                let plan = timer.time("scaleUp", || {
                    let mut branch = base.branch();
                    plan_scale_up(ScaleUpInput {
                        now,
                        snapshot: &mut branch,
                        pending_pods: &pods,
                        draining_pods: &[],
                        node_groups: views,
                        backoff: &self.backoff,
                        options: &self.options,
                        priority_config: gathered.objects.priority_expander_config.as_deref(),
                        provider,
                        seed,
                        // A request's plan does not call out: `grpc` keeps every option.
                        external_expander: ExternalExpanderStep::Skip,
                        all_or_nothing: true,
                        workers: &self.workers,
                        equivalence: None,
                    })
                });
                match plan.status {
                    ScaleUpStatus::Successful => turn.atomic = Some((request, status)),
                    // Everything fits as the cluster is: booked at once.
                    ScaleUpStatus::NotNeeded if all_placed(&plan, &pods) => {
                        place_where_they_fit(base, &pods);
                        let condition = RequestCondition::CAPACITY_FOUND;
                        writer.set(&request, &mut status, condition).await;
                    }
                    // Too young to act on (a request read in the instant it was made leaves
                    // the plan with no pod at all): the next request turn tries again.
                    ScaleUpStatus::NotNeeded | ScaleUpStatus::InCooldown => {}
                    _ => {
                        let condition = RequestCondition::CAPACITY_NOT_FOUND;
                        writer.set(&request, &mut status, condition).await;
                    }
                }
                turn.plan = Some(plan);
            }
        }
        Some(turn)
    }

    /// Picks what a request turn serves: with `--check-capacity-batch-processing`, up to the
    /// batch size of check-capacity requests; otherwise the first request due, of either class.
    /// A request whose pods cannot be built fails here.
    async fn pick(
        &mut self,
        current: &mut [(
            Arc<ProvisioningRequest>,
            RequestClass,
            ProvisioningRequestStatus,
        )],
        capacity: &ferroscale_model::CapacityObjects,
        writer: &mut StatusWriter<'_>,
    ) -> Option<Picked> {
        let now = writer.now;
        let batch_size = if self.options.check_capacity_batch_processing {
            self.options
                .check_capacity_provisioning_request_max_batch_size
                .max(1)
        } else {
            1
        };
        let mut batch = Vec::new();
        let mut atomic = None;
        for (request, class, status) in current.iter_mut() {
            // Without batching the first request due is served, whatever its class.
            if batch.len() >= batch_size || (batch_size == 1 && atomic.is_some()) {
                break;
            }
            // In batch mode check-capacity requests go first; the first atomic request due is
            // the fallback.
            if *class == RequestClass::BestEffortAtomic && atomic.is_some() {
                continue;
            }
            if !self.provisioning.backoff.due(request, status, now) {
                continue;
            }
            let pods = match pods_for_request(request, capacity) {
                Ok(pods) => pods,
                Err(e) => {
                    let condition = RequestCondition::failed(
                        request_reasons::FAILED_TO_CREATE_PODS,
                        e.to_string(),
                    );
                    writer.set(request, status, condition).await;
                    continue;
                }
            };
            match class {
                RequestClass::CheckCapacity => batch.push((request.clone(), pods)),
                RequestClass::BestEffortAtomic => atomic = Some((request.clone(), pods)),
            }
        }
        if !batch.is_empty() {
            Some(Picked::CheckCapacity(batch))
        } else {
            atomic.map(|(request, pods)| Picked::Atomic(request, pods))
        }
    }

    /// After the turn's plan was executed: a best-effort-atomic request whose scale-up the cloud
    /// accepted is provisioned (its capacity is booked from now on), otherwise it is told the
    /// capacity was not found and retried after its backoff. No event names the virtual pods.
    pub(super) async fn finish_requests_turn(
        &mut self,
        cluster: &dyn ClusterApi,
        turn: RequestsTurn,
        execution: Option<&ScaleUpExecution>,
        now: Timestamp,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let RequestsTurn {
            atomic,
            virtual_pods,
            ..
        } = turn;
        events
            .retain(|e| !matches!(&e.object, EventObject::Pod(key) if virtual_pods.contains(key)));
        let Some((request, mut status)) = atomic else {
            return;
        };
        let dry_run = self.options.dry_run;
        // In dry-run nothing is executed: the plan stands for the scale-up.
        let scaled = dry_run
            || execution.is_some_and(|e| {
                !e.succeeded.is_empty() && e.failed.is_empty() && e.not_attempted.is_empty()
            });
        let condition = if scaled {
            RequestCondition::CAPACITY_PROVISIONED
        } else {
            RequestCondition::CAPACITY_NOT_FOUND
        };
        let mut writer = StatusWriter {
            cluster,
            dry_run,
            now,
            outcome,
            events,
        };
        writer.set(&request, &mut status, condition).await;
    }
}

/// True when the plan found a place on existing or upcoming nodes for every one of `pods`.
fn all_placed(plan: &ScaleUpPlan, pods: &[Arc<Pod>]) -> bool {
    let placed: HashSet<&str> = plan
        .pods_schedulable_on_existing
        .iter()
        .map(String::as_str)
        .collect();
    pods.iter().all(|p| placed.contains(p.key().as_str()))
}
