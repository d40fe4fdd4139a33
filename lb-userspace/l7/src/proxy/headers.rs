//! Header handling between client and backend: hop-by-hop headers stay on their hop,
//! `X-Forwarded-For` gains the client, `X-Forwarded-Proto` says how it came in.

use http::{HeaderMap, HeaderName, HeaderValue, header};

/// Headers that belong to one connection (RFC 9110 §7.6.1, plus the legacy
/// `Keep-Alive` and `Proxy-Connection`), and Upgrade (the proxy does not tunnel
/// protocol upgrades), as the lower-case text a [`HeaderName`] has. Text, so that a
/// head's field is checked by its name's text (most fail on their length alone) and
/// a name Connection lists by comparing without case, without making a name of it.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// [`HOP_BY_HOP`] as names, for removing them.
static HOP_BY_HOP_NAMES: [HeaderName; HOP_BY_HOP.len()] = [
    HeaderName::from_static(HOP_BY_HOP[0]),
    HeaderName::from_static(HOP_BY_HOP[1]),
    HeaderName::from_static(HOP_BY_HOP[2]),
    HeaderName::from_static(HOP_BY_HOP[3]),
    HeaderName::from_static(HOP_BY_HOP[4]),
    HeaderName::from_static(HOP_BY_HOP[5]),
    HeaderName::from_static(HOP_BY_HOP[6]),
    HeaderName::from_static(HOP_BY_HOP[7]),
    HeaderName::from_static(HOP_BY_HOP[8]),
];

/// Bit `n` is set when a name of [`HOP_BY_HOP`] is `n` bytes long: most fields of a
/// head are told apart by their length alone, before any text is compared.
const HOP_BY_HOP_LENGTHS: u32 = {
    let mut bits = 0u32;
    let mut i = 0;
    while i < HOP_BY_HOP.len() {
        bits |= 1 << HOP_BY_HOP[i].len();
        i += 1;
    }
    bits
};

/// Removes hop-by-hop headers and those the Connection header names; `Upgrade` too
/// (the proxy does not tunnel protocol upgrades). The Host is never removed, whatever
/// Connection lists: a client must not be able to take from the backend the Host
/// that `preserveHost` or a filter chose for it.
///
/// Runs twice per proxied request (the request's head and the response's), so it
/// looks before it removes: a name Connection lists is made only when the head has
/// such a header (a backend's `Connection: keep-alive` would otherwise make, and
/// allocate, a `keep-alive` name per response), and one pass over the head's names
/// finds the hop-by-hop ones, instead of a hashed removal of each of the nine (Upgrade
/// with them); a head without any is left after that pass, and Connection's values
/// are read only when the pass found it.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One bit per name of the list the head has (the map's keys are distinct).
    let mut present = 0u16;
    for name in headers.keys() {
        if let Some(i) = hop_by_hop_index(name) {
            present |= 1 << i;
        }
    }
    if present == 0 {
        return;
    }
    // Names listed in Connection are removed first, while it is still there. A
    // listed name that is hop-by-hop anyway goes with the others below, so the
    // usual `Connection: keep-alive` costs no name parsed, no lookup and no list.
    // (`close` is looked up: a field named Close, which RFC 9110 reserves, goes
    // with it.)
    if present & 1 << CONNECTION_INDEX != 0 {
        let mut listed: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(header::CONNECTION) {
            let Ok(value) = value.to_str() else {
                continue;
            };
            for token in value.split(',').map(str::trim) {
                if token.is_empty() || goes_anyway(token) || token.eq_ignore_ascii_case("host") {
                    continue;
                }
                if let Ok(name) = HeaderName::from_bytes(token.as_bytes())
                    && headers.contains_key(&name)
                {
                    listed.push(name);
                }
            }
        }
        for name in listed {
            headers.remove(name);
        }
    }
    while present != 0 {
        let i = present.trailing_zeros() as usize;
        present &= present - 1;
        headers.remove(&HOP_BY_HOP_NAMES[i]);
    }
}

/// Where Connection is in [`HOP_BY_HOP`].
const CONNECTION_INDEX: usize = 0;
const _: () = assert!(matches!(
    HOP_BY_HOP[CONNECTION_INDEX].as_bytes(),
    b"connection"
));

