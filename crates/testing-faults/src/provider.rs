//! A cloud provider that misbehaves on demand, served over externalgrpc as `ferroscale run
//! --cloud-provider=externalgrpc` calls a real provider, so that the live tests can prove what
//! the autoscaler does when the cloud is slow, down, half-done or lies by omission.
//!
//! - [`FaultyProvider`] wraps any `CloudProvider` (and the node groups it returns) and is a
//!   `CloudProvider` itself. Faults are switched at run time ([`FaultyProvider::inject`]), per
//!   [`Method`], optionally per group, optionally for a number of calls: a [`Fault::Delay`], an
//!   immediate [`Fault::Unavailable`], a call carried out whose answer is lost
//!   ([`Fault::AnswerLost`]), a [`Fault::PartialDelete`], and new instances that never become
//!   nodes ([`Fault::NeverRegister`]).
//! - Every call is logged ([`CallLog`]) with its wall-clock arrival and end, the client that made
//!   it (the common name of its client certificate, `ferroscale_externalgrpc_sdk::caller`), what
//!   it asked, the fault it met and its result; [`CallLog::wait_for_call`] waits for a call, and
//!   [`CallLog::mutating_calls_by_caller`] and [`CallLog::deletions_by_node`] answer the
//!   invariants (only the leader changes the cloud; no node is deleted twice).
//! - [`ServedProvider`] serves it with the SDK's mutual TLS on a loopback port that can be
//!   pulled ([`ServedProvider::stop`]: the provider is down) and put back, and writes the
//!   externalgrpc cloud-config file for `ferroscale run`.
//!
//! ```no_run
//! # async fn example(
//! #     kwok: std::sync::Arc<dyn ferroscale_core::cloud::CloudProvider>,
//! #     pki: &ferroscale_testing_control_plane::PkiFiles,
//! #     replica_0: ferroscale_testing_faults::provider::ClientTls,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use ferroscale_externalgrpc_sdk::MutualTls;
//! use ferroscale_testing_faults::provider::{
//!     Fault, FaultyProvider, Injection, LostAnswer, Method, ServedProvider,
//! };
//!
//! let provider = Arc::new(FaultyProvider::new(kwok));
//! let served = ServedProvider::start(
//!     provider.clone(),
//!     MutualTls {
//!         cert: pki.serving_certificate.clone(),
//!         key: pki.serving_key.clone(),
//!         client_ca: pki.ca_certificate.clone(),
//!     },
//! )
//! .await?;
//! served.write_cloud_config("cloud-config.yaml".as_ref(), &replica_0, Duration::from_secs(10))?;
//! // The next scale-up happens, but the autoscaler is told it failed.
//! provider.inject(
//!     Injection::new(Method::IncreaseSize, Fault::AnswerLost { answer: LostAnswer::Error })
//!         .times(1),
//! )?;
//! # Ok(()) }
//! ```
//!
//! Only the methods of [`Method`] are logged and can fail; the others (names, GPU and pricing
//! information, and `has_instance`, atomic increases and forced deletions, which have no RPC)
//! are passed to the wrapped provider as they are. The SDK calls some methods for its own checks
//! within another RPC (see [`Method`]), and those calls are logged and faulted like any other.

mod call_log;
mod faults;
mod phantoms;
mod served;

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, GpuConfig, GroupOptions, Instance, NodeGroup, NodeTemplate,
    PricingModel, ResourceLimits,
};
use ferroscale_model::{Node, Timestamp};

pub use call_log::{CallDetails, CallLog, CallRecord, CallResult, NodeRef, WaitError};
pub use faults::{Fault, InjectError, Injection, InjectionId, LostAnswer, Method};
pub use phantoms::PHANTOM_ID_PREFIX;
pub use served::{ClientTls, ServedError, ServedProvider};

use call_log::InFlight;
use phantoms::Phantoms;

/// A `CloudProvider` that passes every call to the provider it wraps, except where a fault
/// injected at run time says otherwise, and logs every call. See the module documentation.
pub struct FaultyProvider {
    inner: Arc<dyn CloudProvider>,
    state: Arc<State>,
}

