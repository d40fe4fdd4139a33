//! Rendering one access-log line into a caller's buffer: skipper's line (combined log
//! format plus duration, requested host, flow id and audit) or a JSON object. Nothing
//! is allocated once the buffer has grown: no maps, no `format!`, the timestamp text
//! is reused within a second.
//!
//! Hand-written rather than through a logging or serialization crate: a line is
//! written for every request on the proxy's hot path, so it must cost no allocation
//! (a `tracing` event or `serde_json` value builds its fields first), and its bytes
//! must be skipper's exactly (nginx-style escaping of quotes and control bytes, `-`
//! for empty fields), which no crate's format produces.

use std::{io::Write as _, net::IpAddr, time::SystemTime};

use super::mask::MaskScratch;

pub use lb_model::config::AccessLogFormat as Format;

/// The facts of one request.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Peer address.
    pub peer: IpAddr,
    /// The X-Forwarded-For header as received.
    pub forwarded_for: Option<&'a [u8]>,
    /// Authenticated user, if any.
    pub user: &'a [u8],
    /// When the request arrived.
    pub time: SystemTime,
    /// Method.
    pub method: &'a [u8],
    /// Path as received.
    pub path: &'a [u8],
    /// Query as received, without `?`; `None` when the target had no `?` (a bare `?`
    /// is `Some(b"")` and is logged, as skipper logs the request URI as received).
    pub query: Option<&'a [u8]>,
    /// The query as the route's filters left it (`setQuery`, `stripQuery`, …),
    /// without `?`: a masked line re-encodes this one, as skipper masks the request's
    /// URL after its filters ran. The received query when no filter changed it.
    pub filtered_query: &'a [u8],
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub proto: &'a [u8],
    /// Response status.
    pub status: u16,
    /// Response body bytes.
    pub size: u64,
    /// Referer header.
    pub referer: &'a [u8],
    /// User-Agent header.
    pub user_agent: &'a [u8],
    /// Time to the end of the response.
    pub duration: std::time::Duration,
    /// Host header.
    pub host: &'a [u8],
    /// X-Flow-Id header.
    pub flow_id: &'a [u8],
    /// X-Unverified-Audit header.
    pub audit: &'a [u8],
}

/// How queries are written.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueryPolicy<'a> {
    /// Leave the query out (the global `strip-query` setting); it wins over `mask`.
    pub strip: bool,
    /// The route's `maskAccessLogQuery` keys. When there are any, the query is
    /// skipper's re-encoding of [`Entry::filtered_query`] (see [`super::mask`]),
    /// always after a `?`, even when it is empty.
    pub mask: &'a [String],
}

/// A renderer with its timestamp cache and the scratch buffers of masked queries.
#[derive(Debug, Default)]
pub struct Renderer {
    /// The second `stamp` shows, as the instants it starts and ends at: comparing
    /// with them is cheaper than counting the seconds of every line's time.
    second: Option<(SystemTime, SystemTime)>,
    stamp: [u8; 26],
    mask: MaskScratch,
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

impl Renderer {
    /// Appends one line (with `\n`) for `e` to `out`.
    pub fn render(&mut self, format: Format, e: &Entry<'_>, q: QueryPolicy<'_>, out: &mut Vec<u8>) {
        match format {
            Format::Text => self.text(e, q, out),
            Format::Json => self.json(e, q, out),
        }
    }

    fn text(&mut self, e: &Entry<'_>, q: QueryPolicy<'_>, out: &mut Vec<u8>) {
        out.reserve(256);
        client(e, out);
        out.extend_from_slice(b" - ");
        or_dash(out, e.user, bare);
        out.extend_from_slice(b" [");
        out.extend_from_slice(self.stamp(e.time));
        out.extend_from_slice(b"] \"");
        // The request line's parts escape spaces too: the line splits on them.
        bare(out, e.method);
        out.push(b' ');
        self.uri(e, q, out, bare);
        out.push(b' ');
        bare(out, e.proto);
        out.extend_from_slice(b"\" ");
        number(out, u64::from(e.status));
        out.push(b' ');
        number(out, e.size);
        out.extend_from_slice(b" \"");
        or_dash(out, e.referer, quoted);
        out.extend_from_slice(b"\" \"");
        or_dash(out, e.user_agent, quoted);
        out.extend_from_slice(b"\" ");
        number(out, e.duration.as_millis() as u64);
        out.push(b' ');
        or_dash(out, e.host, bare);
        out.push(b' ');
        or_dash(out, e.flow_id, bare);
        out.push(b' ');
        or_dash(out, e.audit, bare);
        out.push(b'\n');
    }

