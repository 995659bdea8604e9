//! The dashboard (feature `web`): server-rendered pages over one or more
//! job queues of any backend, actions through the Jobs API, live numbers,
//! and `/metrics` in the Prometheus text format. `dque serve` serves it;
//! a program can mount [`Dashboard::router`] in its own axum server.
//!
//! Everything it shows and does goes through [`JobQueue`]: counts, stats,
//! `waiting`, `dead`, `leases`, `job_info`, `limits`, `schedules`, `is_paused`,
//! `requeue_dead`, `cancel`, `set_priority`, `pause`, `resume`. Nothing of
//! a backend (SQL, Lua, files) is in this module, so a queue of any
//! backend is shown the same way.
//!
//! The routes (one module each; a new page is a module and a line in
//! [`Dashboard::router`]):
//!
//! | route | what |
//! |---|---|
//! | `GET /` | every queue: ready, scheduled, leased, dead, the next job's age, done and failed today |
//! | `GET /queues/{n}` | one queue: whether it is paused (a button to pause or resume), counts, wait and run time histograms of its recorded days, its jobs by state with paging (`?state=…&page=…`; every waiting job by key, `&after=CURSOR` from `JobQueue::waiting_page`, as deep as the list goes), a box to find a job by id, its limits and its schedules |
//! | `GET /queues/{n}/dead` | its dead letters grouped by failure reason (`?reason=…` shows one group) |
//! | `GET /queues/{n}/jobs/{id}` | one job in any state: body (JSON, text or hex), headers, attempts, times, history, last error, the actions its state allows |
//! | `GET /queues/{n}/jobs?job=…` | the "find a job by id" box: sends the browser to the job's page |
//! | `GET /queues/{n}?state=…&kind=…&header=NAME=VALUE&prefix=…&reason=…` | the list filtered: by state, kind, a header, the start of the id, text of a dead letter's reason (through `JobQueue::search`: where no index answers, the first [`SCAN_BOUND`] jobs of the state are read, and the page says how many of how many it searched) |
//! | `GET /queues/{n}/bulk?FILTER&do=retry\|cancel\|priority` | how many jobs an action on every match of the filter would change, and the form that confirms it (absent with `read_only`) |
//! | `POST /queues/{n}/bulk` | the confirmed action on every match, through the Jobs API, unless more match than were shown (CSRF token required; absent with `read_only`) |
//! | `POST /queues/{n}/actions` | requeue a dead letter, cancel, change priority: of one job or a selection; pause or resume the queue (CSRF token required; absent with `read_only`) |
//! | `GET /workers` | who holds what, since when: every queue's leased jobs with the worker holding each, its kind, the lease's start and end |
//! | `GET /live` | the numbers of every queue as JSON, for the pages' live refresh |
//! | `GET /metrics` | the Prometheus text format, collected at scrape time |
//! | `GET /static/…` | the stylesheet and the one small script (vendored: no CDN) |
//! | `GET`/`POST /login` | with a token: the form that sets the session cookie |
//!
//! Pages to come slot in the same way, each over its part of the
//! contract (a module under `pages/`, a tab in the navigation (`layout`),
//! and their actions as more verbs of the one action route).
//!
//! Security: every response carries a Content-Security-Policy that allows
//! only this server's own script and style; every page is a maud template,
//! which escapes what it shows (job bodies, headers, ids, reasons); every
//! state-changing request is a POST with the dashboard's CSRF token and,
//! when the browser says, from its own origin; with a token every request
//! needs it (a `Bearer` header, or the cookie `/login` sets).
//!
//! ```
//! use std::sync::Arc;
//! use dque::jobs::{EmbeddedJobs, JobQueue};
//! use dque::web::{Dashboard, DashboardOptions};
//! # fn main() -> Result<(), dque::Error> {
//! let dir = tempfile::tempdir().unwrap();
//! let queue: Arc<dyn JobQueue> = Arc::new(EmbeddedJobs::create(dir.path().join("mail"))?);
//! let dashboard = Dashboard::new(vec![("mail".into(), queue)], DashboardOptions::new());
//! let _router: axum::Router = dashboard.router();
//! // axum::serve(listener, router) serves it.
//! # Ok(()) }
//! ```

mod actions;
mod assets;
mod charts;
mod filter;
mod format;
mod layout;
mod live;
mod metrics;
mod numbers;
mod pages;
mod security;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::error::{Error, Result};
use crate::jobs::JobQueue;

pub use security::check_listen;

