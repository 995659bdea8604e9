//! The kinds a worker runs: each kind's name, defaults and handler, with
//! the job's type erased so one worker runs many kinds.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::context::Context;
use super::job::{Job, KindOptions};
use super::rules::Ended;

/// One registered kind, its job type erased.
pub(crate) trait Kind: Send + Sync {
    fn options(&self) -> &KindOptions;
    /// Decodes `body` and runs the handler, a panic caught.
    fn run(&self, body: &[u8], cx: &Context<'_>) -> Ended;
}

struct Typed<J> {
    options: KindOptions,
    job: PhantomData<fn() -> J>,
}

impl<J: Job> Kind for Typed<J> {
    fn options(&self) -> &KindOptions {
        &self.options
    }

    fn run(&self, body: &[u8], cx: &Context<'_>) -> Ended {
        // A decode runs the program's code too (a `Deserialize`): its
        // panic is caught as the handler's is.
        let job = match catch_unwind(|| J::decode(body)) {
            Ok(Ok(job)) => job,
            Ok(Err(e)) => {
                return Ended::Undecodable(format!(
                    "cannot decode the body of a {:?} job: {e}",
                    J::KIND
                ))
            }
            Err(payload) => return Ended::Panicked(panic_message(payload.as_ref())),
        };
        // The job is the handler's to use up: nothing of it is seen after
        // a panic, so unwinding cannot leave it half changed for us.
        match catch_unwind(AssertUnwindSafe(|| job.run(cx))) {
            Ok(Ok(())) => Ended::Ok,
            Ok(Err(e)) => Ended::Job(e),
            Err(payload) => Ended::Panicked(panic_message(payload.as_ref())),
        }
    }
}

/// The message a panic was given (`panic!("boom")` gives `boom`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panicked (with a value that is not text)".to_owned()
    }
}

/// The kinds a worker runs, by name: `dyn Kind` for the thread runtime,
/// `dyn AsyncKind` for the tokio one.
pub(crate) struct Kinds<K: ?Sized = dyn Kind>(HashMap<&'static str, Arc<K>>);

impl<K: ?Sized> Default for Kinds<K> {
    fn default() -> Self {
        Kinds(HashMap::new())
    }
}

impl<K: ?Sized> Clone for Kinds<K> {
    fn clone(&self) -> Self {
        Kinds(self.0.clone())
    }
}

impl Kinds {
    pub(crate) fn register<J: Job>(&mut self, options: KindOptions) {
        self.insert(
            J::KIND,
            Arc::new(Typed::<J> {
                options,
                job: PhantomData,
            }),
        );
    }
}

impl<K: ?Sized> Kinds<K> {
    pub(crate) fn insert(&mut self, name: &'static str, kind: Arc<K>) {
        self.0.insert(name, kind);
    }

    /// The kind named `kind`, with its name as registered.
    pub(crate) fn get_named(&self, kind: &str) -> Option<(&'static str, &Arc<K>)> {
        self.0.get_key_value(kind).map(|(name, kind)| (*name, kind))
    }

    pub(crate) fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.0.keys().copied().collect();
        names.sort_unstable();
        names
    }
}

impl<K: ?Sized> std::fmt::Debug for Kinds<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
