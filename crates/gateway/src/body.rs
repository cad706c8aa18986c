//! Response bodies: a fixed buffer (gateway answers) or a replica's body streamed
//! through frame by frame, observed on the way (TTFT, inter-token gaps, `usage`),
//! cut by the idle timeout, and accounted for when it ends or the client leaves.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use memchr::memmem;

use crate::error::Error;
use crate::metrics::RequestLabels;
use crate::proxy::Shared;
use crate::registry::{InFlightGuard, Replica};
use crate::tenancy::Tenant;
use crate::upstream::UpstreamBody;

/// What the gateway sends to clients.
#[derive(Debug)]
pub(crate) enum GwBody {
    /// A complete body (errors, `/v1/models`, `/metrics`).
    Full(Bytes),
    /// A replica's body passed through.
    Proxy(Box<ProxyBody>),
}

impl From<Bytes> for GwBody {
    fn from(b: Bytes) -> Self {
        GwBody::Full(b)
    }
}

impl From<String> for GwBody {
    fn from(s: String) -> Self {
        GwBody::Full(Bytes::from(s))
    }
}

/// Largest non-streamed body kept for reading `usage`, and largest partial SSE event.
const KEEP_LIMIT: usize = 4 * 1024 * 1024;

/// Most bytes merged from frames already received into one write to the client.
const COALESCE_LIMIT: usize = 64 * 1024;

/// Everything known about one proxied request, settled once when it ends.
#[derive(Debug)]
pub(crate) struct Observer {
    pub sh: Arc<Shared>,
    pub replica: Arc<Replica>,
    /// The replica's in-flight count; released as soon as its body has ended
    /// (before the last bytes reach the client, so the next request routes on
    /// the replica's real load).
    pub guard: Option<InFlightGuard>,
    pub tenant: Arc<Tenant>,
    pub model: String,
    pub path: &'static str,
    pub status: u16,
    pub attempts: u32,
    pub arrival: Instant,
    pub estimated_tokens: u64,
    pub estimated_prompt: u64,
    pub sse: bool,
    pub first_text: Option<Instant>,
    pub last_text: Option<Instant>,
    pub gaps: Vec<f32>,
    /// Pieces of text in SSE events (one per event and choice; the token count
    /// when no `usage` comes).
    pub events: u64,
    pub keep: Vec<u8>,
    /// A non-streamed body's first piece, shared rather than copied into `keep`
    /// (most answers arrive as one piece).
    pub first_piece: Option<Bytes>,
    pub overflow: bool,
    pub usage: Option<(u64, u64)>,
    pub outcome: Option<&'static str>,
}

/// Byte frequencies of JSON answers: memchr's default table (from prose and
/// code) ranks `"` and `:` as rare, so its prefilter would pick them out of
/// `"content":"` and stop at every key of every event. Here JSON's punctuation
/// and digits are the most common bytes, then lower-case letters in English
/// frequency order (measured: the SSE observer's searches cost about a third of
/// a streamed request's instructions with the default table).
#[derive(Debug, Clone, Copy)]
struct JsonRank;

impl memchr::arch::all::packedpair::HeuristicFrequencyRank for JsonRank {
    fn rank(&self, byte: u8) -> u8 {
        const LETTERS: &[u8; 26] = b"etaoinshrdlcumwfgypbvkjxqz";
        match byte {
            b'"' | b':' | b',' | b'{' | b'}' | b'[' | b']' | b' ' | b'0'..=b'9' => 255,
            b'a'..=b'z' => {
                let at = LETTERS.iter().position(|l| *l == byte).unwrap_or(25);
                250 - 2 * at as u8
            }
            b'A'..=b'Z' => 150,
            b'_' | b'.' | b'-' => 140,
            0..=31 => 60,
            _ => 100,
        }
    }
}

/// A searcher for `needle`, built once (building one per search costs more than
/// searching a small frame).
macro_rules! finder {
    ($name:ident, $needle:expr) => {
        static $name: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
            memmem::FinderBuilder::new().build_forward_with_ranker(JsonRank, $needle)
        });
    };
}
macro_rules! finder_rev {
    ($name:ident, $needle:expr) => {
        static $name: LazyLock<memmem::FinderRev<'static>> =
            LazyLock::new(|| memmem::FinderRev::new($needle));
    };
}
// `"content":"` and `"text":"` share their last four bytes: one search finds both.
finder!(TEXT_KEY_END, b"t\":\"");
finder!(EVENT_END, b"\n\n");
finder_rev!(EVENT_END_REV, b"\n\n");
finder!(USAGE, b"\"usage\"");
finder!(PROMPT_TOKENS, b"\"prompt_tokens\"");
finder!(COMPLETION_TOKENS, b"\"completion_tokens\"");

