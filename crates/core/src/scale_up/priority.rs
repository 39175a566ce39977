//! The priority expander's configuration: the `priorities` key of its ConfigMap, parsed (YAML and
//! regular expressions) once, when Gather reads a new version of the ConfigMap, and then read by
//! every loop that runs the expander.

use std::collections::BTreeMap;

use regex::Regex;

/// Why the `priorities` text cannot be used. `Display` is the message of the
/// `PriorityConfigMapInvalid` event.
#[derive(Debug, thiserror::Error)]
pub enum PriorityConfigError {
    /// Not a YAML map of integer priorities to lists of strings.
    #[error("invalid priorities YAML: {0}")]
    Yaml(serde_yaml_ng::Error),
    /// A pattern is not a valid regular expression.
    #[error("priority {priority}: pattern {pattern:?}: {error}")]
    Pattern {
        priority: i64,
        pattern: String,
        error: regex::Error,
    },
}

/// The `priorities` text and what it parsed into. A malformed text is kept with its error: the
/// expander reports it (as an event) each time it would have used the configuration.
#[derive(Debug)]
pub struct PriorityConfig {
    text: String,
    parsed: Result<BTreeMap<i64, Vec<Regex>>, PriorityConfigError>,
}

#[cfg(test)]
thread_local! {
    /// How many times this thread parsed a configuration, for tests that parsing happens once.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl PriorityConfig {
    /// Parses the value of the ConfigMap's `priorities` key: priority → regular expressions that
    /// match node group ids.
    pub fn parse(text: impl Into<String>) -> PriorityConfig {
        #[cfg(test)]
        PARSES.with(|n| n.set(n.get() + 1));
        let text = text.into();
        let parsed = parse_priorities(&text);
        PriorityConfig { text, parsed }
    }

    /// The text as it was read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The error that makes the configuration unusable, if any.
    pub fn error(&self) -> Option<&PriorityConfigError> {
        self.parsed.as_ref().err()
    }

    /// The highest priority with a pattern matching `group_id`; `None` when none matches.
    /// `Err` when the configuration is malformed.
    pub fn priority_of(&self, group_id: &str) -> Result<Option<i64>, &PriorityConfigError> {
        let priorities = self.parsed.as_ref()?;
        Ok(priorities
            .iter()
            .rev()
            .find(|(_, patterns)| patterns.iter().any(|re| re.is_match(group_id)))
            .map(|(p, _)| *p))
    }
}

fn parse_priorities(text: &str) -> Result<BTreeMap<i64, Vec<Regex>>, PriorityConfigError> {
    let raw: BTreeMap<i64, Vec<String>> =
        serde_yaml_ng::from_str(text).map_err(PriorityConfigError::Yaml)?;
    raw.into_iter()
        .map(|(priority, patterns)| {
            let compiled = patterns
                .into_iter()
                .map(|pattern| match Regex::new(&pattern) {
                    Ok(re) => Ok(re),
                    Err(error) => Err(PriorityConfigError::Pattern {
                        priority,
                        pattern,
                        error,
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((priority, compiled))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_matching_priority_wins() {
        let config = PriorityConfig::parse("10:\n  - .*\n50:\n  - ^big-.*\n  - ^huge$\n");
        assert!(config.error().is_none());
        assert_eq!(config.priority_of("big-1").ok(), Some(Some(50)));
        assert_eq!(config.priority_of("small").ok(), Some(Some(10)));
        let narrow = PriorityConfig::parse("5:\n  - ^x$\n");
        assert_eq!(narrow.priority_of("y").ok(), Some(None));
    }

    #[test]
    fn malformed_configurations_keep_the_event_wording() {
        let yaml = PriorityConfig::parse("x: y: z");
        let message = yaml.error().map(ToString::to_string).unwrap_or_default();
        assert!(
            message.starts_with("invalid priorities YAML: "),
            "{message}"
        );
        let pattern = PriorityConfig::parse("10: ['(unclosed']");
        let message = pattern.error().map(ToString::to_string).unwrap_or_default();
        assert!(
            message.starts_with("priority 10: pattern \"(unclosed\": regex parse error"),
            "{message}"
        );
        assert!(pattern.priority_of("a").is_err());
        assert_eq!(pattern.text(), "10: ['(unclosed']");
    }
}
