//! The `EXO2-HMAC-SHA256` request signature of the Exoscale API v2 (docs/exoscale.md EXO-03,
//! EXO-04): what goes into the `Authorization` header of every request.
//!
//! Pure: the caller passes the expiry time, so the signature is a function of its inputs and the
//! published signature examples can be checked exactly.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;

use crate::config::Secret;

/// Name of the signature scheme, first word of the header.
pub const ALGORITHM: &str = "EXO2-HMAC-SHA256";

/// How long a signature stays valid: the API refuses it after `expires`.
pub const SIGNATURE_LIFETIME_SECS: u64 = 600;

/// What is signed of one request.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    /// Upper-case HTTP method.
    pub method: &'a str,
    /// The URL path exactly as sent, starting with `/v2/`, without host or query.
    pub path: &'a str,
    /// Query parameters as sent, in any order; a name given more than once is not signed.
    pub query: &'a [(&'a str, &'a str)],
    /// The body bytes exactly as sent (empty without a body).
    pub body: &'a [u8],
    /// Unix seconds after which the signature is invalid.
    pub expires: u64,
}

/// The `Authorization` header value for `request`, signed with `key` and `secret`.
pub fn authorization_header(request: &SignedRequest<'_>, key: &str, secret: &Secret) -> String {
    let (names, values) = signed_query(request.query);
    let signature = signature(request, &values, secret);
    let mut header = format!("{ALGORITHM} credential={key}");
    if !names.is_empty() {
        header.push_str(",signed-query-args=");
        header.push_str(&names);
    }
    header.push_str(&format!(
        ",expires={},signature={signature}",
        request.expires
    ));
    header
}

/// The message the HMAC covers: method and path, body, signed query values, the (empty) signed
/// headers, expiry — joined by `\n`. Bytes rather than a string because the body need not be UTF-8.
pub fn message(request: &SignedRequest<'_>) -> Vec<u8> {
    let (_, values) = signed_query(request.query);
    message_with_values(request, &values)
}

fn message_with_values(request: &SignedRequest<'_>, signed_values: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(request.path.len() + request.body.len() + 32);
    message.extend_from_slice(request.method.as_bytes());
    message.push(b' ');
    message.extend_from_slice(request.path.as_bytes());
    message.push(b'\n');
    message.extend_from_slice(request.body);
    message.push(b'\n');
    message.extend_from_slice(signed_values.as_bytes());
    message.push(b'\n');
    // Signed headers: none are signed, the part stays empty.
    message.push(b'\n');
    message.extend_from_slice(request.expires.to_string().as_bytes());
    message
}

fn signature(request: &SignedRequest<'_>, signed_values: &str, secret: &Secret) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
    let tag = hmac::sign(&key, &message_with_values(request, signed_values));
    STANDARD.encode(tag.as_ref())
}

