//! One pass over a request body for the few fields the gateway needs (`model`,
//! `max_tokens` / `max_completion_tokens`, and the prompt's leading text for
//! prefix routing), validating that the whole body is JSON on the way. It is a
//! plain byte scanner: no serde field machinery, no tree of values, strings
//! borrowed from the body unless they hold escapes, nesting capped at
//! [`MAX_DEPTH`], and it never panics on any input (see the proptests).

use std::borrow::Cow;

/// Deepest nesting of arrays and objects accepted (serde_json's default too).
const MAX_DEPTH: usize = 128;

/// Why a body is not a JSON object with a string `model`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PeekError(pub String);

type Res<T> = Result<T, PeekError>;

/// What the gateway reads from a request body; everything else passes untouched.
#[derive(Debug)]
pub(crate) struct Peek<'a> {
    /// The requested model (or adapter).
    pub model: Cow<'a, str>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    /// The leading characters of the prompt (for hashing).
    pub prefix: String,
    /// All the prompt's text, in bytes (for the token estimate).
    pub prompt_bytes: usize,
}

impl Peek<'_> {
    /// The completion budget the client asked for, if any.
    pub(crate) fn max_tokens(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }
}

/// Appends `s` while `out` is shorter than `limit`: at most the room left, counted
/// in characters.
fn append(out: &mut String, s: &str, limit: usize) {
    if out.len() >= limit {
        return;
    }
    let room = limit - out.len();
    let cut = if s.len() <= room {
        s.len()
    } else {
        s.char_indices().nth(room).map_or(s.len(), |(i, _)| i)
    };
    out.push_str(&s[..cut]);
}

/// Text gathered from one field.
#[derive(Default)]
struct Acc {
    text: String,
    total: usize,
}

impl Acc {
    fn add(&mut self, s: &str, limit: usize) {
        self.total += s.len();
        append(&mut self.text, s, limit);
    }
}

/// A JSON string as found in the body.
struct Raw<'a> {
    /// Between the quotes, escapes not decoded.
    text: &'a str,
    escaped: bool,
}

/// Bytes that end a run of plain string contents: a quote, a backslash, or a
/// control character (not allowed raw in a JSON string).
const STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

struct Scanner<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    limit: usize,
}

/// Reads `model`, the token budget and the prompt prefix (up to `prefix_limit`
/// characters: the text of `messages[].content`, then `prompt`, then `input`)
/// from a JSON object. Errors name the byte offset.
pub(crate) fn peek(body: &[u8], prefix_limit: usize) -> Result<Peek<'_>, PeekError> {
    let s = std::str::from_utf8(body).map_err(|e| {
        PeekError(format!(
            "not UTF-8 at byte {}; send JSON as UTF-8",
            e.valid_up_to()
        ))
    })?;
    let mut sc = Scanner {
        s,
        b: body,
        i: 0,
        limit: prefix_limit,
    };
    sc.ws();
    if sc.peek_byte() != Some(b'{') {
        return Err(sc.err("expected a JSON object"));
    }
    sc.i += 1;
    let mut model: Option<Cow<'_, str>> = None;
    let (mut max_tokens, mut max_completion_tokens) = (None, None);
    let (mut msgs, mut prompt, mut input) = (Acc::default(), Acc::default(), Acc::default());
    let mut seen = 0u8;
    sc.ws();
    if sc.peek_byte() == Some(b'}') {
        sc.i += 1;
    } else {
        loop {
            sc.ws();
            let key = sc.string()?;
            sc.ws();
            sc.expect(b':')?;
            sc.ws();
            let key = if key.escaped {
                Cow::Owned(unescape(key.text).map_err(|e| sc.err(e))?)
            } else {
                Cow::Borrowed(key.text)
            };
            let bit = match &*key {
                "model" => 1,
                "max_tokens" => 2,
                "max_completion_tokens" => 4,
                "messages" => 8,
                "prompt" => 16,
                "input" => 32,
                _ => 0,
            };
            if bit != 0 {
                if seen & bit != 0 {
                    return Err(sc.err(&format!("duplicate field `{key}`")));
                }
                seen |= bit;
            }
            match bit {
                1 => {
                    if sc.peek_byte() != Some(b'"') {
                        return Err(sc.err("`model` must be a string"));
                    }
                    let raw = sc.string()?;
                    model = Some(if raw.escaped {
                        Cow::Owned(unescape(raw.text).map_err(|e| sc.err(e))?)
                    } else {
                        Cow::Borrowed(raw.text)
                    });
                }
                2 => max_tokens = sc.count()?,
                4 => max_completion_tokens = sc.count()?,
                8 => sc.messages(&mut msgs)?,
                16 => sc.text(&mut prompt, 1)?,
                32 => sc.text(&mut input, 1)?,
                _ => sc.skip(1)?,
            }
            sc.ws();
            match sc.peek_byte() {
                Some(b',') => sc.i += 1,
                Some(b'}') => {
                    sc.i += 1;
                    break;
                }
                _ => return Err(sc.err("expected `,` or `}`")),
            }
        }
    }
    sc.ws();
    if sc.i != sc.b.len() {
        return Err(sc.err("trailing characters after the JSON object"));
    }
    let model = model.ok_or_else(|| PeekError("missing field `model`".to_owned()))?;
    let mut prefix = msgs.text;
    append(&mut prefix, &prompt.text, prefix_limit);
    append(&mut prefix, &input.text, prefix_limit);
    Ok(Peek {
        model,
        max_tokens,
        max_completion_tokens,
        prefix,
        prompt_bytes: msgs.total + prompt.total + input.total,
    })
}

