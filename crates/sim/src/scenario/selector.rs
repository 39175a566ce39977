//! The label selector string syntax of `kubectl -l`: comma-separated requirements, each `key=value`,
//! `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (exists) or `!key`.

use ferroscale_model::{LabelOperator, LabelRequirement, LabelSelector};

/// Splits at commas that are not inside parentheses.
fn requirements(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".to_string());
                }
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_string());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(value: &str) -> bool {
    value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn set_values(rest: &str, requirement: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("{requirement:?}: expected a parenthesised value list"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if let Some(bad) = values.iter().find(|v| !valid_value(v)) {
        return Err(format!("{requirement:?}: invalid value {bad:?}"));
    }
    Ok(values)
}

/// Parses a selector string. The empty string selects everything.
pub fn parse_label_selector(text: &str) -> Result<LabelSelector, String> {
    let mut selector = LabelSelector::default();
    if text.trim().is_empty() {
        return Ok(selector);
    }
    for requirement in requirements(text)? {
        let req = requirement.trim();
        let push = |selector: &mut LabelSelector, key: &str, operator, values| {
            if !valid_key(key) {
                return Err(format!("{req:?}: invalid label key {key:?}"));
            }
            selector.match_expressions.push(LabelRequirement {
                key: key.to_string(),
                operator,
                values,
            });
            Ok(())
        };
        if let Some((key, value)) = req.split_once("!=") {
            let value = value.trim();
            if !valid_value(value) {
                return Err(format!("{req:?}: invalid value {value:?}"));
            }
            push(
                &mut selector,
                key.trim(),
                LabelOperator::NotIn,
                vec![value.to_string()],
            )?;
        } else if let Some((key, value)) = req.split_once('=') {
            let value = value.strip_prefix('=').unwrap_or(value).trim();
            let key = key.trim();
            if !valid_value(value) || !valid_key(key) {
                return Err(format!(
                    "{req:?}: expected key=value with a valid key and value"
                ));
            }
            selector
                .match_labels
                .insert(key.to_string(), value.to_string());
        } else if let Some(key) = req.strip_prefix('!') {
            push(
                &mut selector,
                key.trim(),
                LabelOperator::DoesNotExist,
                Vec::new(),
            )?;
        } else if let Some((key, rest)) = req.split_once(" notin ") {
            push(
                &mut selector,
                key.trim(),
                LabelOperator::NotIn,
                set_values(rest, req)?,
            )?;
        } else if let Some((key, rest)) = req.split_once(" in ") {
            push(
                &mut selector,
                key.trim(),
                LabelOperator::In,
                set_values(rest, req)?,
            )?;
        } else if valid_key(req) {
            push(&mut selector, req, LabelOperator::Exists, Vec::new())?;
        } else {
            return Err(format!("{req:?}: not a label requirement"));
        }
    }
    Ok(selector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Labels;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_and_set_based_syntax() {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let db = labels(&[("app", "db")]);
        let s = parse_label_selector("app=web,tier!=back").unwrap();
        assert!(s.matches(&web) && !s.matches(&db));
        let s = parse_label_selector("app in (web, api), tier").unwrap();
        assert!(s.matches(&web) && !s.matches(&db));
        let s = parse_label_selector("app notin (web),!tier").unwrap();
        assert!(!s.matches(&web) && s.matches(&db));
        let s = parse_label_selector("app==db").unwrap();
        assert!(s.matches(&db));
        assert!(parse_label_selector("").unwrap().matches(&db));
    }

    #[test]
    fn malformed_selectors_are_refused() {
        for bad in [
            "app in (web",
            "app=we b",
            "a=b,,",
            "app in web",
            "=x",
            "app)",
        ] {
            assert!(parse_label_selector(bad).is_err(), "{bad}");
        }
    }
}
