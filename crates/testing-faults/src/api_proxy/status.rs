//! The Kubernetes `Status` answers the proxy gives in the API server's place, shaped as the API
//! server shapes them so that clients take the same path as for a real refusal.

use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

use super::server::ProxyBody;

/// The `reason` the API server gives with `code` (metav1.StatusReason), empty when it has none.
fn reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// The JSON body of a failure `Status` with `code`.
pub(super) fn status_body(code: u16, retry_after: Option<u64>, message: &str) -> String {
    let mut status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason(code),
        "code": code,
    });
    if let Some(seconds) = retry_after {
        status["details"] = serde_json::json!({ "retryAfterSeconds": seconds });
    }
    status.to_string()
}

/// A failure answer with `code`, a `Status` body and, when given, `Retry-After`.
pub(super) fn status_response(
    code: StatusCode,
    retry_after: Option<u64>,
    message: &str,
) -> Response<ProxyBody> {
    let body = status_body(code.as_u16(), retry_after, message);
    let mut response = Response::new(Full::from(body).map_err(|never| match never {}).boxed());
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_has_the_api_servers_shape() {
        let body: serde_json::Value =
            serde_json::from_str(&status_body(429, Some(3), "slow down")).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "slow down",
                "reason": "TooManyRequests",
                "details": { "retryAfterSeconds": 3 },
                "code": 429,
            })
        );
    }

    #[test]
    fn reasons_follow_the_code() {
        for (code, expected) in [
            (503, "ServiceUnavailable"),
            (500, "InternalError"),
            (504, "Timeout"),
            (409, "Conflict"),
            (410, "Expired"),
            (502, ""),
        ] {
            let body: serde_json::Value =
                serde_json::from_str(&status_body(code, None, "m")).expect("JSON");
            assert_eq!(body["reason"], expected, "{code}");
            assert_eq!(body["code"], code);
            assert!(body.get("details").is_none());
        }
    }

    #[test]
    fn retry_after_is_a_header_too() {
        let response = status_response(StatusCode::TOO_MANY_REQUESTS, Some(7), "m");
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let plain = status_response(StatusCode::SERVICE_UNAVAILABLE, None, "m");
        assert!(plain.headers().get(header::RETRY_AFTER).is_none());
    }
}
