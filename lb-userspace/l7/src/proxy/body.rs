//! Bodies: what goes to a backend ([`UpBody`]) and what goes back to the client
//! ([`ProxyBody`]), which also ends the request's bookkeeping — access-log line,
//! in-flight count, connection activity — when the last byte is sent or the client
//! goes away.

use std::{
    net::IpAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::{Instant, SystemTime},
};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Uri, Version, header};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::{
    activity::Activity,
    upstream::{BackendBody, ClientError},
};
use crate::{
    accesslog::{AccessLog, Entry},
    balance::InFlight,
    routes::{Exchange, values::HeaderEdit},
};

/// A request body to a backend: the client's, or none (retries only resend requests
/// without a body).
#[derive(Debug)]
pub enum UpBody {
    /// No body.
    Empty,
    /// The client's body, streamed; `failed` is set when reading it failed (bad
    /// chunked framing, a client gone), so the proxy answers 400 rather than blaming
    /// the backend.
    Client {
        /// The body.
        body: Incoming,
        /// Set on a read error.
        failed: Arc<AtomicBool>,
    },
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            UpBody::Empty => Poll::Ready(None),
            UpBody::Client { body, failed } => {
                let polled = Pin::new(body).poll_frame(cx);
                if let Poll::Ready(Some(Err(_))) = &polled {
                    failed.store(true, Ordering::Relaxed);
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpBody::Empty => true,
            UpBody::Client { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpBody::Empty => SizeHint::with_exact(0),
            UpBody::Client { body, .. } => body.size_hint(),
        }
    }
}

/// What the access log needs of a request, kept without copying (header values and
/// the URI share the bytes hyper read).
#[derive(Debug)]
pub struct LogRecord {
    pub log: Arc<AccessLog>,
    pub mask: Arc<[String]>,
    pub peer: IpAddr,
    pub forwarded_for: Option<HeaderValue>,
    pub time: SystemTime,
    pub method: Method,
    pub uri: Uri,
    /// The query as the route's filters left it, when it differs from the received one
    /// and the route masks keys (only a masked line shows it).
    pub filtered_query: Option<Box<str>>,
    pub version: Version,
    pub status: u16,
    pub referer: Option<HeaderValue>,
    pub user_agent: Option<HeaderValue>,
    pub host: Option<HeaderValue>,
    pub flow_id: Option<HeaderValue>,
    pub audit: Option<HeaderValue>,
}

thread_local! {
    /// Boxes of records whose lines are written, for the next requests of this
    /// worker: a logged request then costs no allocation for its record.
    #[expect(
        clippy::vec_box,
        reason = "the boxes themselves are what is kept: a request's Finish holds its record boxed"
    )]
    static SPARE_RECORDS: std::cell::RefCell<Vec<Box<LogRecord>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Records kept for reuse per worker; more than this in flight are allocated.
const SPARE_RECORDS_MAX: usize = 256;

impl LogRecord {
    /// A record for a line of `log` with `mask` (none: the route masks nothing), its
    /// request fields to be filled in: a box this worker's earlier requests gave back
    /// if there is one, filled in place (the record is 400-odd bytes). The box keeps
    /// the log and mask it had when they are the same ones, as they normally are, so
    /// a logged request does not touch their reference counts, which every worker
    /// shares.
    pub fn start(log: &Arc<AccessLog>, mask: Option<&Arc<[String]>>) -> Box<LogRecord> {
        let Some(mut r) = SPARE_RECORDS.with(|s| s.borrow_mut().pop()) else {
            return Box::new(LogRecord {
                log: Arc::clone(log),
                mask: mask.map_or_else(|| Arc::from(Vec::new()), Arc::clone),
                peer: IpAddr::from([0, 0, 0, 0]),
                forwarded_for: None,
                time: SystemTime::UNIX_EPOCH,
                method: Method::GET,
                uri: Uri::default(),
                filtered_query: None,
                version: Version::HTTP_11,
                status: 0,
                referer: None,
                user_agent: None,
                host: None,
                flow_id: None,
                audit: None,
            });
        };
        if !Arc::ptr_eq(&r.log, log) {
            r.log = Arc::clone(log);
        }
        match mask {
            Some(m) if !Arc::ptr_eq(&r.mask, m) => r.mask = Arc::clone(m),
            None if !r.mask.is_empty() => r.mask = Arc::from(Vec::new()),
            _ => {}
        }
        r
    }

