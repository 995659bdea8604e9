//! A small WebDriver client (the W3C protocol: JSON over HTTP) for the
//! browser tests, and the chromedriver it talks to. Without `chromium`
//! and `chromium-driver` a test says so and passes, except under `CI=true`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The key of an element reference in WebDriver's answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process, killed on drop.
pub struct Driver {
    child: Child,
    address: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first of `names` on the PATH or in Debian's chromium directory.
fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push("/usr/lib/chromium".into());
    dirs.iter()
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// Starts chromedriver, or says why it cannot (skipped; failed under `CI=true`).
pub fn start() -> Option<(Driver, PathBuf)> {
    let (Some(driver), Some(browser)) = (
        find(&["chromedriver"]),
        find(&["chromium", "chromium-browser"]),
    ) else {
        return crate::skip::missing(
            "chromium or chromedriver missing (apt-get install chromium chromium-driver)",
        );
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        address: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while request(&driver.address, "GET", "/status", None)
        .map(|v| v["value"]["ready"] != true)
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some((driver, browser))
}

/// One HTTP/1.1 request; the JSON answer.
fn request(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<Value> {
    let mut stream = TcpStream::connect(address)?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    // Read by the length the answer gives: chromedriver may keep the
    // connection open whatever the request says.
    let mut reader = std::io::BufReader::new(stream);
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut line)? == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("content-length:") {
            length = n.trim().parse().unwrap_or(0);
        }
        chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
    }
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            std::io::BufRead::read_line(&mut reader, &mut size)?;
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..n]);
        }
        body
    } else {
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A browser session.
pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = request(
            &self.driver.address,
            "DELETE",
            &format!("/session/{}", self.id),
            None,
        );
    }
}

impl<'a> Session<'a> {
    /// A headless Chromium, JavaScript on or off.
    pub fn new(driver: &'a Driver, browser: &Path, javascript: bool) -> Session<'a> {
        let mut options = json!({
            "binary": browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"],
        });
        if !javascript {
            options["prefs"] = json!({ "profile.managed_default_content_settings.javascript": 2 });
        }
        let caps = json!({ "capabilities": { "alwaysMatch": { "browserName": "chrome", "goog:chromeOptions": options } } });
        let answer = request(&driver.address, "POST", "/session", Some(&caps)).unwrap();
        let id = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Session { driver, id }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.id);
        let answer = request(&self.driver.address, method, &path, body.as_ref()).unwrap();
        assert!(
            answer["value"]["error"].is_null(),
            "{method} {path}: {answer}"
        );
        answer["value"].clone()
    }

    /// Opens `url`.
    pub fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// The element matching `css`.
    pub fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            Some(json!({ "using": "css selector", "value": css })),
        );
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .to_owned()
    }

    /// How many elements match `css`.
    pub fn count(&self, css: &str) -> usize {
        let found = self.call(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        );
        found.as_array().map_or(0, Vec::len)
    }

    /// Clicks the element matching `css`.
    pub fn click(&self, css: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    /// Types `text` into the element matching `css`.
    pub fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// The text of the element matching `css`.
    pub fn text(&self, css: &str) -> String {
        let element = self.element(css);
        self.call("GET", &format!("/element/{element}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page's title.
    pub fn title(&self) -> String {
        self.call("GET", "/title", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The text of the element matching `css`, if there is one now.
    fn try_text(&self, css: &str) -> Option<String> {
        (self.count(css) > 0).then(|| self.text(css))
    }

    /// Waits up to `wait` for the text of `css` to be `text` (a page
    /// reached by a form may come after the click's answer).
    pub fn wait_text(&self, css: &str, text: &str, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            if self.try_text(css).as_deref() == Some(text) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits up to `wait` for `n` elements to match `css`.
    pub fn wait_count(&self, css: &str, n: usize, wait: Duration) -> usize {
        let deadline = Instant::now() + wait;
        loop {
            let found = self.count(css);
            if found == n || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves a screenshot of the window as PNG at `path`.
    pub fn screenshot(&self, path: &Path) {
        let encoded = self.call("GET", "/screenshot", None);
        let png = base64(encoded.as_str().unwrap());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for chunk in sextets.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &s)| acc | (u32::from(s) << (18 - 6 * i)));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}

#[test]
fn base64_decodes() {
    assert_eq!(base64("aGVsbG8="), b"hello");
    assert_eq!(base64("aGk="), b"hi");
    assert_eq!(base64("YWJj"), b"abc");
}
