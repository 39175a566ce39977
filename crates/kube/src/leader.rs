//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one of several replicas
//! autoscales.
//!
//! The protocol is the one client-go's leader election speaks, so Ferroscale and upstream replicas
//! see each other's leases: the holder writes its identity and renews `renewTime`; a candidate
//! takes the lease over only once the record has not changed for `leaseDurationSeconds` *as
//! measured on the candidate's own clock* (so clock skew between machines does not matter). Every
//! write is a replace guarded by the resourceVersion that was read, so two candidates can never
//! both win.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff;
use kube::api::PostParams;
use kube::{Api, Client};
use thiserror::Error;
use tokio::time::Instant;

use crate::repeated::{RepeatedWarnings, Verdict, error_chain};

/// How the lease is held. [`LeaderElectionConfig::new`] gives upstream's defaults.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// `--leader-elect-resource-name` (default `cluster-autoscaler`).
    pub lease_name: String,
    /// `--namespace` (upstream creates the lock there, not in `--leader-elect-resource-namespace`).
    pub namespace: String,
    /// Who we are in `holderIdentity`: the host name and a per-process suffix. Upstream uses the
    /// bare host name, with which two replicas sharing a host (host-network pods, or two processes
    /// on one machine) both believe they hold the lease and both act.
    pub identity: String,
    /// How long a lease that is not renewed keeps others out (15 s).
    pub lease_duration: Duration,
    /// The leader gives up when it could not renew for this long (10 s).
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews (2 s).
    pub retry_period: Duration,
    /// The API server's URL, named in the errors (empty when not known).
    pub api_server: String,
}

impl LeaderElectionConfig {
    /// Upstream defaults in `namespace`, with an identity unique to this process.
    pub fn new(namespace: impl Into<String>) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: "cluster-autoscaler".to_string(),
            namespace: namespace.into(),
            identity: process_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            api_server: String::new(),
        }
    }
}

/// `<host name>_<suffix>`, the suffix unique to this process on this host (its id and start time),
/// as Kubernetes' own components make theirs.
fn process_identity() -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}_{:x}{:x}", host_name(), std::process::id(), started)
}

/// The host name, or `ferroscale-<pid>` on the odd system without one.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| format!("ferroscale-{}", std::process::id()))
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LeaderElectionError {
    /// We led, and could not renew within the renew deadline, or someone else holds the lease now.
    #[error("lost leadership of lease {namespace}/{name}: {reason}")]
    Lost {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("lease {namespace}/{name}{server}: {message}", server = at_server(api_server))]
    Api {
        /// The API server's URL (empty when not known).
        api_server: String,
        namespace: String,
        name: String,
        message: String,
    },
}

/// " at <url>" when the URL is known.
fn at_server(url: &str) -> String {
    if url.is_empty() {
        String::new()
    } else {
        format!(" at {url}")
    }
}

/// The lease record as last read, and when (on our clock) it last changed.
#[derive(Debug)]
struct Observed {
    holder: String,
    renew_time: Option<MicroTime>,
    transitions: Option<i32>,
    changed_at: Instant,
}

/// How long a leader may go on acting. Its lease counts from the moment its last successful
/// renewal was *sent*: the write cannot have reached the API server before then, so no candidate
/// can see the lease unchanged for `leaseDurationSeconds` before that moment plus the lease
/// duration. The leader stops at that moment plus the renew deadline, which the flags keep
/// shorter than the lease duration. (Counting from when the answer arrived, as client-go does,
/// lets a slow answer stretch the leader's tenure past the lease it actually holds.)
#[derive(Debug, Clone, Copy)]
struct Tenure {
    renewed_at: Instant,
    renew_deadline: Duration,
}

impl Tenure {
    fn new(acquired_at: Instant, renew_deadline: Duration) -> Tenure {
        Tenure {
            renewed_at: acquired_at,
            renew_deadline,
        }
    }

