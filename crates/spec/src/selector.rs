//! Label selectors in Kubernetes' grammar: which objects a list or a bulk action takes, by
//! their `metadata.labels`. The text arrives in HTTP query strings, so it is untrusted:
//! anything malformed is an error naming the requirement and the fix, never a panic.
//!
//! ```text
//! selector    := requirement ("," requirement)*     (empty: every object)
//! requirement := KEY | "!" KEY
//!              | KEY ("=" | "==" | "!=") VALUE       (VALUE may be empty)
//!              | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"
//! ```
//!
//! Whitespace between tokens is ignored. Keys and values follow the label rules of
//! `metadata.labels`. As in Kubernetes, `!=` and `notin` also match an object without the key.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use crate::error::SelectorError;
use crate::meta::{validate_label_key, validate_label_value};

/// A parsed label selector: an object matches when every requirement holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One comma-separated condition on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// What a requirement asks of its key's value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    /// `key=v` or `key==v`.
    Equals(String),
    /// `key!=v`: a different value, or no such key.
    NotEquals(String),
    /// `key in (a,b)`.
    In(BTreeSet<String>),
    /// `key notin (a,b)`: another value, or no such key.
    NotIn(BTreeSet<String>),
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
}

/// How every requirement may be written, for the end of error messages.
const FORMS: &str = "write key=value, key!=value, key in (v1,v2), key notin (v1,v2), key or !key";
/// How a value list is written.
const SET_FORM: &str = "write key in (v1,v2)";

impl LabelSelector {
    /// Parses Kubernetes' selector syntax (`team=nlp,tier in (gold,silver),!draft`); an empty
    /// or blank text selects everything.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        Parser {
            text,
            tokens: lex(text).peekable(),
            requirement: 0,
        }
        .selector()
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector has no requirement, so selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Equals(want) => value == Some(want),
            Op::NotEquals(want) => value != Some(want),
            Op::In(set) => value.is_some_and(|v| set.contains(v)),
            Op::NotIn(set) => !value.is_some_and(|v| set.contains(v)),
        }
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(text)
    }
}

/// The canonical text: requirements in their order, `=` for equality, value lists sorted.
/// It parses back to an equal selector.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let key = &r.key;
            match &r.op {
                Op::Exists => write!(f, "{key}")?,
                Op::DoesNotExist => write!(f, "!{key}")?,
                Op::Equals(v) => write!(f, "{key}={v}")?,
                Op::NotEquals(v) => write!(f, "{key}!={v}")?,
                Op::In(set) => write!(f, "{key} in ({})", join(set))?,
                Op::NotIn(set) => write!(f, "{key} notin ({})", join(set))?,
            }
        }
        Ok(())
    }
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().map(String::as_str).collect::<Vec<_>>().join(",")
}

/// A token of selector text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    /// A run of characters that are not whitespace nor `!=,()`: a key, a value, `in`, `notin`.
    Word(&'a str),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Comma,
    Open,
    Close,
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Token::Word(w) => return write!(f, "{w:?}"),
            Token::Bang => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Comma => ",",
            Token::Open => "(",
            Token::Close => ")",
        };
        write!(f, "\"{text}\"")
    }
}

fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, '!' | '=' | ',' | '(' | ')')
}

/// Splits selector text into tokens; `!=` and `==` only when written without a space.
fn lex(text: &str) -> impl Iterator<Item = Token<'_>> {
    let mut rest = text;
    std::iter::from_fn(move || {
        rest = rest.trim_start();
        let mut chars = rest.chars();
        let first = chars.next()?;
        let second = chars.next();
        let (token, len) = match (first, second) {
            ('!', Some('=')) => (Token::NotEquals, 2),
            ('=', Some('=')) => (Token::DoubleEquals, 2),
            ('!', _) => (Token::Bang, 1),
            ('=', _) => (Token::Equals, 1),
            (',', _) => (Token::Comma, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            _ => {
                let end = rest.find(is_special).unwrap_or(rest.len());
                (Token::Word(&rest[..end]), end)
            }
        };
        rest = &rest[len..];
        Some(token)
    })
}

/// A recursive-descent parser over the tokens, counting requirements for its messages.
struct Parser<'a, I: Iterator<Item = Token<'a>>> {
    text: &'a str,
    tokens: std::iter::Peekable<I>,
    /// The requirement being parsed, from 1.
    requirement: usize,
}

