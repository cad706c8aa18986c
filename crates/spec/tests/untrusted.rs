//! Documents arrive from users' files and from HTTP bodies (`ferry apply`, `POST /api/v1/...`):
//! whatever the text, parsing ends in a resource or in an error that names where the problem is,
//! never a panic; and a resource Ferry accepted reads back as itself, so what the store keeps
//! and the API returns means what was applied. The `cargo fuzz` target `documents` in
//! `crates/spec/fuzz` runs the same checks on raw bytes.

use std::path::Path;

use ferry_spec::{
    ClusterPriorityClasses, CohortSpec, LocalQueue, MAX_PRIORITY_VALUE, QueueObjects, QueueSpec,
    Resource, SpecError, parse_documents, parse_metrics_line, parse_value, read_kueue_queues,
    read_priority_classes, read_resource_quotas, read_volcano_queues, validate_name,
};
use proptest::prelude::*;
use serde_json::{Map, Value};

#[path = "support/sound.rs"]
mod sound;
use sound::{queue_sound, tree_sound};

/// Every document of every example file, as the JSON values parsing starts from.
fn example_documents() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples/") {
        let path = entry.expect("an example").path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            let text = std::fs::read_to_string(&path).expect("readable example");
            let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).expect("example is YAML");
            docs.extend(parsed.into_iter().filter(|d| !d.is_null()));
        }
    }
    assert!(docs.len() >= 5, "only {} example documents", docs.len());
    docs
}

/// An accepted resource read back from its JSON form, and from the YAML `ferry get -o yaml`
/// prints, is the same resource: the defaults filled in and the shorthands expanded are a
/// fixed point, and what Ferry prints can be applied again.
fn reads_back(resource: &Resource) -> Result<(), TestCaseError> {
    match parse_value(resource.to_value(), "read back") {
        Ok(again) => prop_assert_eq!(&again, resource),
        Err(e) => prop_assert!(false, "{resource:?} was accepted, then refused: {e}"),
    }
    let yaml = serde_saphyr::to_string(&resource.to_value()).expect("a resource prints as YAML");
    match parse_documents(&yaml, "printed.yaml") {
        Ok(again) => prop_assert_eq!(again.as_slice(), std::slice::from_ref(resource)),
        Err(e) => prop_assert!(false, "printed as\n{yaml}\nthen refused: {e}"),
    }
    Ok(())
}

/// An error says which input it is about and, for an invalid document, every problem has a
/// message; a problem's path is plain field names joined by dots, `[i]` indices and quoted
/// `["odd.key"]`s, or empty for the whole document.
fn well_formed(error: &SpecError, source: &str) -> Result<(), TestCaseError> {
    let text = error.to_string();
    prop_assert!(
        text.starts_with(source),
        "{text:?} does not name {source:?}"
    );
    if let SpecError::Invalid { problems, .. } = error {
        prop_assert!(
            !problems.is_empty(),
            "an invalid document with no problem: {text}"
        );
        for p in problems {
            prop_assert!(
                !p.message.trim().is_empty(),
                "a problem without a message: {text}"
            );
            prop_assert!(
                is_field_path(&p.path),
                "path {:?} is not a field path ({text})",
                p.path
            );
        }
    }
    Ok(())
}

/// Whether `path` reads as one field: plain names joined by dots, each followed by any number
/// of `[index]` or `["quoted key"]` (a path may also start with a quoted key).
fn is_field_path(path: &str) -> bool {
    let mut rest = path;
    let mut at_start = true;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let len = if r.starts_with('"') {
                // Debug quoting escapes `"` and `\`: the key ends at the first bare `"`.
                let mut chars = r.char_indices().skip(1);
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        _ => {}
                    }
                }
                end
            } else {
                r.find(']')
                    .filter(|&e| e > 0 && r[..e].bytes().all(|b| b.is_ascii_digit()))
            };
            match len {
                Some(n) if r[n..].starts_with(']') => rest = &r[n + 1..],
                _ => return false,
            }
        } else {
            let r = if at_start {
                rest
            } else if let Some(r) = rest.strip_prefix('.') {
                r
            } else {
                return false;
            };
            let n = r.find(['.', '[']).unwrap_or(r.len());
            let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            if n == 0 || !r[..n].chars().all(plain) {
                return false;
            }
            rest = &r[n..];
        }
        at_start = false;
    }
    true
}

