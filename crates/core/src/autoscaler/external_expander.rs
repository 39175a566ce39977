//! The loop's call to the external expander (docs/grpc-expander.md): the only await inside
//! Decide. The plan made with `ExternalExpanderStep::Ask` says what to ask; the answer (or the
//! failure) goes into the real plan.

use crate::events::{Event, EventObject};
use crate::options::ExpanderName;
use crate::scale_up::{ExpanderQuery, ExternalAnswer};

use super::Autoscaler;

/// Reason of the event that says the external expander failed and every option was kept.
pub const EXTERNAL_EXPANDER_FAILED: &str = "ExternalExpanderFailed";

impl Autoscaler {
    /// `grpc` is in `--expander` and a service is wired to answer it.
    pub(super) fn external_expander_wanted(&self) -> bool {
        self.external_expander.is_some() && self.options.expander.contains(&ExpanderName::Grpc)
    }

    /// Asks the external expander about `query` (none: the chain did not reach `grpc` with more
    /// than one option, and nothing is asked). A failure keeps every option and is reported on
    /// the status ConfigMap (docs/grpc-expander.md GX-104).
    pub(super) async fn external_expander_answer(
        &self,
        query: Option<ExpanderQuery>,
        events: &mut Vec<Event>,
    ) -> Option<ExternalAnswer> {
        let query = query?;
        let service = self.external_expander.as_ref()?;
        let answer = match service.best_options(&query).await {
            Ok(ids) => ExternalAnswer::Options(ids),
            Err(error) => {
                events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    EXTERNAL_EXPANDER_FAILED,
                    format!("the grpc expander failed, every option is kept: {error}"),
                ));
                ExternalAnswer::Failed(error.to_string())
            }
        };
        Some(answer)
    }
}
