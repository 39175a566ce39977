//! The behaviour statements of docs/exoscale.md, one test per statement (`c24_` checks EXO-24),
//! against the local fake of the Exoscale API over real sockets. Statements fully covered by unit
//! tests say where (c02 and c04 in `config`/`signer`, c24's mapping and c26's min in `provider`).

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferroscale_core::cloud::{CloudError, CloudProvider, InstanceState, NodeGroup};
use ferroscale_model::{Taint, TaintEffect};
use ferroscale_provider_exoscale::{
    ApiClient, ApiError, ClientOptions, ConfigError, ExoscaleConfig, ExoscaleProvider, GroupKind,
    ProviderOptions, Timing,
};
use ferroscale_testing_exoscale::{Endpoint, OperationOutcome};
use support::*;

/// docs/exoscale.md EXO-01: A missing variable aborts construction with its message; all three set
/// builds the provider without any API call.
#[tokio::test]
async fn c01_construction_needs_the_three_variables_and_calls_nothing() {
    let fake = fake().await;
    let env = env_for(&fake, KEY, SECRET);
    for (missing, expected) in [
        ("EXOSCALE_ZONE", ConfigError::MissingZone),
        ("EXOSCALE_API_KEY", ConfigError::MissingApiKey),
        ("EXOSCALE_API_SECRET", ConfigError::MissingApiSecret),
    ] {
        let error = ExoscaleProvider::from_env(
            |name| (name != missing).then(|| env.get(name).cloned()).flatten(),
            Vec::new(),
            ProviderOptions::default(),
        )
        .unwrap_err();
        assert_eq!(error, expected);
        assert!(error.to_string().starts_with(missing), "{error}");
    }
    let provider = provider(&fake, &[]);
    assert_eq!(provider.name(), "exoscale");
    assert!(fake.requests().is_empty());
}

/// docs/exoscale.md EXO-02: Host name from environment and zone (URL construction; the fake needs
/// the override).
#[test]
fn c02_requests_go_to_the_zone_host() {
    let config = |environment: &str| ExoscaleConfig {
        zone: "ch-gva-2".into(),
        api_key: ferroscale_provider_exoscale::Secret::new("k"),
        api_secret: ferroscale_provider_exoscale::Secret::new("s"),
        environment: environment.into(),
        endpoint: None,
    };
    let client = ApiClient::new(&config("api"), ClientOptions::default()).unwrap();
    assert_eq!(client.base_url(), "https://api-ch-gva-2.exoscale.com/v2/");
    let client = ApiClient::new(&config("ppapi"), ClientOptions::default()).unwrap();
    assert_eq!(client.base_url(), "https://ppapi-ch-gva-2.exoscale.com/v2/");
}

/// docs/exoscale.md EXO-03: The header sent has the form `EXO2-HMAC-SHA256
/// credential=<key>,expires=<t>,signature=<sig>` with `t` = now + 600 s, and the fake's independent
/// check accepts it (the vectors themselves are unit tests of `signer`).
#[tokio::test]
async fn c03_authorization_header_form_and_expiry() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap();
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let requests = fake.requests();
    assert!(!requests.is_empty());
    for request in requests {
        assert_eq!(request.status, 200, "{request:?}");
        let header = request.header("authorization").unwrap();
        let rest = header
            .strip_prefix(&format!("EXO2-HMAC-SHA256 credential={KEY},expires="))
            .unwrap_or_else(|| panic!("{header}"));
        let (expires, signature) = rest.split_once(",signature=").unwrap();
        let expires: u64 = expires.parse().unwrap();
        assert!((before + 600..=after + 600).contains(&expires), "{expires}");
        assert_eq!(
            signature.len(),
            44,
            "base64 of 32 bytes with padding: {signature}"
        );
        assert!(signature.ends_with('='));
    }
}

/// docs/exoscale.md EXO-04: No query parameters in the provider's traffic, so no
/// `signed-query-args` (the sorting and joining rules are unit tests of `signer`).
#[tokio::test]
async fn c04_no_signed_query_args_without_query() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap();
    for request in fake.requests() {
        assert_eq!(request.query, None);
        assert!(
            !request
                .header("authorization")
                .unwrap()
                .contains("signed-query-args")
        );
    }
}