/// What the provider and the node groups it hands out share.
#[derive(Debug, Default)]
struct State {
    injections: Mutex<faults::Injections>,
    log: CallLog,
    phantoms: Mutex<Phantoms>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread leaves consistent values behind; keep serving the others.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// Logs a call as it arrives, with the fault it meets.
    fn arrive(
        &self,
        method: Method,
        group: Option<&str>,
        details: CallDetails,
    ) -> (Option<Fault>, InFlight) {
        let fault = lock(&self.injections).take(method, group);
        let caller = ferroscale_externalgrpc_sdk::caller();
        if let Some(fault) = &fault {
            tracing::info!(
                %method,
                group,
                caller = caller.as_deref(),
                ?fault,
                "faulty provider: injecting a fault"
            );
        }
        let call = self
            .log
            .arrive(caller, method, group, details, fault.clone());
        (fault, call)
    }

    /// Serves a call under the faults every method knows (delay, unavailable, answer lost):
    /// `work` is the call as the cloud carries it out, not started until the fault allows.
    async fn serve<T: Send + 'static>(
        &self,
        method: Method,
        fault: Option<Fault>,
        call: InFlight,
        work: impl Future<Output = Result<T, CloudError>> + Send + 'static,
    ) -> Result<T, CloudError> {
        let result = match fault {
            None | Some(Fault::PartialDelete { .. }) | Some(Fault::NeverRegister) => work.await,
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                work.await
            }
            Some(Fault::Unavailable) => Err(CloudError::Unavailable(format!(
                "injected fault: {method} refused, nothing was done"
            ))),
            Some(Fault::AnswerLost { answer }) => {
                let log = self.log.clone();
                let sequence = call.sequence();
                // A task of its own, so that the cloud finishes even when the SDK drops this
                // call at the client's deadline.
                let carried_out = tokio::spawn(async move {
                    let result = work.await;
                    log.carried_out(sequence, call_log::CallResult::of(&result));
                });
                let _ = carried_out.await;
                match answer {
                    LostAnswer::Error => Err(CloudError::Unavailable(format!(
                        "injected fault: {method} was carried out, but its answer was lost"
                    ))),
                    LostAnswer::Timeout => std::future::pending().await,
                }
            }
        };
        call.answer(&result);
        result
    }
}

impl FaultyProvider {
    pub fn new(inner: Arc<dyn CloudProvider>) -> FaultyProvider {
        FaultyProvider {
            inner,
            state: Arc::default(),
        }
    }

    /// Puts a fault in force, from the next call on. Injections apply in the order they were
    /// made: a call meets the first one that matches it.
    pub fn inject(&self, injection: Injection) -> Result<InjectionId, InjectError> {
        tracing::info!(?injection, "faulty provider: fault switched on");
        lock(&self.state.injections).add(injection)
    }

    /// Ends an injection; false when it had ended already (spent or removed).
    pub fn remove(&self, id: InjectionId) -> bool {
        lock(&self.state.injections).remove(id)
    }

    /// Ends every injection: calls are served as the wrapped provider serves them. Instances
    /// that never registered stay.
    pub fn clear_faults(&self) {
        lock(&self.state.injections).clear();
    }

    /// Every call so far, and ways to wait for one.
    pub fn call_log(&self) -> &CallLog {
        &self.state.log
    }

    /// The ids of `group`'s instances that never registered ([`Fault::NeverRegister`]).
    pub fn phantoms(&self, group: &str) -> Vec<String> {
        lock(&self.state.phantoms).ids(group)
    }
}