    /// Time left to act at `now`, `None` once the renew deadline has passed.
    fn left(&self, now: Instant) -> Option<Duration> {
        let left = (self.renewed_at + self.renew_deadline).saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// A renewal that was sent at `attempt_started` succeeded.
    fn renewed(&mut self, attempt_started: Instant) {
        self.renewed_at = self.renewed_at.max(attempt_started);
    }
}

/// Acquires, renews and watches one Lease.
#[derive(Debug)]
pub struct LeaderElector {
    leases: Api<Lease>,
    config: LeaderElectionConfig,
    leading: AtomicBool,
    observed: Mutex<Option<Observed>>,
    /// Failed acquire and renew attempts already logged: one line per window for the same error.
    warnings: RepeatedWarnings,
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaderElectionConfig) -> LeaderElector {
        LeaderElector {
            leases: Api::namespaced(client, &config.namespace),
            config,
            leading: AtomicBool::new(false),
            observed: Mutex::new(None),
            warnings: RepeatedWarnings::default(),
        }
    }

    /// Whether our last acquire or renew succeeded and leadership has not been lost since.
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    fn api_error(&self, error: kube::Error) -> LeaderElectionError {
        LeaderElectionError::Api {
            api_server: self.config.api_server.clone(),
            namespace: self.config.namespace.clone(),
            name: self.config.lease_name.clone(),
            message: error_chain(&error),
        }
    }

    fn lost(&self, reason: impl Into<String>) -> LeaderElectionError {
        self.leading.store(false, Ordering::SeqCst);
        LeaderElectionError::Lost {
            namespace: self.config.namespace.clone(),
            name: self.config.lease_name.clone(),
            reason: reason.into(),
        }
    }