/// Whether a `t":"` found at `pos` ends a `"content":"` or `"text":"` key whose
/// string is not empty.
fn text_at(frame: &[u8], pos: usize) -> bool {
    let key = frame[..pos].ends_with(b"\"conten") || frame[..pos].ends_with(b"\"tex");
    key && frame.get(pos + 4).is_some_and(|b| *b != b'"')
}

/// How many `"content":"…` / `"text":"…` with non-empty text `frame` holds.
fn text_count(frame: &[u8]) -> u64 {
    TEXT_KEY_END
        .find_iter(frame)
        .filter(|pos| text_at(frame, *pos))
        .count() as u64
}

fn has_text(frame: &[u8]) -> bool {
    TEXT_KEY_END.find_iter(frame).any(|pos| text_at(frame, pos))
}

/// `(prompt_tokens, completion_tokens)` of the last `"usage": {...}` object in a
/// JSON body, read without parsing the rest of the body (the choices can be
/// large). A quoted key can only be matched outside strings: inside one, its
/// quotes would be escaped. None when there is no usage object or neither count.
fn usage_in(body: &[u8]) -> Option<(u64, u64)> {
    // A forward vectorised search (the last hit wins) is far cheaper than a
    // reverse two-way search on the sizes seen here.
    let at = USAGE.find_iter(body).last()?;
    let rest = body[at + 7..].trim_ascii_start().strip_prefix(b":")?;
    let obj = rest.trim_ascii_start().strip_prefix(b"{")?;
    // The counts sit near the top of the object; 1 KiB is plenty.
    let obj = &obj[..obj.len().min(1024)];
    let prompt = count_after(obj, &PROMPT_TOKENS);
    let completion = count_after(obj, &COMPLETION_TOKENS);
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    Some((prompt.unwrap_or(0), completion.unwrap_or(0)))
}

