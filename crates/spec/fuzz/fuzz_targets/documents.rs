//! Fuzz target: resource documents arrive in HTTP bodies and users' files, so any bytes must
//! parse or be refused without a panic, and an accepted resource must read back as itself from
//! its JSON and from the YAML `ferry get -o yaml` prints (`tests/untrusted.rs` checks the same
//! on generated text in the test suite).
#![no_main]

use ferry_spec::{parse_documents, parse_value};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(resources) = parse_documents(&text, "fuzz.yaml") else {
        return;
    };
    for r in &resources {
        let again = parse_value(r.to_value(), "read back");
        assert_eq!(again.as_ref().ok(), Some(r), "{again:?}");
        let yaml = serde_saphyr::to_string(&r.to_value()).expect("a resource prints as YAML");
        let printed = parse_documents(&yaml, "printed.yaml");
        assert_eq!(
            printed.as_deref().ok(),
            Some(std::slice::from_ref(r)),
            "{yaml}"
        );
    }
});