impl<'a> Scanner<'a> {
    #[cold]
    #[inline(never)]
    fn err(&self, what: &str) -> PeekError {
        PeekError(format!("{what} at byte {}", self.i))
    }

    #[inline]
    fn peek_byte(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek_byte() {
            self.i += 1;
        }
    }

    #[inline]
    fn expect(&mut self, c: u8) -> Res<()> {
        if self.peek_byte() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.expected(c))
        }
    }

    #[cold]
    #[inline(never)]
    fn expected(&self, c: u8) -> PeekError {
        self.err(&format!("expected `{}`", c as char))
    }

    /// A string starting at the cursor (escapes checked, not decoded).
    fn string(&mut self) -> Res<Raw<'a>> {
        self.expect(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            // One table lookup per byte: strings in requests are short, where a
            // vectorised search costs more to set up than it saves.
            let rest = &self.b[self.i..];
            let Some(at) = rest.iter().position(|c| STOP[usize::from(*c)]) else {
                return Err(self.err("unterminated string"));
            };
            self.i += at;
            match rest[at] {
                b'"' => {
                    // Both ends are ASCII quotes, so the slice is on char boundaries.
                    let text = self.s.get(start..self.i).unwrap_or_default();
                    self.i += 1;
                    return Ok(Raw { text, escaped });
                }
                b'\\' => {}
                _ => return Err(self.err("control character in string")),
            }
            escaped = true;
            match self.b.get(self.i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 2,
                Some(b'u') => {
                    let hex = self.b.get(self.i + 2..self.i + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        return Err(self.err("invalid \\u escape"));
                    }
                    self.i += 6;
                }
                _ => return Err(self.err("invalid escape")),
            }
        }
    }

    /// A non-negative integer's value; any other valid value gives `None`.
    fn count(&mut self) -> Res<Option<u64>> {
        match self.peek_byte() {
            Some(b'0'..=b'9') => {
                let start = self.i;
                self.number()?;
                let digits = &self.b[start..self.i];
                if !digits.iter().all(u8::is_ascii_digit) {
                    return Ok(None);
                }
                Ok(digits.iter().try_fold(0u64, |n, d| {
                    n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                }))
            }
            _ => self.skip(1).map(|()| None),
        }
    }

    fn number(&mut self) -> Res<()> {
        let digits = |sc: &mut Self| {
            let start = sc.i;
            while sc.peek_byte().is_some_and(|c| c.is_ascii_digit()) {
                sc.i += 1;
            }
            sc.i > start
        };
        if self.peek_byte() == Some(b'-') {
            self.i += 1;
        }
        match self.peek_byte() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek_byte() == Some(b'.') {
            self.i += 1;
            if !digits(self) {
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.peek_byte() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek_byte() {
                self.i += 1;
            }
            if !digits(self) {
                return Err(self.err("invalid number"));
            }
        }
        Ok(())
    }

    fn literal(&mut self, lit: &[u8]) -> Res<()> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(self.err("expected a JSON value"))
        }
    }

    fn enter(&self, depth: usize) -> Res<()> {
        if depth > MAX_DEPTH {
            Err(self.err("nested more than 128 levels"))
        } else {
            Ok(())
        }
    }

    /// Walks the members of an object (cursor on `{`), handing each value to `f`
    /// with the member's key.
    fn object(&mut self, depth: usize, f: &mut dyn FnMut(&mut Self, &str) -> Res<()>) -> Res<()> {
        self.enter(depth)?;
        self.expect(b'{')?;
        self.ws();
        if self.peek_byte() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let key = self.string()?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            if key.escaped {
                let k = unescape(key.text).map_err(|e| self.err(e))?;
                f(self, &k)?;
            } else {
                f(self, key.text)?;
            }
            self.ws();
            match self.peek_byte() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    /// Walks the elements of an array (cursor on `[`), handing each to `f`.
    fn array(&mut self, depth: usize, f: &mut dyn FnMut(&mut Self) -> Res<()>) -> Res<()> {
        self.enter(depth)?;
        self.expect(b'[')?;
        self.ws();
        if self.peek_byte() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            f(self)?;
            self.ws();
            match self.peek_byte() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected `,` or `]`")),
            }
        }
    }

    /// Checks and passes over one value.
    fn skip(&mut self, depth: usize) -> Res<()> {
        match self.peek_byte() {
            Some(b'{') => self.object(depth, &mut |sc, _| sc.skip(depth + 1)),
            Some(b'[') => self.array(depth, &mut |sc| sc.skip(depth + 1)),
            Some(b'"') => self.string().map(|_| ()),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.err("expected a JSON value")),
        }
    }

    /// A prompt-like value: a string, a list (of strings, token ids or content
    /// parts, nested), or a content part (`{"type": "text", "text": …}`); its text
    /// goes to `acc`.
    fn text(&mut self, acc: &mut Acc, depth: usize) -> Res<()> {
        let limit = self.limit;
        match self.peek_byte() {
            Some(b'"') => {
                let raw = self.string()?;
                if raw.escaped {
                    let s = unescape(raw.text).map_err(|e| self.err(e))?;
                    acc.add(&s, limit);
                } else {
                    acc.add(raw.text, limit);
                }
                Ok(())
            }
            Some(b'[') => self.array(depth, &mut |sc| sc.text(acc, depth + 1)),
            Some(b'{') => self.object(depth, &mut |sc, k| {
                if k == "text" {
                    sc.text(acc, depth + 1)
                } else {
                    sc.skip(depth + 1)
                }
            }),
            _ => self.skip(depth),
        }
    }

    /// `messages`: the text of each message's `content`.
    fn messages(&mut self, acc: &mut Acc) -> Res<()> {
        if self.peek_byte() != Some(b'[') {
            return self.skip(1);
        }
        self.array(1, &mut |sc| {
            if sc.peek_byte() != Some(b'{') {
                return sc.skip(2);
            }
            sc.object(2, &mut |sc, k| {
                if k == "content" {
                    sc.text(acc, 3)
                } else {
                    sc.skip(3)
                }
            })
        })
    }
}

