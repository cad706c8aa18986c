//! Labels end to end: `ferry get -l` and `--show-labels`, and jobs cancelled, resumed and
//! deleted by selector, against a real `ferry up`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{OutputText, Plane};

/// A command job sleeping in its one rank, with `labels` (YAML flow mapping entries).
fn sleeper(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec:\n  engine: command\n  command: [sleep, '60']\n  onFailure: {{graceSeconds: 2}}\n"
    )
}

#[test]
fn jobs_are_listed_and_cancelled_by_label() {
    let plane = Plane::start(None);
    let jobs = [
        sleeper("nlp-gold", "team: nlp, tier: gold"),
        sleeper("nlp-bronze", "team: nlp, tier: bronze"),
        sleeper("vision", "team: vision, draft: 'yes'"),
        sleeper("plain", ""),
    ];
    plane.apply("jobs.yaml", &jobs.join("---\n"));
    for name in ["nlp-gold", "nlp-bronze", "vision", "plain"] {
        plane.wait_phase(name, "Running", Duration::from_secs(60));
    }
    let selected = |selector: &str| -> Vec<Value> {
        serde_json::from_str(&plane.ok(&["get", "jobs", "-l", selector, "-o", "json"])).unwrap()
    };
    let names = |selector: &str| -> Vec<String> {
        selected(selector)
            .iter()
            .map(|j| j["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names("team=nlp"), ["nlp-gold", "nlp-bronze"]);
    assert_eq!(
        names("team in (vision, nlp)"),
        ["nlp-gold", "nlp-bronze", "vision"]
    );
    assert_eq!(names("team!=nlp"), ["vision", "plain"]);
    assert_eq!(names("!draft"), ["nlp-gold", "nlp-bronze", "plain"]);
    assert_eq!(names("team=nlp,tier notin (gold)"), ["nlp-bronze"]);
    let gold = selected("tier=gold");
    assert_eq!(gold.len(), 1, "{gold:?}");
    assert_eq!(gold[0]["kind"], "TrainJob");
    assert_eq!(
        gold[0]["metadata"]["labels"],
        json!({"team": "nlp", "tier": "gold"})
    );
    assert_eq!(gold[0]["status"]["phase"], "Running");

    let table = plane.ok(&["get", "jobs", "--show-labels"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME ") && lines[0].ends_with(" LABELS"),
        "{table}"
    );
    let row = |name: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}: {table}"))
    };
    assert!(row("nlp-gold").ends_with(" team=nlp,tier=gold"), "{table}");
    assert!(row("vision").ends_with(" draft=yes,team=vision"), "{table}");
    assert!(row("plain").ends_with(" -"), "{table}");
    assert!(
        !plane.ok(&["get", "jobs"]).contains("LABELS"),
        "labels only when asked"
    );

    let bad = plane.ferry(&["get", "jobs", "-l", "team in (nlp"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        bad.stderr_text(),
        "error: label selector \"team in (nlp\": requirement 1 has no closing \")\"; write key \
         in (v1,v2)\n"
    );
    let both = plane.ferry(&["get", "job", "plain", "-l", "team=nlp"]);
    assert_eq!(both.status.code(), Some(1));
    assert!(
        both.stderr_text().contains("give a name or -l, not both"),
        "{}",
        both.stderr_text()
    );

    // Exactly the selected jobs are cancelled; the others keep running.
    let out = plane.ok(&["cancel", "jobs", "-l", "team=nlp"]);
    assert_eq!(
        out,
        "trainjob/nlp-gold cancelled\ntrainjob/nlp-bronze cancelled\n"
    );
    for (name, phase) in [
        ("nlp-gold", "Cancelled"),
        ("nlp-bronze", "Cancelled"),
        ("vision", "Running"),
        ("plain", "Running"),
    ] {
        assert_eq!(plane.job(name)["status"]["phase"], phase, "{name}");
    }
    let none = plane.ferry(&["cancel", "-l", "team=speech"]);
    assert!(none.status.success(), "{}", none.stderr_text());
    assert_eq!(
        none.stdout_text(),
        "no jobs match \"team=speech\" in namespace default\n"
    );
    // What has nothing to do is skipped, not an error.
    let out = plane.ok(&["resume", "-l", "team=nlp"]);
    assert_eq!(
        out,
        "trainjob/nlp-gold skipped: not suspended (Cancelled)\n\
         trainjob/nlp-bronze skipped: not suspended (Cancelled)\n"
    );
    let out = plane.ok(&["cancel", "-A", "-l", "!nope"]);
    assert_eq!(
        out,
        "trainjob/nlp-gold (namespace default) skipped: already finished (Cancelled)\n\
         trainjob/nlp-bronze (namespace default) skipped: already finished (Cancelled)\n\
         trainjob/vision (namespace default) cancelled\n\
         trainjob/plain (namespace default) cancelled\n"
    );
    let out = plane.ok(&["delete", "jobs", "-l", "team"]);
    assert_eq!(
        out,
        "trainjob/nlp-gold deleted\ntrainjob/nlp-bronze deleted\ntrainjob/vision deleted\n"
    );
    assert_eq!(names(""), ["plain"]);
}

/// `ferry suspend -l` stops exactly the selected running jobs; `ferry resume -l` queues them
/// again (at once, or once their ranks have exited), and skips what is not suspended.
#[test]
fn jobs_are_suspended_and_resumed_by_label() {
    let plane = Plane::start(None);
    let jobs = [
        sleeper("a", "sweep: lr"),
        sleeper("b", "sweep: lr"),
        sleeper("c", "sweep: bs"),
    ];
    plane.apply("jobs.yaml", &jobs.join("---\n"));
    for name in ["a", "b", "c"] {
        plane.wait_phase(name, "Running", Duration::from_secs(60));
    }
    let out = plane.ok(&["suspend", "-l", "sweep=lr"]);
    assert_eq!(out, "trainjob/a suspended\ntrainjob/b suspended\n");
    assert_eq!(plane.job("c")["status"]["phase"], "Running");

    // Taken at once: queued now, or once the ranks have exited.
    let resumed = plane.ok(&["resume", "-l", "sweep=lr"]);
    for (line, name) in resumed.lines().zip(["a", "b"]) {
        assert!(
            line == format!("trainjob/{name} queued")
                || line
                    == format!(
                        "trainjob/{name} resume requested: queued once its ranks have exited"
                    ),
            "{resumed}"
        );
    }
    assert_eq!(resumed.lines().count(), 2, "{resumed}");
    for name in ["a", "b"] {
        plane.wait_phase(name, "Running", Duration::from_secs(60));
    }
    assert_eq!(
        plane.ok(&["resume", "-l", "sweep"]),
        "trainjob/a skipped: not suspended (Running)\n\
         trainjob/b skipped: not suspended (Running)\n\
         trainjob/c skipped: not suspended (Running)\n"
    );
    plane.ok(&["cancel", "-l", "sweep"]);
}