    /// Takes the request headers the line shows, each at its first value, in one pass
    /// over the head's fields with each name matched once by its text (six hashed
    /// lookups cost about 600 instructions per logged request). Only a trusted proxy
    /// says who the client is (X-Forwarded-For).
    pub fn take_headers(&mut self, headers: &http::HeaderMap, trusted: bool) {
        for (name, value) in headers {
            let slot = match name.as_str() {
                "referer" => &mut self.referer,
                "user-agent" => &mut self.user_agent,
                "host" => &mut self.host,
                "x-flow-id" => &mut self.flow_id,
                "x-unverified-audit" => &mut self.audit,
                "x-forwarded-for" if trusted => &mut self.forwarded_for,
                _ => continue,
            };
            // A name's values come in order: the first one is what a lookup gives.
            if slot.is_none() {
                *slot = Some(value.clone());
            }
        }
    }

    /// Keeps `record`'s box for [`LogRecord::start`], without the request's header
    /// values and URI (they share the bytes of hyper's read buffers, which must not
    /// stay held).
    fn recycle(mut record: Box<LogRecord>) {
        let r = &mut *record;
        r.uri = Uri::default();
        r.filtered_query = None;
        for h in [
            &mut r.forwarded_for,
            &mut r.referer,
            &mut r.user_agent,
            &mut r.host,
            &mut r.flow_id,
            &mut r.audit,
        ] {
            *h = None;
        }
        SPARE_RECORDS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_RECORDS_MAX {
                s.push(record);
            }
        });
    }
}

/// Header names looked up for every logged request, typed once: a lookup by `&str`
/// would parse the name on every request.
pub static FLOW_ID: HeaderName = HeaderName::from_static("x-flow-id");
pub static AUDIT: HeaderName = HeaderName::from_static("x-unverified-audit");
pub use super::headers::X_FORWARDED_FOR as FORWARDED_FOR;

fn bytes(h: &Option<HeaderValue>) -> &[u8] {
    h.as_ref().map_or(&b""[..], HeaderValue::as_bytes)
}

impl LogRecord {
    /// The field of the line that shows request header `name`, if one does.
    fn logged_header(&mut self, name: &HeaderName) -> Option<&mut Option<HeaderValue>> {
        if name == header::REFERER {
            Some(&mut self.referer)
        } else if name == header::USER_AGENT {
            Some(&mut self.user_agent)
        } else if name == FLOW_ID {
            Some(&mut self.flow_id)
        } else if name == AUDIT {
            Some(&mut self.audit)
        } else if name == FORWARDED_FOR {
            // Set by the route's author, so trusted like a trusted proxy's.
            Some(&mut self.forwarded_for)
        } else {
            None
        }
    }

    /// Takes in what the route's request filters changed that skipper's line shows.
    /// Skipper logs the request object its filters modified in place: headers set by
    /// `setRequestHeader` are logged with their new values, and a masked query is the
    /// filtered one. The path and an unmasked query stay as received (skipper logs the
    /// request URI, which no filter touches), and so does the Host header (skipper
    /// logs the request's host, not the outgoing one).
    pub fn after_filters(&mut self, ex: &Exchange) {
        for edit in &ex.edits {
            let (name, value, append) = match edit {
                HeaderEdit::Set(name, value) => (name, Some(value), false),
                HeaderEdit::Append(name, value) => (name, Some(value), true),
                HeaderEdit::Drop(name) => (name, None, false),
            };
            let Some(slot) = self.logged_header(name) else {
                continue;
            };
            // The line shows a header's first value, as Go's `Header.Get` does: an
            // appended value shows only where there was none.
            if !(append && slot.is_some()) {
                *slot = value.cloned();
            }
        }
        let own = self.uri.query().unwrap_or("");
        if !self.mask.is_empty() && ex.query(own) != own {
            self.filtered_query = Some(ex.query(own).into());
        }
    }

    fn write(&self, size: u64, started: Instant) {
        let host = match (&self.host, self.uri.authority()) {
            (Some(h), _) => h.as_bytes(),
            (None, Some(a)) => a.as_str().as_bytes(),
            (None, None) => b"",
        };
        let entry = Entry {
            peer: self.peer,
            forwarded_for: self.forwarded_for.as_ref().map(HeaderValue::as_bytes),
            user: b"",
            time: self.time,
            method: self.method.as_str().as_bytes(),
            path: self.uri.path().as_bytes(),
            query: self.uri.query().map(str::as_bytes),
            filtered_query: self
                .filtered_query
                .as_deref()
                .or(self.uri.query())
                .unwrap_or("")
                .as_bytes(),
            proto: proto(self.version),
            status: self.status,
            size,
            referer: bytes(&self.referer),
            user_agent: bytes(&self.user_agent),
            duration: started.elapsed(),
            host,
            flow_id: bytes(&self.flow_id),
            audit: bytes(&self.audit),
        };
        self.log.log(&entry, &self.mask);
    }
}

