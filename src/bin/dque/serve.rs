//! `dque serve`: the dashboard (`dque::web`) over one or more queues of
//! any backend, until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::JobQueue;
use dque::runtime::StopHandle;
use dque::web::{check_listen, Dashboard, DashboardOptions};

use crate::address::{Address, AddressExt, Make};
use crate::fail::Failure;

/// Options of `dque serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  dque serve jobs/                                    one queue, at http://127.0.0.1:7878/
  dque serve mail/ 'postgres://app@db/app#billing'    two queues of two backends
  dque serve q --listen 0.0.0.0:7878 --token-file /etc/dque/token

Pages: the overview of every queue, each queue's counts, wait and run time
charts and jobs by state, its dead letters by failure reason, and the actions
(requeue a dead letter, cancel, change priority: one job or a selection).
/metrics serves the Prometheus text format. Listening anywhere but loopback
needs --token-file: browsers log in at /login, scrapers send
`Authorization: Bearer TOKEN`.")]
pub struct ServeArgs {
    /// The queues: directories, postgres://…#QUEUE, redis://…#QUEUE.
    #[arg(value_name = "ADDRESS", required = true, value_parser = crate::address::parse)]
    pub addresses: Vec<Address>,
    /// Where to listen. Anything but loopback needs --token-file.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7878")]
    pub listen: SocketAddr,
    /// Serve no actions: look, change nothing.
    #[arg(long)]
    pub read_only: bool,
    /// A file holding the token every request must carry (at least 16
    /// characters; surrounding white space is ignored).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// Runs the dashboard.
pub fn run(args: &ServeArgs) -> Result<ExitCode, Failure> {
    let mut options = DashboardOptions::new().read_only(args.read_only);
    if let Some(file) = &args.token_file {
        let token = std::fs::read_to_string(file).map_err(|e| {
            Failure::other(format!(
                "cannot read the token file {}: {e}",
                file.display()
            ))
        })?;
        options = options
            .token(token.trim())
            .map_err(|e| Failure::new(2, format!("the token in {}: {e}", file.display())))?;
    }
    check_listen(args.listen, options.has_token()).map_err(|e| Failure::new(2, e.to_string()))?;
    let mut queues: Vec<(String, Arc<dyn JobQueue>)> = Vec::new();
    for address in &args.addresses {
        queues.push((label(address), address.open(Make::No)?));
    }
    let stop = StopHandle::new();
    let _signals = stop
        .on_signals()
        .map_err(|e| Failure::other(format!("cannot catch SIGINT and SIGTERM: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .map_err(Failure::other)?;
    let dashboard = Dashboard::new(queues.clone(), options);
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| Failure::other(format!("cannot listen on {}: {e}", args.listen)))?;
        let bound = listener.local_addr().map_err(Failure::other)?;
        eprintln!(
            "dque serve: http://{bound}/ ({} queue{}{})",
            queues.len(),
            if queues.len() == 1 { "" } else { "s" },
            if args.read_only { ", read-only" } else { "" }
        );
        let stopped = async move {
            let _ =
                tokio::task::spawn_blocking(move || while !stop.wait(Duration::from_secs(3600)) {})
                    .await;
        };
        dashboard
            .serve_until(listener, stopped)
            .await
            .map_err(Failure::other)
    });
    for (_, queue) in &queues {
        queue.close().map_err(Failure::other)?;
    }
    served.map(|()| ExitCode::SUCCESS)
}

/// A queue's label: its address, with any password left out.
pub fn label(address: &Address) -> String {
    let text = address.to_string();
    let Some((scheme, rest)) = text.split_once("://") else {
        return text;
    };
    // user:password@host → user@host (the userinfo ends at the last `@`
    // before the path).
    let end = rest.find(['/', '#', '?']).unwrap_or(rest.len());
    let redacted = match rest[..end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{user}@{}", &rest[at + 1..])
        }
        None => rest.to_owned(),
    };
    // password=… in the query string.
    let redacted = redacted
        .split('&')
        .map(|part| match part.find("password=") {
            Some(i) => {
                let value_end = part[i..].find('#').map_or(part.len(), |j| i + j);
                format!("{}password=…{}", &part[..i], &part[value_end..])
            }
            None => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{scheme}://{redacted}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_leave_out_passwords() {
        let cases = [
            ("postgres://app:s3cret@db/app#q", "postgres://app@db/app#q"),
            ("redis://:s3cret@h:6379/0#q", "redis://@h:6379/0#q"),
            (
                "postgres://db/app?user=a&password=s3cret#q",
                "postgres://db/app?user=a&password=…#q",
            ),
            ("redis://h:6379#q", "redis://h:6379#q"),
        ];
        for (given, shown) in cases {
            let address = crate::address::parse(given).unwrap();
            assert_eq!(label(&address), shown);
            assert!(!label(&address).contains("s3cret"));
        }
    }
}
