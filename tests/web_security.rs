//! The dashboard's defences: the CSRF check of every POST, the token of
//! every request, the listen rule of `dque serve`, the security headers,
//! and escaping of whatever a job, a reason, a URL or a label holds.

mod web;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use axum::http::StatusCode;
use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
use dque::web::{Dashboard, DashboardOptions};
use web::{fill, get, get_with, post, post_with, router};

const TOKEN: &str = "a-token-of-more-than-16-chars";

fn queue(dir: &tempfile::TempDir) -> Arc<dyn JobQueue> {
    Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap())
}

#[tokio::test]
async fn every_post_needs_the_csrf_token_and_a_refused_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir);
    fill(q.as_ref(), 3, 0, 0, &["boom"]);
    let app = router(vec![q.clone()], DashboardOptions::new());
    let csrf = get(&app, "/queues/0").await.csrf();
    let before = (q.counts().unwrap(), q.waiting(10).unwrap());
    let wrong = "0".repeat(csrf.len());
    // (form fields, request headers) of each refused request.
    type Fields<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(Fields, Fields)> = vec![
        (vec![], vec![]),
        (vec![("csrf", "")], vec![]),
        (vec![("csrf", &wrong)], vec![]),
        (vec![("csrf", &csrf[..10])], vec![]),
        (
            vec![("csrf", &csrf)],
            vec![("sec-fetch-site", "cross-site")],
        ),
        (vec![("csrf", &csrf)], vec![("sec-fetch-site", "same-site")]),
        (
            vec![("csrf", &csrf)],
            vec![
                ("origin", "http://evil.example"),
                ("host", "127.0.0.1:7878"),
            ],
        ),
    ];
    for (token, headers) in &cases {
        for action in [
            vec![("row", "requeue:d0")],
            vec![("action", "cancel"), ("id", "r0")],
            vec![("action", "priority"), ("priority", "5"), ("id", "r1")],
        ] {
            let mut fields = token.clone();
            fields.extend(action);
            let refused = post_with(&app, "/queues/0/actions", &fields, headers).await;
            assert_eq!(
                refused.status,
                StatusCode::FORBIDDEN,
                "{fields:?} {headers:?}"
            );
            assert!(refused.body.contains("Reload the page"));
        }
    }
    assert_eq!(
        (q.counts().unwrap(), q.waiting(10).unwrap()),
        before,
        "a refused POST changed nothing"
    );
    // A GET changes nothing either: actions are POST only.
    let get_action = get(
        &app,
        &format!("/queues/0/actions?csrf={csrf}&row=requeue:d0"),
    )
    .await;
    assert_eq!(get_action.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(q.counts().unwrap(), before.0);
    // The same request from the page's own origin is done.
    let same = post_with(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "requeue:d0")],
        &[
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://127.0.0.1:7878"),
            ("host", "127.0.0.1:7878"),
        ],
    )
    .await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert_eq!(q.counts().unwrap().dead, 0);
    // Regression: a browser's form POST under a `no-referrer` policy says
    // `Origin: null`, and the dashboard refused every action of a real
    // browser. The token decides then; the policy no longer asks for it.
    let null_origin = post_with(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "cancel:r0")],
        &[
            ("sec-fetch-site", "same-origin"),
            ("origin", "null"),
            ("host", "127.0.0.1:7878"),
        ],
    )
    .await;
    assert_eq!(null_origin.status, StatusCode::OK, "{}", null_origin.body);
    assert_eq!(null_origin.header("referrer-policy"), "same-origin");
    let null_no_token = post_with(
        &app,
        "/queues/0/actions",
        &[("row", "cancel:r1")],
        &[("origin", "null")],
    )
    .await;
    assert_eq!(null_no_token.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn with_a_token_every_route_but_login_and_assets_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir);
    fill(q.as_ref(), 1, 0, 0, &["boom"]);
    let app = router(
        vec![q.clone()],
        DashboardOptions::new().token(TOKEN).unwrap(),
    );
    let routes = [
        "/",
        "/queues/0",
        "/queues/0?state=dead",
        "/queues/0/dead",
        "/live",
        "/metrics",
        "/nowhere",
    ];
    let bearer = format!("Bearer {TOKEN}");
    let wrong = format!("Bearer {TOKEN}x");
    let cookie = format!("other=1; dque_token={TOKEN}");
    for path in routes {
        for headers in [
            vec![],
            vec![("authorization", wrong.as_str())],
            vec![("cookie", "dque_token=nope")],
        ] {
            let refused = get_with(&app, path, &headers).await;
            assert_eq!(
                refused.status,
                StatusCode::UNAUTHORIZED,
                "{path} {headers:?}"
            );
            assert!(
                !refused.body.contains("boom"),
                "{path}: nothing of the queue"
            );
            assert!(refused
                .header("content-security-policy")
                .contains("default-src 'none'"));
        }
        let expected = if path == "/nowhere" {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::OK
        };
        assert_eq!(
            get_with(&app, path, &[("authorization", &bearer)])
                .await
                .status,
            expected,
            "{path}"
        );
        assert_eq!(
            get_with(&app, path, &[("cookie", &cookie)]).await.status,
            expected,
            "{path}"
        );
    }
    let csrf = get_with(&app, "/queues/0", &[("authorization", &bearer)])
        .await
        .csrf();
    let unauthorized = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "requeue:d0")],
    )
    .await;
    assert_eq!(unauthorized.status, StatusCode::UNAUTHORIZED);
    assert_eq!(q.counts().unwrap().dead, 1, "refused: nothing changed");
    // The login form, then its cookie.
    assert_eq!(get(&app, "/static/dque.css").await.status, StatusCode::OK);
    let form = get(&app, "/login").await;
    assert_eq!(form.status, StatusCode::OK);
    let login_csrf = form.csrf();
    let refused = post(
        &app,
        "/login",
        &[("csrf", &login_csrf), ("token", "guess-guess-guess-guess")],
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.header("set-cookie").is_empty());
    let no_csrf = post(&app, "/login", &[("token", TOKEN)]).await;
    assert_eq!(no_csrf.status, StatusCode::FORBIDDEN);
    let logged = post(&app, "/login", &[("csrf", &login_csrf), ("token", TOKEN)]).await;
    assert_eq!(logged.status, StatusCode::SEE_OTHER);
    let set = logged.header("set-cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap();
    let done = web::post_with(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "requeue:d0")],
        &[("cookie", cookie)],
    )
    .await;
    assert_eq!(done.status, StatusCode::OK);
    assert_eq!(q.counts().unwrap().dead, 0);
    // Without a token there is no login route.
    let open = router(vec![q], DashboardOptions::new());
    assert_eq!(get(&open, "/login").await.status, StatusCode::NOT_FOUND);
}

