//! Act: applying decisions through the cloud provider. Executing a scale-up plan is here
//! ([`scale_up`]); scale-down deletions are the state machines of [`crate::actuation`]; the loop's
//! own act steps (size fixes, instance deletions, starting deletions, soft taints) are in
//! [`crate::autoscaler`].

pub mod scale_up;
