//! What of an API error body may travel on: into a [`crate::ApiError`], and from there into the
//! provider's log lines and the errors the core (or an externalgrpc client) receives.
//!
//! The body comes from whatever answered: the API, but also a proxy, a load balancer or a
//! misconfigured endpoint, some of which echo the request back — its `Authorization` header
//! included, which carries the API key and a signature valid for minutes. So the text is cut to
//! [`MAX_ERROR_TEXT`] characters and everything credential-shaped is replaced by
//! [`REDACTED`] first: the values the client knows are secret wherever they appear, the
//! `EXO2-HMAC-SHA256` scheme and other authorization schemes with their parameters, and the value
//! of any `name=value` or `"name": "value"` pair whose name speaks of a key, secret, token,
//! password, signature, credential, authorization or cookie.

use std::sync::LazyLock;

use regex::Regex;

/// Longest error text kept from an answer, in characters.
pub const MAX_ERROR_TEXT: usize = 512;

/// What replaces a credential.
pub const REDACTED: &str = "[redacted]";

/// Only this much of a body is examined; the rest could never reach the kept text.
const MAX_SCANNED_BYTES: usize = 64 * 1024;

/// Known secrets shorter than this are not searched for: replacing every `a` of a message would
/// hide the message and protect nothing.
const MIN_KNOWN_LEN: usize = 4;

/// An authorization scheme followed by its parameters (`EXO2-HMAC-SHA256 credential=…`,
/// `Bearer …`, `Basic …`).
static AUTH_SCHEME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b(EXO2-HMAC-SHA256|Bearer|Basic|Digest)\s+[^\s"'<>\]}]+"#)
        .unwrap_or_else(|error| unreachable!("a constant pattern: {error}"))
});

/// A `name=value`, `name: value` or `"name": "value"` pair whose name is credential-shaped.
static SENSITIVE_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(?P<name>[a-z0-9_.-]*(?:key|secret|token|passw(?:or)?d|signature|credential|authorization|cookie)[a-z0-9_.-]*)(?P<separator>["']?\s*[:=]\s*\[?\s*["']?)(?P<value>[^\s"',;&}\]<>\[]+)"#,
    )
    .unwrap_or_else(|error| unreachable!("a constant pattern: {error}"))
});

/// `text` without any of `known` and without credential-shaped pieces, then cut to
/// [`MAX_ERROR_TEXT`] characters (an ellipsis marks the cut).
pub fn scrub(text: &str, known: &[&str]) -> String {
    let scanned = match text.char_indices().find(|(at, _)| *at >= MAX_SCANNED_BYTES) {
        Some((at, _)) => &text[..at],
        None => text,
    };
    let mut clean = scanned.to_string();
    for value in known {
        if value.len() >= MIN_KNOWN_LEN {
            clean = clean.replace(value, REDACTED);
        }
    }
    let clean = AUTH_SCHEME.replace_all(&clean, format!("$1 {REDACTED}"));
    let clean = SENSITIVE_PAIR.replace_all(&clean, format!("${{name}}${{separator}}{REDACTED}"));
    let clean = clean.trim();
    match clean.char_indices().nth(MAX_ERROR_TEXT) {
        Some((cut, _)) => format!("{}…", &clean[..cut]),
        None => clean.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "EXOa1b2c3d4e5f6a7b8c9d0e1f2";
    const SECRET: &str = "s3cr3t-V4lue_of-the-account";
    const SIGNATURE: &str = "q8Kf0x2Zt9RkqzI4d6Hn1mXyA7sQpW3vLcE5bN0uJ1o=";

    fn assert_clean(text: &str) {
        for secret in [KEY, SECRET, SIGNATURE, "hunter22", "abc.def.ghi"] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
    }

    #[test]
    fn echoed_authorization_headers_lose_key_and_signature() {
        let header =
            format!("EXO2-HMAC-SHA256 credential={KEY},expires=1700000000,signature={SIGNATURE}");
        let bodies = [
            format!("authorization: {header}\nuser-agent: ferroscale"),
            format!(r#"{{"headers":{{"Authorization":["{header}"]}}}}"#),
            format!(r#"{{"authorization":"{header}","host":"api"}}"#),
            format!("credential={KEY},signature={SIGNATURE}"),
        ];
        for body in bodies {
            let clean = scrub(&body, &[]);
            assert_clean(&clean);
            assert!(clean.contains(REDACTED), "{clean}");
        }
    }

    #[test]
    fn known_values_are_removed_wherever_they_appear() {
        let clean = scrub(
            &format!("oops {SECRET} and {KEY} in free text"),
            &[KEY, SECRET],
        );
        assert_eq!(clean, "oops [redacted] and [redacted] in free text");
    }

    #[test]
    fn generic_credential_pairs_are_redacted_and_the_rest_kept() {
        let clean = scrub(
            r#"password=hunter22&user=bob; {"api_token": "abc.def.ghi", "reason": "quota exceeded"} Bearer abc.def.ghi"#,
            &[],
        );
        assert_clean(&clean);
        assert!(clean.contains("user=bob"), "{clean}");
        assert!(clean.contains("quota exceeded"), "{clean}");
        // An ordinary message is left alone.
        assert_eq!(
            scrub("instance pool not found", &[KEY]),
            "instance pool not found"
        );
    }

    #[test]
    fn long_text_is_cut_after_redaction() {
        let body = format!(
            "{}secret={SECRET} {}",
            "x".repeat(MAX_ERROR_TEXT - 40),
            "y".repeat(100)
        );
        let clean = scrub(&body, &[]);
        assert!(clean.chars().count() <= MAX_ERROR_TEXT + 1, "{clean}");
        assert!(clean.ends_with('…'));
        assert!(!clean.contains("s3cr3t"), "{clean}");
        let huge = "y".repeat(10 * MAX_SCANNED_BYTES);
        assert_eq!(scrub(&huge, &[]).chars().count(), MAX_ERROR_TEXT + 1);
    }
}
