//! The Jobs API suite (`tests/jobs_api/`) against the embedded backend,
//! in exclusive and in shared mode.

use std::path::PathBuf;
use std::sync::Arc;

use dque::jobs::{JobOptions, JobQueue};
use dque::Options;

#[macro_use]
mod jobs_api;
use jobs_api::{Backend, Settings};

/// Queues in a temporary directory, one subdirectory per name.
struct Embedded {
    dir: tempfile::TempDir,
    shared: bool,
}

impl Embedded {
    fn new(shared: bool) -> Self {
        Embedded {
            dir: tempfile::tempdir().expect("temp dir"),
            shared,
        }
    }

    fn options(&self, settings: &Settings) -> JobOptions {
        JobOptions::new()
            .queue(
                Options::new()
                    .shared(self.shared)
                    .visibility_timeout(settings.lease_time)
                    .max_attempts(settings.max_attempts),
            )
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Backend for Embedded {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Arc::new(
            self.options(settings)
                .create(self.path(name))
                .expect("create"),
        )
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Arc::new(self.options(settings).open(self.path(name)).expect("open"))
    }
}

mod exclusive {
    use super::*;
    jobs_api_suite!(Embedded::new(false));
}

mod shared {
    use super::*;
    jobs_api_suite!(Embedded::new(true));
}
