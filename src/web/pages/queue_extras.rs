//! The parts of a queue page about the queue itself rather than its jobs:
//! whether it is paused (with the button that changes it), its limits
//! (name, max, running) and its schedules (name, cadence, next run). Each
//! is one read of the Jobs API; a list shows at most [`SHOWN`] entries.

use std::time::SystemTime;

use maud::{html, Markup};

use crate::jobs::{Cadence, JobQueue, Limit, ScheduleInfo};
use crate::web::format::{ago, duration};
use crate::web::App;

/// Limits, or schedules, a queue page shows at most (and says how many more).
pub const SHOWN: usize = 100;

/// What a queue page shows of its queue.
#[derive(Debug)]
pub struct Extras {
    paused: crate::Result<bool>,
    limits: crate::Result<Vec<Limit>>,
    schedules: crate::Result<Vec<ScheduleInfo>>,
}

impl Extras {
    /// Reads them (three reads; an error is shown where its part would be).
    pub fn read(queue: &dyn JobQueue) -> Extras {
        Extras {
            paused: queue.is_paused(),
            limits: queue.limits(),
            schedules: queue.schedules(),
        }
    }

    /// Whether the queue is paused (false when it cannot say).
    pub fn paused(&self) -> bool {
        matches!(self.paused, Ok(true))
    }

    /// The paused line with its button (none in read-only mode).
    pub fn pause_bar(&self, app: &App, n: usize) -> Markup {
        let paused = self.paused();
        html! {
            div.bar-actions #pause {
                @match &self.paused {
                    Ok(true) => { span.badge.paused { "paused" } " Workers lease nothing from this queue. " }
                    Ok(false) => {}
                    Err(e) => { span.error { "Pause: " (e.to_string()) } " " }
                }
                @if !app.read_only && self.paused.is_ok() {
                    form.inline method="post" action={ "/queues/" (n) "/actions" } {
                        input type="hidden" name="csrf" value=(app.csrf);
                        input type="hidden" name="back" value={ "/queues/" (n) };
                        @if paused {
                            button type="submit" name="queue" value="resume" { "Resume" }
                        } @else {
                            button type="submit" name="queue" value="pause" { "Pause" }
                        }
                    }
                }
            }
        }
    }

    /// The limits and schedules sections.
    pub fn sections(&self, now: SystemTime) -> Markup {
        html! {
            section #limits {
                h2 { "Limits" }
                @match &self.limits {
                    Err(e) => { p.error { (e.to_string()) } }
                    Ok(limits) if limits.is_empty() => { p { "None set." } }
                    Ok(limits) => {
                        table { thead { tr { th { "name" } th.n { "max" } th.n { "running" } } }
                            tbody { @for l in limits.iter().take(SHOWN) {
                                tr { td { code { (l.name) } } td.n { (l.max) } td.n { (l.running) } }
                            } } }
                        (more(limits.len()))
                    }
                }
            }
            section #schedules {
                h2 { "Schedules" }
                @match &self.schedules {
                    Err(e) => { p.error { (e.to_string()) } }
                    Ok(schedules) if schedules.is_empty() => { p { "None." } }
                    Ok(schedules) => {
                        table { thead { tr { th { "name" } th { "cadence" } th { "next run" } } }
                            tbody { @for s in schedules.iter().take(SHOWN) {
                                tr {
                                    td { code { (s.schedule.name()) } }
                                    td { (cadence(s.schedule.cadence(), s.schedule.zone())) }
                                    td { (next_run(s.next_run, now)) }
                                }
                            } } }
                        (more(schedules.len()))
                    }
                }
            }
        }
    }
}

fn more(len: usize) -> Markup {
    html! { @if len > SHOWN { p.note { "And " (len - SHOWN) " more not shown." } } }
}

/// `every 30s`, `every 250ms`, or `cron 0 3 * * * (Europe/Paris)`.
fn cadence(cadence: &Cadence, zone: &str) -> String {
    match cadence {
        Cadence::Every(d) if d.as_secs() == 0 => format!("every {}ms", d.as_millis()),
        Cadence::Every(d) => format!("every {}", duration(*d)),
        Cadence::Cron(expression) => format!("cron {expression} ({zone})"),
    }
}

/// A next run: `in 5m`, or `due now` for a time passed.
fn next_run(at: SystemTime, now: SystemTime) -> String {
    if at <= now {
        "due now (at the next lease)".to_owned()
    } else {
        ago(at, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cadences_read_as_people_say_them() {
        assert_eq!(
            cadence(&Cadence::Every(Duration::from_millis(250)), "UTC"),
            "every 250ms"
        );
        assert_eq!(
            cadence(&Cadence::Every(Duration::from_secs(90)), "UTC"),
            "every 1m 30s"
        );
        assert_eq!(
            cadence(&Cadence::Cron("0 3 * * *".into()), "Europe/Paris"),
            "cron 0 3 * * * (Europe/Paris)"
        );
    }
}