/// Strings that would run or break out of their place if a page showed
/// them as they are.
const HOSTILE: [&str; 5] = [
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(2)>",
    "'><svg onload=alert(3)>",
    "</textarea></table><b>bold</b>",
    "javascript:alert(4)&amp;<!--",
];

/// Whether any hostile string shows up as it is (text starting with `<`
/// or a quote that a page could not have escaped).
fn unescaped(body: &str) -> Option<&'static str> {
    HOSTILE.iter().copied().find(|h| body.contains(h))
}

#[tokio::test]
async fn what_jobs_reasons_urls_and_labels_hold_is_shown_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir);
    let mut jobs = Vec::new();
    for (i, h) in HOSTILE.iter().enumerate() {
        jobs.push(
            NewJob::new(h.as_bytes().to_vec())
                .id(format!("{h}{i}"))
                .header("note", *h)
                .priority(-1),
        );
        jobs.push(
            NewJob::new(h.as_bytes().to_vec())
                .id(format!("w{h}{i}"))
                .header("note", *h),
        );
        jobs.push(
            NewJob::new(h.as_bytes().to_vec())
                .id(format!("s{h}{i}"))
                .delay(std::time::Duration::from_secs(600)),
        );
    }
    q.enqueue_batch(jobs).unwrap();
    for h in HOSTILE {
        let lease = q.lease().unwrap().unwrap();
        q.fail(lease, &format!("{h}: {h}")).unwrap();
    }
    let shown: Vec<(String, Arc<dyn JobQueue>)> = vec![(HOSTILE[0].to_owned(), q.clone())];
    let app = Dashboard::new(shown, DashboardOptions::new()).router();
    let mut paths = vec![
        "/".to_owned(),
        "/queues/0".to_owned(),
        "/queues/0?state=dead".to_owned(),
        "/queues/0?state=scheduled".to_owned(),
        "/queues/0?state=ready".to_owned(),
        "/queues/0/dead".to_owned(),
        "/live".to_owned(),
        "/metrics".to_owned(),
    ];
    for h in HOSTILE {
        paths.push(format!("/queues/0/dead?reason={}", web::encode(h)));
        paths.push(format!(
            "/queues/0?state={}&page={}",
            web::encode(h),
            web::encode(h)
        ));
        paths.push(format!("/{}", web::encode(h)));
        paths.push(format!("/queues/0?state=dead&kind={}", web::encode(h)));
    }
    for path in &paths {
        let page = get(&app, path).await;
        if path.starts_with("/live") || path.starts_with("/metrics") {
            assert!(!page.header("content-type").contains("html"), "{path}");
            continue;
        }
        assert!(
            page.header("content-type").starts_with("text/html"),
            "{path}"
        );
        assert_eq!(unescaped(&page.body), None, "{path}:\n{}", page.body);
    }
    // The dead letters' group page shows every hostile body, escaped.
    let group = get(
        &app,
        &format!("/queues/0/dead?reason={}", web::encode(HOSTILE[0])),
    )
    .await;
    assert!(
        group.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        group.body
    );
    // An action on hostile ids: the answer names them, escaped.
    let csrf = get(&app, "/queues/0").await.csrf();
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("action", "cancel"),
        ("back", "\"><script>alert(5)</script>"),
    ];
    let ids: Vec<String> = HOSTILE.iter().map(|h| format!("nope{h}")).collect();
    fields.extend(ids.iter().map(|id| ("id", id.as_str())));
    let answer = post(&app, "/queues/0/actions", &fields).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(unescaped(&answer.body), None, "{}", answer.body);
    assert!(!answer.body.contains("<script>alert(5)"));
    // The security headers are on every answer.
    for path in [
        "/",
        "/queues/0",
        "/metrics",
        "/live",
        "/static/dque.js",
        "/nowhere",
    ] {
        let page = get(&app, path).await;
        assert!(
            page.header("content-security-policy")
                .contains("script-src 'self'"),
            "{path}"
        );
        assert_eq!(page.header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(page.header("x-frame-options"), "DENY", "{path}");
    }
}