/// Pieces of YAML and JSON that exercise the parser's corners: anchors and aliases, merge keys,
/// tags, flow collections, block scalars, quoting, odd numbers and the document separators.
const PIECES: &[&str] = &[
    "apiVersion: ferry.dev/v1alpha1\n",
    "kind: TrainJob\n",
    "kind: Queue\n",
    "kind: Sweep\n",
    "kind: ModelDeployment\n",
    "kind: PriorityClass\n",
    "metadata:\n  name: a\n",
    "metadata: {name: b, labels: {team: x}}\n",
    "spec:\n",
    "  engine: builtin\n",
    "  resources:\n    gpus: 2\n",
    "  resources: {gpus: -1, nodes: 2, gpusPerNode: 1e999}\n",
    "  queue: team-a\n",
    "  template: &t\n",
    "  grid:\n    spec.hyperparameters.lr: [0.1, 0.2]\n",
    "  nominalQuota: [{flavor: H100-80GB, gpus: 8}]\n",
    "  <<: *t\n",
    "  x: *t\n",
    "&a [*a]\n",
    "!!binary aGVsbG8=\n",
    "!custom {a: 1}\n",
    "? complex key\n: v\n",
    "- \n",
    "- [1, {a: [2, {b: 3}]}]\n",
    "{\"kind\": \"TrainJob\", \"spec\": {}}",
    "[{\"apiVersion\": \"ferry.dev/v1\"}, 3]",
    "|\n  block\n  text\n",
    ">-\n folded\n",
    "\"\\u0000\\uD800\"\n",
    "'it''s'\n",
    "0x7fffffffffffffff\n",
    "-0.0\n",
    ".nan\n",
    "~\n",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "# comment\n",
    "\t",
    "  ",
    ": ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "é",
    "\u{feff}",
];

/// Every example file's text.
fn example_texts() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|e| e.expect("an example").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .map(|p| std::fs::read_to_string(p).expect("readable example"))
        .collect();
    texts.sort();
    texts
}

/// Text made of the pieces above and of stray characters, or an example file with a few of
/// them spliced in or a few spans cut out.
fn yamlish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => proptest::sample::select(PIECES).prop_map(str::to_owned),
        1 => "[ -~\n]{0,12}",
        1 => any::<char>().prop_map(String::from),
    ];
    let made = proptest::collection::vec(piece.clone(), 0..24).prop_map(|pieces| pieces.concat());
    let edit = (
        any::<prop::sample::Index>(),
        0usize..24,
        prop::option::of(piece),
    );
    let spliced = (
        proptest::sample::select(example_texts()),
        proptest::collection::vec(edit, 0..4),
    )
        .prop_map(|(mut text, edits)| {
            for (at, cut, insert) in edits {
                let bounds: Vec<usize> = text.char_indices().map(|c| c.0).collect();
                let start = bounds[at.index(bounds.len())];
                let end = bounds
                    .get(bounds.partition_point(|&b| b < start) + cut)
                    .copied();
                text.replace_range(start..end.unwrap_or(text.len()).max(start), "");
                if let Some(piece) = insert {
                    text.insert_str(start, &piece);
                }
            }
            text
        });
    prop_oneof![made, spliced]
}

/// One change to a JSON document, applied at the `index`-th node in document order.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the node with another value.
    Replace(Value),
    /// Remove the node from its parent.
    Remove,
    /// Add a key (an object) or an element (an array) to the node.
    Insert(String, Value),
    /// Keep the node's type, change its value: a number becomes this one, a string gets it
    /// appended or is cut to its length, a boolean flips.
    Nudge(i64),
}

