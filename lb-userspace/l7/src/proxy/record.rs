//! What a request's access-log line needs, taken when the route is known and written
//! when the response ends ([`super::body::ProxyBody`]).
//!
//! The request fields the line shows (six headers, the path, the query, the
//! authority, a filtered query) are copied into one buffer of the record, which is
//! reused from request to request with its capacity: about 100 bytes copied, where
//! holding the fields as shared slices of the request head's buffer took a reference to it
//! per field and gave each back after the line, fourteen atomic count updates per
//! logged request (callgrind counts each as one instruction, so the instruction
//! count did not move; an atomic update costs its cycles in the CPU, not there).

use std::{
    net::IpAddr,
    sync::Arc,
    time::{Instant, SystemTime},
};

use http::{HeaderMap, HeaderName, Method, Uri, Version};

use crate::{
    accesslog::{AccessLog, Entry},
    routes::{Exchange, values::HeaderEdit},
};

/// A field of the line kept in the record's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    ForwardedFor,
    Referer,
    UserAgent,
    Host,
    FlowId,
    Audit,
    /// The request target's path, its query (`None` without a `?`) and authority.
    Path,
    Query,
    Authority,
    /// The query as the route's filters left it, when it differs from the received
    /// one and the route masks keys (only a masked line shows it).
    FilteredQuery,
}

const FIELDS: usize = 10;

/// Where a field's bytes are in [`LogRecord::text`].
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    start: u32,
    len: u32,
}

/// What the access log needs of a request.
#[derive(Debug)]
pub struct LogRecord {
    pub log: Arc<AccessLog>,
    pub mask: Arc<[String]>,
    pub peer: IpAddr,
    pub time: SystemTime,
    pub method: Method,
    pub version: Version,
    pub status: u16,
    /// The fields' bytes, one after another (a field set again is appended).
    text: Vec<u8>,
    places: [Option<Place>; FIELDS],
}

thread_local! {
    /// Boxes of records whose lines are written, for the next requests of this
    /// worker: a logged request then costs no allocation for its record or its text.
    #[expect(
        clippy::vec_box,
        reason = "the boxes themselves are what is kept: a request's Finish holds its record boxed"
    )]
    static SPARE_RECORDS: std::cell::RefCell<Vec<Box<LogRecord>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Records kept for reuse per worker; more than this in flight are allocated.
const SPARE_RECORDS_MAX: usize = 256;

/// A record's text capacity past which a recycled record lets it go (a request
/// with huge logged headers must not keep its buffer in every spare).
const TEXT_KEPT_MAX: usize = 4096;