/// Decodes the escapes of a JSON string's contents (already checked by
/// [`Scanner::string`]).
fn unescape(raw: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let b = rest.as_bytes();
        let (c, used) = match b.get(at + 1) {
            Some(b'"') => ('"', 2),
            Some(b'\\') => ('\\', 2),
            Some(b'/') => ('/', 2),
            Some(b'b') => ('\u{8}', 2),
            Some(b'f') => ('\u{c}', 2),
            Some(b'n') => ('\n', 2),
            Some(b'r') => ('\r', 2),
            Some(b't') => ('\t', 2),
            Some(b'u') => {
                let hi = hex4(rest.get(at + 2..at + 6)).ok_or("invalid \\u escape")?;
                if (0xD800..0xDC00).contains(&hi) {
                    let lo = match rest.get(at + 6..at + 8) {
                        Some("\\u") => hex4(rest.get(at + 8..at + 12)),
                        _ => None,
                    }
                    .filter(|lo| (0xDC00..0xE000).contains(lo))
                    .ok_or("lone surrogate in \\u escape")?;
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    (char::from_u32(c).ok_or("invalid \\u escape")?, 12)
                } else {
                    (char::from_u32(hi).ok_or("lone surrogate in \\u escape")?, 6)
                }
            }
            _ => return Err("invalid escape"),
        };
        out.push(c);
        rest = rest.get(at + used..).ok_or("invalid escape")?;
    }
    out.push_str(rest);
    Ok(out)
}