/// Scalars and small collections of every JSON type, including the ones validation must
/// catch: negative and huge numbers, floats where integers go, empty and odd strings.
fn any_value() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(-1i64),
            Just(0),
            Just(1),
            Just(8),
            Just(i64::from(i32::MAX) + 1)
        ]
        .prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-zA-Z0-9./:_-]{0,12}".prop_map(Value::String),
        Just(Value::String("auto".into())),
        any::<String>().prop_map(Value::String),
    ];
    scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::vec(("[a-zA-Z]{1,10}", inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn mutation() -> impl Strategy<Value = (usize, Mutation)> {
    let m = prop_oneof![
        3 => any_value().prop_map(Mutation::Replace),
        1 => Just(Mutation::Remove),
        2 => ("[a-zA-Z]{1,12}", any_value()).prop_map(|(k, v)| Mutation::Insert(k, v)),
        4 => prop_oneof![-2i64..=10, Just(1 << 31), Just(i64::MAX)].prop_map(Mutation::Nudge),
    ];
    (any::<usize>(), m)
}

/// Applies `m` to the node `index` modulo the number of nodes (the root is node 0 and is
/// never removed).
fn apply(doc: &mut Value, index: usize, m: &Mutation) {
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(items) => items.iter().map(count).sum(),
            Value::Object(map) => map.values().map(count).sum(),
            _ => 0,
        }
    }
    /// Walks to node `target` (counting `v` itself as node 0) and changes it; `Remove` is
    /// done by the parent, which reports the child's removal through the return value.
    fn walk(v: &mut Value, target: &mut usize, m: &Mutation) -> bool {
        if *target == 0 {
            match m {
                Mutation::Replace(new) => *v = new.clone(),
                Mutation::Remove => return true,
                Mutation::Insert(key, new) => match v {
                    Value::Object(map) => {
                        map.insert(key.clone(), new.clone());
                    }
                    Value::Array(items) => items.push(new.clone()),
                    other => *other = new.clone(),
                },
                Mutation::Nudge(n) => match v {
                    Value::Number(_) => *v = Value::from(*n),
                    Value::Bool(b) => *b = !*b,
                    Value::String(text) if *n < 0 => text.push_str(&n.to_string()),
                    Value::String(text) => {
                        let keep = text
                            .char_indices()
                            .nth(*n as usize)
                            .map_or(text.len(), |c| c.0);
                        text.truncate(keep);
                    }
                    _ => {}
                },
            }
            return false;
        }
        *target -= 1;
        match v {
            Value::Array(items) => {
                for i in 0..items.len() {
                    let n = count(&items[i]);
                    if *target < n {
                        if walk(&mut items[i], target, m) {
                            items.remove(i);
                        }
                        return false;
                    }
                    *target -= n;
                }
            }
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    let n = count(&map[&k]);
                    if *target < n {
                        if walk(map.get_mut(&k).expect("key just listed"), target, m) {
                            map.shift_remove(&k);
                        }
                        return false;
                    }
                    *target -= n;
                }
            }
            _ => {}
        }
        false
    }
    let mut target = index % count(doc);
    if target == 0 && matches!(m, Mutation::Remove) {
        return;
    }
    walk(doc, &mut target, m);
}

/// The seeds of the fuzz target `queue_objects` (`crates/spec/fuzz/corpus/queue_objects`: Kueue
/// objects, ResourceQuotas, Volcano Queues, Ferry Queue and Cohort documents in seeds named
/// `*ferry*`, and priority classes in seeds named `*priority_classes*`), by name.
fn queue_object_seeds() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/queue_objects");
    let mut seeds: Vec<(String, String)> = std::fs::read_dir(&root)
        .expect("the queue objects seed corpus")
        .map(|e| {
            let path = e.expect("a seed").path();
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read_to_string(&path).expect("a text seed"))
        })
        .collect();
    seeds.sort();
    seeds
}

/// Queues by name, cohorts of a cohort tree by name, and the LocalQueues that lead to queues.
type ReadQueues = (
    Vec<(String, QueueSpec)>,
    Vec<(String, CohortSpec)>,
    Vec<LocalQueue>,
);

/// Reads `text` as `ferry sim --queues` picks its reader: Kueue objects, ResourceQuotas or
/// Volcano Queues and the cohorts of their tree (these on a 176-GPU cluster).
fn read_queue_objects(text: &str, source: &str) -> Result<ReadQueues, SpecError> {
    match QueueObjects::of(text) {
        Some(QueueObjects::Kueue) => {
            let read = read_kueue_queues(text, source)?;
            Ok((read.cluster_queues, read.cohorts, read.local_queues))
        }
        Some(QueueObjects::Volcano) => {
            let read = read_volcano_queues(text, source)?;
            Ok((read.queue_specs(176), read.cohort_specs(176), Vec::new()))
        }
        // ResourceQuotas, and whatever is neither, which that reader refuses.
        _ => Ok((
            read_resource_quotas(text, source)?.queues,
            Vec::new(),
            Vec::new(),
        )),
    }
}