/// docs/exoscale.md EXO-05: Exact PUT bodies, sent as JSON, and accepted by the fake's signature
/// check (which hashes the body it received, so the signed body is the sent body).
#[tokio::test]
async fn c05_put_bodies_are_exact_and_signed_as_sent() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    let members: Vec<String> = fake.members(&pool).into_iter().map(|(id, _)| id).collect();
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&members[0]))
        .await
        .unwrap()
        .unwrap();
    group.increase_size(1).await.unwrap();
    group
        .delete_nodes(&[node(&members[0]), node(&members[1])])
        .await
        .unwrap();
    let puts: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(puts.len(), 2);
    assert_eq!(puts[0].body, r#"{"size":3}"#);
    assert_eq!(
        puts[1].body,
        format!(r#"{{"instances":["{}","{}"]}}"#, members[0], members[1])
    );
    for put in puts {
        assert_eq!(put.status, 200);
        assert_eq!(put.header("content-type"), Some("application/json"));
    }
}

/// docs/exoscale.md EXO-06: 404 → not found; other 4xx → invalid request; 5xx → API error; each
/// with the message.
#[tokio::test]
async fn c06_error_kinds_carry_the_message() {
    let fake = fake().await;
    let env = env_for(&fake, KEY, SECRET);
    let config = ExoscaleConfig::from_lookup(|name| env.get(name).cloned()).unwrap();
    let options = support::fast_options().client;
    let client = ApiClient::new(&config, options).unwrap();

    let error = client.get_instance("nope").await.unwrap_err();
    assert_eq!(
        error.error,
        ApiError::NotFound("instance nope not found".into())
    );
    assert!(error.error.is_not_found());

    fake.fail_next(Endpoint::GetInstance, 409, 1);
    let error = client.get_instance("nope").await.unwrap_err();
    assert_eq!(error.error, ApiError::InvalidRequest("injected 409".into()));

    fake.fail_next(Endpoint::GetInstance, 500, 3);
    let error = client.get_instance("nope").await.unwrap_err();
    assert_eq!(error.error, ApiError::Api("injected 500".into()));
    assert_eq!(
        error.to_string(),
        "GET /v2/instance/nope: API error: injected 500"
    );
}

/// docs/exoscale.md EXO-07: A node of a plain pool → an Instance Pool group whose id is the pool
/// id.
#[tokio::test]
async fn c07_plain_pool_node_gives_an_instance_pool_group() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.id(), pool);
    assert_eq!(
        provider.cached_group(&pool).unwrap().kind(),
        &GroupKind::InstancePool {
            pool_name: "workers".into()
        }
    );
}

/// docs/exoscale.md EXO-08: A node of an SKS nodepool's pool → an SKS group with the pool id,
/// scaling through the cluster and nodepool ids.
#[tokio::test]
async fn c08_sks_pool_node_gives_an_sks_group() {
    let fake = fake().await;
    let cluster = fake.add_sks_cluster("prod");
    let _other = fake.add_sks_nodepool(&cluster, "other", 1);
    let ids = fake.add_sks_nodepool(&cluster, "workers", 1);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &ids.instance_pool_id)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.id(), ids.instance_pool_id);
    assert_eq!(
        provider.cached_group(group.id()).unwrap().kind(),
        &GroupKind::SksNodepool {
            cluster_id: cluster.clone(),
            nodepool_id: ids.nodepool_id.clone(),
            nodepool_name: "workers".into(),
        }
    );
    group.increase_size(1).await.unwrap();
    assert_eq!(fake.count(Endpoint::ScaleSksNodepool), 1);
    assert_eq!(fake.members(&ids.instance_pool_id).len(), 2);
}

/// docs/exoscale.md EXO-09: An instance without manager is not managed: no group, no error.
#[tokio::test]
async fn c09_unmanaged_instance_has_no_group() {
    let fake = fake().await;
    let lone = fake.add_instance("bastion", "running", None);
    let provider = provider(&fake, &[]);
    assert!(
        provider
            .node_group_for_node(&node(&lone))
            .await
            .unwrap()
            .is_none()
    );
    assert!(provider.node_groups().await.unwrap().is_empty());
}

