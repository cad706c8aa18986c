//! Fuzz target: label selectors arrive in HTTP query strings, so any text must parse or be
//! refused without a panic, and a parsed selector's printed form must parse back to it.
#![no_main]

use ferry_spec::LabelSelector;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(selector) = LabelSelector::parse(&text) {
        let printed = selector.to_string();
        assert_eq!(
            LabelSelector::parse(&printed).as_ref(),
            Ok(&selector),
            "{text:?} printed as {printed:?}"
        );
    }
});
