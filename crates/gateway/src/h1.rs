//! HTTP/1.1 framing of a replica's answer, over bytes the replica sent: the
//! response head (status, headers, how the body is delimited, whether the
//! connection can be reused) and a decoder for `Content-Length`, chunked and
//! close-delimited bodies. Pure functions over buffers: bounded (a head is at
//! most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers, a chunk-size line and
//! the trailers are capped) and never panicking on any input.

use bytes::{Bytes, BytesMut};
use http::StatusCode;

/// Largest response head accepted from a replica.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// Most headers accepted in a replica's response head.
pub(crate) const MAX_HEADERS: usize = 64;

/// Longest chunk-size line (size and extensions) accepted.
const MAX_CHUNK_LINE: usize = 1024;

/// Most trailer bytes accepted after the last chunk (they are dropped).
const MAX_TRAILERS: usize = 16 * 1024;

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the replica closes the connection.
    Eof,
}

/// A parsed response head. Its end-to-end header lines were written to the
/// buffer [`parse_head`] was given.
#[derive(Debug)]
pub(crate) struct Head {
    pub status: StatusCode,
    pub framing: Framing,
    /// HTTP/1.1 without `Connection: close`: the connection may carry another request.
    pub keep_alive: bool,
    /// `Content-Type: text/event-stream`.
    pub sse: bool,
}

/// What the gateway does with one response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    ContentLength,
    TransferEncoding,
    Connection,
    ContentType,
    /// Describes one connection (hop-by-hop): dropped.
    Hop,
    /// Passed to the client as it came.
    Pass,
}

/// Sorts a header name, comparing only names of its length.
fn role(name: &[u8]) -> Role {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    match name.len() {
        2 if is(b"te") => Role::Hop,
        7 if is(b"trailer") || is(b"upgrade") => Role::Hop,
        10 if is(b"connection") => Role::Connection,
        10 if is(b"keep-alive") => Role::Hop,
        12 if is(b"content-type") => Role::ContentType,
        14 if is(b"content-length") => Role::ContentLength,
        16 if is(b"proxy-connection") => Role::Hop,
        17 if is(b"transfer-encoding") => Role::TransferEncoding,
        19 if is(b"proxy-authorization") => Role::Hop,
        _ => Role::Pass,
    }
}

/// Whether a comma-separated header value lists `token` (ASCII case-insensitive).
fn lists(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// Parses a response head at the start of `buf`. `Ok(None)`: incomplete, read
/// more (unless `buf` already holds [`MAX_HEAD`] bytes, which is an error). On
/// success the head's bytes are taken off `buf`, and its end-to-end header lines
/// (`name: value\r\n` each; hop-by-hop and framing headers left out) replace the
/// contents of `lines`. Informational (1xx) heads are returned too; their body is
/// empty. httparse refuses CR, LF and other control bytes in names and values, so
/// a passed line cannot smuggle another.
pub(crate) fn parse_head(
    buf: &mut BytesMut,
    lines: &mut Vec<u8>,
) -> Result<Option<Head>, &'static str> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut raw);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err("response head larger than 64 KiB");
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err("more than 64 response headers"),
        Err(_) => return Err("malformed HTTP/1.1 response head"),
    };
    if len > MAX_HEAD {
        return Err("response head larger than 64 KiB");
    }
    let code = resp.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| "invalid response status code")?;
    let http11 = resp.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = !http11;
    let mut sse = false;
    lines.clear();
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        let v = h.value;
        let r = role(name);
        match r {
            Role::ContentLength => {
                let n = parse_length(v).ok_or("invalid Content-Length")?;
                if length.is_some_and(|l| l != n) {
                    return Err("conflicting Content-Length headers");
                }
                length = Some(n);
            }
            Role::TransferEncoding => {
                transfer_encoding = true;
                // Chunked must be the last coding; anything else is read to EOF.
                chunked = v
                    .rsplit(|b| *b == b',')
                    .next()
                    .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            Role::Connection => close |= lists(v, b"close"),
            Role::ContentType => {
                sse = v.len() >= 17 && v[..17].eq_ignore_ascii_case(b"text/event-stream");
            }
            Role::Hop | Role::Pass => {}
        }
        if matches!(r, Role::ContentType | Role::Pass) {
            lines.extend_from_slice(name);
            lines.extend_from_slice(b": ");
            lines.extend_from_slice(v);
            lines.extend_from_slice(b"\r\n");
        }
    }
    let framing = if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Length(0)
    } else if transfer_encoding {
        if chunked {
            Framing::Chunked
        } else {
            Framing::Eof
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Eof
    };
    let _ = buf.split_to(len);
    Ok(Some(Head {
        status,
        keep_alive: !close && framing != Framing::Eof && !(transfer_encoding && length.is_some()),
        framing,
        sse,
    }))
}

