//! A list's filter as the query of a URL (`state`, `kind`, `header`,
//! `prefix` (of the id), `reason`), read into the Jobs API's [`JobFilter`], and written back
//! into links and hidden form fields so paging, tabs and actions keep it.

use maud::{html, Markup};

use super::pages::dead::urlencode;
use super::pages::param;
use super::pages::queue::KIND_HEADER;
use crate::jobs::{JobFilter, SearchState};

/// The states a list can show, as the `state` parameter names them.
pub const STATES: [&str; 5] = ["waiting", "ready", "leased", "scheduled", "dead"];

/// A list's filter, as asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// One of [`STATES`].
    pub state: String,
    /// Header `klass`.
    pub kind: Option<String>,
    /// `NAME=VALUE`.
    pub header: Option<(String, String)>,
    /// The start of an id.
    pub id: Option<String>,
    /// Text of a dead letter's reason.
    pub reason: Option<String>,
}

impl Filter {
    /// The filter of a query; a state other than [`STATES`] is `waiting`,
    /// a header without `=` is ignored, empty fields are absent.
    pub fn of(query: &[(String, String)]) -> Self {
        let text = |name| {
            param(query, name)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let header = text("header").and_then(|h| {
            h.split_once('=')
                .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                .filter(|(n, _)| !n.is_empty())
        });
        Filter {
            state: param(query, "state")
                .filter(|s| STATES.contains(s))
                .unwrap_or("waiting")
                .to_owned(),
            kind: text("kind"),
            header,
            id: text("prefix"),
            reason: text("reason"),
        }
    }

    /// Whether anything but the state narrows the list.
    pub fn narrows(&self) -> bool {
        self.kind.is_some() || self.header.is_some() || self.id.is_some() || self.reason.is_some()
    }

    /// The Jobs API's filter.
    pub fn jobs_filter(&self) -> JobFilter {
        let mut f = JobFilter::new().state(match self.state.as_str() {
            "ready" => SearchState::Ready,
            "leased" => SearchState::Leased,
            "scheduled" => SearchState::Scheduled,
            "dead" => SearchState::Dead,
            _ => SearchState::Waiting,
        });
        if let Some(kind) = &self.kind {
            f = f.header(KIND_HEADER, kind.clone());
        }
        if let Some((name, value)) = &self.header {
            f = f.header(name.clone(), value.clone());
        }
        f.id_prefix = self.id.clone();
        f.reason = self.reason.clone();
        f
    }

    /// The query of the narrowing fields (`&kind=…&header=…`), for links
    /// that add the state and page.
    pub fn query(&self) -> String {
        self.fields()
            .iter()
            .map(|(name, value)| format!("&{name}={}", urlencode(value)))
            .collect()
    }

    /// The narrowing fields as (name, value), in a fixed order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = Vec::new();
        if let Some(kind) = &self.kind {
            fields.push(("kind", kind.clone()));
        }
        if let Some((name, value)) = &self.header {
            fields.push(("header", format!("{name}={value}")));
        }
        if let Some(id) = &self.id {
            fields.push(("prefix", id.clone()));
        }
        if let Some(reason) = &self.reason {
            fields.push(("reason", reason.clone()));
        }
        fields
    }

    /// The filter as hidden fields of a form (the state too).
    pub fn hidden(&self) -> Markup {
        html! {
            input type="hidden" name="state" value=(self.state);
            @for (name, value) in self.fields() { input type="hidden" name=(name) value=(value); }
        }
    }

    /// The filter in words: "dead jobs, kind send_email, reason containing “x”".
    pub fn describe(&self) -> String {
        let mut words = vec![format!("{} jobs", self.state)];
        if let Some(kind) = &self.kind {
            words.push(format!("kind {kind}"));
        }
        if let Some((name, value)) = &self.header {
            words.push(format!("header {name}={value}"));
        }
        if let Some(id) = &self.id {
            words.push(format!("id starting with “{id}”"));
        }
        if let Some(reason) = &self.reason {
            words.push(format!("reason containing “{reason}”"));
        }
        words.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_query_reads_into_a_filter_and_back() {
        let f = Filter::of(&query(&[
            ("state", "dead"),
            ("kind", "send_email"),
            ("header", " tenant = a&b "),
            ("prefix", ""),
            ("reason", "exit 3"),
        ]));
        assert_eq!(f.header, Some(("tenant".into(), "a&b".into())));
        assert_eq!(f.id, None, "empty fields are absent");
        assert_eq!(
            f.query(),
            "&kind=send_email&header=tenant%3Da%26b&reason=exit%203"
        );
        let jobs = f.jobs_filter();
        assert_eq!(jobs.state, SearchState::Dead);
        assert_eq!(
            jobs.headers,
            [
                ("klass".to_owned(), "send_email".to_owned()),
                ("tenant".into(), "a&b".into())
            ]
        );
        assert_eq!(jobs.reason.as_deref(), Some("exit 3"));
        let plain = Filter::of(&query(&[("state", "bogus"), ("header", "novalue")]));
        assert_eq!(plain.state, "waiting");
        assert!(!plain.narrows() && plain.query().is_empty());
    }
}