/// What a seed is read into.
#[derive(Debug)]
enum Read {
    /// Queues, as `ferry sim --queues` reads them.
    Queues(ReadQueues),
    /// Priority classes, as `ferry up --priority-classes` reads them.
    Classes(ClusterPriorityClasses),
    /// Ferry documents, as `ferry apply` and `ferry sim --queues` read Queues and Cohorts.
    Ferry(Vec<Resource>),
}

/// Reads `text` as the command its seed (named `seed`) is for: priority classes for seeds named
/// `*priority_classes*`, Ferry documents for seeds named `*ferry*`, else queues.
fn read_seed(seed: &str, text: &str, source: &str) -> Result<Read, SpecError> {
    if seed.contains("priority_classes") {
        read_priority_classes(text, source).map(Read::Classes)
    } else if seed.contains("ferry") {
        parse_documents(text, source).map(Read::Ferry)
    } else {
        read_queue_objects(text, source).map(Read::Queues)
    }
}

/// What was read holds the rules its command relies on.
fn read_sound(read: &Read) -> Result<(), TestCaseError> {
    match read {
        Read::Queues(queues) => queues_sound(queues),
        Read::Classes(classes) => classes_sound(classes),
        Read::Ferry(resources) => ferry_sound(resources),
    }
}

/// Ferry Queues and Cohorts as accepted: quotas the scheduler takes, and each Cohort a valid
/// node of a tree on its own (a loop across documents is the scheduler's to refuse).
fn ferry_sound(resources: &[Resource]) -> Result<(), TestCaseError> {
    for r in resources {
        match r {
            Resource::Queue(q) => {
                let name = q.metadata.name.clone();
                queues_sound(&(vec![(name, q.spec.clone())], Vec::new(), Vec::new()))?;
            }
            Resource::Cohort(c) => {
                let name = c.metadata.name.as_str();
                prop_assert!(c.spec.parent.as_deref() != Some(name), "{c:?}");
                prop_assert!(
                    c.spec
                        .parent
                        .as_deref()
                        .is_none_or(|p| validate_name(p).is_ok()),
                    "{c:?}"
                );
                tree_sound([(name, &c.spec)]).map_err(TestCaseError::fail)?;
            }
            _ => {}
        }
        reads_back(r)?;
    }
    Ok(())
}

/// What the class reader hands `ferry up`: some class, each once, with a Ferry name that is not
/// a system class's and a value in the user range; the global default one of them.
fn classes_sound(read: &ClusterPriorityClasses) -> Result<(), TestCaseError> {
    prop_assert!(!read.classes.is_empty());
    let mut names = std::collections::BTreeSet::new();
    for c in &read.classes {
        prop_assert!(validate_name(&c.name).is_ok(), "{c:?}");
        prop_assert!(!c.name.starts_with("system-"), "{c:?}");
        prop_assert!(c.value.abs() <= MAX_PRIORITY_VALUE, "{c:?}");
        prop_assert!(names.insert(c.name.as_str()), "{} twice", c.name);
    }
    if let Some(default) = &read.global_default {
        prop_assert!(names.contains(default.as_str()), "{default}");
    }
    Ok(())
}

/// What the readers hand the scheduler holds its rules: whole GPU quotas, lending within
/// nominal, a positive weight, LocalQueues that lead to a queue of the file.
fn queues_sound((queues, cohorts, locals): &ReadQueues) -> Result<(), TestCaseError> {
    prop_assert!(!queues.is_empty());
    for (name, spec) in queues {
        queue_sound(name, spec).map_err(TestCaseError::fail)?;
    }
    for l in locals {
        prop_assert!(queues.iter().any(|(n, _)| *n == l.cluster_queue), "{l:?}");
    }
    tree_sound(cohorts.iter().map(|(n, c)| (n.as_str(), c))).map_err(TestCaseError::fail)
}