impl LogRecord {
    /// A record for a line of `log` with `mask` (none: the route masks nothing), its
    /// request fields to be filled in: a box this worker's earlier requests gave back
    /// if there is one, filled in place. The box keeps the log and mask it had when
    /// they are the same ones, as they normally are, so a logged request does not
    /// touch their reference counts, which every worker shares.
    pub fn start(log: &Arc<AccessLog>, mask: Option<&Arc<[String]>>) -> Box<LogRecord> {
        let Some(mut r) = SPARE_RECORDS.with(|s| s.borrow_mut().pop()) else {
            return Box::new(LogRecord {
                log: Arc::clone(log),
                mask: mask.map_or_else(|| Arc::from(Vec::new()), Arc::clone),
                peer: IpAddr::from([0, 0, 0, 0]),
                time: SystemTime::UNIX_EPOCH,
                method: Method::GET,
                version: Version::HTTP_11,
                status: 0,
                text: Vec::with_capacity(256),
                places: [None; FIELDS],
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

    /// Keeps `record`'s box and text buffer for [`LogRecord::start`], emptied.
    pub fn recycle(mut record: Box<LogRecord>) {
        record.text.clear();
        if record.text.capacity() > TEXT_KEPT_MAX {
            record.text = Vec::with_capacity(256);
        }
        record.places = [None; FIELDS];
        SPARE_RECORDS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_RECORDS_MAX {
                s.push(record);
            }
        });
    }

    /// `field`'s bytes, if the request had it.
    pub fn get(&self, field: Field) -> Option<&[u8]> {
        let p = self.places[field as usize]?;
        self.text
            .get(p.start as usize..(p.start as usize + p.len as usize))
    }

    /// Sets `field` (`None`: the request does not have it).
    pub fn set(&mut self, field: Field, value: Option<&[u8]>) {
        self.places[field as usize] = value.and_then(|v| {
            let start = u32::try_from(self.text.len()).ok()?;
            let len = u32::try_from(v.len()).ok()?;
            self.text.extend_from_slice(v);
            Some(Place { start, len })
        });
    }

    /// Takes the request target's path, query and authority.
    pub fn take_uri(&mut self, uri: &Uri) {
        self.set(Field::Path, Some(uri.path().as_bytes()));
        self.set(Field::Query, uri.query().map(str::as_bytes));
        self.set(
            Field::Authority,
            uri.authority().map(|a| a.as_str().as_bytes()),
        );
    }

    /// Takes the request headers the line shows, each at its first value, in one pass
    /// over the head's fields with each name matched once by its text (six hashed
    /// lookups cost about 600 instructions per logged request). Only a trusted proxy
    /// says who the client is (X-Forwarded-For).
    pub fn take_headers(&mut self, headers: &HeaderMap, trusted: bool) {
        for (name, value) in headers {
            let field = match shown_header(name) {
                Some(Field::ForwardedFor) if !trusted => continue,
                Some(field) => field,
                None => continue,
            };
            // A name's values come in order: the first one is what a lookup gives.
            if self.places[field as usize].is_none() {
                self.set(field, Some(value.as_bytes()));
            }
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
            // The Host stays as received (skipper logs the request's host); an
            // X-Forwarded-For the route's author set is trusted like a trusted
            // proxy's.
            let field = match shown_header(name) {
                Some(Field::Host) | None => continue,
                Some(field) => field,
            };
            // The line shows a header's first value, as Go's `Header.Get` does: an
            // appended value shows only where there was none.
            if !(append && self.places[field as usize].is_some()) {
                self.set(field, value.map(http::HeaderValue::as_bytes));
            }
        }
        // A query a filter set (`Exchange::query`), when the route masks keys and it
        // is not the received one.
        if let Some(q) = ex.query.as_deref()
            && !self.mask.is_empty()
            && self.get(Field::Query).unwrap_or(b"") != q.as_bytes()
        {
            self.set(Field::FilteredQuery, Some(q.as_bytes()));
        }
    }

    /// Renders the line into the log: `size` body bytes sent, the request handled
    /// since `started`.
    pub fn write(&self, size: u64, started: Instant) {
        let host = self
            .get(Field::Host)
            .or_else(|| self.get(Field::Authority))
            .unwrap_or(b"");
        let query = self.get(Field::Query);
        let shown = |f: Field| self.get(f).unwrap_or(b"");
        let entry = Entry {
            peer: self.peer,
            forwarded_for: self.get(Field::ForwardedFor),
            user: b"",
            time: self.time,
            method: self.method.as_str().as_bytes(),
            path: shown(Field::Path),
            query,
            filtered_query: self.get(Field::FilteredQuery).or(query).unwrap_or(b""),
            proto: proto(self.version),
            status: self.status,
            size,
            referer: shown(Field::Referer),
            user_agent: shown(Field::UserAgent),
            duration: started.elapsed(),
            host,
            flow_id: shown(Field::FlowId),
            audit: shown(Field::Audit),
        };
        self.log.log(&entry, &self.mask);
    }
}

/// The field of the line that shows request header `name`, if one does: matched by
/// the name's text, once.
fn shown_header(name: &HeaderName) -> Option<Field> {
    Some(match name.as_str() {
        "referer" => Field::Referer,
        "user-agent" => Field::UserAgent,
        "host" => Field::Host,
        "x-flow-id" => Field::FlowId,
        "x-unverified-audit" => Field::Audit,
        "x-forwarded-for" => Field::ForwardedFor,
        _ => return None,
    })
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

#[cfg(test)]
mod tests;