/// docs/exoscale.md EXO-10: A pool managed by a nodepool no cluster lists → error naming the id and
/// the zone.
#[tokio::test]
async fn c10_unknown_nodepool_is_an_error_naming_id_and_zone() {
    let fake = fake().await;
    let pool =
        fake.add_instance_pool_managed_by("ghost", 1, "dead0000-0000-4000-8000-000000000000");
    let provider = provider(&fake, &[]);
    let error = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        CloudError::Provider(
            "no SKS Nodepool found with ID dead0000-0000-4000-8000-000000000000 in zone ch-gva-2"
                .into()
        )
    );
}

/// docs/exoscale.md EXO-11: Empty provider ID: the legacy master taint exempts the node; anything
/// else is an error (the control-plane taint does not exempt, EXO-Q4). No API call either way.
#[tokio::test]
async fn c11_empty_provider_id() {
    let fake = fake().await;
    let provider = provider(&fake, &[]);
    let mut master = node("x");
    master.provider_id = String::new();
    master.taints.push(Taint::new(
        "node-role.kubernetes.io/master",
        "",
        TaintEffect::NoSchedule,
    ));
    assert!(
        provider
            .node_group_for_node(&master)
            .await
            .unwrap()
            .is_none()
    );

    let mut control_plane = node("x");
    control_plane.provider_id = "exoscale://".into();
    control_plane.taints.push(Taint::new(
        "node-role.kubernetes.io/control-plane",
        "",
        TaintEffect::NoSchedule,
    ));
    let error = provider
        .node_group_for_node(&control_plane)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("unable to retrieve instance ID from Node \"node-x\""),
        "{error}"
    );
    assert!(fake.requests().is_empty());
}

/// docs/exoscale.md EXO-12: Without `--nodes`: min 1, max = quota limit (not limit − usage).
#[tokio::test]
async fn c12_default_bounds_from_the_quota_limit() {
    let fake = fake().await;
    fake.set_quota(4, 20);
    let pool = fake.add_instance_pool("workers", 1);
    fake.set_quota(4, 20);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((group.min_size(), group.max_size()), (1, 20));
    assert_eq!(fake.count(Endpoint::GetQuota), 1);
}

/// docs/exoscale.md EXO-13: `--nodes` bounds match the pool name for plain pools and the nodepool
/// name (not its pool's name) for SKS groups; a matching spec means no quota call.
#[tokio::test]
async fn c13_nodes_bounds_match_pool_or_nodepool_name() {
    let fake = fake().await;
    let plain = fake.add_instance_pool("workers", 1);
    let cluster = fake.add_sks_cluster("prod");
    let sks = fake.add_sks_nodepool(&cluster, "gpu", 1);
    // The fake names the nodepool's pool "nodepool-gpu": that name must not match.
    let provider = provider(&fake, &["2:5:workers", "3:9:nodepool-gpu"]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &plain)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((group.min_size(), group.max_size()), (2, 5));
    assert_eq!(fake.count(Endpoint::GetQuota), 0);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &sks.instance_pool_id)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((group.min_size(), group.max_size()), (1, 20));

    let provider = support::provider(&fake, &["3:7:gpu"]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &sks.instance_pool_id)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((group.min_size(), group.max_size()), (3, 7));
}

/// docs/exoscale.md EXO-14: An invalid spec examined before a match (or with no match) fails the
/// lookup; one after the match is never examined.
#[tokio::test]
async fn c14_invalid_nodes_spec_fails_when_examined() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let member = node(&first_member(&fake, &pool));
    for bad in ["0:5:x", "5:2:x", "a:b:x"] {
        let provider = support::provider(&fake, &[bad, "1:3:workers"]);
        let error = provider.node_group_for_node(&member).await.unwrap_err();
        assert!(
            matches!(&error, CloudError::IllegalConfiguration(m)
                if m.starts_with("failed to parse node group spec")),
            "{error}"
        );
        let provider = support::provider(&fake, &["1:3:workers", bad]);
        let group = provider
            .node_group_for_node(&member)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(group.max_size(), 3);
    }
}