/// A refused file of queue objects is named, and every problem says something.
fn queue_objects_refusal(error: &SpecError, source: &str) -> Result<(), TestCaseError> {
    prop_assert!(error.to_string().starts_with(source), "{error}");
    if let SpecError::Invalid { problems, .. } = error {
        prop_assert!(
            !problems.is_empty() && problems.iter().all(|p| !p.message.is_empty()),
            "{error}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any text is parsed or refused with an error naming the input; what is accepted reads
    /// back as itself.
    #[test]
    fn any_text_is_parsed_or_refused(text in yamlish()) {
        match parse_documents(&text, "input.yaml") {
            Ok(resources) => {
                prop_assert!(!resources.is_empty());
                for r in &resources {
                    reads_back(r)?;
                }
            }
            Err(e) => well_formed(&e, "input.yaml")?,
        }
    }

    /// A job's log line (bytes a user's process wrote) is a metrics object with an integer
    /// `step` taken from its first `{`, or nothing; a valid object after any prefix is found.
    #[test]
    fn any_log_line_is_metrics_or_nothing(
        prefix in proptest::collection::vec(any::<u8>(), 0..64),
        step in any::<i64>(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        if let Some(v) = parse_metrics_line(&[prefix.as_slice(), &tail].concat()) {
            prop_assert!(v["step"].is_i64(), "{v}");
        }
        let prefix: Vec<u8> = prefix.into_iter().filter(|&b| b != b'{').collect();
        let line = [prefix.as_slice(), format!("{{\"step\": {step}, \"loss\": 0.5}}").as_bytes()].concat();
        let v = parse_metrics_line(&line);
        prop_assert_eq!(v.as_ref().and_then(|v| v["step"].as_i64()), Some(step));
    }

    /// An example document changed in one to four places, anywhere in it, is accepted and
    /// reads back as itself, or is refused with every problem placed at a field path; the
    /// same through the YAML and the JSON door.
    #[test]
    fn changed_examples_are_accepted_or_refused_by_field(
        pick in any::<prop::sample::Index>(),
        changes in proptest::collection::vec(mutation(), 1..5),
    ) {
        let docs = example_documents();
        let mut doc = docs[pick.index(docs.len())].clone();
        for (index, m) in &changes {
            apply(&mut doc, *index, m);
        }
        // A list of one, as the API's bodies may be: a bare array would be read as a list.
        let json = serde_json::to_string(&[&doc]).expect("a JSON value prints");
        let doc_was_null = doc.is_null();
        let by_value = parse_value(doc, "changed.yaml");
        let by_text = parse_documents(&json, "changed.yaml");
        match (&by_value, &by_text) {
            (Ok(r), Ok(rs)) => {
                prop_assert_eq!(rs.as_slice(), std::slice::from_ref(r));
                reads_back(r)?;
            }
            (Err(a), Err(b)) => {
                well_formed(a, "changed.yaml")?;
                well_formed(b, "changed.yaml")?;
                // A null document is skipped as an empty one (`---` twice), so a list of only
                // that is an empty file; any other document gets the same problems both ways.
                if !doc_was_null {
                    prop_assert_eq!(a.problems(), b.problems());
                }
            }
            _ => prop_assert!(false, "value {by_value:?} but text {by_text:?}"),
        }
    }
}

/// The mutation walker reaches every node, so the property above changes every part of a
/// document over its cases (a walker that only touched the root would pass it vacuously).
#[test]
fn every_node_can_be_changed() {
    let original = serde_json::json!({"a": [1, {"b": 2}], "c": {"d": [3]}});
    // Nodes in document order: root, a, 1, {b}, b=2, c, d, 3.
    let mut changed = Vec::new();
    for index in 0..8 {
        let mut doc = original.clone();
        apply(&mut doc, index, &Mutation::Replace(Value::from("X")));
        assert_ne!(doc, original, "node {index} was not reached");
        changed.push(doc);
    }
    assert_eq!(changed[0], Value::from("X"));
    assert_eq!(
        changed[7],
        serde_json::json!({"a": [1, {"b": 2}], "c": {"d": ["X"]}})
    );
    let mut doc = original.clone();
    apply(&mut doc, 4, &Mutation::Remove);
    assert_eq!(doc, serde_json::json!({"a": [1, {}], "c": {"d": [3]}}));
    let mut doc = original;
    apply(&mut doc, 0, &Mutation::Remove);
    assert_eq!(doc["c"]["d"][0], 3, "the root is never removed");
}

/// The fuzz target's seeds (`crates/spec/fuzz/corpus/documents`, run beside `examples/`) are
/// accepted or refused as their names say; the refused ones are the parser's limits (alias
/// bombs, deep nesting) and the corners fixed after the property above found them.
#[test]
fn the_fuzz_seed_corpus_parses_as_named() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/documents");
    let mut n = 0;
    for entry in std::fs::read_dir(&root).expect("the seed corpus") {
        let path = entry.expect("a seed").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).expect("a text seed");
        match parse_documents(&text, &name) {
            Ok(resources) if name.starts_with("ok_") => {
                for r in &resources {
                    reads_back(r).unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
            Err(e) if name.starts_with("err_") => {
                well_formed(&e, &name).unwrap_or_else(|f| panic!("{name}: {f}"));
            }
            other => panic!("{name}: {other:?}"),
        }
        n += 1;
    }
    assert!(n >= 6, "seeds under {}", root.display());
}

/// The path check accepts what Ferry prints and refuses what would read as another field.
#[test]
fn field_paths_are_told_apart() {
    for ok in [
        "",
        "spec",
        "spec.quotas[0].nominal",
        r#"metadata.labels["ferry.dev/team"]"#,
        r#"[".apiVersion"]"#,
        r#"spec["a\"]b"][2]"#,
    ] {
        assert!(is_field_path(ok), "{ok}");
    }
    for bad in [
        ".apiVersion",
        "spec..a",
        "spec.",
        "a[x]",
        "a[]",
        r#"a["b]"#,
        "a b",
    ] {
        assert!(!is_field_path(bad), "{bad}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A seed of Kueue objects, ResourceQuotas, Volcano Queues or priority classes changed in
    /// one to four places is read into sound queues or classes or refused with its problems
    /// listed, never a panic (`ferry sim --queues` and `ferry up --priority-classes` read
    /// clusters' exports).
    #[test]
    fn changed_queue_objects_are_read_or_refused(
        pick in any::<prop::sample::Index>(),
        changes in proptest::collection::vec(mutation(), 1..5),
    ) {
        let seeds = queue_object_seeds();
        let (name, text) = &seeds[pick.index(seeds.len())];
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("a seed is YAML or JSON");
        let mut doc = Value::Array(docs);
        for (index, m) in &changes {
            apply(&mut doc, *index, m);
        }
        match read_seed(name, &doc.to_string(), "changed.json") {
            Ok(read) => read_sound(&read)?,
            Err(e) => queue_objects_refusal(&e, "changed.json")?,
        }
    }
}

/// The queue-object seeds are read or refused as their names say.
#[test]
fn the_queue_objects_seed_corpus_reads_as_named() {
    let seeds = queue_object_seeds();
    assert!(seeds.len() >= 18, "{} seeds", seeds.len());
    for tree in [
        "ok_kueue_cohort_tree",
        "ok_ferry_cohort_tree",
        "ok_volcano_cohort_tree",
    ] {
        assert!(seeds.iter().any(|(n, _)| n == tree), "seed {tree}");
    }
    for (name, text) in seeds {
        match read_seed(&name, &text, &name) {
            Ok(read) if name.starts_with("ok_") => {
                read_sound(&read).unwrap_or_else(|e| panic!("{name}: {e}"));
                // The tree seeds hold a cohort under a parent, so the tree checks bite.
                let under_parent = match &read {
                    Read::Queues((_, cohorts, _)) => {
                        cohorts.iter().any(|(_, c)| c.parent.is_some())
                    }
                    Read::Ferry(docs) => docs
                        .iter()
                        .any(|d| matches!(d, Resource::Cohort(c) if c.spec.parent.is_some())),
                    Read::Classes(_) => false,
                };
                assert_eq!(under_parent, name.contains("cohort_tree"), "{name}");
            }
            Err(e) if name.starts_with("err_") => {
                queue_objects_refusal(&e, &name).unwrap_or_else(|f| panic!("{name}: {f}"))
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
