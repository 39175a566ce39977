//! Shared setup of the tests against the fake Exoscale API: the fake with known credentials, a
//! provider pointed at it with short intervals, and Kubernetes nodes for its instances.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use ferroscale_model::{Node, Resources};
use ferroscale_provider_exoscale::{
    ClientOptions, ExoscaleProvider, ProviderOptions, RateLimit, Timing,
};
use ferroscale_testing_exoscale::{Credentials, FakeExoscale};

pub const KEY: &str = "EXOtestkey";
pub const SECRET: &str = "test-secret-value";
pub const ZONE: &str = "ch-gva-2";

pub async fn fake() -> FakeExoscale {
    FakeExoscale::start(Credentials::new(KEY, SECRET)).await
}

/// Polling in milliseconds, bounds short enough that a stuck wait ends the test quickly, no
/// rate limit, fast retries.
pub fn fast_options() -> ProviderOptions {
    ProviderOptions {
        client: ClientOptions {
            request_timeout: Duration::from_secs(5),
            get_attempts: 3,
            retry_backoff: Duration::from_millis(1),
            rate_limit: RateLimit {
                per_second: 0.0,
                burst: 1,
            },
        },
        timing: Timing {
            operation_poll: Duration::from_millis(2),
            operation_limit: Duration::from_secs(5),
            pool_poll: Duration::from_millis(2),
            pool_limit: Duration::from_secs(5),
        },
    }
}

pub fn env_for(fake: &FakeExoscale, key: &str, secret: &str) -> HashMap<String, String> {
    HashMap::from([
        ("EXOSCALE_ZONE".to_string(), ZONE.to_string()),
        ("EXOSCALE_API_KEY".to_string(), key.to_string()),
        ("EXOSCALE_API_SECRET".to_string(), secret.to_string()),
        ("EXOSCALE_API_ENDPOINT".to_string(), fake.base_url()),
    ])
}

pub fn provider_with(
    fake: &FakeExoscale,
    nodes: &[&str],
    options: ProviderOptions,
) -> ExoscaleProvider {
    let env = env_for(fake, KEY, SECRET);
    ExoscaleProvider::from_env(
        |name| env.get(name).cloned(),
        nodes.iter().map(|s| s.to_string()).collect(),
        options,
    )
    .unwrap()
}

pub fn provider(fake: &FakeExoscale, nodes: &[&str]) -> ExoscaleProvider {
    provider_with(fake, nodes, fast_options())
}

/// A node registered for instance `instance_id`.
pub fn node(instance_id: &str) -> Node {
    let mut node = Node::new(format!("node-{instance_id}"), Resources::new(2000, 4 << 30));
    node.provider_id = format!("exoscale://{instance_id}");
    node
}

/// The first member of a pool.
pub fn first_member(fake: &FakeExoscale, pool_id: &str) -> String {
    fake.members(pool_id)
        .first()
        .map(|(id, _)| id.clone())
        .expect("the pool has a member")
}
