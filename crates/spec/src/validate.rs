//! The accumulator that lets validation report every problem at once.

use crate::error::FieldError;

/// Problems found so far, in the order found.
#[derive(Debug, Default)]
pub(crate) struct Problems(pub(crate) Vec<FieldError>);

impl Problems {
    /// Records a problem at `path`.
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(path, message));
    }

    /// Records `must be N or more` when `value < min`.
    pub(crate) fn at_least(&mut self, path: &str, value: i64, min: i64) {
        if value < min {
            self.push(path, format!("must be {min} or more (got {value})"));
        }
    }

    /// Records what every row of a quota list (a Queue's or a Cohort's `spec.quotas`) must
    /// hold: its flavor named once in the list (`seen` holds the rows before it), and GPU
    /// counts of 0 or more. Returns the row's path, for the kind's own rules.
    pub(crate) fn quota_row<'a>(
        &mut self,
        i: usize,
        seen: &mut std::collections::BTreeSet<&'a str>,
        flavor: &'a str,
        nominal: i32,
        limits: [(&str, Option<i32>); 2],
    ) -> String {
        let at = format!("spec.quotas[{i}]");
        if !seen.insert(flavor) {
            self.push(
                format!("{at}.flavor"),
                format!("{flavor:?} is listed twice; merge the entries"),
            );
        }
        self.at_least(&format!("{at}.nominal"), i64::from(nominal), 0);
        for (field, limit) in limits {
            if let Some(limit) = limit {
                self.at_least(&format!("{at}.{field}"), i64::from(limit), 0);
            }
        }
        at
    }

    /// Records a problem at `path` unless `weight` (a Queue's or a Cohort's fair-sharing
    /// `spec.weight`) is a positive, finite number.
    pub(crate) fn positive_weight(&mut self, path: &str, weight: f64) {
        if !(weight > 0.0 && weight.is_finite()) {
            self.push(
                path,
                format!(
                    "must be a positive number such as 1 (the default) or 0.5 (got {weight}); \
                     for almost no share of what others leave idle, write a small one such as 0.01"
                ),
            );
        }
    }
}
