//! End-to-end behaviour against the fake Exoscale API beyond the checklist: whole scale-up and
//! scale-down cycles for both kinds of group, quota, 5xx bursts and retries, a slow API against
//! the request timeout, signature rejections, and secrets kept out of errors.

mod support;

use std::time::Duration;

use ferroscale_core::cloud::{CloudError, CloudProvider};
use ferroscale_provider_exoscale::signer::{self, SignedRequest};
use ferroscale_provider_exoscale::{ExoscaleProvider, Secret, UNLIMITED_QUOTA_MAX};
use ferroscale_testing_exoscale::Endpoint;
use support::*;

/// A plain pool grows by 2, the new members show up (as running once settled) after the group is
/// rebuilt from one of them, then two members are evicted and the size follows.
#[tokio::test]
async fn plain_pool_grows_and_shrinks() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &["1:5:workers"]);
    let first = first_member(&fake, &pool);
    let group = provider
        .node_group_for_node(&node(&first))
        .await
        .unwrap()
        .unwrap();
    group.increase_size(2).await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 3);
    let members = fake.members(&pool);
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|(_, state)| state == "running"));

    // A new member registers as a node: its lookup rebuilds the group with the new members.
    let newest = members[2].0.clone();
    let group = provider
        .node_group_for_node(&node(&newest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.nodes().await.unwrap().len(), 3);
    assert_eq!(provider.node_groups().await.unwrap().len(), 1);

    group
        .delete_nodes(&[node(&first), node(&newest)])
        .await
        .unwrap();
    assert_eq!(group.target_size().await.unwrap(), 1);
    assert!(!fake.instance_exists(&first));
    // The evicted members are not read again.
    assert_eq!(
        group
            .nodes()
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.id)
            .collect::<Vec<_>>(),
        vec![format!("exoscale://{}", members[1].0)]
    );
    // A rebuilt group agrees with the fake.
    let rebuilt = provider
        .node_group_for_node(&node(&members[1].0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rebuilt.target_size().await.unwrap(), 1);
}

/// The same cycle on an SKS nodepool: scale and evict go through the nodepool, `nodes()` sees the
/// new members at once, and the rebuilt group's size is the nodepool's.
#[tokio::test]
async fn sks_nodepool_grows_and_shrinks() {
    let fake = fake().await;
    let cluster = fake.add_sks_cluster("prod");
    let ids = fake.add_sks_nodepool(&cluster, "workers", 2);
    let provider = provider(&fake, &["1:4:workers"]);
    let first = first_member(&fake, &ids.instance_pool_id);
    let group = provider
        .node_group_for_node(&node(&first))
        .await
        .unwrap()
        .unwrap();
    group.increase_size(2).await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 4);
    assert_eq!(group.nodes().await.unwrap().len(), 4);
    assert_eq!(
        group.increase_size(1).await,
        Err(CloudError::InvalidRequest(
            "size increase is too large (current: 4 desired: 5 max: 4)".into()
        ))
    );

    let members = fake.members(&ids.instance_pool_id);
    group
        .delete_nodes(&[node(&members[3].0), node(&members[0].0)])
        .await
        .unwrap();
    assert_eq!(group.target_size().await.unwrap(), 2);
    let rebuilt = provider
        .node_group_for_node(&node(&members[1].0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rebuilt.target_size().await.unwrap(), 2);
    assert_eq!(fake.count(Endpoint::ScaleSksNodepool), 1);
    assert_eq!(fake.count(Endpoint::EvictSksNodepoolMembers), 1);
    assert_eq!(fake.count(Endpoint::ScaleInstancePool), 0);
}

/// Quota reached: without `--nodes`, an increase past the quota limit fails before any PUT.
#[tokio::test]
async fn quota_limit_caps_scale_up() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    fake.set_quota(2, 3);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.max_size(), 3);
    let error = group.increase_size(2).await.unwrap_err();
    assert_eq!(
        error,
        CloudError::InvalidRequest(
            "size increase is too large (current: 2 desired: 4 max: 3)".into()
        )
    );
    assert_eq!(fake.count(Endpoint::ScaleInstancePool), 0);
    group.increase_size(1).await.unwrap();
}

/// docs/exoscale.md EXO-Q2: an unlimited quota (−1) gives the documented large bound instead of
/// blocking every scale-up.
#[tokio::test]
async fn unlimited_quota_is_a_large_bound() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    fake.set_quota(1, -1);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.max_size(), UNLIMITED_QUOTA_MAX as usize);
    group.increase_size(3).await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 4);
}

/// A 5xx burst shorter than the GET attempts is absorbed; a longer one surfaces the API's
/// message.
#[tokio::test]
async fn get_retries_absorb_short_5xx_bursts() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let member = node(&first_member(&fake, &pool));
    let provider = provider(&fake, &[]);
    fake.fail_next(Endpoint::GetInstance, 503, 2);
    assert!(
        provider
            .node_group_for_node(&member)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(fake.count(Endpoint::GetInstance), 3);

    fake.fail_next(Endpoint::GetInstance, 502, 3);
    let error = provider.node_group_for_node(&member).await.unwrap_err();
    assert!(
        error.to_string().ends_with("API error: injected 502"),
        "{error}"
    );
}