fn proto(v: Version) -> &'static [u8] {
    match v {
        Version::HTTP_09 => b"HTTP/0.9",
        Version::HTTP_10 => b"HTTP/1.0",
        Version::HTTP_2 => b"HTTP/2.0",
        Version::HTTP_3 => b"HTTP/3.0",
        _ => b"HTTP/1.1",
    }
}

/// The request's bookkeeping, finished once.
#[derive(Debug)]
pub struct Finish {
    pub started: Instant,
    pub log: Option<Box<LogRecord>>,
    pub inflight: Option<InFlight>,
    pub activity: Arc<Activity>,
}

/// A response body to the client. A backend's body gives its connection back to the
/// pool when it ends ([`BackendBody`]).
#[derive(Debug)]
pub struct ProxyBody {
    inner: Inner,
    sent: u64,
    finish: Option<Finish>,
    /// A failure of the backend's body held back for one turn (see `poll_frame`).
    failed: Option<BodyError>,
}

#[derive(Debug)]
enum Inner {
    Full(Option<Bytes>),
    Upstream {
        body: BackendBody,
        /// The route's `backendTimeout` deadline (see [`BodyDeadline`]).
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    },
}

/// The instant a route's `backendTimeout` ends, carried in the backend response's
/// extensions from the request to its body. skipper's deadline is a context on the
/// backend request, and Go's client stops reading a body whose context is done: the
/// timeout bounds the whole exchange, body included. A body still streaming then
/// fails, so the client's connection is cut rather than the body ending as if whole.
#[derive(Clone, Copy, Debug)]
pub struct BodyDeadline(pub tokio::time::Instant);

/// Why a response body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The backend's body failed (the connection closed or reset mid-body).
    #[error("reading the backend's response body")]
    Backend(#[source] ClientError),
    /// The route's `backendTimeout` passed while the body was streaming.
    #[error("the route's backendTimeout passed while the response body streamed")]
    Deadline,
}

impl ProxyBody {
    /// A body held in memory.
    pub fn full(bytes: Bytes, finish: Finish) -> Self {
        Self {
            inner: Inner::Full((!bytes.is_empty()).then_some(bytes)),
            sent: 0,
            finish: Some(finish),
            failed: None,
        }
    }