    /// Skipper's JSON line (logrus's JSON formatter): the same fields under skipper's
    /// names, keys in byte order, with logrus's `level` and empty `msg`; numbers bare,
    /// empty strings `""`.
    fn json(&mut self, e: &Entry<'_>, q: QueryPolicy<'_>, out: &mut Vec<u8>) {
        // Each literal closes one value and opens the next key's: one copy where
        // separate pieces would be three or four.
        out.reserve(384);
        out.extend_from_slice(b"{\"audit\":\"");
        json_str(out, e.audit);
        out.extend_from_slice(b"\",\"auth-user\":\"");
        json_str(out, e.user);
        out.extend_from_slice(b"\",\"duration\":");
        number(out, e.duration.as_millis() as u64);
        out.extend_from_slice(b",\"flow-id\":\"");
        json_str(out, e.flow_id);
        out.extend_from_slice(b"\",\"host\":\"");
        client(e, out);
        out.extend_from_slice(b"\",\"level\":\"info\",\"method\":\"");
        json_str(out, e.method);
        out.extend_from_slice(b"\",\"msg\":\"\",\"proto\":\"");
        json_str(out, e.proto);
        out.extend_from_slice(b"\",\"referer\":\"");
        json_str(out, e.referer);
        out.extend_from_slice(b"\",\"requested-host\":\"");
        json_str(out, e.host);
        out.extend_from_slice(b"\",\"response-size\":");
        number(out, e.size);
        out.extend_from_slice(b",\"status\":");
        number(out, u64::from(e.status));
        out.extend_from_slice(b",\"timestamp\":\"");
        out.extend_from_slice(self.stamp(e.time));
        out.extend_from_slice(b"\",\"uri\":\"");
        self.uri(e, q, out, json_str);
        out.extend_from_slice(b"\",\"user-agent\":\"");
        json_str(out, e.user_agent);
        out.extend_from_slice(b"\"}\n");
    }

    /// The request URI: the path, then `?` and the query as received, or nothing
    /// (stripped), or the masked re-encoding.
    fn uri(
        &mut self,
        e: &Entry<'_>,
        q: QueryPolicy<'_>,
        out: &mut Vec<u8>,
        write: fn(&mut Vec<u8>, &[u8]),
    ) {
        write(out, e.path);
        if q.strip {
            return;
        }
        if !q.mask.is_empty() {
            // Skipper writes the `?` whatever follows, and the re-encoding needs no
            // escaping (see `MaskScratch::write`).
            out.push(b'?');
            self.mask.write(e.filtered_query, q.mask, out);
        } else if let Some(query) = e.query {
            write(out, b"?");
            write(out, query);
        }
    }