/// A 5xx on a scale PUT is not retried: one PUT, the error, the size unchanged.
#[tokio::test]
async fn puts_are_never_retried() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    fake.fail_next(Endpoint::ScaleInstancePool, 503, 1);
    let error = group.increase_size(1).await.unwrap_err();
    assert!(
        error.to_string().contains("API error: injected 503"),
        "{error}"
    );
    assert_eq!(fake.count(Endpoint::ScaleInstancePool), 1);
    assert_eq!(group.target_size().await.unwrap(), 1);
    assert_eq!(fake.members(&pool).len(), 1);
}

/// An API slower than the request timeout gives a timeout error instead of hanging.
#[tokio::test]
async fn slow_api_hits_the_request_timeout() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let member = node(&first_member(&fake, &pool));
    let mut options = fast_options();
    options.client.request_timeout = Duration::from_millis(50);
    options.client.get_attempts = 2;
    let provider = provider_with(&fake, &[], options);
    fake.set_delay(Endpoint::GetInstance, Some(Duration::from_secs(30)));
    let error = provider.node_group_for_node(&member).await.unwrap_err();
    assert!(
        error.to_string().contains("no answer within 50ms"),
        "{error}"
    );

    fake.set_delay(Endpoint::GetInstance, None);
    assert!(
        provider
            .node_group_for_node(&member)
            .await
            .unwrap()
            .is_some()
    );
}

fn provider_with_credentials(
    fake: &ferroscale_testing_exoscale::FakeExoscale,
    key: &str,
    secret: &str,
) -> ExoscaleProvider {
    let env = env_for(fake, key, secret);
    ExoscaleProvider::from_env(|name| env.get(name).cloned(), Vec::new(), fast_options()).unwrap()
}

/// The fake refuses a wrong secret, a wrong key and an expired signature with 403; the provider
/// reports an invalid request with the API's message and never the credentials.
#[tokio::test]
async fn signature_rejections_are_invalid_requests_without_secrets() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let member = node(&first_member(&fake, &pool));

    let wrong_secret = provider_with_credentials(&fake, KEY, "not-the-secret");
    let error = wrong_secret.node_group_for_node(&member).await.unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("invalid request: invalid request signature"),
        "{error}"
    );
    assert!(!error.to_string().contains("not-the-secret"));

    let wrong_key = provider_with_credentials(&fake, "EXOwrong", SECRET);
    let error = wrong_key.node_group_for_node(&member).await.unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("invalid request: invalid API key"),
        "{error}"
    );
    assert!(!error.to_string().contains("EXOwrong"));
    assert!(!error.to_string().contains(SECRET));

    let good = provider(&fake, &[]);
    fake.set_clock_skew(601);
    let error = good.node_group_for_node(&member).await.unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("invalid request: request expired"),
        "{error}"
    );
    fake.set_clock_skew(590);
    assert!(good.node_group_for_node(&member).await.unwrap().is_some());
    // A 403 is not retried.
    assert!(fake.requests().iter().filter(|r| r.status == 403).count() == 3);
}

/// The fake hashes the body it received: a body other than the signed one is refused, so the
/// provider's accepted PUTs prove it signs exactly what it sends.
#[tokio::test]
async fn fake_refuses_a_body_other_than_the_signed_one() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let path = format!("/v2/instance-pool/{pool}:scale");
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let header = |body: &str| {
        signer::authorization_header(
            &SignedRequest {
                method: "PUT",
                path: &path,
                query: &[],
                body: body.as_bytes(),
                expires,
            },
            KEY,
            &Secret::new(SECRET),
        )
    };
    let url = format!("{}instance-pool/{pool}:scale", fake.base_url());
    let http = reqwest::Client::new();
    let send = |authorization: String, body: &'static str| {
        http.put(&url)
            .header("authorization", authorization)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let refused = send(header(r#"{"size":2}"#), r#"{"size":9}"#)
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(
        refused.text().await.unwrap(),
        r#"{"message":"invalid request signature"}"#
    );
    assert_eq!(fake.members(&pool).len(), 1);
    let accepted = send(header(r#"{"size":2}"#), r#"{"size":2}"#)
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    assert_eq!(fake.members(&pool).len(), 2);
}

/// Rate limiting is on by default and does not change results (its timing is a unit test of the
/// token bucket, on Tokio's paused clock).
#[tokio::test]
async fn default_rate_limit_lets_a_loop_through() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 5);
    let mut options = fast_options();
    options.client.rate_limit = Default::default();
    let provider = provider_with(&fake, &[], options);
    for (id, _) in fake.members(&pool) {
        provider.node_group_for_node(&node(&id)).await.unwrap();
    }
    assert_eq!(provider.node_groups().await.unwrap().len(), 1);
}

/// A pool that disappears between lookup and use: the group's calls fail with not found, and the
/// next refresh drops it.
#[tokio::test]
async fn deleted_pool_fails_calls_and_is_dropped() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    let member = first_member(&fake, &pool);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&member))
        .await
        .unwrap()
        .unwrap();
    fake.delete_pool(&pool);
    let error = group.increase_size(1).await.unwrap_err();
    assert!(error.to_string().contains("not found"), "{error}");
    provider.refresh().await.unwrap();
    assert!(provider.node_groups().await.unwrap().is_empty());
}

/// Deleting no node sends nothing (the API would refuse an empty eviction list).
#[tokio::test]
async fn deleting_no_node_sends_nothing() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    group.delete_nodes(&[]).await.unwrap();
    assert!(fake.requests().is_empty());
    assert_eq!(group.target_size().await.unwrap(), 2);
}