/// docs/exoscale.md EXO-15: One cached group per pool, in discovery order, returned by
/// `node_groups`.
#[tokio::test]
async fn c15_one_cached_group_per_pool() {
    let fake = fake().await;
    let a = fake.add_instance_pool("a", 2);
    let b = fake.add_instance_pool("b", 1);
    let provider = provider(&fake, &[]);
    for (id, _) in fake.members(&a) {
        provider.node_group_for_node(&node(&id)).await.unwrap();
    }
    let ids = |groups: Vec<std::sync::Arc<dyn NodeGroup>>| {
        groups
            .iter()
            .map(|g| g.id().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(provider.node_groups().await.unwrap()), vec![a.clone()]);
    provider
        .node_group_for_node(&node(&first_member(&fake, &b)))
        .await
        .unwrap();
    assert_eq!(ids(provider.node_groups().await.unwrap()), vec![a, b]);
}

/// docs/exoscale.md EXO-16: `refresh` drops a group whose pool answers 404; a 500 fails it and
/// keeps the cache.
#[tokio::test]
async fn c16_refresh_drops_gone_pools_and_keeps_cache_on_errors() {
    let fake = fake().await;
    let a = fake.add_instance_pool("a", 1);
    let b = fake.add_instance_pool("b", 1);
    let provider = provider(&fake, &[]);
    for pool in [&a, &b] {
        provider
            .node_group_for_node(&node(&first_member(&fake, pool)))
            .await
            .unwrap();
    }
    fake.fail_next(Endpoint::GetInstancePool, 500, 3);
    let error = provider.refresh().await.unwrap_err();
    assert!(
        error.to_string().contains("API error: injected 500"),
        "{error}"
    );
    assert_eq!(provider.node_groups().await.unwrap().len(), 2);

    fake.delete_pool(&a);
    provider.refresh().await.unwrap();
    let groups = provider.node_groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].id(), b);
}

/// docs/exoscale.md EXO-17: Target size is the pool size (plain) or the nodepool size (SKS) at
/// build time, and `refresh` does not renew it.
#[tokio::test]
async fn c17_target_size_from_build_time() {
    let fake = fake().await;
    let plain = fake.add_instance_pool("workers", 3);
    let cluster = fake.add_sks_cluster("prod");
    let sks = fake.add_sks_nodepool(&cluster, "np", 2);
    let provider = provider(&fake, &[]);
    let plain_group = provider
        .node_group_for_node(&node(&first_member(&fake, &plain)))
        .await
        .unwrap()
        .unwrap();
    let sks_group = provider
        .node_group_for_node(&node(&first_member(&fake, &sks.instance_pool_id)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(plain_group.target_size().await.unwrap(), 3);
    assert_eq!(sks_group.target_size().await.unwrap(), 2);
    fake.add_instance_pool("unrelated", 0);
    provider.refresh().await.unwrap();
    assert_eq!(plain_group.target_size().await.unwrap(), 3);
}

/// docs/exoscale.md EXO-18: Zero delta and an increase beyond max fail without any API call.
#[tokio::test]
async fn c18_bad_increases_send_nothing() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &["1:2:workers"]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    assert_eq!(
        group.increase_size(0).await,
        Err(CloudError::InvalidRequest(
            "delta must be positive, have: 0".into()
        ))
    );
    assert_eq!(
        group.increase_size(2).await,
        Err(CloudError::InvalidRequest(
            "size increase is too large (current: 1 desired: 3 max: 2)".into()
        ))
    );
    assert!(fake.requests().is_empty());
    assert_eq!(group.target_size().await.unwrap(), 1);
}

/// docs/exoscale.md EXO-19: `increase_size(2)` from 1: one scale PUT `{"size":3}`, operation polls
/// until success, pool polls until running, then target 3 — in that order.
#[tokio::test]
async fn c19_increase_size_sequence() {
    let fake = fake().await;
    fake.set_operation_settle_polls(3);
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    group.increase_size(2).await.unwrap();
    let sequence: Vec<(Endpoint, String)> = fake
        .requests()
        .into_iter()
        .map(|r| (r.endpoint.unwrap(), r.body))
        .collect();
    assert_eq!(
        sequence,
        vec![
            (Endpoint::ScaleInstancePool, r#"{"size":3}"#.to_string()),
            (Endpoint::GetOperation, String::new()),
            (Endpoint::GetOperation, String::new()),
            (Endpoint::GetOperation, String::new()),
            (Endpoint::GetInstancePool, String::new()),
        ]
    );
    assert_eq!(group.target_size().await.unwrap(), 3);
    assert_eq!(fake.pool_size_and_state(&pool), Some((3, "running".into())));
}

/// docs/exoscale.md EXO-20: An operation ending in `failure` or `timeout` fails the call; the
/// cached size stays.
#[tokio::test]
async fn c20_failed_operations_keep_the_cached_size() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    for (outcome, text) in [
        (OperationOutcome::Failure, "job failed"),
        (OperationOutcome::Timeout, "job timed out"),
    ] {
        fake.next_operation_ends(outcome);
        let error = group.increase_size(1).await.unwrap_err();
        assert!(error.to_string().contains(text), "{error}");
        assert_eq!(group.target_size().await.unwrap(), 1);
    }
}

/// docs/exoscale.md EXO-21: `delete_nodes([A, B])`: pool read (running) first, one evict PUT,
/// operation poll, pool poll, then target −2; the members are gone from the pool.
#[tokio::test]
async fn c21_delete_nodes_sequence() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 3);
    let members: Vec<String> = fake.members(&pool).into_iter().map(|(id, _)| id).collect();
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&members[0]))
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    group
        .delete_nodes(&[node(&members[2]), node(&members[0])])
        .await
        .unwrap();
    let sequence: Vec<Endpoint> = fake
        .requests()
        .into_iter()
        .map(|r| r.endpoint.unwrap())
        .collect();
    assert_eq!(
        sequence,
        vec![
            Endpoint::GetInstancePool,
            Endpoint::EvictInstancePoolMembers,
            Endpoint::GetOperation,
            Endpoint::GetInstancePool,
        ]
    );
    assert_eq!(
        fake.requests()[1].body,
        format!(r#"{{"instances":["{}","{}"]}}"#, members[2], members[0])
    );
    assert_eq!(group.target_size().await.unwrap(), 1);
    assert_eq!(
        fake.members(&pool),
        vec![(members[1].clone(), "running".to_string())]
    );
}