impl<'a, I: Iterator<Item = Token<'a>>> Parser<'a, I> {
    fn selector(mut self) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        if self.tokens.peek().is_none() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            self.requirement += 1;
            requirements.push(self.requirement()?);
            match self.tokens.next() {
                None => return Ok(LabelSelector { requirements }),
                Some(Token::Comma) => {}
                Some(other) => {
                    return Err(self.error(format!(
                        "continues with {other} after a complete requirement; separate \
                         requirements with ','"
                    )));
                }
            }
        }
    }

    /// One requirement, up to (not including) the `,` or the end that closes it.
    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let key = match self.tokens.next() {
            None | Some(Token::Comma) => {
                return Err(self.error("is empty; remove the extra ','".into()));
            }
            Some(Token::Bang) => {
                let key = match self.tokens.next() {
                    Some(Token::Word(key)) => self.key(key)?,
                    _ => return Err(self.error("has no key after \"!\"; write !key".into())),
                };
                return match self.tokens.peek().copied() {
                    None | Some(Token::Comma) => Ok(Requirement {
                        key,
                        op: Op::DoesNotExist,
                    }),
                    Some(other) => Err(self.error(format!(
                        "(!{key}) continues with {other}, but \"!\" only says the key is absent; \
                         write !key alone, or key!=value"
                    ))),
                };
            }
            Some(Token::Word(key)) => self.key(key)?,
            Some(other) => {
                return Err(self.error(format!("has no key before {other}; {FORMS}")));
            }
        };
        let op = match self.tokens.peek().copied() {
            None | Some(Token::Comma) => Op::Exists,
            Some(Token::Equals | Token::DoubleEquals) => {
                self.tokens.next();
                Op::Equals(self.exact_value()?)
            }
            Some(Token::NotEquals) => {
                self.tokens.next();
                Op::NotEquals(self.exact_value()?)
            }
            Some(Token::Word("in")) => {
                self.tokens.next();
                Op::In(self.value_set("in")?)
            }
            Some(Token::Word("notin")) => {
                self.tokens.next();
                Op::NotIn(self.value_set("notin")?)
            }
            Some(other) => {
                return Err(self.error(format!(
                    "has no operator after key {key:?} (got {other}); {FORMS}"
                )));
            }
        };
        Ok(Requirement { key, op })
    }

    /// The value after `=`, `==` or `!=`: empty when the requirement ends there.
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        match self.tokens.peek().copied() {
            None | Some(Token::Comma) => Ok(String::new()),
            Some(Token::Word(value)) => {
                self.tokens.next();
                self.value(value)
            }
            Some(other) => Err(self.error(format!(
                "has {other} where a value belongs; write key=value"
            ))),
        }
    }

    /// `(v1,v2,…)` after `in` or `notin`. As in Kubernetes, an empty item is the empty value.
    fn value_set(&mut self, op: &str) -> Result<BTreeSet<String>, SelectorError> {
        if self.tokens.next() != Some(Token::Open) {
            return Err(self.error(format!(
                "needs a value list in parentheses after {op}; {SET_FORM}"
            )));
        }
        let mut values = BTreeSet::new();
        // True right after "(" or ",": a value may come; a "," or ")" there adds "".
        let mut expecting = true;
        loop {
            match self.tokens.next() {
                None => return Err(self.error(format!("has no closing \")\"; {SET_FORM}"))),
                Some(Token::Close) => {
                    if expecting {
                        values.insert(String::new());
                    }
                    return Ok(values);
                }
                Some(Token::Comma) => {
                    if expecting {
                        values.insert(String::new());
                    }
                    expecting = true;
                }
                Some(Token::Word(value)) if expecting => {
                    values.insert(self.value(value)?);
                    expecting = false;
                }
                Some(Token::Word(value)) => {
                    return Err(self.error(format!(
                        "has {value:?} where \",\" or \")\" belongs; {SET_FORM}"
                    )));
                }
                Some(other) => {
                    return Err(
                        self.error(format!("has {other} inside its value list; {SET_FORM}"))
                    );
                }
            }
        }
    }

    fn key(&self, key: &str) -> Result<String, SelectorError> {
        validate_label_key(key)
            .map_err(|why| self.error(format!("has an invalid key {key:?}: {why}")))?;
        Ok(key.to_owned())
    }

    fn value(&self, value: &str) -> Result<String, SelectorError> {
        validate_label_value(value)
            .map_err(|why| self.error(format!("has an invalid value {value:?}: {why}")))?;
        Ok(value.to_owned())
    }

    fn error(&self, problem: String) -> SelectorError {
        const SHOWN: usize = 100;
        let mut selector = format!("{:?}", self.text.chars().take(SHOWN).collect::<String>());
        if self.text.chars().nth(SHOWN).is_some() {
            selector.push('…');
        }
        SelectorError {
            selector,
            requirement: self.requirement,
            problem,
        }
    }
}

#[cfg(test)]
mod tests;