fn dque() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dque"))
}

#[test]
fn serve_refuses_other_addresses_without_a_token_and_bad_tokens() {
    let dir = tempfile::tempdir().unwrap();
    drop(queue(&dir));
    let q = dir.path().join("q");
    for listen in ["0.0.0.0:0", "[::]:0", "192.0.2.1:7878"] {
        let out = dque()
            .arg("serve")
            .arg(&q)
            .args(["--listen", listen])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{listen}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("--token-file") && said.contains("127.0.0.1"),
            "{said}"
        );
    }
    let short = dir.path().join("short");
    std::fs::write(&short, "abc\n").unwrap();
    let out = dque()
        .arg("serve")
        .arg(&q)
        .arg("--token-file")
        .arg(&short)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than 16"));
}

/// A `dque serve` process, killed if a test fails before it stops it.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `dque serve` on a free port of 127.0.0.1 and returns it and its address.
fn serve(args: &[&std::ffi::OsStr]) -> (Served, String) {
    let mut child = dque()
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let child = Served(child);
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    (child, address)
}

/// A plain HTTP/1.1 GET: the whole answer as text.
fn http_get(address: &str, path: &str, extra: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn serve_answers_with_its_token_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir);
    fill(q.as_ref(), 2, 0, 0, &[]);
    q.close().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("  {TOKEN}\n")).unwrap();
    let (mut served, address) = serve(&[
        dir.path().join("q").as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
    ]);
    let refused = http_get(&address, "/", "");
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let page = http_get(&address, "/", &format!("Authorization: Bearer {TOKEN}\r\n"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("data-live=\"0.ready\">2<"), "{page}");
    let metrics = http_get(
        &address,
        "/metrics",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    assert!(metrics.contains("q\",state=\"ready\"} 2"), "{metrics}");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&served.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = served.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "stops cleanly on SIGTERM");
}
