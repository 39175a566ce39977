//! Ferroscale's own metrics, prefixed `ferroscale_`: what upstream has no series for. They sit in
//! the same registry and on the same `/metrics` page as upstream's.

use ferroscale_core::autoscaler::LoopOutcome;
use prometheus::{IntGaugeVec, Opts, Registry};

use crate::registry::MetricsError;

#[derive(Clone)]
pub(crate) struct FerroscaleMetrics {
    /// `ferroscale_missing_permissions{resource}`: 1 for each kind the autoscaler runs without
    /// because its identity may not list or watch it (docs/behaviour.md LOOP-123); no series
    /// when every kind can be read.
    pub missing_permissions: IntGaugeVec,
}

impl FerroscaleMetrics {
    pub(crate) fn register(registry: &Registry) -> Result<FerroscaleMetrics, MetricsError> {
        let missing_permissions = IntGaugeVec::new(
            Opts::new(
                "ferroscale_missing_permissions",
                "Kinds the autoscaler runs without because its identity may not list or watch \
                 them (1 per resource).",
            ),
            &["resource"],
        )?;
        registry.register(Box::new(missing_permissions.clone()))?;
        Ok(FerroscaleMetrics {
            missing_permissions,
        })
    }

    pub(crate) fn record(&self, outcome: &LoopOutcome) {
        self.missing_permissions.reset();
        for missing in &outcome.missing_permissions {
            // `list/watch <resource>: <what is lost>`.
            let resource = missing
                .strip_prefix("list/watch ")
                .and_then(|rest| rest.split_once(':'))
                .map_or(missing.as_str(), |(resource, _)| resource);
            self.missing_permissions
                .with_label_values(&[resource])
                .set(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ferroscale_core::AutoscalingOptions;
    use ferroscale_core::autoscaler::LoopOutcome;

    use crate::AutoscalerMetrics;

    /// Each kind the identity may not read is one series; once it may, the series goes.
    #[test]
    fn missing_permissions_are_one_series_each_and_go_when_granted() {
        let metrics = AutoscalerMetrics::new().unwrap();
        let options = AutoscalingOptions::default();
        let denied = LoopOutcome {
            missing_permissions: vec![
                "list/watch priorityclasses.scheduling.k8s.io: pods count with ...".to_string(),
                "list/watch resourceslices.resource.k8s.io: DRA is blind".to_string(),
            ],
            ..LoopOutcome::default()
        };
        metrics.record_loop(&denied, &options, Duration::ZERO);
        let text = metrics.render();
        for resource in [
            "priorityclasses.scheduling.k8s.io",
            "resourceslices.resource.k8s.io",
        ] {
            let series = format!("ferroscale_missing_permissions{{resource=\"{resource}\"}} 1");
            assert!(text.contains(&series), "{text}");
        }

        metrics.record_loop(&LoopOutcome::default(), &options, Duration::ZERO);
        assert!(
            !metrics.render().contains("ferroscale_missing_permissions{"),
            "{}",
            metrics.render()
        );
    }
}
