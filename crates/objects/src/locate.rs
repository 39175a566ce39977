//! Finds the line of a field path (`spec.containers[1].resources.requests.memory`) in YAML text, so
//! errors found after parsing (when the parser's positions are gone) can still point at a line.
//!
//! This is a best-effort reading of block-style YAML by indentation, not a YAML parser: it follows
//! keys and sequence items as far as it can and returns the deepest line it reached. Flow-style
//! values (`{a: 1}` on one line) resolve to that line.

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        while let Some(inner) = rest.strip_prefix('[') {
            let Some(end) = inner.find(']') else { break };
            if let Ok(index) = inner[..end].parse() {
                out.push(Segment::Index(index));
            }
            rest = &inner[end + 1..];
        }
    }
    out
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// Whether `line` holds `key:` as a mapping key, in block style (possibly after `- `) or inside a
/// flow mapping.
fn has_key(line: &str, key: &str) -> bool {
    let mut content = line.trim_start();
    while let Some(rest) = content.strip_prefix("- ") {
        content = rest.trim_start();
    }
    let quoted = [
        format!("{key}:"),
        format!("\"{key}\":"),
        format!("'{key}':"),
    ];
    if quoted.iter().any(|k| content.starts_with(k.as_str())) {
        return true;
    }
    ["{", ", ", ",", "{ "].iter().any(|before| {
        quoted
            .iter()
            .any(|k| content.contains(&format!("{before}{k}")))
    })
}

/// 1-based line of `path` in `text`; `None` when not even the first segment is found.
pub fn locate_field_line(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found: Option<usize> = None;
    // The region the next segment must be inside: lines after `scope_line` indented more than
    // `scope_indent` (None: the whole text).
    let mut scope_line = 0usize;
    let mut scope_indent: Option<usize> = None;
    for segment in segments(path) {
        let in_scope = |i: usize, line: &str| {
            i == scope_line
                || is_blank_or_comment(line)
                || scope_indent.is_none_or(|s| indent(line) > s)
        };
        match segment {
            Segment::Key(key) => {
                let mut hit = None;
                for (i, line) in lines.iter().enumerate().skip(scope_line) {
                    if !in_scope(i, line) {
                        break;
                    }
                    if has_key(line, key) {
                        hit = Some(i);
                        break;
                    }
                }
                let i = hit?;
                found = Some(i);
                scope_line = i;
                // Children of a key are indented more than the key itself; for `- key:` the key
                // sits after the dash.
                let line = lines[i];
                let content = line.trim_start();
                let dash_offset = content.len() - content.trim_start_matches(['-', ' ']).len();
                scope_indent = Some(indent(line) + dash_offset);
            }
            Segment::Index(n) => {
                let mut item_indent = None;
                let mut count = 0usize;
                let mut hit = None;
                for (i, line) in lines.iter().enumerate().skip(scope_line + 1) {
                    if is_blank_or_comment(line) {
                        continue;
                    }
                    let this_indent = indent(line);
                    // A block sequence under a key may sit at the key's own indentation.
                    if scope_indent.is_some_and(|s| this_indent < s) {
                        break;
                    }
                    let is_item = line.trim_start().starts_with('-');
                    match item_indent {
                        None if is_item => item_indent = Some(this_indent),
                        None => break,
                        Some(item) if this_indent < item => break,
                        Some(item) if this_indent == item && !is_item => break,
                        _ => {}
                    }
                    if is_item && Some(this_indent) == item_indent {
                        if count == n {
                            hit = Some(i);
                            break;
                        }
                        count += 1;
                    }
                }
                let Some(i) = hit else {
                    return found.map(|l| l + 1);
                };
                found = Some(i);
                scope_line = i;
                scope_indent = item_indent;
            }
        }
    }
    found.map(|l| l + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: a
    resources:
      requests:
        cpu: 100m
  - name: b
    resources:
      requests:
        cpu: 1x
        memory: 1Gi
  tolerations: [{key: a, effect: Bad}]
";

    #[test]
    fn follows_keys_and_sequence_items() {
        assert_eq!(
            locate_field_line(POD, "spec.containers[1].resources.requests.cpu"),
            Some(14)
        );
        assert_eq!(
            locate_field_line(POD, "spec.containers[0].resources.requests.cpu"),
            Some(10)
        );
        assert_eq!(
            locate_field_line(POD, "spec.containers[1].resources.requests.memory"),
            Some(15)
        );
        assert_eq!(
            locate_field_line(POD, "spec.tolerations[0].effect"),
            Some(16)
        );
        assert_eq!(locate_field_line(POD, "metadata.name"), Some(4));
    }

    #[test]
    fn stops_at_the_deepest_known_line() {
        assert_eq!(locate_field_line(POD, "spec.containers[5].name"), Some(6));
        assert_eq!(locate_field_line(POD, "status.phase"), None);
    }

    #[test]
    fn indented_sequences() {
        let text = "nodeGroups:\n  - id: a\n    maxSize: 1\n  - id: b\n    maxSize: x\n";
        assert_eq!(locate_field_line(text, "nodeGroups[1].maxSize"), Some(5));
        assert_eq!(locate_field_line(text, "nodeGroups[0].maxSize"), Some(3));
    }
}
