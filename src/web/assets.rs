//! The stylesheet and the one script, compiled in: no CDN, no build step.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const SCRIPT: &str = include_str!("assets/dque.js");
const STYLE: &str = include_str!("assets/dque.css");

/// `GET /static/{file}`.
pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "dque.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "dque.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such file").into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