/// Names (sorted byte-wise, `;`-joined) and values (concatenated in that order) of the query
/// parameters that occur exactly once.
fn signed_query(query: &[(&str, &str)]) -> (String, String) {
    let mut single: Vec<(&str, &str)> = query
        .iter()
        .filter(|(name, _)| query.iter().filter(|(other, _)| other == name).count() == 1)
        .copied()
        .collect();
    single.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let names = single
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(";");
    let values = single.iter().map(|(_, value)| *value).collect::<String>();
    (names, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPIRES: u64 = 1_700_000_000;

    fn secret() -> Secret {
        Secret::new("test-secret")
    }

    fn signed(method: &str, path: &str, query: &[(&str, &str)], body: &str) -> String {
        authorization_header(
            &SignedRequest {
                method,
                path,
                query,
                body: body.as_bytes(),
                expires: EXPIRES,
            },
            "EXOabc",
            &secret(),
        )
    }

    /// docs/exoscale.md EXO-03, first published example: a GET without body or query.
    #[test]
    fn c03_vector_get_instance() {
        let path = "/v2/instance/6f1f2a3e-0000-4000-8000-000000000001";
        let request = SignedRequest {
            method: "GET",
            path,
            query: &[],
            body: b"",
            expires: EXPIRES,
        };
        assert_eq!(
            message(&request),
            format!("GET {path}\n\n\n\n1700000000").into_bytes()
        );
        assert_eq!(
            signed("GET", path, &[], ""),
            "EXO2-HMAC-SHA256 credential=EXOabc,expires=1700000000,\
             signature=NaxWORiSszNV26DUquRv5epv7N6V7oew8BnzkfUFNpU="
        );
    }

    /// docs/exoscale.md EXO-03, second published example: the scale PUT, whose body is signed; the
    /// `:` stays literal.
    #[test]
    fn c03_vector_scale_pool() {
        assert_eq!(
            signed(
                "PUT",
                "/v2/instance-pool/6f1f2a3e-0000-4000-8000-0000000000aa:scale",
                &[],
                r#"{"size":3}"#
            ),
            "EXO2-HMAC-SHA256 credential=EXOabc,expires=1700000000,\
             signature=hJlOG6qHOYfOYcPqd0VneYbi6P3mQueINi4zxJlTY38="
        );
    }

    /// docs/exoscale.md EXO-03, third published example: the SKS evict PUT.
    #[test]
    fn c03_vector_evict_nodepool() {
        assert_eq!(
            signed(
                "PUT",
                "/v2/sks-cluster/c0ffee00-0000-4000-8000-000000000001/nodepool/\
                 c0ffee00-0000-4000-8000-000000000002:evict",
                &[],
                r#"{"instances":["6f1f2a3e-0000-4000-8000-000000000001"]}"#
            ),
            "EXO2-HMAC-SHA256 credential=EXOabc,expires=1700000000,\
             signature=LW38m31qDn8q9Pv+3DNtwb1Yqp6nzBtE5ltKHRNduX4="
        );
    }

    /// docs/exoscale.md EXO-03, fourth published example, and EXO-04: single-valued query
    /// parameters are signed, names sorted and `;`-joined, values concatenated in that order.
    #[test]
    fn c04_vector_query_arguments() {
        let request = SignedRequest {
            method: "GET",
            path: "/v2/example",
            query: &[("b", "2"), ("a", "1")],
            body: b"",
            expires: EXPIRES,
        };
        assert_eq!(message(&request), b"GET /v2/example\n\n12\n\n1700000000");
        assert_eq!(
            signed("GET", "/v2/example", &[("b", "2"), ("a", "1")], ""),
            "EXO2-HMAC-SHA256 credential=EXOabc,signed-query-args=a;b,expires=1700000000,\
             signature=3v8cTvVTkQ6HifN0TshJepbqqvUGYgktYsneSPvUn9M="
        );
    }

    /// docs/exoscale.md EXO-04: a parameter given twice is left out of the signature altogether.
    #[test]
    fn c04_repeated_query_parameter_is_not_signed() {
        let header = signed(
            "GET",
            "/v2/example",
            &[("a", "1"), ("a", "2"), ("c", "3")],
            "",
        );
        assert!(header.contains(",signed-query-args=c,"), "{header}");
        let repeated_only = signed("GET", "/v2/example", &[("a", "1"), ("a", "2")], "");
        assert!(
            !repeated_only.contains("signed-query-args"),
            "{repeated_only}"
        );
    }

    /// A different secret gives a different signature (the key is the secret, not the API key).
    #[test]
    fn signature_depends_on_the_secret() {
        let request = SignedRequest {
            method: "GET",
            path: "/v2/sks-cluster",
            query: &[],
            body: b"",
            expires: EXPIRES,
        };
        assert_ne!(
            authorization_header(&request, "EXOabc", &Secret::new("a")),
            authorization_header(&request, "EXOabc", &Secret::new("b"))
        );
    }
}