    /// `02/Jan/2006:15:04:05 +0000` (UTC), formatted once per second.
    fn stamp(&mut self, t: SystemTime) -> &[u8] {
        if self
            .second
            .is_none_or(|(from, until)| t < from || t >= until)
        {
            let secs = t
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let from = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            self.second = Some((from, from + std::time::Duration::from_secs(1)));
            let (y, m, d) = civil_from_days((secs / 86_400) as i64);
            let s = secs % 86_400;
            let mut w = &mut self.stamp[..];
            let _ = write!(w, "{d:02}/");
            w[..3].copy_from_slice(MONTHS[(m - 1) as usize]);
            let mut w = &mut w[3..];
            let _ = write!(
                w,
                "/{y:04}:{:02}:{:02}:{:02} +0000",
                s / 3600,
                s / 60 % 60,
                s % 60
            );
        }
        &self.stamp
    }
}

/// HOST as skipper finds it: a non-empty X-Forwarded-For is split at `", "`, each
/// entry's port dropped (Go's `net.SplitHostPort`) and the entries that are IP
/// addresses written in canonical form, joined by `", "`: none of them leaves the
/// field empty (`-`), not the peer. Without the header, the peer address.
fn client(e: &Entry<'_>, out: &mut Vec<u8>) {
    let Some(xff) = e.forwarded_for.filter(|x| !x.is_empty()) else {
        write_ip(out, e.peer);
        return;
    };
    let mut any = false;
    let mut rest = xff;
    loop {
        if let Some(len) = leading_quad(rest) {
            // The common entry, a dotted quad without port or leading zeros, is its
            // own canonical form: copied, not parsed and formatted again, and without
            // an escape check, as digits and dots need none.
            if any {
                out.extend_from_slice(b", ");
            }
            copy_quad(out, &rest[..len]);
            any = true;
            match rest.get(len + 2..) {
                Some(t) => rest = t,
                None => break,
            }
            continue;
        }
        let (entry, tail) = match comma_space(rest) {
            Some(i) => (&rest[..i], Some(&rest[i + 2..])),
            None => (rest, None),
        };
        if let Some(ip) = parse_ip(strip_port(entry)) {
            if any {
                out.extend_from_slice(b", ");
            }
            write_ip(out, ip);
            any = true;
        }
        match tail {
            Some(t) => rest = t,
            None => break,
        }
    }
    if !any {
        out.push(b'-');
    }
}

/// Where `", "` starts in `s`: a scan for the comma alone, which is cheaper than
/// comparing every pair of bytes.
fn comma_space(s: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].iter().position(|&b| b == b',') {
        let at = from + i;
        if s.get(at + 1) == Some(&b' ') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The host of `host:port` or `[host]:port` as Go's `net.SplitHostPort` takes it
/// apart; anything it refuses (no port, too many colons, stray brackets) is returned
/// whole, as skipper then uses the entry as it is.
fn strip_port(s: &[u8]) -> &[u8] {
    let Some(colon) = s.iter().rposition(|&b| b == b':') else {
        return s;
    };
    let (host, from) = if s.first() == Some(&b'[') {
        match s.iter().position(|&b| b == b']') {
            Some(end) if end + 1 == colon => (&s[1..end], end + 1),
            _ => return s,
        }
    } else {
        let host = &s[..colon];
        if host.contains(&b':') {
            return s;
        }
        (host, 0)
    };
    let opened = s.first() == Some(&b'[');
    if s[usize::from(opened)..].contains(&b'[') || s[from..].contains(&b']') {
        return s;
    }
    host
}

/// An address as text: IPv4 by hand (the common case, and `fmt` costs more than the
/// rest of the line), IPv6 through `Display`.
fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            // Put together in a fixed buffer and appended as one 16-byte copy (then
            // cut to its length): a push per digit and dot checked the capacity for
            // each.
            let mut quad = [0u8; 16];
            let mut n = 0;
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    quad[n] = b'.';
                    n += 1;
                }
                if o >= 100 {
                    quad[n] = b'0' + o / 100;
                    n += 1;
                }
                if o >= 10 {
                    quad[n] = b'0' + o / 10 % 10;
                    n += 1;
                }
                quad[n] = b'0' + o % 10;
                n += 1;
            }
            let end = out.len() + n;
            out.extend_from_slice(&quad);
            out.truncate(end);
        }
        IpAddr::V6(v6) => {
            let mut buf = [0u8; 46];
            let mut w = &mut buf[..];
            let _ = write!(w, "{v6}");
            let n = 46 - w.len();
            out.extend_from_slice(&buf[..n]);
        }
    }
}

/// The length of the dotted quad that `s` starts with (an IPv4 address as
/// [`parse_ip`] reads one: four decimal fields of one to three digits, at most 255,
/// no leading zeros), when it is a whole X-Forwarded-For entry: followed by the end
/// or by `", "`. One pass finds both the entry's end and whether it is a quad, where
/// finding the separator first and then checking the entry read every byte twice.
fn leading_quad(s: &[u8]) -> Option<usize> {
    let (mut dots, mut digits, mut value, mut lead) = (0, 0, 0u32, 0u8);
    for (i, &b) in s.iter().enumerate() {
        if b == b'.' {
            if digits == 0 || dots == 3 {
                return None;
            }
            (dots, digits, value) = (dots + 1, 0, 0);
        } else if b.is_ascii_digit() {
            if digits == 0 {
                lead = b;
            } else if lead == b'0' {
                return None;
            }
            digits += 1;
            value = value * 10 + u32::from(b - b'0');
            if value > 255 {
                return None;
            }
        } else {
            let ends = b == b',' && s.get(i + 1) == Some(&b' ');
            return (ends && dots == 3 && digits > 0).then_some(i);
        }
    }
    (dots == 3 && digits > 0).then_some(s.len())
}