/// docs/exoscale.md EXO-22: SKS groups scale and evict through the nodepool paths, plain groups
/// through the pool.
#[tokio::test]
async fn c22_paths_per_kind() {
    let fake = fake().await;
    let plain = fake.add_instance_pool("workers", 1);
    let cluster = fake.add_sks_cluster("prod");
    let sks = fake.add_sks_nodepool(&cluster, "np", 1);
    let provider = provider(&fake, &[]);
    for pool in [&plain, &sks.instance_pool_id] {
        let member = first_member(&fake, pool);
        let group = provider
            .node_group_for_node(&node(&member))
            .await
            .unwrap()
            .unwrap();
        group.increase_size(1).await.unwrap();
        group.delete_nodes(&[node(&member)]).await.unwrap();
    }
    let puts: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .map(|r| r.path)
        .collect();
    let sks_base = format!("/v2/sks-cluster/{cluster}/nodepool/{}", sks.nodepool_id);
    assert_eq!(
        puts,
        vec![
            format!("/v2/instance-pool/{plain}:scale"),
            format!("/v2/instance-pool/{plain}:evict"),
            format!("{sks_base}:scale"),
            format!("{sks_base}:evict"),
        ]
    );
}

/// docs/exoscale.md EXO-23: `decrease_target_size` succeeds and sends nothing (EXO-Q1).
#[tokio::test]
async fn c23_decrease_target_size_is_a_no_op() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    assert_eq!(group.decrease_target_size(-1).await, Ok(()));
    assert!(fake.requests().is_empty());
    assert_eq!(group.target_size().await.unwrap(), 2);
}

/// docs/exoscale.md EXO-24: `nodes()` reports `exoscale://<id>` with mapped states.
#[tokio::test]
async fn c24_nodes_with_mapped_states() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 4);
    let members: Vec<String> = fake.members(&pool).into_iter().map(|(id, _)| id).collect();
    for (id, state) in members
        .iter()
        .zip(["running", "starting", "stopping", "error"])
    {
        fake.set_instance_state(id, state);
    }
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&members[0]))
        .await
        .unwrap()
        .unwrap();
    let instances = group.nodes().await.unwrap();
    let ids: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
    assert_eq!(
        ids,
        members
            .iter()
            .map(|m| format!("exoscale://{m}"))
            .collect::<Vec<_>>()
    );
    let status = |i: usize| instances[i].status.clone().unwrap();
    assert_eq!(status(0).state, InstanceState::Running);
    assert_eq!(status(1).state, InstanceState::Creating);
    assert_eq!(status(2).state, InstanceState::Deleting);
    assert_eq!(status(3).error.unwrap().code, "no-code-exoscale");
    assert!(status(0).error.is_none());
}