/// Where `name` is in [`HOP_BY_HOP`], if it is there.
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    let name = name.as_str();
    if name.len() >= 32 || HOP_BY_HOP_LENGTHS & (1 << name.len()) == 0 {
        return None;
    }
    HOP_BY_HOP.iter().position(|n| *n == name)
}

/// Whether `name` is one of [`HOP_BY_HOP`].
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    hop_by_hop_index(name).is_some()
}

/// Whether a Connection `value` lists only names that go in any case (`keep-alive`,
/// the usual one): dropping the field then drops everything it asks for. `close`
/// is not such a name (a field named Close goes with it, see [`strip_hop_by_hop`]).
pub(crate) fn lists_only_hop_by_hop(value: &HeaderValue) -> bool {
    lists_only_hop_by_hop_bytes(value.as_bytes())
}

/// [`lists_only_hop_by_hop`] of a value's bytes.
pub(crate) fn lists_only_hop_by_hop_bytes(value: &[u8]) -> bool {
    std::str::from_utf8(value).is_ok_and(|v| {
        v.split(',')
            .map(str::trim)
            .all(|token| token.is_empty() || goes_anyway(token))
    })
}

/// Whether a name Connection lists is one [`strip_hop_by_hop`] removes in any case.
fn goes_anyway(token: &str) -> bool {
    is_hop_by_hop_text(token.as_bytes())
}

