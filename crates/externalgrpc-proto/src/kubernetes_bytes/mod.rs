//! The Kubernetes objects the externalgrpc API carries as opaque bytes
//! (docs/externalgrpc.md GRPC-11, GRPC-20): `nodeBytes` of a
//! template answer and `pod_bytes` of a pod-pricing request hold the plain protobuf encoding of
//! `k8s.io.api.core.v1.Node` and `k8s.io.api.core.v1.Pod`, exactly what the Go types' `Marshal`
//! writes and `Unmarshal` reads.
//!
//! Decoding goes bytes → k8s-pb message → k8s-openapi object → model, so a node or pod read from
//! the wire gets the same conversion (defaults, validation, error messages naming the field) as
//! one read from YAML or the API server by `ferroscale-objects`. The k8s-pb → k8s-openapi step
//! copies only the fields that conversion reads, and turns the empty strings, lists and maps the Go
//! encoder writes for unset values into "absent", as JSON's `omitempty` would have.
//!
//! Encoding goes model → k8s-pb message → bytes directly: the model holds less than a Kubernetes
//! object (a pod keeps its effective requests, not its containers), so the encoder writes the
//! smallest object that decodes back to the same model value, with `metadata`, `spec` and `status`
//! always present and maps sorted, as the Go encoder does.

mod meta;
mod node;
mod pod;
mod resource_slice;

use prost::Message;
use thiserror::Error;

use ferroscale_objects::ConvertError;

pub use node::{decode_node, encode_node};
pub use pod::{decode_pod, encode_pod};
pub use resource_slice::{decode_resource_slice, encode_resource_slice};

/// The four bytes the Kubernetes runtime protobuf serializer puts in front of its envelope.
const RUNTIME_SERIALIZER_MAGIC: &[u8] = b"k8s\0";

/// How many leading bytes an error message shows, enough to recognise a format at a glance.
const PREFIX_SHOWN: usize = 16;

/// Why the bytes of a Kubernetes Node or Pod could not be turned into a model object.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// Nothing was sent. On a template answer that means "no template", which callers check for
    /// before decoding.
    #[error("the {kind} bytes are empty: no {} was sent", message_name(kind))]
    Empty { kind: &'static str },
    /// The bytes are in the API server's envelope format, which this API does not use.
    #[error(
        "the {kind} bytes start with 6b 38 73 00 (\"k8s\\0\"), the magic prefix of the Kubernetes \
         runtime protobuf serializer: that is the API server's envelope format, but this API \
         carries the plain protobuf encoding of {} with no prefix and no envelope",
        message_name(kind)
    )]
    RuntimeSerializerPrefix { kind: &'static str },
    /// Not a protobuf encoding of the expected message at all.
    #[error(
        "the {kind} bytes ({length} bytes, starting {prefix}) are not a valid protobuf \
         {}: {reason}",
        message_name(kind)
    )]
    Malformed {
        kind: &'static str,
        length: usize,
        /// The first bytes in hex.
        prefix: String,
        /// What the protobuf decoder found, including the path of the field it was reading.
        reason: String,
    },
    /// Well-formed protobuf with a value the model cannot accept (a malformed quantity, an unknown
    /// taint effect, a time out of range, ...). Names the object, the field and the value.
    #[error("{0}")]
    Invalid(#[from] ConvertError),
}

/// The protobuf message name of a kind the API carries.
fn message_name(kind: &str) -> String {
    match kind {
        "ResourceSlice" => "k8s.io.api.resource.v1.ResourceSlice".to_string(),
        core => format!("k8s.io.api.core.v1.{core}"),
    }
}

/// Decodes one Kubernetes message, refusing the mistakes a peer is likely to make first.
fn decode_message<M: Message + Default>(kind: &'static str, bytes: &[u8]) -> Result<M, CodecError> {
    if bytes.is_empty() {
        return Err(CodecError::Empty { kind });
    }
    if bytes.starts_with(RUNTIME_SERIALIZER_MAGIC) {
        return Err(CodecError::RuntimeSerializerPrefix { kind });
    }
    M::decode(bytes).map_err(|error| CodecError::Malformed {
        kind,
        length: bytes.len(),
        prefix: hex_prefix(bytes),
        reason: error.to_string(),
    })
}

fn hex_prefix(bytes: &[u8]) -> String {
    let mut shown: Vec<String> = bytes
        .iter()
        .take(PREFIX_SHOWN)
        .map(|b| format!("{b:02x}"))
        .collect();
    if bytes.len() > PREFIX_SHOWN {
        shown.push("…".to_string());
    }
    shown.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_prefix_shows_the_first_bytes_in_hex() {
        assert_eq!(hex_prefix(&[0x0a, 0xff]), "0a ff");
        let long = [0u8; 20];
        assert!(hex_prefix(&long).ends_with("00 …"));
    }
}