    fn spec(&self, now: jiff::Timestamp, acquired: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or renew the lease. `Ok(false)`: someone else holds a live lease, or
    /// won a race for it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaderElectionError> {
        let now = jiff::Timestamp::now();
        let Some(mut lease) = self
            .leases
            .get_opt(&self.config.lease_name)
            .await
            .map_err(|e| self.api_error(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, MicroTime(now), 0)),
            };
            return match self.leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(self.won()),
                Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(false),
                Err(e) => Err(self.api_error(e)),
            };
        };

        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let changed_at = self.observe(&holder, &spec);
        let ours = holder == self.config.identity;
        let lease_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.config.lease_duration);
        if !holder.is_empty() && !ours && changed_at.elapsed() < lease_duration {
            self.leading.store(false, Ordering::SeqCst);
            return Ok(false);
        }

        lease.spec = Some(if ours {
            self.spec(
                now,
                spec.acquire_time.unwrap_or(MicroTime(now)),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            self.spec(
                now,
                MicroTime(now),
                spec.lease_transitions.unwrap_or(0).saturating_add(1),
            )
        });
        match self
            .leases
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                if !ours {
                    tracing::info!(
                        identity = %self.config.identity,
                        previous = %holder,
                        "acquired leadership"
                    );
                }
                Ok(self.won())
            }
            // Someone else wrote the lease since we read it; they are ahead of us.
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(false),
            Err(e) => Err(self.api_error(e)),
        }
    }

    fn won(&self) -> bool {
        self.leading.store(true, Ordering::SeqCst);
        true
    }

    /// Records the lease as read; returns when it last changed on our clock.
    fn observe(&self, holder: &str, spec: &LeaseSpec) -> Instant {
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        let same = observed.as_ref().is_some_and(|o| {
            o.holder == holder
                && o.renew_time == spec.renew_time
                && o.transitions == spec.lease_transitions
        });
        if !same {
            *observed = Some(Observed {
                holder: holder.to_string(),
                renew_time: spec.renew_time.clone(),
                transitions: spec.lease_transitions,
                changed_at: Instant::now(),
            });
        }
        observed
            .as_ref()
            .map_or_else(Instant::now, |o| o.changed_at)
    }

    /// A failed attempt, logged the first time and then once per window with the count of the
    /// identical ones held back (a candidate retries every retry period for as long as the API
    /// server is away).
    fn warn(&self, what: &str, error: &str) {
        match self.warnings.note(error, "lease", Instant::now()) {
            Verdict::Log => tracing::warn!(error, "{what}"),
            Verdict::LogWithSummary(held_back) => {
                tracing::warn!(error, "{what} ({held_back})")
            }
            Verdict::Suppress => tracing::debug!(error, "{what}"),
        }
    }

    /// Tries every retry period until we lead. API errors are logged and retried. Returns when the
    /// winning attempt started: the tenure counts from then (see [`Tenure`]).
    pub async fn acquire(&self) -> Instant {
        loop {
            let started = Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(true) => return started,
                Ok(false) => {}
                Err(error) => {
                    self.warn("could not acquire leadership; retrying", &error.to_string())
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// While we lead, renews every retry period; returns when leadership is lost: another holder
    /// took the lease, or no renewal succeeded within the renew deadline. `acquired_at` is when
    /// the attempt that won the lease started. It returns no later than the renew deadline after
    /// the start of the last successful renewal — however slowly the API server answers — so
    /// that the caller stops acting before any other candidate can see the lease expire.
    pub async fn renew_until_lost(&self, acquired_at: Instant) -> LeaderElectionError {
        let mut tenure = Tenure::new(acquired_at, self.config.renew_deadline);
        loop {
            let Some(left) = tenure.left(Instant::now()) else {
                return self.deadline_passed();
            };
            tokio::time::sleep(self.config.retry_period.min(left)).await;
            let started = Instant::now();
            let Some(left) = tenure.left(started) else {
                return self.deadline_passed();
            };
            // An attempt may not outlive the tenure: a renewal that answers after the deadline
            // would come too late to count anyway.
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => tenure.renewed(started),
                Ok(Ok(false)) => return self.lost("another candidate holds the lease"),
                Ok(Err(error)) => self.warn("could not renew the lease", &error.to_string()),
                Err(_) => self.warn(
                    "could not renew the lease",
                    &format!(
                        "no answer{} before the renew deadline",
                        at_server(&self.config.api_server)
                    ),
                ),
            }
        }
    }

    fn deadline_passed(&self) -> LeaderElectionError {
        self.lost(format!(
            "not renewed within the renew deadline of {:?}",
            self.config.renew_deadline
        ))
    }

    /// Waits until we lead, then runs `work` while renewing. Returns `work`'s output, or the loss
    /// of leadership (in which case `work` is dropped: upstream exits the process at that point,
    /// and callers should do likewise).
    pub async fn run_while_leader<F: Future>(
        &self,
        work: F,
    ) -> Result<F::Output, LeaderElectionError> {
        let acquired_at = self.acquire().await;
        tokio::select! {
            output = work => Ok(output),
            lost = self.renew_until_lost(acquired_at) => Err(lost),
        }
    }

    /// Gives the lease up at once (an empty holder), so another candidate need not wait for it to
    /// expire. Does nothing when we do not lead.
    pub async fn release(&self) -> Result<(), LeaderElectionError> {
        if !self.leading.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let Some(mut lease) = self
            .leases
            .get_opt(&self.config.lease_name)
            .await
            .map_err(|e| self.api_error(e))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        self.leases
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.api_error(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tenure counts from when a renewal was sent, never from when its answer came back: a
    /// renewal sent at t=4 s whose answer took 6 s extends the tenure to 4 s + the deadline.
    #[test]
    fn a_slow_renewal_extends_the_tenure_only_from_when_it_was_sent() {
        let start = Instant::now();
        let deadline = Duration::from_secs(10);
        let mut tenure = Tenure::new(start, deadline);
        assert_eq!(tenure.left(start), Some(deadline));
        tenure.renewed(start + Duration::from_secs(4));
        let answered = start + Duration::from_secs(10);
        assert_eq!(tenure.left(answered), Some(Duration::from_secs(4)));
        assert_eq!(tenure.left(start + Duration::from_secs(14)), None);
        // An older attempt answering late never moves the tenure back.
        tenure.renewed(start + Duration::from_secs(1));
        assert_eq!(tenure.left(answered), Some(Duration::from_secs(4)));
    }

    /// Two replicas on one host must not share an identity, or both would think they lead.
    #[test]
    fn two_processes_on_one_host_get_different_identities() {
        let first = LeaderElectionConfig::new("kube-system").identity;
        std::thread::sleep(Duration::from_millis(1));
        let second = LeaderElectionConfig::new("kube-system").identity;
        assert_ne!(first, second);
        assert!(first.starts_with(&format!("{}_", host_name())), "{first}");
    }
}