fn hex4(s: Option<&str>) -> Option<u32> {
    let s = s?;
    if s.len() != 4 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_model_budget_and_prompt_prefix() {
        let p = peek(
            br#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Tell \"me\"\n"},{"type":"image_url","image_url":{"url":"x"}}]}],"model":"llama","max_tokens":32,"stream":true,"seed":-1.5e3}"#,
            256,
        )
        .unwrap();
        assert_eq!(p.model, "llama");
        assert_eq!(p.max_tokens(), Some(32));
        assert_eq!(p.prefix, "Be brief.Tell \"me\"\n");
        assert_eq!(p.prompt_bytes, 19);

        let p = peek(
            br#" {"model":"a\u00e9b","prompt":["ab\ud83d\ude00",[1,2,"cd"]],"max_completion_tokens":7,"max_tokens":9} "#,
            4,
        )
        .unwrap();
        assert_eq!(p.model, "a\u{e9}b");
        assert_eq!(p.max_tokens(), Some(7));
        // Stops once 4 bytes are in, even inside the list.
        assert_eq!(p.prefix, "ab\u{1f600}");
        assert_eq!(p.prompt_bytes, 8);

        let p = peek(br#"{"model":"m","input":"x","max_tokens":1.5}"#, 8).unwrap();
        assert_eq!(p.max_tokens(), None);
        assert_eq!(p.prefix, "x");
    }

    #[test]
    fn refuses_what_is_not_a_json_object_with_a_model() {
        for bad in [
            &br#"{"model": "m", "#[..],
            b"[1,2]",
            br#"{"messages":[]}"#,
            br#"{"model":1}"#,
            br#"{"model":"m","model":"n"}"#,
            br#"{"model":"m"} x"#,
            br#"{"model":"m","x":tru}"#,
            br#"{"model":"m","x":01}"#,
            br#"{"model":"m","x":"\q"}"#,
            br#"{"model":"\ud800"}"#,
            b"{\"model\":\"m\",\"x\":\"a\x01\"}",
            b"{\"model\":\"\xff\"}",
            b"",
        ] {
            assert!(peek(bad, 16).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let deep = format!(
            r#"{{"model":"m","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(peek(deep.as_bytes(), 16).unwrap_err().0.contains("nested"));
        let ok = format!(
            r#"{{"model":"m","x":{}{}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(peek(ok.as_bytes(), 16).is_ok());
    }

    /// Arbitrary JSON values, to check agreement with serde_json.
    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map("(model|text|content|[a-z]{1,6})", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any bytes: no panic, and nothing returned is larger than the input
        /// justifies.
        #[test]
        fn takes_any_bytes(prefix in prop::sample::select(vec![&b""[..], b"{\"model\":\"m\",", b"{\"messages\":[{\"content\":"]), bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let mut input = prefix.to_vec();
            input.extend_from_slice(&bytes);
            if let Ok(p) = peek(&input, 16) {
                prop_assert!(p.model.len() <= input.len());
                prop_assert!(p.prefix.chars().count() <= 16);
                prop_assert!(p.prompt_bytes <= input.len());
            }
        }

        /// Valid JSON objects: accepted exactly when serde_json finds a string
        /// `model`, and the same model comes out.
        #[test]
        fn agrees_with_serde_json(v in json(), model in prop::option::of(".{0,8}")) {
            let mut v = match v {
                serde_json::Value::Object(m) => serde_json::Value::Object(m),
                other => serde_json::json!({"x": other}),
            };
            if let Some(m) = &model {
                v["model"] = serde_json::Value::from(m.clone());
            }
            let text = serde_json::to_vec(&v).unwrap();
            let got = peek(&text, 16);
            match v.get("model").and_then(serde_json::Value::as_str) {
                Some(m) => prop_assert_eq!(got.map(|p| p.model.into_owned()), Ok(m.to_owned())),
                None => prop_assert!(got.is_err()),
            }
        }
    }
}