/// A dotted quad (7 to 15 bytes, none to escape) as two overlapping fixed
/// eight-byte copies, or one padded word when shorter than eight.
#[inline(always)]
fn copy_quad(out: &mut Vec<u8>, quad: &[u8]) {
    let start = out.len();
    let n = quad.len();
    if n < 8 {
        out.extend_from_slice(&short_word(quad));
    } else {
        let head: [u8; 8] = quad[..8].try_into().expect("eight bytes");
        let tail: [u8; 8] = quad[n - 8..].try_into().expect("eight bytes");
        out.extend_from_slice(&head);
        out.truncate(start + n - 8);
        out.extend_from_slice(&tail);
    }
    out.truncate(start + n);
}

/// `s` as an IP address, as Go's `netip.ParseAddr` reads it (IPv4 only as four
/// decimal fields without leading zeros); the common dotted quad without the general
/// parser.
fn parse_ip(s: &[u8]) -> Option<IpAddr> {
    let mut octets = [0u8; 4];
    let mut fields = s.split(|&b| b == b'.');
    let quad = octets.iter_mut().all(|o| {
        let Some(f) = fields.next() else {
            return false;
        };
        let digits = matches!(f.len(), 1..=3)
            && f.iter().all(u8::is_ascii_digit)
            && (f.len() == 1 || f[0] != b'0');
        let n = f
            .iter()
            .take(3)
            .fold(0u32, |n, &d| n * 10 + u32::from(d.wrapping_sub(b'0')));
        *o = n as u8;
        digits && n <= 255
    }) && fields.next().is_none();
    if quad {
        return Some(IpAddr::from(octets));
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// `n` in decimal. Up to eight digits go out as one copy of a fixed eight bytes, cut
/// back to their count: a fixed-size copy compiles to a few moves, where a copy of the
/// digits' own length is a `memcpy` call (a sixth of the line's time, with a number in
/// every few fields). Up to eight digits (every status and duration, and sizes below
/// 100 MB) are gathered in a register, the first digit in the lowest byte: digits
/// stored one byte at a time into memory and then read back as one wide word stall
/// the read until every store has landed, which cost a tenth of the line.
#[inline(always)]
fn number(out: &mut Vec<u8>, mut n: u64) {
    if n < 100_000_000 {
        let mut word = 0u64;
        let mut len = 0;
        loop {
            // Each new digit is more significant, so the ones before move up a byte.
            word = word << 8 | u64::from(b'0' + (n % 10) as u8);
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let end = out.len() + len;
        out.extend_from_slice(&word.to_le_bytes());
        out.truncate(end);
        return;
    }
    // Nine digits or more: rare, so a copy of their own length does.
    let mut digits = [0u8; 20];
    let len = itoa(n, &mut digits);
    out.extend_from_slice(&digits[20 - len..]);
}

/// Writes `n` right-aligned into `buf`; returns the digit count.
pub(super) fn itoa(mut n: u64, buf: &mut [u8; 20]) -> usize {
    let mut i = 20;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return 20 - i;
        }
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn hex_escape(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&[
        b'\\',
        b'x',
        HEX[usize::from(b >> 4)],
        HEX[usize::from(b & 15)],
    ]);
}

/// nginx-style escaping inside quotes: `"`, `\`, control bytes and bytes ≥ 0x7F as
/// `\xHH`.
#[inline(always)]
fn quoted(out: &mut Vec<u8>, s: &[u8]) {
    escape_runs(out, s, &QUOTED_ESCAPES);
}

/// Bytes escaped inside quotes, and in unquoted fields (spaces too), as lookup tables.
const QUOTED_ESCAPES: [bool; 256] = escapes(0x20);
const BARE_ESCAPES: [bool; 256] = escapes(0x21);

const fn escapes(first_plain: u8) -> [bool; 256] {
    let mut t = [true; 256];
    let mut b = first_plain as usize;
    while b < 0x7F {
        t[b] = b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    t
}

/// Copies `s`, escaping the bytes `escape` picks as `\xHH`.
#[inline(always)]
fn escape_runs(out: &mut Vec<u8>, s: &[u8], escape: &[bool; 256]) {
    copy_escaped(out, s, escape, hex_escape);
}

/// Copies `s` in one pass, writing the bytes `escape` picks through `write_escape`.
///
/// Fields are short (a method, a path, a host, a user agent), and a `memcpy` call per
/// field cost more than the whole scan, so every copy here has a fixed size of eight
/// bytes and compiles to a move: words of eight that pass a word test for "below the
/// table's first plain byte, 0x7F or above, `\"` or `\\`" are copied whole; the tail
/// shorter than a word is copied as the last eight bytes of `s` after taking back the
/// bytes it overlaps (they were copied as they are, so they come out the same); a
/// field shorter than a word is padded with a plain byte and cut back after. Only
/// words that hold a byte to escape go byte by byte.
#[inline(always)]
fn copy_escaped(
    out: &mut Vec<u8>,
    s: &[u8],
    escape: &[bool; 256],
    write_escape: fn(&mut Vec<u8>, u8),
) {
    // Below this byte everything is escaped: 0x20 inside quotes, 0x21 (space too)
    // in bare fields.
    let first_plain: u8 = if escape[usize::from(b' ')] {
        0x21
    } else {
        0x20
    };
    let one = |out: &mut Vec<u8>, b: u8| {
        if escape[usize::from(b)] {
            write_escape(out, b);
        } else {
            out.push(b);
        }
    };
    if s.len() < 8 {
        let word = short_word(s);
        if plain_word(word, first_plain) {
            let end = out.len() + s.len();
            out.extend_from_slice(&word);
            out.truncate(end);
        } else {
            for &b in s {
                one(out, b);
            }
        }
        return;
    }
    let mut chunks = s.chunks_exact(8);
    let mut last_plain = false;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        last_plain = plain_word(word, first_plain);
        if last_plain {
            out.extend_from_slice(&word);
        } else {
            for b in word {
                one(out, b);
            }
        }
    }
    let tail = chunks.remainder();
    if tail.is_empty() {
        return;
    }
    let mut word = [0u8; 8];
    word.copy_from_slice(&s[s.len() - 8..]);
    if last_plain && plain_word(word, first_plain) {
        out.truncate(out.len() - (8 - tail.len()));
        out.extend_from_slice(&word);
    } else {
        for &b in tail {
            one(out, b);
        }
    }
}

/// `s` (shorter than eight bytes) as the first bytes of a word padded with `a`, read
/// with at most three loads. Byte by byte into an array compiles to a `memcpy` call
/// and then a read of the word it just stored in pieces, which stalls.
#[inline(always)]
fn short_word(s: &[u8]) -> [u8; 8] {
    const PAD: u64 = u64::from_le_bytes([b'a'; 8]);
    let n = s.len();
    let x = match n {
        0 => PAD,
        1..=3 => {
            // Bytes 0, n/2 and n-1 cover every byte of a field this short.
            let at = |i: usize| u64::from(s[i]) << (8 * i);
            at(0) | at(n / 2) | at(n - 1) | PAD << (8 * n)
        }
        _ => {
            // Two overlapping four-byte reads; the overlap holds the same bytes.
            let four = |i: usize| {
                let mut w = [0u8; 4];
                w.copy_from_slice(&s[i..i + 4]);
                u64::from(u32::from_le_bytes(w))
            };
            four(0) | four(n - 4) << (8 * (n - 4)) | PAD << (8 * n)
        }
    };
    x.to_le_bytes()
}

/// Whether none of `word`'s bytes is below `first_plain`, 0x7F or above, `"` or `\`.
#[inline(always)]
fn plain_word(word: [u8; 8], first_plain: u8) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |y: u64| y.wrapping_sub(ONES) & !y & HIGHS;
    let x = u64::from_le_bytes(word);
    let below = x.wrapping_sub(ONES * u64::from(first_plain)) & !x & HIGHS;
    let special = x & HIGHS
        | zero_byte(x ^ (ONES * 0x7F))
        | zero_byte(x ^ (ONES * u64::from(b'"')))
        | zero_byte(x ^ (ONES * u64::from(b'\\')));
    below | special == 0
}

/// Unquoted fields: as [`quoted`], and spaces too, so fields stay separable.
#[inline(always)]
fn bare(out: &mut Vec<u8>, s: &[u8]) {
    escape_runs(out, s, &BARE_ESCAPES);
}

/// An empty field prints as `-`; others through `write`.
#[inline(always)]
fn or_dash(out: &mut Vec<u8>, s: &[u8], write: fn(&mut Vec<u8>, &[u8])) {
    if s.is_empty() {
        out.push(b'-');
    } else {
        write(out, s);
    }
}

/// JSON string contents: `"` and `\` escaped, control bytes and bytes ≥ 0x7F as
/// `\u00HH` (header bytes are not necessarily UTF-8; this keeps every line valid).
/// The bytes to escape are those escaped inside the text line's quotes.
#[inline(always)]
fn json_str(out: &mut Vec<u8>, s: &[u8]) {
    copy_escaped(out, s, &QUOTED_ESCAPES, json_escape);
}

fn json_escape(out: &mut Vec<u8>, b: u8) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]),
    }
}

