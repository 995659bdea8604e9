//! PostgreSQL's errors as the crate's: the server's SQLSTATE and message
//! (with its detail and hint) when it refused a call, what broke when it
//! could not be reached, and "outcome unknown" when a connection dropped
//! after a write was sent. The advice to check the server and the address
//! is given only where the server could not be reached.

use postgres::error::{DbError, ErrorPosition, Severity};

use crate::error::Error;

const BACKEND: &str = "PostgreSQL";

/// An error of a call that wrote nothing (a read, a connect, a statement
/// the server refused): `ServerRefused` with the server's reason, or
/// `Backend` if the server could not be reached.
pub fn db(e: postgres::Error) -> Error {
    match e.as_db_error() {
        Some(server) => refused(server),
        None => Error::Backend {
            backend: BACKEND,
            reason: chain(&e),
        },
    }
}

/// An error of a call that writes: as [`db`], but `OutcomeUnknown` when the
/// connection broke while the statement may have reached the server.
pub fn sent(e: postgres::Error) -> Error {
    if connection_lost(&e) && !never_sent(&e) {
        return Error::OutcomeUnknown {
            backend: BACKEND,
            reason: match e.as_db_error() {
                Some(server) => reason_of(server),
                None => chain(&e),
            },
        };
    }
    db(e)
}

/// Whether `e` ended the connection (rather than one statement): an I/O
/// error, a closed connection, or a server error that ends the session
/// (FATAL, PANIC: a shutdown, a restart, a terminated backend).
pub fn connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(server) => matches!(
            server.parsed_severity(),
            Some(Severity::Fatal | Severity::Panic)
        ),
        // Io, or a protocol error: the connection is not usable after either.
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// Whether the server had closed the connection before the call reached
/// it: the write was refused (EPIPE), so the request's closing Sync never
/// arrived and nothing of it was committed.
pub fn never_sent(e: &postgres::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Whether connecting again may help: the server is down, starting up,
/// shutting down or out of connections (not a refusal of who we are).
pub fn worth_retrying(e: &postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            // 08: connection exception; 57: operator intervention
            // (shutdown, starting up); 53300: too many connections.
            code.starts_with("08") || code.starts_with("57") || code == "53300"
        }
    }
}

fn refused(server: &DbError) -> Error {
    Error::ServerRefused {
        backend: BACKEND,
        code: format!("SQLSTATE {}", server.code().code()),
        reason: reason_of(server),
    }
}

/// The server's message, detail and hint, then what to do where known.
fn reason_of(server: &DbError) -> String {
    let mut reason = server.message().to_owned();
    if let Some(detail) = server.detail() {
        reason.push_str(&format!(" ({detail})"));
    }
    if let Some(hint) = server.hint() {
        reason.push_str(&format!("; hint: {hint}"));
    }
    if let Some(ErrorPosition::Original(at)) = server.position() {
        reason.push_str(&format!(" at character {at}"));
    }
    if let Some(advice) = advice(server.code().code()) {
        reason.push_str("; ");
        reason.push_str(advice);
    }
    reason
}

/// What to do next for the errors a user of a queue meets.
fn advice(code: &str) -> Option<&'static str> {
    Some(match code {
        "28P01" | "28000" => "check the user and password in the address",
        "3D000" => "check the database name in the address, or create the database",
        "42501" => {
            "grant the user the privileges the queue needs (USAGE and CREATE on its \
             schema, or a schema it owns: PgOptions::schema)"
        }
        "53300" => {
            "the server has no connection slot free: close idle ones or raise max_connections"
        }
        "57P03" => "the server is starting up or shutting down: try again in a moment",
        "57P01" | "57P02" => "the server was shut down or restarted: the next call connects again",
        _ => return None,
    })
}

/// `e` and its sources, each once: the driver's own text ("db error",
/// "error connecting to server") says little without its cause.
fn chain(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}
