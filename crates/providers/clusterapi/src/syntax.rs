//! Kubernetes name syntax the provider validates in user-written strings: qualified names (label
//! and taint keys) and label values.

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// A name part of a qualified name, which is also the syntax of a non-empty label value: at most
/// 63 characters of `[A-Za-z0-9_.-]`, starting and ending with an alphanumeric.
fn is_simple_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAME_MAX
        && s.chars().all(is_name_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS subdomain (the optional prefix of a qualified name): dot-separated lower-case labels of
/// `[a-z0-9-]`, each starting and ending with an alphanumeric, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= PREFIX_MAX
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// `[prefix/]name`, the syntax of label keys and taint keys.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_simple_name(name),
        None => is_simple_name(s),
    }
}

/// A label value: empty, or a simple name of at most 63 characters.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_simple_name(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_follow_kubernetes_rules() {
        for good in [
            "a",
            "color",
            "node-role.kubernetes.io/worker",
            "x.y/A_b.c",
            "k8s.io/1",
        ] {
            assert!(is_qualified_name(good), "{good}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "-a",
            "a-",
            "Upper.io/a",
            "a/b/c",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed() {
        assert!(is_label_value(""));
        assert!(is_label_value("v1.2_x-Y"));
        assert!(!is_label_value("a/b"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"v".repeat(64)));
    }
}
