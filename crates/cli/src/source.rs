//! Where a run's scenario and options come from: a file, a bundled scenario by name, or the bundled
//! default; then the scenario's `options:` and the `--set` overrides applied on top of the upstream
//! defaults. Every failure becomes an [`Invalid`] naming the file, the line (when known) and the
//! field, so the binary can exit with status 2.

use std::fmt;
use std::path::{Path, PathBuf};

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_objects::locate_field_line;
use ferroscale_sim::runner::{SettingsError, options_for};
use ferroscale_sim::scenario::{self, Limits, Scenario, ScenarioError};

/// An invalid scenario or invalid flags: `origin[:line]: field: message`.
#[derive(Debug)]
pub struct Invalid {
    pub origin: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Invalid {}

impl From<ScenarioError> for Invalid {
    fn from(e: ScenarioError) -> Invalid {
        Invalid {
            origin: e.origin,
            line: e.line,
            field: e.field,
            message: e.message,
        }
    }
}

/// A scenario ready to run.
pub struct Loaded {
    pub scenario: Scenario,
    pub options: AutoscalingOptions,
}

/// Loads the scenario named on the command line (a file, else a bundled scenario of that name),
/// or the bundled default, and builds the options of the run.
pub fn load(path: Option<&Path>, overrides: &[(String, String)]) -> Result<Loaded, Invalid> {
    let (scenario, origin, text) = match path {
        None => {
            let origin = "bundled default scenario".to_string();
            let text = scenario::DEFAULT_SCENARIO.to_string();
            (parse_bundled(&text, &origin)?, origin, Some(text))
        }
        Some(path) if path.exists() => {
            let origin = path.display().to_string();
            // Read once, within the limits: the text also locates option lines below.
            let text = scenario::read_scenario_text(path, &Limits::DEFAULT)?;
            let base_dir = path.parent().unwrap_or_else(|| Path::new("."));
            (
                scenario::parse_scenario(&text, &origin, base_dir)?,
                origin,
                Some(text),
            )
        }
        Some(path) => {
            let name = path.to_string_lossy();
            match scenario::bundled(&name) {
                Some(text) => {
                    let origin = format!("bundled scenario {name}");
                    (
                        parse_bundled(text, &origin)?,
                        origin,
                        Some(text.to_string()),
                    )
                }
                None => {
                    return Err(Invalid {
                        origin: path.display().to_string(),
                        line: None,
                        field: String::new(),
                        message: format!(
                            "no such file, and no bundled scenario of that name (bundled \
                             scenarios: {})",
                            scenario::bundled_names().join(", ")
                        ),
                    });
                }
            }
        }
    };
    let options = options_for(&scenario, overrides).map_err(|e| {
        let (field, line) = match &e {
            SettingsError::ScenarioOption { flag, .. } => {
                let field = format!("options.{flag}");
                let line = text.as_deref().and_then(|t| locate_field_line(t, &field));
                (field, line)
            }
            SettingsError::TooManyLoops { .. } => {
                let line = text
                    .as_deref()
                    .and_then(|t| locate_field_line(t, "duration"));
                ("duration".to_string(), line)
            }
            SettingsError::Override { .. } | SettingsError::Invalid(_) => (String::new(), None),
        };
        let origin = match &e {
            SettingsError::Override { .. } => "command line".to_string(),
            _ => origin.clone(),
        };
        let message = match &e {
            SettingsError::ScenarioOption { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        Invalid {
            origin,
            line,
            field,
            message,
        }
    })?;
    Ok(Loaded { scenario, options })
}

fn parse_bundled(text: &str, origin: &str) -> Result<Scenario, Invalid> {
    Ok(scenario::parse_scenario(text, origin, &PathBuf::from("."))?)
}