/// docs/exoscale.md EXO-25: SKS `nodes()` re-reads the pool; plain `nodes()` uses the member ids of
/// build time (EXO-Q5).
#[tokio::test]
async fn c25_sks_nodes_reread_plain_nodes_cached() {
    let fake = fake().await;
    let plain = fake.add_instance_pool("workers", 1);
    let cluster = fake.add_sks_cluster("prod");
    let sks = fake.add_sks_nodepool(&cluster, "np", 1);
    let provider = provider(&fake, &[]);
    let plain_group = provider
        .node_group_for_node(&node(&first_member(&fake, &plain)))
        .await
        .unwrap()
        .unwrap();
    let sks_group = provider
        .node_group_for_node(&node(&first_member(&fake, &sks.instance_pool_id)))
        .await
        .unwrap()
        .unwrap();
    plain_group.increase_size(1).await.unwrap();
    sks_group.increase_size(1).await.unwrap();
    fake.clear_requests();
    assert_eq!(plain_group.nodes().await.unwrap().len(), 1);
    assert_eq!(fake.count(Endpoint::GetInstancePool), 0);
    assert_eq!(sks_group.nodes().await.unwrap().len(), 2);
    assert_eq!(fake.count(Endpoint::GetInstancePool), 1);
    // Rebuilding the plain group through a node renews its members.
    let rebuilt = provider
        .node_group_for_node(&node(&first_member(&fake, &plain)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rebuilt.nodes().await.unwrap().len(), 2);
}

/// docs/exoscale.md EXO-26: A plain group built with max 0 (quota limit 0) reads the live quota
/// when it grows (`max_size` cannot call the API; see the crate docs). The min clamp is a unit
/// test.
#[tokio::test]
async fn c26_zero_max_reads_the_live_quota() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    fake.set_quota(1, 0);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.max_size(), 0);
    let error = group.increase_size(1).await.unwrap_err();
    assert!(error.to_string().contains("max: 0"), "{error}");
    fake.set_quota(1, 10);
    fake.clear_requests();
    group.increase_size(1).await.unwrap();
    assert_eq!(fake.requests()[0].endpoint, Some(Endpoint::GetQuota));
    assert_eq!(group.target_size().await.unwrap(), 2);
}

/// docs/exoscale.md EXO-27: Optional methods not implemented; exists; not autoprovisioned.
#[tokio::test]
async fn c27_optional_methods() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let member = node(&first_member(&fake, &pool));
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&member)
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    assert_eq!(
        group.template_node_info().await,
        Err(CloudError::NotImplemented)
    );
    assert_eq!(group.get_options().await, Err(CloudError::NotImplemented));
    assert_eq!(
        group.atomic_increase_size(1).await,
        Err(CloudError::NotImplemented)
    );
    assert_eq!(
        group.force_delete_nodes(&[member]).await,
        Err(CloudError::NotImplemented)
    );
    assert!(group.exist());
    assert!(!group.autoprovisioned());
    assert!(fake.requests().is_empty());
}

/// docs/exoscale.md EXO-28: `debug()` format.
#[tokio::test]
async fn c28_debug_format() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &["2:6:workers"]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        group.debug(),
        format!("Node group ID: {pool} (min:2 max:6)")
    );
}

/// docs/exoscale.md EXO-29: Provider identity and optional methods.
#[tokio::test]
async fn c29_provider_methods() {
    let fake = fake().await;
    let provider = provider(&fake, &[]);
    assert_eq!(provider.name(), "exoscale");
    assert_eq!(provider.gpu_label(), "");
    assert!(provider.available_gpu_types().is_empty());
    assert_eq!(
        provider.has_instance(&node("x")).await,
        Err(CloudError::NotImplemented)
    );
    assert!(provider.pricing().is_err_and(|e| e.is_not_implemented()));
    let mut gpu_node = node("g");
    gpu_node.allocatable.set("nvidia.com/gpu", 1);
    assert_eq!(
        provider
            .node_gpu_config(&gpu_node)
            .map(|config| config.resource_name),
        Some("nvidia.com/gpu".to_string())
    );
    assert!(provider.node_gpu_config(&node("plain")).is_none());
    assert!(fake.requests().is_empty());
}

