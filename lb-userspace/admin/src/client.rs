//! A small blocking client for the admin socket, for `lbctl`: one request per
//! connection, every failure turned into one line that says what to do.

use std::{
    io::{Read as _, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::de::DeserializeOwned;

use super::{API_VERSION, ApiError, Envelope};

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error(
        "lbd is not running (nothing answers on {path}); `lbctl flows`, `stats` and `explain` still work from the pinned maps"
    )]
    NotRunning {
        /// The socket.
        path: PathBuf,
    },
    /// The socket is root-only.
    #[error(
        "permission denied on {path}: the admin socket is root-only (mode 0600); run lbctl as root"
    )]
    PermissionDenied {
        /// The socket.
        path: PathBuf,
    },
    /// Another I/O failure.
    #[error("talking to lbd on {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The reply is not what lbd sends.
    #[error("malformed reply from lbd on {path}: {detail}")]
    Malformed {
        /// The socket.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// lbd speaks another version of the API.
    #[error(
        "lbd speaks admin API version {theirs}, this lbctl speaks {API_VERSION}: use the lbctl of lbd's release"
    )]
    Version {
        /// lbd's version.
        theirs: u32,
    },
    /// lbd answered with an error.
    #[error("lbd: {message} (HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// lbd's message.
        message: String,
    },
}

/// `GET path` on the admin socket at `socket`, decoded from its [`Envelope`].
///
/// # Errors
/// [`ClientError`], one variant per way it can go wrong.
pub fn get<T: DeserializeOwned>(socket: &Path, path: &str) -> Result<T, ClientError> {
    let raw = exchange(socket, path)?;
    let malformed = |detail: String| ClientError::Malformed {
        path: socket.to_owned(),
        detail,
    };
    let (status, body) = parse_response(&raw).map_err(malformed)?;
    // The version first: a reply of another version may not decode at all.
    let version: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| malformed(format!("body is not JSON: {e}")))?;
    let theirs = version
        .get("api_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| malformed("no api_version field".into()))?;
    if theirs != u64::from(API_VERSION) {
        return Err(ClientError::Version {
            theirs: u32::try_from(theirs).unwrap_or(u32::MAX),
        });
    }
    if !(200..300).contains(&status) {
        let message = serde_json::from_value::<Envelope<ApiError>>(version).map_or_else(
            |_| "an error without a message".to_owned(),
            |e| e.data.error,
        );
        return Err(ClientError::Api { status, message });
    }
    let envelope: Envelope<T> = serde_json::from_value(version)
        .map_err(|e| malformed(format!("unexpected content: {e}")))?;
    Ok(envelope.data)
}

fn exchange(socket: &Path, path: &str) -> Result<Vec<u8>, ClientError> {
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            ClientError::NotRunning {
                path: socket.to_owned(),
            }
        }
        std::io::ErrorKind::PermissionDenied => ClientError::PermissionDenied {
            path: socket.to_owned(),
        },
        _ => ClientError::Io {
            path: socket.to_owned(),
            source,
        },
    };
    let mut stream = UnixStream::connect(socket).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: lbd\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    Ok(raw)
}

/// Splits an HTTP/1.1 response into status and body (by `Content-Length` when given,
/// else to the end).
///
/// # Errors
/// What is malformed.
pub fn parse_response(raw: &[u8]) -> Result<(u16, &[u8]), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {} bytes", raw.len()))?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8".to_owned())?;
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let status = match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => code
            .parse::<u16>()
            .map_err(|_| format!("bad status line {status_line:?}"))?,
        _ => return Err(format!("bad status line {status_line:?}")),
    };
    let length = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    match length {
        Some(n) if n > body.len() => Err(format!("body cut short: {} of {n} bytes", body.len())),
        Some(n) => Ok((status, &body[..n])),
        None => Ok((status, body)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_responses_and_rejects_junk() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}trailing";
        assert_eq!(parse_response(ok), Ok((200, &b"{}"[..])));
        let no_len = b"HTTP/1.1 404 Not Found\r\n\r\nabc";
        assert_eq!(parse_response(no_len), Ok((404, &b"abc"[..])));
        assert!(
            parse_response(b"garbage")
                .expect_err("junk")
                .contains("no end of headers")
        );
        assert!(
            parse_response(b"SMTP 220\r\n\r\n")
                .expect_err("junk")
                .contains("bad status line")
        );
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}";
        assert!(
            parse_response(short)
                .expect_err("short")
                .contains("cut short")
        );
    }

    /// Serves one connection on a fresh socket with `reply`, then returns its path.
    fn fake_lbd(reply: &'static [u8]) -> (PathBuf, std::thread::JoinHandle<()>) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("lbctl-fake-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(reply);
        });
        (path, handle)
    }

    fn ask(reply: &'static [u8]) -> Result<serde_json::Value, ClientError> {
        let (path, handle) = fake_lbd(reply);
        let result = get::<serde_json::Value>(&path, "/v1/status");
        handle.join().expect("fake lbd");
        let _ = std::fs::remove_file(&path);
        result
    }

    #[test]
    fn replies_are_checked_for_version_errors_and_form() {
        let ok = ask(b"HTTP/1.1 200 OK\r\n\r\n{\"api_version\":1,\"data\":{\"x\":2}}");
        assert_eq!(ok.expect("ok")["x"], 2);
        let newer = ask(b"HTTP/1.1 200 OK\r\n\r\n{\"api_version\":7,\"data\":[]}");
        let e = newer.expect_err("version");
        assert!(matches!(e, ClientError::Version { theirs: 7 }), "{e}");
        assert!(
            e.to_string()
                .contains("admin API version 7, this lbctl speaks 1")
        );
        let api = ask(b"HTTP/1.1 404 Not Found\r\n\r\n{\"api_version\":1,\"data\":{\"error\":\"no service named x\"}}");
        assert_eq!(
            api.expect_err("404").to_string(),
            "lbd: no service named x (HTTP 404)"
        );
        for junk in [
            &b"hello"[..],
            b"HTTP/1.1 200 OK\r\n\r\nnot json",
            b"HTTP/1.1 200 OK\r\n\r\n{}",
        ] {
            let e = ask(junk).expect_err("malformed");
            assert!(matches!(e, ClientError::Malformed { .. }), "{e}");
            assert!(!e.to_string().contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn a_missing_socket_says_lbd_is_not_running() {
        let err = get::<serde_json::Value>(Path::new("/nonexistent/lbd.sock"), "/v1/status")
            .expect_err("no socket");
        assert!(matches!(err, ClientError::NotRunning { .. }), "{err}");
        assert!(err.to_string().contains("lbd is not running"));
    }
}
