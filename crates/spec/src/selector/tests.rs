use proptest::prelude::*;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Whether `selector` selects each of: nlp-gold, nlp-bronze, vision-draft, unlabelled.
fn picks(selector: &str) -> [bool; 4] {
    let s = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
    [
        labels(&[("team", "nlp"), ("tier", "gold")]),
        labels(&[("team", "nlp"), ("tier", "bronze")]),
        labels(&[("team", "vision"), ("draft", "")]),
        labels(&[]),
    ]
    .map(|l| s.matches(&l))
}

fn error(selector: &str) -> String {
    match LabelSelector::parse(selector) {
        Ok(s) => panic!("{selector:?} parsed as {s:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn equality_matches_the_value_only() {
    assert_eq!(picks("team=nlp"), [true, true, false, false]);
    assert_eq!(picks("team==nlp"), [true, true, false, false]);
    assert_eq!(picks("team=nlp,tier=gold"), [true, false, false, false]);
}

#[test]
fn inequality_also_matches_objects_without_the_key() {
    assert_eq!(picks("team!=nlp"), [false, false, true, true]);
    assert_eq!(picks("tier!=gold"), [false, true, true, true]);
}

#[test]
fn in_matches_any_listed_value() {
    assert_eq!(picks("team in (nlp,vision)"), [true, true, true, false]);
    assert_eq!(picks("tier in (gold)"), [true, false, false, false]);
}

#[test]
fn notin_also_matches_objects_without_the_key() {
    assert_eq!(picks("team notin (nlp)"), [false, false, true, true]);
    assert_eq!(
        picks("tier notin (gold,bronze)"),
        [false, false, true, true]
    );
}

#[test]
fn a_bare_key_asks_that_it_exists_and_a_bang_that_it_does_not() {
    assert_eq!(picks("draft"), [false, false, true, false]);
    assert_eq!(picks("!draft"), [true, true, false, true]);
    assert_eq!(picks("team,!draft"), [true, true, false, false]);
}

#[test]
fn an_empty_value_is_a_value() {
    assert_eq!(picks("draft="), [false, false, true, false]);
    assert_eq!(picks("draft!="), [true, true, false, true]);
    assert_eq!(picks("draft in ()"), [false, false, true, false]);
    assert_eq!(picks("draft in (,x)"), [false, false, true, false]);
}

#[test]
fn an_empty_selector_selects_everything() {
    for text in ["", "   "] {
        let s = LabelSelector::parse(text).unwrap();
        assert!(s.is_empty());
        assert_eq!(picks(text), [true; 4]);
    }
}

#[test]
fn whitespace_between_tokens_is_ignored() {
    let spaced = LabelSelector::parse(
        "  team = nlp ,tier  in ( gold , silver ),  ! draft, x!= y,\tz notin(a)  ",
    )
    .unwrap();
    let tight =
        LabelSelector::parse("team=nlp,tier in (gold,silver),!draft,x!=y,z notin (a)").unwrap();
    assert_eq!(spaced, tight);
    assert_eq!(
        spaced.to_string(),
        "team=nlp,tier in (gold,silver),!draft,x!=y,z notin (a)"
    );
}

#[test]
fn prefixed_keys_and_the_words_in_and_notin_as_keys() {
    let s = LabelSelector::parse("ferry.dev/sweep=lr,in,notin=in").unwrap();
    assert!(s.matches(&labels(&[
        ("ferry.dev/sweep", "lr"),
        ("in", "x"),
        ("notin", "in")
    ])));
    assert_eq!(s.to_string(), "ferry.dev/sweep=lr,in,notin=in");
}

#[test]
fn display_writes_a_canonical_form_that_parses_back() {
    for (text, canonical) in [
        ("team==nlp", "team=nlp"),
        ("team in (b, a, b)", "team in (a,b)"),
        ("k in (,)", "k in ()"),
        ("k notin (x,)", "k notin (,x)"),
        ("a,!b,c=", "a,!b,c="),
    ] {
        let s = LabelSelector::parse(text).unwrap();
        assert_eq!(s.to_string(), canonical, "{text}");
        assert_eq!(LabelSelector::parse(canonical).unwrap(), s, "{text}");
    }
    assert_eq!("x=1".parse::<LabelSelector>().unwrap().to_string(), "x=1");
}

#[test]
fn errors_name_the_requirement_and_the_fix() {
    let cases = [
        (
            "team in (a,b",
            r#"label selector "team in (a,b": requirement 1 has no closing ")"; write key in (v1,v2)"#,
        ),
        (
            "team=a,",
            r#"label selector "team=a,": requirement 2 is empty; remove the extra ','"#,
        ),
        (
            "team=a,,x",
            r#"label selector "team=a,,x": requirement 2 is empty; remove the extra ','"#,
        ),
        (
            "=nlp",
            r#"label selector "=nlp": requirement 1 has no key before "="; write key=value, key!=value, key in (v1,v2), key notin (v1,v2), key or !key"#,
        ),
        (
            "a,team nlp",
            r#"label selector "a,team nlp": requirement 2 has no operator after key "team" (got "nlp"); write key=value, key!=value, key in (v1,v2), key notin (v1,v2), key or !key"#,
        ),
        (
            "team in nlp",
            r#"label selector "team in nlp": requirement 1 needs a value list in parentheses after in; write key in (v1,v2)"#,
        ),
        (
            "team notin",
            r#"label selector "team notin": requirement 1 needs a value list in parentheses after notin; write key in (v1,v2)"#,
        ),
        (
            "!team=nlp",
            r#"label selector "!team=nlp": requirement 1 (!team) continues with "=", but "!" only says the key is absent; write !key alone, or key!=value"#,
        ),
        (
            "!",
            r#"label selector "!": requirement 1 has no key after "!"; write !key"#,
        ),
        (
            "team=a b",
            r#"label selector "team=a b": requirement 1 continues with "b" after a complete requirement; separate requirements with ','"#,
        ),
        (
            "team in (a b)",
            r#"label selector "team in (a b)": requirement 1 has "b" where "," or ")" belongs; write key in (v1,v2)"#,
        ),
        (
            "team in (a=b)",
            r#"label selector "team in (a=b)": requirement 1 has "=" inside its value list; write key in (v1,v2)"#,
        ),
        (
            "team==(",
            r#"label selector "team==(": requirement 1 has "(" where a value belongs; write key=value"#,
        ),
        (
            "x=1,Team_=a",
            r#"label selector "x=1,Team_=a": requirement 2 has an invalid key "Team_": its name must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit (got "Team_")"#,
        ),
        (
            "team=a/b",
            r#"label selector "team=a/b": requirement 1 has an invalid value "a/b": must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit (got "a/b")"#,
        ),
        (
            "tier>3",
            r#"label selector "tier>3": requirement 1 has an invalid key "tier>3": its name must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit (got "tier>3")"#,
        ),
    ];
    for (text, expect) in cases {
        assert_eq!(error(text), expect, "{text}");
    }
    let err = LabelSelector::parse("a,b,c in (").unwrap_err();
    assert_eq!(err.requirement, 3);
}

#[test]
fn a_long_selector_is_cut_short_and_escaped_in_messages() {
    let text = format!("{}\n=", "k".repeat(300));
    let err = error(&text);
    assert!(
        err.starts_with(&format!("label selector \"{}\"…: ", "k".repeat(100))),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
}

/// Text made mostly of the grammar's own pieces, so random cases reach deep into the parser.
fn selector_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("team".to_owned()),
        Just("a.b/c".to_owned()),
        Just("in".to_owned()),
        Just("notin".to_owned()),
        Just("=".to_owned()),
        Just("==".to_owned()),
        Just("!".to_owned()),
        Just("!=".to_owned()),
        Just(",".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just(" ".to_owned()),
        "[a-zA-Z0-9_.-]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..16).prop_map(|p| p.concat())
}

/// A valid selector, built from its parts.
fn valid_selector() -> impl Strategy<Value = LabelSelector> {
    let key = "([a-z0-9]{1,3}(\\.[a-z0-9]{1,3})?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,3}[A-Za-z0-9])?";
    let value = "([A-Za-z0-9]([A-Za-z0-9_.-]{0,3}[A-Za-z0-9])?)?";
    let set = proptest::collection::btree_set(value, 1..4);
    let op = prop_oneof![
        value.prop_map(Op::Equals),
        value.prop_map(Op::NotEquals),
        set.clone().prop_map(Op::In),
        set.prop_map(Op::NotIn),
        Just(Op::Exists),
        Just(Op::DoesNotExist),
    ];
    proptest::collection::vec((key, op), 0..5).prop_map(|reqs| LabelSelector {
        requirements: reqs
            .into_iter()
            .map(|(key, op)| Requirement { key, op })
            .collect(),
    })
}

proptest! {
    #[test]
    fn parsing_never_panics_and_what_parses_prints_back_the_same(text in selector_like()) {
        if let Ok(selector) = LabelSelector::parse(&text) {
            let printed = selector.to_string();
            prop_assert_eq!(LabelSelector::parse(&printed), Ok(selector), "{:?} → {:?}", text, printed);
        }
    }

    #[test]
    fn every_valid_selector_prints_to_text_that_parses_back(selector in valid_selector()) {
        let printed = selector.to_string();
        prop_assert_eq!(LabelSelector::parse(&printed), Ok(selector), "{}", printed);
    }
}

/// The fuzzer's checked-in seeds: `ok_*` parse and print back to themselves as parsed,
/// `err_*` are refused; none panics.
#[test]
fn the_fuzz_seed_corpus_parses_as_named() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/selector");
    let mut n = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = LabelSelector::parse(&text);
        if name.starts_with("ok_") {
            let s = parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(LabelSelector::parse(&s.to_string()), Ok(s), "{name}");
        } else {
            assert!(name.starts_with("err_") && parsed.is_err(), "{name}");
        }
        n += 1;
    }
    assert!(n >= 9, "seeds under {}", root.display());
}