/// The unsigned integer after `key` and a colon, if any (at most 19 digits).
fn count_after(obj: &[u8], key: &memmem::Finder<'static>) -> Option<u64> {
    let at = key.find(obj)?;
    let rest = obj[at + key.needle().len()..]
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    rest[..digits].iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

impl Observer {
    fn on_data(&mut self, data: &Bytes) {
        if data.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.sse {
            // Whole events (the usual frame): the event scan says whether any
            // carried text; a partial event is searched on its own.
            let text = if self.keep.is_empty() && data.ends_with(b"\n\n") {
                let before = self.events;
                self.scan_events(data);
                self.events > before
            } else {
                let text = has_text(data);
                self.scan_partial(data);
                text
            };
            if text {
                match self.last_text {
                    None => self.first_text = Some(now),
                    Some(prev) => self.gaps.push((now - prev).as_secs_f32()),
                }
                self.last_text = Some(now);
            }
        } else {
            if self.first_text.is_none() {
                self.first_text = Some(now);
            }
            if !self.overflow {
                let held = self.first_piece.as_ref().map_or(0, Bytes::len);
                if held + self.keep.len() + data.len() > KEEP_LIMIT {
                    self.overflow = true;
                    self.first_piece = None;
                    self.keep = Vec::new();
                } else if held == 0 && self.keep.is_empty() {
                    self.first_piece = Some(data.clone());
                } else {
                    if let Some(first) = self.first_piece.take() {
                        self.keep.extend_from_slice(&first);
                    }
                    self.keep.extend_from_slice(data);
                }
            }
        }
    }

    /// Data that does not end on an event boundary: kept until its events are whole.
    fn scan_partial(&mut self, data: &[u8]) {
        if self.keep.len() + data.len() > KEEP_LIMIT {
            self.keep.clear();
            return;
        }
        self.keep.extend_from_slice(data);
        if let Some(end) = EVENT_END_REV.rfind(&self.keep) {
            let complete: Vec<u8> = self.keep.drain(..end + 2).collect();
            self.scan_events(&complete);
        }
    }

    fn scan_events(&mut self, events: &[u8]) {
        // One pass per key over the whole frame rather than a search per event:
        // every `"content":"…` / `"text":"…` with text counts (one per event, or
        // one per choice when an event carries several).
        self.events += text_count(events);
        let Some(at) = USAGE.find_iter(events).last() else {
            return;
        };
        let end = EVENT_END
            .find(&events[at..])
            .map_or(events.len(), |p| at + p);
        if let Some(u) = usage_in(&events[at..end]) {
            self.usage = Some(u);
        }
    }

    fn finish_body(&mut self) {
        if !self.sse && !self.overflow {
            let found = match self.first_piece.take() {
                Some(first) => usage_in(&first),
                None if !self.keep.is_empty() => usage_in(&self.keep),
                None => None,
            };
            if found.is_some() {
                self.usage = found;
            }
            self.keep = Vec::new();
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or("client_gone");
        let code = if outcome == "client_gone" {
            499
        } else {
            self.status
        };
        let m = &self.sh.metrics;
        let h = self
            .replica
            .route_handles(m, &self.model, &self.tenant.team);
        if code == 200 {
            h.ok.inc();
        } else {
            m.requests
                .get_or_create(&RequestLabels {
                    model: self.model.clone(),
                    replica: self.replica.id().to_owned(),
                    team: self.tenant.team.clone(),
                    code: code.to_string(),
                })
                .inc();
        }
        let e2e = self.arrival.elapsed();
        h.e2e.observe(e2e.as_secs_f64());
        if let Some(t) = self.first_text {
            h.ttft.observe((t - self.arrival).as_secs_f64());
        }
        for g in &self.gaps {
            h.itl.observe(f64::from(*g));
        }
        let (prompt, completion) = match self.usage {
            Some(u) => u,
            None => (
                self.estimated_prompt,
                // No `usage` in the stream: one token per event carrying text.
                if self.sse { self.events } else { 0 },
            ),
        };
        h.prompt_tokens.inc_by(prompt);
        h.completion_tokens.inc_by(completion);
        self.tenant
            .settle(self.estimated_tokens, prompt + completion);
        tracing::info!(
            target: "ferry_gateway::access",
            path = self.path,
            model = %self.model,
            team = %self.tenant.team,
            replica = %self.replica.id(),
            status = code,
            outcome,
            attempts = self.attempts,
            ttft_ms = self.first_text.map(|t| (t - self.arrival).as_secs_f64() * 1e3),
            e2e_ms = e2e.as_secs_f64() * 1e3,
            prompt_tokens = prompt,
            completion_tokens = completion,
            stream = self.sse,
            "request"
        );
    }
}

/// A replica's response body on its way to the client.
#[derive(Debug)]
pub(crate) struct ProxyBody {
    inner: Option<UpstreamBody>,
    /// The worker lane whose pool the connection returns to once the body ends
    /// (None: close it).
    lane: Option<usize>,
    idle: Duration,
    /// Armed the first time the replica makes us wait (most small answers never do).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    obs: Observer,
    done: bool,
}

impl ProxyBody {
    pub(crate) fn new(
        inner: UpstreamBody,
        lane: Option<usize>,
        idle: Duration,
        obs: Observer,
    ) -> Self {
        Self {
            inner: Some(inner),
            lane,
            idle,
            sleep: None,
            obs,
            done: false,
        }
    }

    /// Ends a broken stream: an SSE error event for streams (what vLLM does; the
    /// status line already went out), an aborted body otherwise.
    fn fail(&mut self, kind: &'static str, message: String) -> Poll<Option<Result<Bytes, String>>> {
        self.inner = None;
        self.obs.outcome = Some(kind);
        self.obs.sh.metrics.failure(self.obs.replica.id(), kind);
        self.obs.replica.record_failure(kind);
        self.obs.finish_body();
        if self.obs.sse {
            let err = Error::Upstream {
                model: self.obs.model.clone(),
                attempts: self.obs.attempts,
                last: message,
            };
            let mut event = b"data: ".to_vec();
            event.extend_from_slice(&err.body());
            event.extend_from_slice(b"\n\ndata: [DONE]\n\n");
            self.done = true;
            return Poll::Ready(Some(Ok(Bytes::from(event))));
        }
        self.done = true;
        Poll::Ready(Some(Err(message)))
    }

    /// The replica's body ended normally.
    fn complete(&mut self) {
        if let Some(mut inner) = self.inner.take()
            && let Some(lane) = self.lane
        {
            inner.recycle(&self.obs.replica, lane);
        }
        self.done = true;
        self.obs.guard = None;
        self.obs.finish_body();
        self.obs.outcome = Some("completed");
        if self.obs.status < 500 {
            self.obs.replica.record_success();
        }
    }

    /// Whether the body has ended (no more pieces will come).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Body bytes still to come, when the replica said how many.
    pub(crate) fn remaining(&self) -> Option<u64> {
        self.inner.as_ref().and_then(UpstreamBody::remaining)
    }

    /// The replica's end-to-end header lines (valid until the first piece is polled).
    pub(crate) fn head_lines(&self) -> &[u8] {
        self.inner.as_ref().map_or(&[], UpstreamBody::head_lines)
    }

    /// The replica that answers.
    pub(crate) fn replica(&self) -> &Replica {
        &self.obs.replica
    }

    /// The next piece of body for the client: everything the replica already
    /// delivered, in one buffer. `Err`: the body broke off (the client's answer
    /// must be cut short). `None` at the end.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, String>>> {
        let this = self;
        if this.done {
            return Poll::Ready(None);
        }
        let Some(inner) = this.inner.as_mut() else {
            this.done = true;
            return Poll::Ready(None);
        };
        let obs = &mut this.obs;
        // Everything the replica has already delivered goes out in one write, so a
        // burst of small SSE events costs one write instead of one each.
        let polled = inner.poll_data(cx, COALESCE_LIMIT, &mut |piece| obs.on_data(piece));
        match polled {
            Poll::Ready(Some(Ok(data))) => {
                if inner.is_end_stream() {
                    // Settle now: the connection goes back to its pool before the
                    // last bytes are written to the client.
                    this.complete();
                } else if let Some(sleep) = this.sleep.as_mut() {
                    sleep
                        .as_mut()
                        .reset(tokio::time::Instant::now() + this.idle);
                }
                Poll::Ready(Some(Ok(data)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.fail("body", format!("the replica's response broke off: {e}"))
            }
            Poll::Ready(None) => {
                this.complete();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let idle = this.idle;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if sleep.as_mut().poll(cx).is_ready() {
                    return this.fail(
                        "idle_timeout",
                        format!("the replica sent nothing for {idle:?} (idle timeout)"),
                    );
                }
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{has_text, text_count, usage_in};

    #[test]
    fn text_pieces_are_counted_by_key_and_non_empty_value() {
        let events = br#"data: {"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant","content":""}}]}

data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":" a"}},{"delta":{"content":"b"}}]}

data: {"object":"text_completion","choices":[{"text":" c","context":"x","subtext":"y"}]}

data: {"choices":[{"delta":{"content":"say \"content\":\"z\""}}]}

"#;
        assert_eq!(text_count(events), 4);
        assert!(has_text(br#"{"text":"x"}"#));
        assert!(!has_text(br#"{"text":"","object":"a","context":"b"}"#));
        assert!(!has_text(br#"t":"x"#));
    }

    #[test]
    fn usage_is_read_from_the_last_usage_object_only() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"say \"usage\": {\"prompt_tokens\": 9}"}}],"usage": {"prompt_tokens": 12, "prompt_tokens_details": {"cached_tokens": 3}, "completion_tokens":7,"total_tokens":19}}"#;
        assert_eq!(usage_in(body), Some((12, 7)));
        assert_eq!(
            usage_in(br#"{"usage":{"completion_tokens":5}}"#),
            Some((0, 5))
        );
        assert_eq!(usage_in(br#"{"usage":null}"#), None);
        assert_eq!(usage_in(br#"{"usage":{}}"#), None);
        assert_eq!(usage_in(br#"{"choices":[]}"#), None);
        // Absurd counts are refused rather than wrapped.
        assert_eq!(
            usage_in(br#"{"usage":{"prompt_tokens":99999999999999999999999}}"#),
            None
        );
        // Truncated input never panics.
        for cut in 0..40 {
            let b = br#"{"usage":{"prompt_tokens":12,"completion_tokens":7}}"#;
            let _ = usage_in(&b[..cut]);
        }
    }
}