    /// A backend's body, streamed; with a deadline, it fails when that passes.
    pub fn upstream(body: BackendBody, deadline: Option<BodyDeadline>, finish: Finish) -> Self {
        Self {
            inner: Inner::Upstream {
                body,
                deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d.0))),
            },
            sent: 0,
            finish: Some(finish),
            failed: None,
        }
    }

    fn done(&mut self) {
        if let Some(f) = self.finish.take() {
            if let Some(log) = f.log {
                log.write(self.sent, f.started);
                LogRecord::recycle(log);
            }
            f.activity.request_done();
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        self.done();
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        let polled = match &mut this.inner {
            Inner::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Inner::Upstream { body, deadline } => {
                // As a done Go context does, the deadline stops the body even when
                // more of it is already there.
                if deadline
                    .as_mut()
                    .is_some_and(|d| d.as_mut().poll(cx).is_ready())
                {
                    Poll::Ready(Some(Err(BodyError::Deadline)))
                } else {
                    Pin::new(body)
                        .poll_frame(cx)
                        .map(|f| f.map(|r| r.map_err(BodyError::Backend)))
                }
            }
        };
        match polled {
            // hyper's server drops what it has buffered of the response when the body
            // fails: the failure waits one turn, in which the server writes the head
            // and the data before it (skipper's client gets them too, then the cut).
            Poll::Ready(Some(Err(e))) => {
                this.failed = Some(e);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Some(Ok(ref frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.sent += d.len() as u64;
                }
            }
            Poll::Ready(None) => this.done(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(b) => b.is_none(),
            Inner::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Upstream { body, .. } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accesslog::AccessLogConfig;

    fn record(uri: &str, mask: &[&str]) -> LogRecord {
        LogRecord {
            log: Arc::new(AccessLog::with_sink(
                AccessLogConfig::default(),
                Box::new(std::io::sink()),
            )),
            mask: mask.iter().map(|&m| m.to_owned()).collect(),
            peer: IpAddr::from([198, 18, 0, 1]),
            forwarded_for: None,
            time: SystemTime::UNIX_EPOCH,
            method: Method::GET,
            uri: uri.parse().expect("uri"),
            filtered_query: None,
            version: Version::HTTP_11,
            status: 200,
            referer: None,
            user_agent: Some(HeaderValue::from_static("curl")),
            host: None,
            flow_id: None,
            audit: None,
        }
    }

    #[test]
    fn a_log_line_takes_each_shown_header_at_its_first_value() {
        let mut h = http::HeaderMap::new();
        let v = HeaderValue::from_static;
        h.append(header::USER_AGENT, v("first-agent"));
        h.append(header::USER_AGENT, v("second-agent"));
        h.insert(header::HOST, v("public.example"));
        h.insert(header::REFERER, v("https://from.example/"));
        h.insert(FLOW_ID.clone(), v("F1"));
        h.insert(AUDIT.clone(), v("A1"));
        h.append(FORWARDED_FOR, v("198.18.0.9"));
        h.append(FORWARDED_FOR, v("198.18.0.8"));
        h.insert("x-other", v("not shown"));
        let mut f = record("/", &[]);
        f.user_agent = None;
        f.take_headers(&h, true);
        assert_eq!(bytes(&f.user_agent), b"first-agent");
        assert_eq!(bytes(&f.host), b"public.example");
        assert_eq!(bytes(&f.referer), b"https://from.example/");
        assert_eq!(bytes(&f.flow_id), b"F1");
        assert_eq!(bytes(&f.audit), b"A1");
        assert_eq!(bytes(&f.forwarded_for), b"198.18.0.9");
        let mut untrusted = record("/", &[]);
        untrusted.take_headers(&h, false);
        assert!(
            untrusted.forwarded_for.is_none(),
            "only a trusted proxy says who the client is"
        );
        let mut none = record("/", &[]);
        none.user_agent = None;
        none.take_headers(&http::HeaderMap::new(), true);
        assert!(none.user_agent.is_none());
    }

    /// A recycled record is filled in place: it keeps its log and mask when they are
    /// the ones asked for, takes the others, and carries none of the last request's
    /// header values or URI.
    #[test]
    fn a_recycled_record_starts_clean_with_the_asked_log_and_mask() {
        let first = record("/old?q=1", &["token"]);
        let log = Arc::clone(&first.log);
        let mask = Arc::clone(&first.mask);
        let mut boxed = LogRecord::start(&log, Some(&mask));
        *boxed = first;
        boxed.referer = Some(HeaderValue::from_static("r"));
        LogRecord::recycle(boxed);
        let again = LogRecord::start(&log, Some(&mask));
        assert!(Arc::ptr_eq(&again.log, &log) && Arc::ptr_eq(&again.mask, &mask));
        assert_eq!(again.referer, None);
        assert_eq!(again.uri, Uri::default());
        LogRecord::recycle(again);
        let other: Arc<[String]> = Arc::from(vec!["other".to_owned()]);
        let other_log = Arc::new(AccessLog::with_sink(
            AccessLogConfig::default(),
            Box::new(std::io::sink()),
        ));
        let switched = LogRecord::start(&other_log, Some(&other));
        assert!(Arc::ptr_eq(&switched.log, &other_log) && Arc::ptr_eq(&switched.mask, &other));
        LogRecord::recycle(switched);
        let unmasked = LogRecord::start(&other_log, None);
        assert!(unmasked.mask.is_empty());
    }

    /// skipper `proxy/proxy.go` logs the request its filters changed in place (and
    /// `logging/access.go` masks that request's URL): set headers and a filtered query
    /// show in the line; the Host header and an unmasked query do not change.
    #[test]
    fn the_line_shows_what_request_filters_changed() {
        let ex = Exchange {
            query: Some("lang=pt&token=s".to_owned()),
            edits: vec![
                HeaderEdit::Set(FLOW_ID.clone(), HeaderValue::from_static("F9")),
                HeaderEdit::Set(header::USER_AGENT, HeaderValue::from_static("set")),
                HeaderEdit::Set(header::HOST, HeaderValue::from_static("other.example")),
                HeaderEdit::Append(header::USER_AGENT, HeaderValue::from_static("second")),
                HeaderEdit::Set(header::REFERER, HeaderValue::from_static("r")),
                HeaderEdit::Drop(header::REFERER),
            ],
            ..Exchange::default()
        };
        let mut masked = record("/a?token=s", &["token"]);
        masked.after_filters(&ex);
        assert_eq!(masked.filtered_query.as_deref(), Some("lang=pt&token=s"));
        assert_eq!(bytes(&masked.flow_id), b"F9");
        assert_eq!(
            bytes(&masked.user_agent),
            b"set",
            "an appended value is a second one"
        );
        assert_eq!(masked.referer, None, "dropped");
        assert_eq!(masked.host, None);
        let mut plain = record("/a?token=s", &[]);
        plain.after_filters(&ex);
        assert_eq!(plain.filtered_query, None, "only a masked line re-encodes");
        let mut same = record("/a?lang=pt&token=s", &["token"]);
        same.after_filters(&ex);
        assert_eq!(same.filtered_query, None, "the received query, not a copy");
    }
}