/// A Content-Length value: 1 to 19 ASCII digits.
fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// What one decoding step produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// Body bytes (never empty).
    Data(Bytes),
    /// The buffer holds no further complete piece: read more.
    NeedMore,
    /// The body is complete.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Eof,
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers(usize),
    Done,
}

/// Decodes a body delimited by a [`Framing`] from bytes as they arrive.
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
}

impl Decoder {
    /// A decoder for a body with this framing.
    pub(crate) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size,
            Framing::Eof => State::Eof,
        };
        Self { state }
    }

    /// Whether the whole body has been decoded.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Body bytes still expected, when known.
    pub(crate) fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The connection reached EOF: fine for a close-delimited body (which is then
    /// complete), an error for any other body not yet complete.
    pub(crate) fn eof(&mut self) -> Result<(), &'static str> {
        match self.state {
            State::Done => Ok(()),
            State::Eof => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err("the replica closed the connection before the end of the body"),
        }
    }

    /// Takes the next piece of body off the front of `buf`.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, &'static str> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::Done),
                State::Length(n) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let (data, left) = split_upto(buf, n);
                    self.state = if left == 0 {
                        State::Done
                    } else {
                        State::Length(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::Eof => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    return Ok(Decoded::Data(buf.split().freeze()));
                }
                State::Size => {
                    let Some(nl) = memchr::memchr(b'\n', &buf[..buf.len().min(MAX_CHUNK_LINE)])
                    else {
                        if buf.len() >= MAX_CHUNK_LINE {
                            return Err("chunk-size line too long");
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    let line = &buf[..nl];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let size = parse_chunk_size(line).ok_or("malformed chunk-size line")?;
                    let _ = buf.split_to(nl + 1);
                    self.state = if size == 0 {
                        State::Trailers(0)
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(n) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let (data, left) = split_upto(buf, n);
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::DataEnd => match &buf[..] {
                    [] | [b'\r'] => return Ok(Decoded::NeedMore),
                    [b'\r', b'\n', ..] => {
                        let _ = buf.split_to(2);
                        self.state = State::Size;
                    }
                    [b'\n', ..] => {
                        let _ = buf.split_to(1);
                        self.state = State::Size;
                    }
                    _ => return Err("chunk data not followed by CRLF"),
                },
                State::Trailers(seen) => {
                    let Some(nl) = memchr::memchr(b'\n', buf) else {
                        if seen + buf.len() > MAX_TRAILERS {
                            return Err("trailers larger than 16 KiB");
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    let line = &buf[..nl];
                    let empty = line.is_empty() || line == b"\r";
                    if seen + nl + 1 > MAX_TRAILERS {
                        return Err("trailers larger than 16 KiB");
                    }
                    let _ = buf.split_to(nl + 1);
                    self.state = if empty {
                        State::Done
                    } else {
                        State::Trailers(seen + nl + 1)
                    };
                }
            }
        }
    }
}

/// The hex size at the start of a chunk-size line (extensions after `;` ignored).
/// Takes at most `n` bytes off the front of `buf`; returns them and how many of the `n`
/// are still to come.
fn split_upto(buf: &mut BytesMut, n: u64) -> (Bytes, u64) {
    let take = usize::try_from(n).unwrap_or(usize::MAX).min(buf.len());
    (buf.split_to(take).freeze(), n - take as u64)
}

fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let rest = line[digits..].trim_ascii_start();
    if !(rest.is_empty() || rest[0] == b';') {
        return None;
    }
    line[..digits].iter().try_fold(0u64, |n, d| {
        let v = (*d as char).to_digit(16)?;
        Some(n * 16 + u64::from(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head(s: &str) -> Result<Option<Head>, &'static str> {
        parse_head(&mut BytesMut::from(s.as_bytes()), &mut Vec::new())
    }

    fn head_lines(s: &str) -> (Head, String) {
        let mut lines = Vec::new();
        let h = parse_head(&mut BytesMut::from(s.as_bytes()), &mut lines)
            .unwrap()
            .unwrap();
        (h, String::from_utf8(lines).unwrap())
    }

    fn decode_all(framing: Framing, input: &[u8]) -> Result<(Vec<u8>, bool), &'static str> {
        let mut d = Decoder::new(framing);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => {
                    assert!(!b.is_empty());
                    out.extend_from_slice(&b);
                }
                Decoded::NeedMore => return Ok((out, false)),
                Decoded::Done => return Ok((out, true)),
            }
        }
    }

    #[test]
    fn heads_give_status_framing_and_end_to_end_headers() {
        let (h, lines) = head_lines(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nX-Request-Id: a1\r\nKeep-Alive: timeout=5\r\n\r\nrest",
        );
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.keep_alive && h.sse);
        assert_eq!(
            lines,
            "Content-Type: text/event-stream\r\nX-Request-Id: a1\r\n"
        );

        let (h, lines) = head_lines(
            "HTTP/1.1 503 Busy\r\ncontent-length: 12\r\nconnection: close\r\ncontent-type: application/json\r\n\r\n",
        );
        assert_eq!(h.framing, Framing::Length(12));
        assert!(!h.keep_alive && !h.sse);
        // The gateway writes the framing itself.
        assert_eq!(lines, "content-type: application/json\r\n");

        let h = head("HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.framing, Framing::Eof);
        assert!(!h.keep_alive);
        let h = head("HTTP/1.1 100 Continue\r\n\r\n").unwrap().unwrap();
        assert!(h.status.is_informational());
        assert_eq!(h.framing, Framing::Length(0));

        assert!(head("HTTP/1.1 200 OK\r\nContent-Le").unwrap().is_none());
        assert!(head("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
        assert!(head("SSH-2.0-OpenSSH\r\n\r\n").is_err());
        let many: String = (0..70).map(|i| format!("x-h{i}: v\r\n")).collect();
        assert!(head(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).is_err());
        let big = format!("HTTP/1.1 200 OK\r\nx-big: {}", "a".repeat(MAX_HEAD));
        assert!(head(&big).is_err());
    }

    #[test]
    fn bodies_decode_by_length_chunks_and_eof() {
        assert_eq!(
            decode_all(Framing::Length(5), b"hello, next").unwrap(),
            (b"hello".to_vec(), true)
        );
        assert_eq!(
            decode_all(Framing::Length(9), b"hello").unwrap(),
            (b"hello".to_vec(), false)
        );
        let chunked = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert_eq!(
            decode_all(Framing::Chunked, chunked).unwrap(),
            (b"hello, world".to_vec(), true)
        );
        assert!(decode_all(Framing::Chunked, b"zz\r\n").is_err());
        assert!(decode_all(Framing::Chunked, b"2\r\nabX\r\n").is_err());
        assert!(decode_all(Framing::Chunked, b"ffffffffffffffffff\r\n").is_err());
        let mut d = Decoder::new(Framing::Eof);
        assert_eq!(d.eof(), Ok(()));
        assert!(d.is_done());
        assert!(Decoder::new(Framing::Chunked).eof().is_err());
        assert!(Decoder::new(Framing::Length(3)).eof().is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any bytes: no panic; a parsed head never keeps more than it consumed.
        #[test]
        fn head_parser_takes_any_bytes(prefix in prop::sample::select(vec![&b""[..], b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"]), bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut input = prefix.to_vec();
            input.extend_from_slice(&bytes);
            let mut buf = BytesMut::from(&input[..]);
            let mut lines = Vec::new();
            if let Ok(Some(_)) = parse_head(&mut buf, &mut lines) {
                // Each kept line is a header's name and value plus ": " and CRLF.
                prop_assert!(lines.len() <= input.len() + 4 * MAX_HEADERS);
                prop_assert!(buf.len() < input.len());
                prop_assert!(lines.windows(2).filter(|w| w == b"\r\n").count() <= MAX_HEADERS);
            }
        }

        /// Any bytes under any framing: no panic, never more body than input.
        #[test]
        fn decoder_takes_any_bytes(framing in prop_oneof![Just(Framing::Chunked), Just(Framing::Eof), (0u64..2000).prop_map(Framing::Length)], bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            if let Ok((out, _)) = decode_all(framing, &bytes) {
                prop_assert!(out.len() <= bytes.len());
            }
        }

        /// Chunked data split at any points decodes to what was encoded.
        #[test]
        fn chunked_round_trips_across_any_split(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..50), 0..8), cut in 0usize..500) {
            let mut wire = Vec::new();
            for c in &chunks {
                wire.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                wire.extend_from_slice(c);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let cut = cut.min(wire.len());
            let mut d = Decoder::new(Framing::Chunked);
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut out = Vec::new();
            let mut fed = false;
            loop {
                match d.decode(&mut buf).unwrap() {
                    Decoded::Data(b) => out.extend_from_slice(&b),
                    Decoded::NeedMore => {
                        prop_assert!(!fed);
                        buf.extend_from_slice(&wire[cut..]);
                        fed = true;
                    }
                    Decoded::Done => break,
                }
            }
            prop_assert_eq!(out, chunks.concat());
            prop_assert!(buf.is_empty());
        }
    }
}
