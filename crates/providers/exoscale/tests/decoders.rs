//! Property test: whatever JSON (or bytes) the API sends, decoding never panics (docs/exoscale.md
//! EXO-Q7), and the accessors the provider uses on decoded values are total.

use ferroscale_provider_exoscale::api::{Instance, InstancePool, Operation, Quota, SksClusterList};
use proptest::prelude::*;
use serde_json::Value;

fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("id".to_string()),
        Just("name".to_string()),
        Just("state".to_string()),
        Just("size".to_string()),
        Just("limit".to_string()),
        Just("manager".to_string()),
        Just("type".to_string()),
        Just("instances".to_string()),
        Just("sks-clusters".to_string()),
        Just("nodepools".to_string()),
        Just("instance-pool".to_string()),
        "[a-z-]{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn decode_all(bytes: &[u8]) {
    if let Ok(pool) = serde_json::from_slice::<InstancePool>(bytes) {
        let _ = pool.member_ids();
    }
    let _ = serde_json::from_slice::<Instance>(bytes);
    let _ = serde_json::from_slice::<Quota>(bytes);
    let _ = serde_json::from_slice::<SksClusterList>(bytes);
    let _ = serde_json::from_slice::<Operation>(bytes);
}

proptest! {
    #[test]
    fn arbitrary_json_never_panics(value in json_value()) {
        decode_all(value.to_string().as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        decode_all(&bytes);
    }
}

/// Objects with the right field names but nothing else decode to "absent", not an error.
#[test]
fn empty_objects_decode_as_absent() {
    let pool: InstancePool = serde_json::from_str(r#"{"instances":[{},{"id":"a"}]}"#).unwrap();
    assert_eq!(pool.member_ids(), vec!["a".to_string()]);
    let operation: Operation = serde_json::from_str(r#"{"state":"success"}"#).unwrap();
    assert_eq!(operation.id, None);
}