#[async_trait]
impl CloudProvider for FaultyProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn gpu_label(&self) -> &str {
        self.inner.gpu_label()
    }

    fn available_gpu_types(&self) -> Vec<String> {
        self.inner.available_gpu_types()
    }

    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        self.inner.node_gpu_config(node)
    }

    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        self.inner.resource_limits()
    }

    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        self.inner.pricing()
    }

    async fn node_price_per_hour(&self, node: &Node, start: Timestamp) -> Result<f64, CloudError> {
        self.inner.node_price_per_hour(node, start).await
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        let method = Method::NodeGroups;
        let (fault, call) = self.state.arrive(method, None, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        let work = async move {
            let groups = inner.node_groups().await?;
            Ok(groups
                .into_iter()
                .map(|group| FaultyNodeGroup::wrap(group, &state))
                .collect())
        };
        self.state.serve(method, fault, call, work).await
    }

    /// The group of a phantom instance is the one it was made in; any other node is the wrapped
    /// provider's to place.
    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        let method = Method::NodeGroupForNode;
        let details = CallDetails {
            delta: None,
            nodes: vec![NodeRef::of(node)],
        };
        let (fault, call) = self.state.arrive(method, None, details);
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        let node = node.clone();
        let work = async move {
            let phantom_group = lock(&state.phantoms)
                .group_of(instance_key(&node))
                .map(str::to_string);
            let group = match phantom_group {
                Some(id) => inner
                    .node_groups()
                    .await?
                    .into_iter()
                    .find(|group| group.id() == id),
                None => inner.node_group_for_node(&node).await?,
            };
            Ok(group.map(|group| FaultyNodeGroup::wrap(group, &state)))
        };
        self.state.serve(method, fault, call, work).await
    }

    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        self.inner.has_instance(node).await
    }

    async fn scale_down_vetoes(&self, nodes: &[Arc<Node>]) -> HashSet<String> {
        self.inner.scale_down_vetoes(nodes).await
    }

    async fn refresh(&self) -> Result<(), CloudError> {
        let method = Method::Refresh;
        let (fault, call) = self.state.arrive(method, None, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let work = async move { inner.refresh().await };
        self.state.serve(method, fault, call, work).await
    }

    async fn cleanup(&self) -> Result<(), CloudError> {
        let method = Method::Cleanup;
        let (fault, call) = self.state.arrive(method, None, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let work = async move { inner.cleanup().await };
        self.state.serve(method, fault, call, work).await
    }
}

/// A node group of the wrapped provider, with its calls logged and faulted, and with the
/// instances that never registered added to it.
pub struct FaultyNodeGroup {
    inner: Arc<dyn NodeGroup>,
    state: Arc<State>,
}

impl fmt::Debug for FaultyNodeGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyNodeGroup")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// How a node is matched to an instance: by provider id, else by name (as the SDK does).
fn instance_key(node: &Node) -> &str {
    if node.provider_id.is_empty() {
        &node.name
    } else {
        &node.provider_id
    }
}

impl FaultyNodeGroup {
    fn wrap(inner: Arc<dyn NodeGroup>, state: &Arc<State>) -> Arc<dyn NodeGroup> {
        Arc::new(FaultyNodeGroup {
            inner,
            state: Arc::clone(state),
        })
    }

    fn arrive(&self, method: Method, details: CallDetails) -> (Option<Fault>, InFlight) {
        self.state.arrive(method, Some(self.inner.id()), details)
    }

    /// Deletes `nodes` in the cloud: phantoms here, the others in the wrapped group (first, so
    /// that a failure there deletes no phantom).
    fn delete(&self, nodes: Vec<Node>) -> impl Future<Output = Result<(), CloudError>> + use<> {
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        async move {
            let (phantom, real): (Vec<Node>, Vec<Node>) = {
                let phantoms = lock(&state.phantoms);
                nodes
                    .into_iter()
                    .partition(|node| phantoms.contains(inner.id(), instance_key(node)))
            };
            if !real.is_empty() {
                inner.delete_nodes(&real).await?;
            }
            let ids: Vec<&str> = phantom.iter().map(instance_key).collect();
            lock(&state.phantoms).remove(inner.id(), &ids);
            Ok(())
        }
    }

    /// Grows the target by `delta` instances that will never register.
    async fn add_phantoms(&self, delta: usize) -> Result<(), CloudError> {
        let id = self.inner.id();
        let target = self.inner.target_size().await?;
        let target = target + lock(&self.state.phantoms).count(id);
        let wanted = target.saturating_add(delta);
        if wanted > self.inner.max_size() {
            return Err(CloudError::InvalidRequest(format!(
                "size increase too large for node group {id}: desired {wanted}, max {}",
                self.inner.max_size()
            )));
        }
        let ids = lock(&self.state.phantoms).add(id, delta);
        tracing::info!(
            group = id,
            ?ids,
            "faulty provider: instances that will never register"
        );
        Ok(())
    }
}

#[async_trait]
impl NodeGroup for FaultyNodeGroup {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn min_size(&self) -> usize {
        self.inner.min_size()
    }

    fn max_size(&self) -> usize {
        self.inner.max_size()
    }

    fn debug(&self) -> String {
        self.inner.debug()
    }

    fn exist(&self) -> bool {
        self.inner.exist()
    }

    fn autoprovisioned(&self) -> bool {
        self.inner.autoprovisioned()
    }

    /// The wrapped group's target plus the instances that never registered.
    async fn target_size(&self) -> Result<usize, CloudError> {
        let method = Method::TargetSize;
        let (fault, call) = self.arrive(method, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        let work = async move {
            let target = inner.target_size().await?;
            Ok(target + lock(&state.phantoms).count(inner.id()))
        };
        self.state.serve(method, fault, call, work).await
    }

    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        let method = Method::IncreaseSize;
        let details = CallDetails {
            delta: Some(i64::try_from(delta).unwrap_or(i64::MAX)),
            nodes: Vec::new(),
        };
        let (fault, call) = self.arrive(method, details);
        if fault == Some(Fault::NeverRegister) {
            let result = self.add_phantoms(delta).await;
            call.answer(&result);
            return result;
        }
        let inner = Arc::clone(&self.inner);
        let work = async move { inner.increase_size(delta).await };
        self.state.serve(method, fault, call, work).await
    }

    async fn atomic_increase_size(&self, delta: usize) -> Result<(), CloudError> {
        self.inner.atomic_increase_size(delta).await
    }

    /// Deletes phantoms here and the other nodes in the wrapped group.
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let method = Method::DeleteNodes;
        let details = CallDetails {
            delta: None,
            nodes: nodes.iter().map(NodeRef::of).collect(),
        };
        let (fault, call) = self.arrive(method, details);
        if let Some(Fault::PartialDelete { deleted }) = fault {
            let deleted = deleted.min(nodes.len());
            let result = match self.delete(nodes[..deleted].to_vec()).await {
                Ok(()) => Err(CloudError::Provider(format!(
                    "injected fault: {deleted} of the {} nodes were deleted, then the call failed",
                    nodes.len()
                ))),
                Err(error) => Err(error),
            };
            call.answer(&result);
            return result;
        }
        let work = self.delete(nodes.to_vec());
        self.state.serve(method, fault, call, work).await
    }

    async fn force_delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        self.inner.force_delete_nodes(nodes).await
    }

    /// Cancels instances that never registered first, newest first; the rest of the decrease,
    /// if any, goes to the wrapped group (before any phantom is cancelled, so that its refusal
    /// changes nothing).
    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        let method = Method::DecreaseTargetSize;
        let details = CallDetails {
            delta: Some(delta),
            nodes: Vec::new(),
        };
        let (fault, call) = self.arrive(method, details);
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        let work = async move {
            if delta >= 0 {
                // Not a decrease: the wrapped group says why.
                return inner.decrease_target_size(delta).await;
            }
            let wanted = usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX);
            let phantoms = lock(&state.phantoms).count(inner.id());
            let cancelled = wanted.min(phantoms);
            let rest = wanted - cancelled;
            if rest > 0 {
                inner
                    .decrease_target_size(-i64::try_from(rest).unwrap_or(i64::MAX))
                    .await?;
            }
            lock(&state.phantoms).cancel(inner.id(), cancelled);
            Ok(())
        };
        self.state.serve(method, fault, call, work).await
    }

    /// The wrapped group's instances, then the ones that never registered, as being created.
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        let method = Method::Nodes;
        let (fault, call) = self.arrive(method, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        let work = async move {
            let mut instances = inner.nodes().await?;
            let never_registered = lock(&state.phantoms).ids(inner.id());
            instances.extend(never_registered.iter().map(|id| phantoms::instance(id)));
            Ok(instances)
        };
        self.state.serve(method, fault, call, work).await
    }

    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        let method = Method::TemplateNodeInfo;
        let (fault, call) = self.arrive(method, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let work = async move { inner.template_node_info().await };
        self.state.serve(method, fault, call, work).await
    }

    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        let method = Method::GetOptions;
        let (fault, call) = self.arrive(method, CallDetails::default());
        let inner = Arc::clone(&self.inner);
        let work = async move { inner.get_options().await };
        self.state.serve(method, fault, call, work).await
    }
}
