//! Clients' HTTP/1.x request heads, parsed with `httparse` from untrusted bytes:
//! the method, which route the target names, the version, how the body is
//! delimited, whether the connection stays open, and the few headers the gateway
//! acts on or forwards. A pure function over a buffer: it never panics, looks at
//! no more than [`MAX_REQUEST_HEAD`] bytes, allocates nothing but the forwarded
//! header lines it copies, and gives the same answer however the bytes were split
//! into reads (it is re-run on the whole buffer after each read).

use std::ops::Range;

/// Largest request head accepted (431 above), like nginx's default
/// `large_client_header_buffers` line size times four.
pub(crate) const MAX_REQUEST_HEAD: usize = 32 * 1024;

/// Most header fields accepted in a request head (431 above).
pub(crate) const MAX_REQUEST_HEADERS: usize = 64;

/// The request methods the gateway tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// `GET`.
    Get,
    /// `HEAD`: answered like `GET`, without a body.
    Head,
    /// `POST`.
    Post,
    /// Anything else (answered 404).
    Other,
}

/// What the request target names (the path before any `?`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// `/v1/embeddings`.
    Embeddings,
    /// `/v1/models`.
    Models,
    /// `/health`.
    Health,
    /// `/metrics`.
    Metrics,
    /// Anything else.
    Other,
}

impl Route {
    fn of(path: &[u8]) -> Route {
        match path {
            b"/v1/chat/completions" => Route::Chat,
            b"/v1/completions" => Route::Completions,
            b"/v1/embeddings" => Route::Embeddings,
            b"/v1/models" => Route::Models,
            b"/health" => Route::Health,
            b"/metrics" => Route::Metrics,
            _ => Route::Other,
        }
    }

    /// The path as a static string (`""` for [`Route::Other`]).
    pub(crate) fn path(self) -> &'static str {
        match self {
            Route::Chat => "/v1/chat/completions",
            Route::Completions => "/v1/completions",
            Route::Embeddings => "/v1/embeddings",
            Route::Models => "/v1/models",
            Route::Health => "/health",
            Route::Metrics => "/metrics",
            Route::Other => "",
        }
    }
}

/// How a request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// No body (neither `Content-Length` nor `Transfer-Encoding`).
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed request head; ranges index the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestHead {
    /// Bytes the head takes (request line, headers, empty line).
    pub len: usize,
    /// The method.
    pub method: Method,
    /// The method as sent.
    pub method_text: Range<usize>,
    /// The request target's path (before `?`).
    pub path: Range<usize>,
    /// What the path names.
    pub route: Route,
    /// HTTP/1.1 (else HTTP/1.0).
    pub http11: bool,
    /// How the body is delimited.
    pub framing: BodyFraming,
    /// Whether the client wants the connection kept open after the answer.
    pub keep_alive: bool,
    /// `Expect: 100-continue` (HTTP/1.1 only).
    pub expect_continue: bool,
    /// The `Authorization` value.
    pub authorization: Option<Range<usize>>,
    /// The session header's value.
    pub session: Option<Range<usize>>,
}

/// Why a request head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Larger than [`MAX_REQUEST_HEAD`] or more than [`MAX_REQUEST_HEADERS`] fields (431).
    TooLarge,
    /// Not a valid HTTP/1.x request head, or framing the gateway refuses (400).
    Malformed(&'static str),
}

/// Headers copied from the client to the replica (besides the session header).
const FORWARDED: [&[u8]; 5] = [
    b"accept",
    b"user-agent",
    b"accept-encoding",
    b"x-request-id",
    b"traceparent",
];