/// docs/exoscale.md EXO-30: No groups until a node has been resolved.
#[tokio::test]
async fn c30_no_groups_before_resolution() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    provider.refresh().await.unwrap();
    assert!(provider.node_groups().await.unwrap().is_empty());
    provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap();
    assert_eq!(provider.node_groups().await.unwrap().len(), 1);
}

/// docs/exoscale.md EXO-31: Operation polling gives up after its bound; pool polling too, with the
/// deadline error, and a delete on a pool that never becomes running sends no evict.
#[tokio::test]
async fn c31_polling_bounds() {
    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 2);
    let mut options = support::fast_options();
    options.timing = Timing {
        operation_poll: Duration::from_millis(2),
        operation_limit: Duration::from_millis(60),
        pool_poll: Duration::from_millis(2),
        pool_limit: Duration::from_millis(60),
    };
    let provider = provider_with(&fake, &[], options);
    let member = first_member(&fake, &pool);
    let group = provider
        .node_group_for_node(&node(&member))
        .await
        .unwrap()
        .unwrap();

    fake.next_operation_ends(OperationOutcome::NeverSettles);
    let error = group.increase_size(1).await.unwrap_err();
    assert!(error.to_string().contains("deadline exceeded"), "{error}");
    assert!(fake.count(Endpoint::GetOperation) >= 2);
    assert_eq!(group.target_size().await.unwrap(), 2);

    fake.set_pool_stuck(&pool, true);
    fake.set_pool_state(&pool, "scaling-up");
    fake.clear_requests();
    let error = group.delete_nodes(&[node(&member)]).await.unwrap_err();
    assert!(
        error.to_string().contains("context timeout after"),
        "{error}"
    );
    assert!(fake.count(Endpoint::GetInstancePool) >= 2);
    assert_eq!(fake.count(Endpoint::EvictInstancePoolMembers), 0);
}

/// docs/exoscale.md EXO-33: while `IncreaseSize(3)` is in flight, `IncreaseSize(2)` and
/// `IncreaseSize(4)` of the same group (a group object of its own, as after a rebuild) go as one
/// scale request for their sum: two requests instead of three, and the final size counts every
/// delta once. The callers are polled in that order in one task, so the first request is out
/// before the others ask.
#[tokio::test]
async fn c33_increases_during_a_resize_are_merged() {
    let fake = fake().await;
    fake.set_operation_settle_polls(3);
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &["1:12:workers"]);
    let member = first_member(&fake, &pool);
    let group = provider
        .node_group_for_node(&node(&member))
        .await
        .unwrap()
        .unwrap();
    let rebuilt = provider
        .node_group_for_node(&node(&member))
        .await
        .unwrap()
        .unwrap();
    fake.clear_requests();
    let (first, second, third) = futures::join!(
        group.increase_size(3),
        rebuilt.increase_size(2),
        group.increase_size(4)
    );
    assert_eq!((first, second, third), (Ok(()), Ok(()), Ok(())));
    let scales: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.endpoint == Some(Endpoint::ScaleInstancePool))
        .map(|r| r.body)
        .collect();
    assert_eq!(scales, vec![r#"{"size":4}"#, r#"{"size":10}"#]);
    assert_eq!(
        fake.pool_size_and_state(&pool),
        Some((10, "running".into()))
    );
    assert_eq!(rebuilt.target_size().await.unwrap(), 10);

    // A merged call that fails fails every increase it carried, and only those.
    let (first, second, third) = futures::join!(
        group.increase_size(1),
        group.increase_size(1),
        group.increase_size(1)
    );
    assert_eq!(first, Ok(()));
    let refused = Err(CloudError::InvalidRequest(
        "size increase is too large (current: 11 desired: 13 max: 12)".into(),
    ));
    assert_eq!((second, third), (refused.clone(), refused));
    assert_eq!(
        fake.pool_size_and_state(&pool),
        Some((11, "running".into()))
    );
}