/// Civil date of days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass check takes exactly the quads the parser takes as IPv4.
    #[test]
    fn is_quad_agrees_with_parse_ip() {
        let is_quad = |s: &[u8]| leading_quad(s) == Some(s.len());
        for s in [
            "1.2.3.4",
            "0.0.0.0",
            "255.255.255.255",
            "198.18.5.5",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "1..3.4",
            ".1.2.3",
            "1.2.3.",
            "1.2.3.4a",
            "1000.1.1.1",
            "::1",
            "1.2.3.4:80",
            "",
            "a.b.c.d",
            "10.0.0.00",
        ] {
            let parsed = parse_ip(s.as_bytes()).is_some_and(|ip| ip.is_ipv4());
            assert_eq!(is_quad(s.as_bytes()), parsed, "{s}");
        }
    }

    /// Short fields, word-sized ones and ones with a tail, each with and without a
    /// byte to escape, come out as a byte-by-byte copy would write them.
    #[test]
    fn word_copies_match_byte_copies() {
        let samples: [&[u8]; 12] = [
            b"",
            b"a",
            b"ab",
            b"abc",
            b"abcd",
            b"abc\"e",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefgh\x01",
            b"abcdefghijk",
            b"ab de\\gh ijklmnopq",
            b"\xffabcdefghijklmn",
        ];
        for s in samples {
            for (table, first_plain) in [(&QUOTED_ESCAPES, 0x20u8), (&BARE_ESCAPES, 0x21)] {
                let mut want = b"x".to_vec();
                for &b in s {
                    if b < first_plain || b >= 0x7F || b == b'"' || b == b'\\' {
                        hex_escape(&mut want, b);
                    } else {
                        want.push(b);
                    }
                }
                let mut got = b"x".to_vec();
                copy_escaped(&mut got, s, table, hex_escape);
                assert_eq!(got, want, "{s:?}");
            }
        }
    }

    /// A quad ends an entry only at the end or at `", "`; a comma without the space,
    /// a port or any other byte makes the entry something the general path reads.
    /// Quads of every length from 7 to 15 bytes are copied whole.
    #[test]
    fn leading_quads_end_at_the_separator() {
        for (s, want) in [
            ("1.2.3.4", Some(7)),
            ("1.2.3.4, 5.6.7.8", Some(7)),
            ("198.18.5.5, x", Some(10)),
            ("1.2.3.4,5.6.7.8", None),
            ("1.2.3.4,", None),
            ("1.2.3.4:80, 5.6.7.8", None),
            ("1.2.3, 4", None),
            ("255.255.255.255", Some(15)),
            ("255.255.255.255, ", Some(15)),
        ] {
            assert_eq!(leading_quad(s.as_bytes()), want, "{s}");
        }
        for quad in [
            "1.2.3.4",
            "10.2.3.4",
            "10.20.3.4",
            "255.255.255.25",
            "255.255.255.255",
        ] {
            let mut out = b"x".to_vec();
            copy_quad(&mut out, quad.as_bytes());
            assert_eq!(out, format!("x{quad}").into_bytes());
        }
    }

    /// Numbers on both sides of the register path's eight digits, and at the ends of
    /// `u64`, come out as `Display` writes them, after what the buffer held.
    #[test]
    fn addresses_match_display() {
        let mut out = b"x".to_vec();
        for ip in [
            "0.0.0.0",
            "255.255.255.255",
            "198.18.0.1",
            "10.100.9.99",
            "1.22.133.4",
            "2001:db8::1",
        ] {
            let ip: IpAddr = ip.parse().expect("address");
            out.truncate(1);
            write_ip(&mut out, ip);
            assert_eq!(String::from_utf8_lossy(&out), format!("x{ip}"));
        }
    }

    #[test]
    fn numbers_match_display() {
        for n in [
            0u64,
            7,
            10,
            200,
            5123,
            99_999_999,
            100_000_000,
            123_456_789,
            10_000_000_000_000_000_000,
            u64::MAX,
        ] {
            let mut out = b"x".to_vec();
            number(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes(), "{n}");
        }
    }
}