/// Whether a comma-separated header value lists `token` (ASCII case-insensitive).
fn lists(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// A `Content-Length` value: 1 to 19 ASCII digits.
fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Where `part` (a sub-slice of `buf`) lies in `buf`.
fn range_in(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    let start = start.min(buf.len());
    start..(start + part.len()).min(buf.len())
}

/// Parses a request head at the start of `buf`. `Ok(None)`: incomplete, read more.
/// `session` is the lower-case name of the session header. The forwarded headers
/// (see [`FORWARDED`], and the session header) are appended to `forward` as
/// `name: value\r\n` lines; `forward` is cleared first. httparse refuses CR, LF
/// and other control bytes in names and values, so a line cannot smuggle another.
pub(crate) fn parse_head(
    buf: &[u8],
    session: &[u8],
    forward: &mut Vec<u8>,
) -> Result<Option<RequestHead>, HeadError> {
    forward.clear();
    // Never look past the limit: the answer for a too-large head is the same
    // whatever comes after it, however the bytes were split into reads.
    let window = &buf[..buf.len().min(MAX_REQUEST_HEAD)];
    let mut raw = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut req = httparse::Request::new(&mut raw);
    let len = match req.parse(window) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if window.len() >= MAX_REQUEST_HEAD => {
            return Err(HeadError::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(httparse::Error::Version) => {
            return Err(HeadError::Malformed("unsupported HTTP version"));
        }
        Err(_) => return Err(HeadError::Malformed("malformed request head")),
    };
    let (Some(method_text), Some(target), Some(version)) = (req.method, req.path, req.version)
    else {
        return Err(HeadError::Malformed("malformed request line"));
    };
    let method = match method_text {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        _ => Method::Other,
    };
    // Absolute form (`http://host/path`, which servers must accept) names the
    // same path as origin form.
    let origin = match target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        Some(rest) => rest.find('/').map_or("/", |at| &rest[at..]),
        None => target,
    };
    let path = origin.split('?').next().unwrap_or("");
    let http11 = version == 1;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut authorization = None;
    let mut session_value = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let v = h.value;
        match name.len() {
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let n = parse_length(v).ok_or(HeadError::Malformed("invalid Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(HeadError::Malformed("conflicting Content-Length headers"));
                }
                length = Some(n);
                continue;
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                transfer_encoding = true;
                // Chunked must be the last (and here the only understood) coding.
                chunked = v
                    .rsplit(|b| *b == b',')
                    .next()
                    .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                continue;
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                close |= lists(v, b"close");
                keep_alive_token |= lists(v, b"keep-alive");
                continue;
            }
            6 if name.eq_ignore_ascii_case(b"expect") => {
                expect_continue = v.trim_ascii().eq_ignore_ascii_case(b"100-continue");
                continue;
            }
            13 if name.eq_ignore_ascii_case(b"authorization") => {
                authorization = Some(range_in(buf, v));
                continue;
            }
            _ => {}
        }
        let is_session = !session.is_empty() && name.eq_ignore_ascii_case(session);
        if is_session {
            session_value = Some(range_in(buf, v));
        }
        if is_session || FORWARDED.iter().any(|f| name.eq_ignore_ascii_case(f)) {
            forward.extend_from_slice(name);
            forward.extend_from_slice(b": ");
            forward.extend_from_slice(v);
            forward.extend_from_slice(b"\r\n");
        }
    }
    let framing = match (transfer_encoding, length) {
        (true, Some(_)) => {
            // Both framings: the classic request-smuggling shape (RFC 9112 §6.1).
            return Err(HeadError::Malformed(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        (true, None) if !http11 => {
            return Err(HeadError::Malformed(
                "Transfer-Encoding in an HTTP/1.0 request",
            ));
        }
        (true, None) if !chunked => {
            return Err(HeadError::Malformed(
                "unsupported Transfer-Encoding (only chunked is understood)",
            ));
        }
        (true, None) => BodyFraming::Chunked,
        (false, Some(0)) | (false, None) => BodyFraming::None,
        (false, Some(n)) => BodyFraming::Length(n),
    };
    Ok(Some(RequestHead {
        len,
        method,
        method_text: range_in(buf, method_text.as_bytes()),
        path: range_in(buf, path.as_bytes()),
        route: Route::of(path.as_bytes()),
        http11,
        framing,
        keep_alive: if http11 {
            !close
        } else {
            keep_alive_token && !close
        },
        expect_continue: http11 && expect_continue,
        authorization,
        session: session_value,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &[u8]) -> (Result<Option<RequestHead>, HeadError>, Vec<u8>) {
        let mut fwd = Vec::new();
        let r = parse_head(s, b"x-session-id", &mut fwd);
        (r, fwd)
    }

    #[test]
    fn a_chat_request_head() {
        let raw = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k1\r\nContent-Length: 42\r\nAccept: */*\r\nX-Session-Id: s7\r\nX-Other: no\r\nTraceparent: 00-ab\r\n\r\n{\"model\"";
        let (r, fwd) = parse(raw);
        let h = r.unwrap().unwrap();
        assert_eq!(h.len, raw.len() - 8);
        assert_eq!(h.method, Method::Post);
        assert_eq!(&raw[h.method_text.clone()], b"POST");
        assert_eq!(&raw[h.path.clone()], b"/v1/chat/completions");
        assert_eq!(h.route, Route::Chat);
        assert!(h.http11 && h.keep_alive && !h.expect_continue);
        assert_eq!(h.framing, BodyFraming::Length(42));
        assert_eq!(&raw[h.authorization.clone().unwrap()], b"Bearer k1");
        assert_eq!(&raw[h.session.clone().unwrap()], b"s7");
        assert_eq!(
            String::from_utf8(fwd).unwrap(),
            "Accept: */*\r\nX-Session-Id: s7\r\nTraceparent: 00-ab\r\n"
        );
    }

    #[test]
    fn versions_connection_and_expect() {
        let raw = b"POST http://gw:80/v1/embeddings?q HTTP/1.1\r\n\r\n";
        let h = parse(raw).0.unwrap().unwrap();
        assert_eq!(
            (h.route, &raw[h.path]),
            (Route::Embeddings, &b"/v1/embeddings"[..])
        );
        let (r, _) = parse(b"GET /health HTTP/1.0\r\n\r\n");
        let h = r.unwrap().unwrap();
        assert!(!h.http11 && !h.keep_alive);
        assert_eq!(h.framing, BodyFraming::None);
        assert_eq!(h.route, Route::Health);
        let (r, _) = parse(b"GET /v1/models HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(r.unwrap().unwrap().keep_alive);
        let (r, _) = parse(b"GET /metrics HTTP/1.1\r\nConnection: foo, close\r\n\r\n");
        assert!(!r.unwrap().unwrap().keep_alive);
        let (r, _) = parse(
            b"POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        );
        let h = r.unwrap().unwrap();
        assert!(h.expect_continue);
        assert_eq!(h.framing, BodyFraming::Chunked);
        // Leading empty lines before the request line are skipped (RFC 9112 §2.2).
        let (r, _) = parse(b"\r\nGET /health HTTP/1.1\r\n\r\n");
        assert_eq!(r.unwrap().unwrap().route, Route::Health);
        assert_eq!(parse(b"GET /health HTTP/1.1\r\nHost: x\r\n").0, Ok(None));
    }

    #[test]
    fn refused_heads() {
        let malformed = [
            &b"GET\r\n\r\n"[..],
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ];
        for raw in malformed {
            assert!(
                matches!(parse(raw).0, Err(HeadError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_REQUEST_HEAD + 10, b'a');
        assert_eq!(parse(&big).0, Err(HeadError::TooLarge));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_REQUEST_HEADERS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many).0, Err(HeadError::TooLarge));
    }

    /// Feeds `bytes` in pieces ending at `cuts`, re-parsing after each, as the
    /// connection does; returns the first definite answer.
    fn parse_in_pieces(
        bytes: &[u8],
        cuts: &[usize],
    ) -> (Result<Option<RequestHead>, HeadError>, Vec<u8>) {
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        ends.push(bytes.len());
        ends.sort_unstable();
        let mut fwd = Vec::new();
        for end in ends {
            match parse_head(&bytes[..end], b"x-session-id", &mut fwd) {
                Ok(None) => {}
                done => return (done, fwd),
            }
        }
        (Ok(None), fwd)
    }

    fn head_like() -> impl Strategy<Value = Vec<u8>> {
        let line = prop_oneof![
            Just(b"Content-Length: 5\r\n".to_vec()),
            Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
            Just(b"Connection: close\r\n".to_vec()),
            Just(b"Expect: 100-continue\r\n".to_vec()),
            Just(b"X-Session-Id: abc\r\n".to_vec()),
            Just(b"Accept: */*\r\n".to_vec()),
            prop::collection::vec(any::<u8>(), 0..40),
        ];
        (
            prop_oneof![
                Just(b"POST".to_vec()),
                Just(b"GET".to_vec()),
                prop::collection::vec(any::<u8>(), 0..6)
            ],
            prop_oneof![
                Just(b" /v1/completions HTTP/1.1\r\n".to_vec()),
                Just(b" /health HTTP/1.0\r\n".to_vec())
            ],
            prop::collection::vec(line, 0..8),
            prop_oneof![Just(b"\r\n".to_vec()), Just(Vec::new())],
            prop::collection::vec(any::<u8>(), 0..20),
        )
            .prop_map(|(m, l, hs, end, tail)| {
                let mut v = m;
                v.extend(l);
                for h in hs {
                    v.extend(h);
                }
                v.extend(end);
                v.extend(tail);
                v
            })
    }

    proptest! {
        /// Arbitrary bytes: no panic, ranges inside the input, forwarded lines no
        /// longer than the input, and the same answer however the bytes arrive.
        #[test]
        fn any_bytes_any_split(bytes in prop::collection::vec(any::<u8>(), 0..600), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
            let (whole, fwd) = parse(&bytes);
            prop_assert!(fwd.len() <= bytes.len() + 4 * MAX_REQUEST_HEADERS);
            if let Ok(Some(h)) = &whole {
                prop_assert!(h.len <= bytes.len());
                for r in [Some(h.path.clone()), Some(h.method_text.clone()), h.authorization.clone(), h.session.clone()].into_iter().flatten() {
                    prop_assert!(r.end <= h.len);
                }
            }
            prop_assert_eq!(parse_in_pieces(&bytes, &cuts), (whole, fwd));
        }

        /// Request-like bytes (valid and broken header lines mixed) split anywhere.
        #[test]
        fn request_like_bytes_any_split(bytes in head_like(), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
            let whole = parse(&bytes);
            prop_assert_eq!(parse_in_pieces(&bytes, &cuts), whole);
        }

        /// Huge inputs are judged on their first MAX_REQUEST_HEAD bytes only.
        #[test]
        fn oversize_heads_are_refused_whatever_follows(fill in any::<u8>(), tail in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut bytes = b"POST /v1/completions HTTP/1.1\r\nX: ".to_vec();
            bytes.resize(MAX_REQUEST_HEAD, if fill.is_ascii_alphanumeric() { fill } else { b'a' });
            bytes.extend(tail);
            prop_assert_eq!(parse(&bytes).0, Err(HeadError::TooLarge));
        }
    }
}