/// Whether a field name, as a head spells it (any case), is one of [`HOP_BY_HOP`]
/// (told apart by its length first, as [`hop_by_hop_index`] does).
pub(crate) fn is_hop_by_hop_text(name: &[u8]) -> bool {
    name.len() < 32
        && HOP_BY_HOP_LENGTHS & (1 << name.len()) != 0
        && HOP_BY_HOP
            .iter()
            .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

/// A client connection's address, with its X-Forwarded-For value.
#[derive(Debug)]
pub struct Peer {
    /// The address.
    pub addr: std::net::SocketAddr,
    /// Its IP as [`client_value`] writes it, for every request of the connection.
    pub forwarded: HeaderValue,
}

impl Peer {
    /// The peer at `addr`.
    pub fn new(addr: std::net::SocketAddr) -> Self {
        Self {
            addr,
            forwarded: client_value(addr.ip()),
        }
    }
}

/// `client` as an X-Forwarded-For value, made once per connection: requests that
/// arrive without the header then share its bytes instead of formatting the address
/// into a new allocation each.
pub fn client_value(client: std::net::IpAddr) -> HeaderValue {
    use std::io::Write as _;
    // An address prints in at most 39 bytes (eight groups of four hex digits).
    let mut buf = [0u8; 48];
    let mut w = &mut buf[..];
    let _ = write!(w, "{client}");
    let left = w.len();
    let text = &buf[..buf.len() - left];
    HeaderValue::from_bytes(text).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// The X-Forwarded-* names, made at compile time: `HeaderName::from_static` in a
/// function body checks its text at run time, about 140 instructions per name per
/// request.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Appends `client` (see [`client_value`]) to X-Forwarded-For (one header,
/// comma-joined) and sets X-Forwarded-Proto unless a trusted hop before us set it.
/// Each name is hashed and looked up once (its entry): a lookup, an insert and a
/// membership test per name were about 500 instructions per request more.
pub fn add_forwarded(headers: &mut HeaderMap, client: &HeaderValue, proto: &'static str) {
    use http::header::Entry;
    match headers.entry(X_FORWARDED_FOR) {
        Entry::Vacant(e) => {
            e.insert(client.clone());
        }
        Entry::Occupied(mut e) => {
            let len: usize = e
                .iter()
                .filter(|v| v.to_str().is_ok())
                .map(|v| v.len() + 2)
                .sum();
            let value = if len == 0 {
                Ok(client.clone())
            } else {
                // Sized exactly: a vector whose length is its capacity becomes the
                // header's bytes without a second allocation.
                let mut value = Vec::with_capacity(len + client.len());
                for v in e.iter().filter(|v| v.to_str().is_ok()) {
                    value.extend_from_slice(v.as_bytes());
                    value.extend_from_slice(b", ");
                }
                value.extend_from_slice(client.as_bytes());
                HeaderValue::from_maybe_shared(bytes::Bytes::from(value))
            };
            // The joined value replaces every one it joined.
            if let Ok(value) = value {
                e.insert(value);
            }
        }
    }
    if let Entry::Vacant(e) = headers.entry(X_FORWARDED_PROTO) {
        e.insert(HeaderValue::from_static(proto));
    }
}

/// What [`add_forwarded`] would add, for a request head written straight from its
/// map to a backend of our own pool ([`write_fields`]): there the fields are joined
/// and appended as the head is written, instead of being looked up, joined and put
/// into the map first (two hashed entries and an insert, ~800 instructions per
/// request).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Forwarded<'a> {
    /// The client, as [`client_value`] gives it.
    pub client: &'a HeaderValue,
    /// X-Forwarded-Proto's value unless the head has one.
    pub proto: &'static str,
}

/// Appends `headers` as field lines (`name: value` and CRLF), with the
/// X-Forwarded-* fields as [`add_forwarded`] would have left them: the values of
/// X-Forwarded-For that are text joined into one field with the client last (where
/// the first of them was, else after the others), and X-Forwarded-Proto added unless
/// there is one.
pub(crate) fn write_fields(headers: &HeaderMap, fwd: Option<Forwarded<'_>>, out: &mut Vec<u8>) {
    let mut joined = false;
    let mut proto = false;
    let mut in_for = false;
    for (name, value) in headers {
        if let Some(f) = fwd {
            if *name == X_FORWARDED_FOR {
                if value.to_str().is_err() {
                    continue;
                }
                if in_for {
                    out.extend_from_slice(b", ");
                } else {
                    out.extend_from_slice(b"x-forwarded-for: ");
                    in_for = true;
                    joined = true;
                }
                out.extend_from_slice(value.as_bytes());
                continue;
            }
            if in_for {
                close_forwarded_for(f.client, out);
                in_for = false;
            }
            proto |= *name == X_FORWARDED_PROTO;
        }
        write_field(name.as_str(), value.as_bytes(), out);
    }
    if let Some(f) = fwd {
        if in_for {
            close_forwarded_for(f.client, out);
        }
        if !joined {
            write_field(X_FORWARDED_FOR.as_str(), f.client.as_bytes(), out);
        }
        if !proto {
            write_field(X_FORWARDED_PROTO.as_str(), f.proto.as_bytes(), out);
        }
    }
}

/// Appends one field line: `name: value` and CRLF.
pub(crate) fn write_field(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Ends a joined X-Forwarded-For line with the client.
fn close_forwarded_for(client: &HeaderValue, out: &mut Vec<u8>) {
    out.extend_from_slice(b", ");
    out.extend_from_slice(client.as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head written with the fields joined as it is written is the head written
    /// from the map after [`add_forwarded`], field for field.
    #[test]
    fn forwarded_fields_written_as_add_forwarded_leaves_them() {
        let client = client_value("198.18.0.7".parse().expect("ip"));
        let fwd = Forwarded {
            client: &client,
            proto: "http",
        };
        let maps: [&[(&str, &[u8])]; 6] = [
            &[],
            &[("host", b"a")],
            &[("x-forwarded-for", b"10.0.0.1"), ("host", b"a")],
            &[
                ("x-forwarded-for", b"10.0.0.1"),
                ("x-forwarded-for", b"\xff"),
                ("x-forwarded-for", b"10.0.0.2"),
                ("x-forwarded-proto", b"https"),
            ],
            &[("x-forwarded-for", b"\xff"), ("accept", b"*/*")],
            &[
                ("x-forwarded-proto", b"h2"),
                ("x-forwarded-for", b""),
                ("a", b"b"),
            ],
        ];
        for fields in maps {
            let mut map = HeaderMap::new();
            for (n, v) in fields {
                map.append(
                    HeaderName::from_static(n),
                    HeaderValue::from_bytes(v).expect("value"),
                );
            }
            let mut direct = Vec::new();
            write_fields(&map, Some(fwd), &mut direct);
            add_forwarded(&mut map, &client, "http");
            let mut after = Vec::new();
            write_fields(&map, None, &mut after);
            let lines = |b: &[u8]| {
                let mut l: Vec<Vec<u8>> = b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
                l.sort();
                l
            };
            assert_eq!(lines(&direct), lines(&after), "{fields:?}");
        }
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn every_hop_by_hop_name_goes_at_once_with_all_its_values() {
        let mut h = HeaderMap::new();
        for name in HOP_BY_HOP.map(HeaderName::from_static) {
            h.append(&name, HeaderValue::from_static("a"));
            h.append(name, HeaderValue::from_static("b"));
        }
        // Listed in two Connection values, in any case; one listed name is absent.
        h.append(
            header::CONNECTION,
            HeaderValue::from_static("X-One, x-absent"),
        );
        h.append(header::CONNECTION, HeaderValue::from_static(" X-TWO ,"));
        h.insert("x-one", HeaderValue::from_static("1"));
        h.insert("x-two", HeaderValue::from_static("2"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-length"]);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn the_hop_by_hop_list_holds_the_standard_names() {
        for name in [
            header::CONNECTION,
            header::PROXY_AUTHENTICATE,
            header::PROXY_AUTHORIZATION,
            header::TE,
            header::TRAILER,
            header::TRANSFER_ENCODING,
            header::UPGRADE,
            HeaderName::from_static("keep-alive"),
            HeaderName::from_static("proxy-connection"),
        ] {
            assert!(is_hop_by_hop(&name), "{name}");
        }
        // Some as long as one of the list (10 and 17 bytes), some of no such length.
        for name in [
            header::HOST,
            header::CONTENT_LENGTH,
            header::DATE,
            header::ETAG,
            header::USER_AGENT,
            HeaderName::from_static("x-forwarded-proto"),
            HeaderName::from_static("x-a-name-longer-than-thirty-two-bytes"),
        ] {
            assert!(!is_hop_by_hop(&name), "{name}");
        }
        assert!(!is_hop_by_hop(&HeaderName::from_static("x-connection")));
    }

    #[test]
    fn connection_close_takes_a_field_named_close_with_it() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Close"));
        h.insert("close", HeaderValue::from_static("reserved name"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn connection_cannot_remove_the_host() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Host, x-a"));
        h.insert(header::HOST, HeaderValue::from_static("public.example"));
        h.insert("x-a", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h[header::HOST], "public.example");
    }

    #[test]
    fn forwarded_for_appends_the_client() {
        let mut h = HeaderMap::new();
        let client = |ip: &str| client_value(ip.parse().expect("ip"));
        add_forwarded(&mut h, &client("198.18.0.1"), "http");
        assert_eq!(h["x-forwarded-for"], "198.18.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        h.append("x-forwarded-for", HeaderValue::from_static("198.18.0.9"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        add_forwarded(&mut h, &client("2001:db8::1"), "http");
        assert_eq!(h["x-forwarded-for"], "198.18.0.1, 198.18.0.9, 2001:db8::1");
        assert_eq!(h["x-forwarded-proto"], "https");
        let longest = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        assert_eq!(client(longest), longest);
    }

    /// A value that is not text is not joined, and goes with the ones joined: the
    /// backend gets one X-Forwarded-For.
    #[test]
    fn forwarded_for_leaves_out_values_that_are_not_text() {
        let odd = HeaderValue::from_bytes(b"caf\xc3\xa9").expect("obs-text is a valid value");
        let client = client_value("198.18.0.1".parse().expect("ip"));
        let mut h = HeaderMap::new();
        h.append(X_FORWARDED_FOR, odd.clone());
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("198.18.0.7"));
        add_forwarded(&mut h, &client, "http");
        let all: Vec<&HeaderValue> = h.get_all(X_FORWARDED_FOR).iter().collect();
        assert_eq!(all, ["198.18.0.7, 198.18.0.1"]);
        let mut only_odd = HeaderMap::new();
        only_odd.append(X_FORWARDED_FOR, odd);
        add_forwarded(&mut only_odd, &client, "https");
        let all: Vec<&HeaderValue> = only_odd.get_all(X_FORWARDED_FOR).iter().collect();
        assert_eq!(all, ["198.18.0.1"]);
        assert_eq!(only_odd["x-forwarded-proto"], "https");
    }
}
