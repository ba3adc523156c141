//! The web console (`/ui`): static assets compiled into the binary and
//! served with a strict Content-Security-Policy. The page calls the same
//! API as every client, with the same API key; this module adds no data
//! route, only files.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// The console's files: (name, content type, bytes).
const ASSETS: [(&str, &str, &[u8]); 5] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/app.css"),
    ),
    (
        "vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.iife.min.js"),
    ),
    (
        "vendor/uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.min.css"),
    ),
];

/// Scripts, styles and connections from this origin only; no inline
/// script, no plugins, no framing.
pub const CSP: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Total bytes of the console's assets (as served, uncompressed).
pub fn asset_bytes() -> usize {
    ASSETS.iter().map(|a| a.2.len()).sum()
}

/// `/ui` → `/ui/` (the page's relative links need the slash).
pub async fn root() -> Redirect {
    Redirect::permanent("/ui/")
}

/// `/ui/`.
pub async fn index() -> Response {
    asset("index.html")
}

/// `/ui/{*file}`.
pub async fn file(Path(name): Path<String>) -> Response {
    asset(&name)
}

fn asset(name: &str) -> Response {
    let Some(&(_, ty, bytes)) = ASSETS.iter().find(|a| a.0 == name) else {
        return crate::error::ApiError::NotFound(format!("no console file {name:?}"))
            .into_response();
    };
    let mut r = (StatusCode::OK, bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ty));
    // Assets change with the binary: revalidate, never serve a stale page.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    r
}

/// Headers every HTTP response carries (API and console).
pub fn security_headers(r: &mut Response) {
    let h = r.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "permissions-policy",
        HeaderValue::from_static("camera=(), microphone=(), geolocation=()"),
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn assets_are_small() {
        // The budget is 300 kB gzipped; uncompressed is stricter.
        assert!(super::asset_bytes() < 300_000, "{}", super::asset_bytes());
    }
}
