//! Who may see and change what: the listen address rule, the token, the
//! CSRF check of every POST, and the headers every response carries.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Form;
use maud::html;

use super::layout;
use super::App;
use crate::error::{Error, Result};

/// Only this server's own script and style, no frames, forms to itself.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The cookie `/login` sets.
const COOKIE: &str = "dque_token";

/// Refuses to listen anywhere but loopback without a token: a dashboard
/// changes jobs, and anyone who reaches the port could.
///
/// ```
/// use dque::web::check_listen;
/// assert!(check_listen("127.0.0.1:9090".parse().unwrap(), false).is_ok());
/// assert!(check_listen("0.0.0.0:9090".parse().unwrap(), false).is_err());
/// assert!(check_listen("0.0.0.0:9090".parse().unwrap(), true).is_ok());
/// ```
///
/// # Errors
///
/// `InvalidOption` (`listen`) for an address other than loopback when
/// `has_token` is false.
pub fn check_listen(listen: SocketAddr, has_token: bool) -> Result<()> {
    if listen.ip().is_loopback() || has_token {
        return Ok(());
    }
    Err(Error::InvalidOption {
        name: "listen",
        reason: format!(
            "{listen} is reachable from other machines, and the dashboard changes jobs: \
             give a token (--token-file FILE, holding at least 16 characters), \
             or listen on 127.0.0.1"
        ),
    })
}

/// A token must be long enough to guess at no cost, and travel in a cookie.
pub fn check_token(token: &str) -> Result<()> {
    let refused = |reason: &str| {
        Err(Error::InvalidOption {
            name: "token",
            reason: reason.to_owned(),
        })
    };
    if token.chars().count() < 16 {
        return refused(
            "shorter than 16 characters: make one with `head -c 24 /dev/urandom | base64`",
        );
    }
    if !token
        .bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'))
    {
        return refused(
            "holds a space, a control character, `;`, `,`, `\"`, `\\` or non-ASCII: \
             use letters, digits and `+/=-_`",
        );
    }
    Ok(())
}

/// 32 random bytes in hex: the OS's randomness, or the standard library's
/// random hash keys if /dev/urandom cannot be read.
pub fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        use std::hash::{BuildHasher, Hasher};
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_usize(i);
            chunk.copy_from_slice(&hasher.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares without stopping at the first difference.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// Whether the request carries the token (a bearer header or the cookie).
fn authorized(token: &str, headers: &HeaderMap) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| same(given.trim(), token));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|given| same(given, token));
    bearer || cookie
}

/// Around every route: the token check, then the security headers on
/// whatever answers.
pub async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let open = path == "/login" || path.starts_with("/static/");
    let mut response = match &app.token {
        Some(token) if !open && !authorized(token, request.headers()) => {
            let mut refused = layout::bare(
                StatusCode::UNAUTHORIZED,
                "Token required",
                html! {
                    p { "This dashboard needs its token. " a href="/login" { "Log in" } }
                },
            );
            refused
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            refused
        }
        _ => next.run(request).await,
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // Not `no-referrer`: under it browsers send `Origin: null` with a
        // form's POST, and the origin check below could not tell.
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The CSRF check of a POST: the form's token, and the browser's word on
/// where the request comes from when it gives one.
pub fn check_post(
    app: &App,
    headers: &HeaderMap,
    fields: &[(String, String)],
) -> Result<(), Box<Response>> {
    let refuse = |why: &str| {
        Err(Box::new(layout::bare(
            StatusCode::FORBIDDEN,
            "Refused",
            html! { p { (why) " Reload the page and try again." } },
        )))
    };
    let given = field(fields, "csrf").unwrap_or("");
    if !same(given, &app.csrf) {
        return refuse("The form's CSRF token is missing or not this dashboard's.");
    }
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if site != "same-origin" && site != "none" {
            return refuse("The request came from another site.");
        }
    }
    // `null`: a browser that keeps the origin to itself (privacy settings);
    // the token above still holds.
    let origin = text(header::ORIGIN).filter(|o| *o != "null");
    if let (Some(origin), Some(host)) = (origin, text(header::HOST)) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin_host != host {
            return refuse("The request came from another origin.");
        }
    }
    Ok(())
}

/// The first value of form field `name`.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// `GET /login`: the token form.
pub async fn login_form(State(app): State<Arc<App>>) -> Response {
    login_page(&app, StatusCode::OK, None)
}

fn login_page(app: &App, status: StatusCode, error: Option<&str>) -> Response {
    layout::bare(
        status,
        "Log in",
        html! {
            @if let Some(error) = error { p.error { (error) } }
            form method="post" action="/login" {
                input type="hidden" name="csrf" value=(app.csrf);
                label { "Token " input type="password" name="token" autocomplete="current-password"; }
                " "
                button type="submit" { "Log in" }
            }
        },
    )
}

/// `POST /login`: sets the session cookie when the token is right.
pub async fn login(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    if let Err(refused) = check_post(&app, &headers, &fields) {
        return *refused;
    }
    let token = app.token.as_deref().unwrap_or_default();
    if !same(field(&fields, "token").unwrap_or(""), token) {
        return login_page(
            &app,
            StatusCode::UNAUTHORIZED,
            Some("That is not the token."),
        );
    }
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_beyond_loopback_needs_a_token() {
        for ok in ["127.0.0.1:1", "127.9.9.9:1", "[::1]:1"] {
            assert!(check_listen(ok.parse().unwrap(), false).is_ok(), "{ok}");
        }
        for refused in ["0.0.0.0:1", "192.168.1.2:1", "[::]:1"] {
            let e = check_listen(refused.parse().unwrap(), false).unwrap_err();
            assert!(e.to_string().contains("--token-file"), "{e}");
            assert!(check_listen(refused.parse().unwrap(), true).is_ok());
        }
    }

    #[test]
    fn tokens_that_cannot_travel_in_a_cookie_or_are_short_are_refused() {
        for bad in [
            "short",
            "sixteen chars ok",
            "abcdefghijklmnop;q",
            "abcdefghijklmnopé",
        ] {
            assert!(check_token(bad).is_err(), "{bad}");
        }
        assert!(check_token("abcdefghijklmnop+/=-_").is_ok());
        assert_ne!(random_token(), random_token());
        assert_eq!(random_token().len(), 64);
    }
}