/// Jobs shown on one page of a queue's list.
pub const PAGE_JOBS: usize = 50;
/// The deepest page of a list read from the front (dead letters,
/// filtered lists): a page reads every job before it, so such a list
/// stops here. The list of every waiting job is paged by key instead.
pub const MAX_LIST_DEPTH: usize = 10_000;
/// Jobs a filtered list (one state, one failure reason) reads at most; a
/// page says so when there were more.
pub const SCAN_BOUND: usize = 10_000;
/// Jobs one action may name.
pub const MAX_SELECTION: usize = 1_000;

/// How a dashboard serves.
#[derive(Debug, Clone, Default)]
pub struct DashboardOptions {
    read_only: bool,
    token: Option<String>,
}

impl DashboardOptions {
    /// Actions on, no token: for 127.0.0.1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve no actions: no buttons, and `POST` routes answer 404.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Require `token` of every request: `Authorization: Bearer TOKEN`, or
    /// the cookie that the `/login` form sets.
    ///
    /// ```
    /// let options = dque::web::DashboardOptions::new().token("k3y-of-32-characters-or-so-abcdef")?;
    /// # Ok::<(), dque::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidOption` for a token shorter than 16 characters or with a
    /// character outside printable ASCII, space, `;`, `,`, `"` or `\`
    /// (it travels in a cookie).
    pub fn token(mut self, token: impl Into<String>) -> Result<Self> {
        let token = token.into();
        security::check_token(&token)?;
        self.token = Some(token);
        Ok(self)
    }

    /// Whether a token is required.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }
}

/// One queue shown: a label (its address without a password) and its handle.
pub type Shown = (String, Arc<dyn JobQueue>);

/// The dashboard's state, shared by its routes.
#[derive(Debug)]
pub(crate) struct App {
    pub queues: Vec<Shown>,
    pub read_only: bool,
    pub token: Option<String>,
    /// The CSRF token of every form: random per process.
    pub csrf: String,
}

/// A dashboard over some queues.
#[derive(Debug, Clone)]
pub struct Dashboard {
    app: Arc<App>,
}

impl Dashboard {
    /// A dashboard showing `queues` (label, handle), in this order.
    ///
    /// ```
    /// let dashboard = dque::web::Dashboard::new(Vec::new(), dque::web::DashboardOptions::new());
    /// let _ = dashboard.router();
    /// ```
    pub fn new(queues: Vec<Shown>, options: DashboardOptions) -> Self {
        Dashboard {
            app: Arc::new(App {
                queues,
                read_only: options.read_only,
                token: options.token,
                csrf: security::random_token(),
            }),
        }
    }

    /// The routes (see the [module documentation](self)), with the
    /// security headers and the token check around them.
    pub fn router(&self) -> Router {
        let mut router = Router::new()
            .route("/", get(pages::overview::page))
            .route("/queues/{n}", get(pages::queue::page))
            .route("/queues/{n}/dead", get(pages::dead::page))
            .route("/queues/{n}/jobs", get(pages::job::find))
            .route("/queues/{n}/jobs/{id}", get(pages::job::page))
            .route("/workers", get(pages::workers::page))
            .route("/live", get(live::numbers))
            .route("/metrics", get(metrics::scrape))
            .route("/static/{file}", get(assets::serve));
        if !self.app.read_only {
            router = router.route("/queues/{n}/actions", post(actions::act));
            router = router.route(
                "/queues/{n}/bulk",
                get(pages::bulk::confirm).post(pages::bulk::apply),
            );
        }
        if self.app.token.is_some() {
            router = router.route("/login", get(security::login_form).post(security::login));
        }
        router
            .fallback(pages::not_found)
            .layer(axum::middleware::from_fn_with_state(
                self.app.clone(),
                security::guard,
            ))
            .with_state(self.app.clone())
    }

    /// Serves the dashboard on `listen` until the server fails, after
    /// [`check_listen`].
    ///
    /// # Errors
    ///
    /// `InvalidOption` for an address other than loopback without a
    /// token; `Io` if the address cannot be bound or the server fails.
    pub async fn serve(self, listen: SocketAddr) -> Result<()> {
        check_listen(listen, self.app.token.is_some())?;
        let io = |e| Error::io(std::path::PathBuf::from(listen.to_string()), e);
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(io)?;
        self.serve_until(listener, std::future::pending()).await
    }

    /// Serves on a bound `listener` until `stop` is ready, then finishes
    /// the requests under way.
    ///
    /// # Errors
    ///
    /// As [`serve`](Self::serve).
    pub async fn serve_until(
        self,
        listener: tokio::net::TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("listener", e))?;
        check_listen(local, self.app.token.is_some())?;
        axum::serve(listener, self.router())
            .with_graceful_shutdown(stop)
            .await
            .map_err(|e| Error::io(std::path::PathBuf::from(local.to_string()), e))
    }
}
