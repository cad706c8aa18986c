//! The store test suite, written once against `Arc<dyn Store>` and run twice: on a
//! real SQLite file in a temp dir, and on a real Postgres server named by
//! `FERRY_TEST_POSTGRES_URL` (start one with `eval "$(scripts/postgres-test-server.sh)"`).
//! Each Postgres test gets its own schema so tests run in parallel. With `CI` set and
//! no Postgres URL, the Postgres tests fail instead of skipping.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use ferry_spec::{JobPhase, Resource, TrainJob, parse_documents};
use ferry_store::{JobFilter, ModelRecord, StatusPatch, Store, StoreError};
use serde_json::json;
use sqlx::Connection;

/// A store under test plus what is needed to reopen and clean it up.
struct Fixture {
    /// What [`ferry_store::open`] takes to reach the same data again.
    url: String,
    store: Arc<dyn Store>,
    /// Keeps the SQLite directory alive for the test's duration.
    _dir: Option<tempfile::TempDir>,
    /// Postgres admin URL and the per-test schema to drop at the end.
    schema: Option<(String, String)>,
}

impl Fixture {
    async fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nested").join("ferry.db");
        let url = path.display().to_string();
        let store = ferry_store::open(&url).await.expect("open sqlite store");
        Fixture {
            url,
            store,
            _dir: Some(dir),
            schema: None,
        }
    }

    async fn postgres() -> Option<Fixture> {
        let admin = match std::env::var("FERRY_TEST_POSTGRES_URL") {
            Ok(url) if !url.trim().is_empty() => url,
            _ => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI is set but FERRY_TEST_POSTGRES_URL is not: the Postgres half of the store \
                     suite must run in CI; run `eval \"$(scripts/postgres-test-server.sh)\"` first"
                );
                eprintln!(
                    "FERRY_TEST_POSTGRES_URL is unset: not running the Postgres store suite here \
                     (start one with `eval \"$(scripts/postgres-test-server.sh)\"`)"
                );
                return None;
            }
        };
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("connect to FERRY_TEST_POSTGRES_URL");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut conn)
            .await
            .expect("create test schema");
        conn.close().await.ok();
        let sep = if admin.contains('?') { '&' } else { '?' };
        let url = format!("{admin}{sep}options[search_path]={schema}");
        let store = ferry_store::open(&url).await.expect("open postgres store");
        Some(Fixture {
            url,
            store,
            _dir: None,
            schema: Some((admin, schema)),
        })
    }

    async fn reopen(&self) -> Arc<dyn Store> {
        ferry_store::open(&self.url).await.expect("reopen store")
    }

    async fn finish(self) {
        self.store.close().await;
        if let Some((admin, schema)) = self.schema {
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .expect("reconnect");
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&mut conn)
                .await
                .expect("drop test schema");
        }
    }
}

/// The hello-gang job of the issue, parsed by the real spec parser.
fn job(namespace: &str, name: &str) -> TrainJob {
    let yaml = format!(
        "apiVersion: ferry.dev/v1alpha1\n\
         kind: TrainJob\n\
         metadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  \
           engine: command\n  \
           command: [\"python3\", \"rank.py\"]\n  \
           resources: {{nodes: 2, procsPerNode: 2, gpusPerNode: 0}}\n  \
           onFailure: {{maxRestarts: 2}}\n"
    );
    let mut docs = parse_documents(&yaml, "test.yaml").expect("valid job");
    let Some(Resource::TrainJob(job)) = docs.pop() else {
        panic!("expected one TrainJob from {yaml}");
    };
    job
}

/// The shortest legal path of phases from `Pending` to `target` (inclusive of both).
fn path_to(target: JobPhase) -> Vec<JobPhase> {
    let mut prev: HashMap<JobPhase, JobPhase> = HashMap::new();
    let mut queue = VecDeque::from([JobPhase::Pending]);
    while let Some(p) = queue.pop_front() {
        if p == target {
            break;
        }
        for next in JobPhase::ALL {
            if next != p
                && p.can_become(next)
                && next != JobPhase::Pending
                && !prev.contains_key(&next)
            {
                prev.insert(next, p);
                queue.push_back(next);
            }
        }
    }
    let mut path = vec![target];
    while let Some(p) = prev.get(path.last().expect("non-empty")) {
        path.push(*p);
    }
    path.reverse();
    assert_eq!(path[0], JobPhase::Pending, "no path to {target}");
    path
}

/// Drives a job along `path` (which starts at its current phase).
async fn walk(store: &dyn Store, uid: &str, path: &[JobPhase]) {
    for w in path.windows(2) {
        store
            .transition(uid, w[0], w[1], "Walk", "", StatusPatch::default())
            .await
            .unwrap_or_else(|e| panic!("{} -> {}: {e}", w[0], w[1]));
    }
}

mod cases {
    use super::*;

    pub async fn create_get_list_delete(fx: &Fixture) {
        let store = &*fx.store;
        let a = store
            .create_job(&job("team-a", "first"), "Applied")
            .await
            .unwrap();
        let b = store
            .create_job(&job("team-b", "second"), "Applied")
            .await
            .unwrap();
        assert_eq!(a.phase, JobPhase::Pending);
        assert_eq!((a.attempt, a.restarts), (0, 0));
        assert_ne!(a.uid, b.uid);
        assert_eq!(a.job.metadata.uid.as_deref(), Some(a.uid.as_str()));
        assert!(a.job.metadata.creation_timestamp.is_some());
        assert!(a.job.status.is_none());
        assert_eq!(a.job.spec.command, ["python3", "rank.py"]);

        let got = store
            .get_job("team-a", "first")
            .await
            .unwrap()
            .expect("by name");
        assert_eq!(got, a);
        let got = store.get_job_by_uid(&b.uid).await.unwrap().expect("by uid");
        assert_eq!(got, b);
        assert!(store.get_job("team-a", "second").await.unwrap().is_none());
        assert!(store.get_job_by_uid("no-such-uid").await.unwrap().is_none());

        let all = store.list_jobs(&JobFilter::default()).await.unwrap();
        let names: Vec<_> = all.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["first", "second"], "oldest first");

        let only_b = JobFilter {
            namespace: Some("team-b".into()),
            phases: vec![],
        };
        let listed = store.list_jobs(&only_b).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].uid, b.uid);

        walk(store, &a.uid, &[JobPhase::Pending, JobPhase::Queued]).await;
        let queued = JobFilter {
            namespace: None,
            phases: vec![JobPhase::Queued, JobPhase::Running],
        };
        let listed = store.list_jobs(&queued).await.unwrap();
        assert_eq!(listed.iter().map(|j| &j.uid).collect::<Vec<_>>(), [&a.uid]);

        // Deleting a live job is refused, naming the phase and the fix.
        let err = store.delete_job(&a.uid).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NotDeletable {
                    phase: JobPhase::Queued,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("ferry cancel job first"), "{err}");

        // A finished job is deleted with its events.
        walk(store, &a.uid, &[JobPhase::Queued, JobPhase::Cancelled]).await;
        assert!(store.delete_job(&a.uid).await.unwrap());
        assert!(store.get_job_by_uid(&a.uid).await.unwrap().is_none());
        assert!(store.events(&a.uid).await.unwrap().is_empty());
        assert!(
            !store.delete_job(&a.uid).await.unwrap(),
            "second delete finds nothing"
        );
        // The name is free again.
        store
            .create_job(&job("team-a", "first"), "Applied")
            .await
            .unwrap();
    }

    pub async fn duplicate_names_are_refused(fx: &Fixture) {
        let store = &*fx.store;
        let first = store
            .create_job(&job("default", "hello"), "Applied")
            .await
            .unwrap();
        let err = store
            .create_job(&job("default", "hello"), "Applied")
            .await
            .unwrap_err();
        match &err {
            StoreError::AlreadyExists {
                kind,
                namespace,
                name,
            } => {
                assert_eq!(
                    (kind.as_str(), namespace.as_str(), name.as_str()),
                    ("TrainJob", "default", "hello")
                );
            }
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("pick another metadata.name"), "{msg}");
        assert!(msg.contains("ferry delete job hello"), "{msg}");
        // Nothing was stored by the failed attempt.
        let all = store.list_jobs(&JobFilter::default()).await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(store.events(&first.uid).await.unwrap().len(), 1);
        // The same name in another namespace is a different job.
        store
            .create_job(&job("other", "hello"), "Applied")
            .await
            .unwrap();
    }

    pub async fn every_legal_and_illegal_transition(fx: &Fixture) {
        let store = &*fx.store;
        let mut n = 0;
        for from in JobPhase::ALL {
            for to in JobPhase::ALL {
                n += 1;
                let rec = store
                    .create_job(&job("matrix", &format!("j{n}")), "Applied")
                    .await
                    .unwrap();
                let path = path_to(from);
                walk(store, &rec.uid, &path).await;
                let before = store.events(&rec.uid).await.unwrap();
                let result = store
                    .transition(
                        &rec.uid,
                        from,
                        to,
                        "Step",
                        "matrix step",
                        StatusPatch::default(),
                    )
                    .await;
                let after = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
                let events = store.events(&rec.uid).await.unwrap();
                if from.can_become(to) {
                    let moved = result.unwrap_or_else(|e| panic!("{from} -> {to} is legal: {e}"));
                    assert_eq!(moved.phase, to);
                    assert_eq!(after.phase, to);
                    assert_eq!(events.len(), before.len() + 1);
                    let last = events.last().unwrap();
                    assert_eq!((last.from, last.to), (Some(from), to));
                    assert_eq!(last.reason, "Step");
                    assert_eq!(
                        after.finished_at.is_some(),
                        to.is_terminal(),
                        "{from} -> {to}"
                    );
                } else {
                    let err = result.expect_err("illegal transition must fail");
                    match &err {
                        StoreError::IllegalTransition { job, source } => {
                            assert_eq!(job, &format!("matrix/j{n}"));
                            assert_eq!((source.from, source.to), (from, to));
                        }
                        other => {
                            panic!("{from} -> {to}: expected IllegalTransition, got {other:?}")
                        }
                    }
                    assert_eq!(after.phase, from, "an illegal transition changes nothing");
                    assert_eq!(events, before, "an illegal transition records nothing");
                }
            }
        }
    }

    pub async fn racing_transitions_have_one_winner(fx: &Fixture) {
        let store = fx.store.clone();
        // Same step from many writers: exactly one moves the job.
        let rec = store
            .create_job(&job("race", "same"), "Applied")
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let store = store.clone();
            let uid = rec.uid.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .transition(
                        &uid,
                        JobPhase::Pending,
                        JobPhase::Queued,
                        "Queue",
                        &format!("writer {i}"),
                        StatusPatch::default(),
                    )
                    .await
            }));
        }
        let mut wins = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(r) => {
                    wins += 1;
                    assert_eq!(r.phase, JobPhase::Queued);
                }
                Err(StoreError::Conflict {
                    expected, actual, ..
                }) => {
                    assert_eq!((expected, actual), (JobPhase::Pending, JobPhase::Queued));
                }
                Err(other) => panic!("expected Conflict, got {other:?}"),
            }
        }
        assert_eq!(wins, 1);
        let queued: Vec<_> = store
            .events(&rec.uid)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.to == JobPhase::Queued)
            .collect();
        assert_eq!(queued.len(), 1, "only the winner's event is recorded");

        // Conflicting outcomes (finish vs cancel vs fail) on a running job.
        let rec = store
            .create_job(&job("race", "ending"), "Applied")
            .await
            .unwrap();
        walk(&*store, &rec.uid, &path_to(JobPhase::Running)).await;
        let endings = [
            JobPhase::Succeeded,
            JobPhase::Cancelled,
            JobPhase::Failed,
            JobPhase::Restarting,
            JobPhase::Preempted,
        ];
        let mut tasks = Vec::new();
        for to in endings {
            let store = store.clone();
            let uid = rec.uid.clone();
            tasks.push(tokio::spawn(async move {
                (
                    to,
                    store
                        .transition(
                            &uid,
                            JobPhase::Running,
                            to,
                            "Race",
                            "",
                            StatusPatch::default(),
                        )
                        .await,
                )
            }));
        }
        let mut winner = None;
        for t in tasks {
            let (to, result) = t.await.unwrap();
            match result {
                Ok(r) => {
                    assert!(winner.is_none(), "two writers won");
                    assert_eq!(r.phase, to);
                    winner = Some(to);
                }
                Err(StoreError::Conflict { expected, .. }) => {
                    assert_eq!(expected, JobPhase::Running)
                }
                Err(other) => panic!("expected Conflict, got {other:?}"),
            }
        }
        let winner = winner.expect("one writer wins");
        let job = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        assert_eq!(job.phase, winner);
        let events = store.events(&rec.uid).await.unwrap();
        assert_eq!(events.iter().filter(|e| e.reason == "Race").count(), 1);
    }

    pub async fn events_are_appended_in_order(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("ev", "ordered"), "Applied")
            .await
            .unwrap();
        let steps = [
            (
                JobPhase::Pending,
                JobPhase::Queued,
                "Queued",
                "waiting in queue default",
            ),
            (
                JobPhase::Queued,
                JobPhase::Admitted,
                "Admitted",
                "4 ranks, 0 GPUs",
            ),
            (
                JobPhase::Admitted,
                JobPhase::Running,
                "Started",
                "all ranks started",
            ),
            (
                JobPhase::Running,
                JobPhase::Restarting,
                "RankFailed",
                "rank 3 exited 1",
            ),
            (
                JobPhase::Restarting,
                JobPhase::Running,
                "Restarted",
                "attempt 2",
            ),
            (
                JobPhase::Running,
                JobPhase::Succeeded,
                "Completed",
                "every rank exited 0",
            ),
        ];
        for (from, to, reason, message) in steps {
            store
                .transition(&rec.uid, from, to, reason, message, StatusPatch::default())
                .await
                .unwrap();
        }
        let events = store.events(&rec.uid).await.unwrap();
        assert_eq!(events.len(), steps.len() + 1);
        let first = &events[0];
        assert_eq!(
            (first.from, first.to, first.reason.as_str()),
            (None, JobPhase::Pending, "Applied")
        );
        assert!(first.message.contains("ev/ordered"), "{}", first.message);
        for (event, (from, to, reason, message)) in events[1..].iter().zip(steps) {
            assert_eq!(event.job_uid, rec.uid);
            assert_eq!((event.from, event.to), (Some(from), to));
            assert_eq!(
                (event.reason.as_str(), event.message.as_str()),
                (reason, message)
            );
        }
        for w in events.windows(2) {
            assert!(w[0].id < w[1].id, "ids increase");
            assert!(w[0].at <= w[1].at, "times do not go back");
        }
        let job = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        assert_eq!(job.message.as_deref(), Some("every rank exited 0"));
        // Terminal means terminal: nothing moves a finished job.
        let err = store
            .transition(
                &rec.uid,
                JobPhase::Succeeded,
                JobPhase::Running,
                "Zombie",
                "",
                StatusPatch::default(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::IllegalTransition { .. }),
            "{err:?}"
        );
    }

    pub async fn a_live_jobs_spec_is_replaced_with_an_event(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("limits", "long"), "Applied")
            .await
            .unwrap();
        walk(store, &rec.uid, &path_to(JobPhase::Running)).await;
        let mut raised = rec.job.clone();
        raised.spec.max_total_runtime_seconds = Some(7_200);
        // Metadata stays the stored one whatever the caller sends.
        raised.metadata.uid = Some("forged".into());
        let after = store
            .replace_spec(
                &rec.uid,
                JobPhase::Running,
                &raised,
                "LimitsChanged",
                "more",
            )
            .await
            .unwrap();
        assert_eq!(after.job.spec.max_total_runtime_seconds, Some(7_200));
        assert_eq!(after.job.metadata, rec.job.metadata);
        assert_eq!(
            (after.phase, after.attempt),
            (JobPhase::Running, rec.attempt)
        );
        let last = store.events(&rec.uid).await.unwrap().pop().unwrap();
        assert_eq!(
            (
                last.from,
                last.to,
                last.reason.as_str(),
                last.message.as_str()
            ),
            (
                Some(JobPhase::Running),
                JobPhase::Running,
                "LimitsChanged",
                "more"
            )
        );
        let got = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        assert_eq!(got.job.spec.max_total_runtime_seconds, Some(7_200));

        // A stale phase loses the compare-and-set; nothing changes.
        let events = store.events(&rec.uid).await.unwrap().len();
        let err = store
            .replace_spec(&rec.uid, JobPhase::Queued, &rec.job, "LimitsChanged", "x")
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Conflict {
                    actual: JobPhase::Running,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(store.events(&rec.uid).await.unwrap().len(), events);
        // An ended job is never changed.
        walk(store, &rec.uid, &[JobPhase::Running, JobPhase::Succeeded]).await;
        let err = store
            .replace_spec(
                &rec.uid,
                JobPhase::Succeeded,
                &rec.job,
                "LimitsChanged",
                "x",
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("has ended (Succeeded)"), "{err}");
        let got = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        assert_eq!(got.job.spec.max_total_runtime_seconds, Some(7_200));
    }

    pub async fn notes_keep_the_phase(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("notes", "adopted"), "Applied")
            .await
            .unwrap();
        walk(store, &rec.uid, &path_to(JobPhase::Running)).await;
        let before = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        let note = store
            .note(&rec.uid, "ControlPlaneRestarted", "re-adopted 4 live ranks")
            .await
            .unwrap();
        assert_eq!(
            (note.from, note.to),
            (Some(JobPhase::Running), JobPhase::Running)
        );
        assert_eq!(note.reason, "ControlPlaneRestarted");
        let after = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        assert_eq!(after.phase, JobPhase::Running);
        assert_eq!(
            after.updated_at, before.updated_at,
            "a note is not a change"
        );
        let events = store.events(&rec.uid).await.unwrap();
        assert_eq!(events.last(), Some(&note));

        let err = store.note("missing-uid", "X", "y").await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
        let err = store
            .transition(
                "missing-uid",
                JobPhase::Pending,
                JobPhase::Queued,
                "X",
                "",
                StatusPatch::default(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    }

    pub async fn patches_and_status(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("st", "patched"), "Applied")
            .await
            .unwrap();
        walk(store, &rec.uid, &path_to(JobPhase::Admitted)).await;
        let gpus = vec![vec!["GPU-0".to_owned()], vec!["GPU-1".to_owned()]];
        let running = store
            .transition(
                &rec.uid,
                JobPhase::Admitted,
                JobPhase::Running,
                "Started",
                "ranks started",
                StatusPatch {
                    attempt: Some(1),
                    gpus: Some(gpus.clone()),
                    ..StatusPatch::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(running.attempt, 1);
        assert_eq!(running.gpus, gpus);
        let started = running.started_at.expect("started_at set on Running");
        assert!(running.finished_at.is_none());

        let restarting = store
            .transition(
                &rec.uid,
                JobPhase::Running,
                JobPhase::Restarting,
                "RankFailed",
                "rank 1 exited 3",
                StatusPatch {
                    restarts: Some(1),
                    gpus: Some(vec![]),
                    message: Some("restarting in 5s".into()),
                    ..StatusPatch::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(restarting.restarts, 1);
        assert!(restarting.gpus.is_empty());
        assert_eq!(restarting.message.as_deref(), Some("restarting in 5s"));
        assert_eq!(restarting.attempt, 1, "untouched fields stay");

        let resumed = store
            .transition(
                &rec.uid,
                JobPhase::Restarting,
                JobPhase::Running,
                "Restarted",
                "",
                StatusPatch {
                    attempt: Some(2),
                    resumed_from: Some("/ckpt/step-500".into()),
                    ..StatusPatch::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(resumed.started_at, Some(started), "first start time kept");
        assert_eq!(resumed.resumed_from.as_deref(), Some("/ckpt/step-500"));
        assert_eq!(
            resumed.message, None,
            "an empty message clears the status message"
        );

        let done = store
            .transition(
                &rec.uid,
                JobPhase::Running,
                JobPhase::Failed,
                "RankFailed",
                "rank 0 exited 1",
                StatusPatch::default(),
            )
            .await
            .unwrap();
        let finished = done
            .finished_at
            .expect("finished_at set on terminal phases");
        assert!(finished >= started);
        assert!(done.updated_at >= done.created_at);

        let status = done.status();
        assert_eq!(status.phase, JobPhase::Failed);
        assert_eq!((status.attempt, status.restarts), (2, 1));
        assert_eq!(status.resumed_from.as_deref(), Some("/ckpt/step-500"));
        assert_eq!(status.start_time, Some(ferry_store::rfc3339(started)));
        assert_eq!(status.completion_time, Some(ferry_store::rfc3339(finished)));
        assert_eq!(status.message.as_deref(), Some("rank 0 exited 1"));
        let full = done.to_train_job();
        assert_eq!(full.status, Some(status));
        // What was read back equals what the transition returned.
        assert_eq!(store.get_job_by_uid(&rec.uid).await.unwrap().unwrap(), done);
        // Records serialise for the REST API.
        let json = serde_json::to_value(&done).unwrap();
        assert_eq!(json["phase"], "Failed");
        assert_eq!(json["job"]["metadata"]["name"], "patched");
    }

    pub async fn gang_round_trip(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("gang", "ranks"), "Applied")
            .await
            .unwrap();
        assert_eq!(store.get_gang(&rec.uid).await.unwrap(), None);
        let first = json!({"ranks": [
            {"rank": 0, "pid": 4242, "startTime": 123456, "log": "/tmp/r0.log"},
            {"rank": 1, "pid": 4243, "startTime": 123457, "log": "/tmp/r1.log"}
        ], "masterPort": 29500});
        store.put_gang(&rec.uid, 1, &first).await.unwrap();
        assert_eq!(store.get_gang(&rec.uid).await.unwrap(), Some((1, first)));
        let second =
            json!({"ranks": [{"rank": 0, "pid": 5000, "startTime": 9, "log": "/tmp/a2.log"}]});
        store.put_gang(&rec.uid, 2, &second).await.unwrap();
        assert_eq!(
            store.get_gang(&rec.uid).await.unwrap(),
            Some((2, second)),
            "replaced"
        );

        let err = store
            .put_gang("missing-uid", 1, &json!({}))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

        walk(store, &rec.uid, &[JobPhase::Pending, JobPhase::Cancelled]).await;
        store.delete_job(&rec.uid).await.unwrap();
        assert_eq!(
            store.get_gang(&rec.uid).await.unwrap(),
            None,
            "deleted with the job"
        );
    }

    pub async fn metrics_page_and_latest(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("m", "loss"), "Applied")
            .await
            .unwrap();
        assert_eq!(store.latest_metrics(&rec.uid).await.unwrap(), None);
        store.append_metrics(&rec.uid, 1, &[]).await.unwrap();
        let lines: Vec<_> = (0..25)
            .map(|s| json!({"step": s, "loss": 2.0 / f64::from(s + 1), "lr": 2e-5, "grad_norm": 1.5, "tokens_per_s": 1234.5}))
            .collect();
        store
            .append_metrics(&rec.uid, 1, &lines[..10])
            .await
            .unwrap();
        store
            .append_metrics(&rec.uid, 2, &lines[10..])
            .await
            .unwrap();
        store
            .append_metrics(&rec.uid, 2, &[json!({"note": "no step"})])
            .await
            .unwrap();

        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let page = store.metrics(&rec.uid, after, 7).await.unwrap();
            assert!(page.len() <= 7);
            let Some(last) = page.last() else { break };
            after = last.id;
            seen.extend(page);
        }
        assert_eq!(seen.len(), 26);
        for (row, line) in seen.iter().zip(&lines) {
            assert_eq!(&row.values, line);
            assert_eq!(row.step, line["step"].as_i64());
            assert_eq!(row.job_uid, rec.uid);
        }
        assert_eq!(seen[9].attempt, 1);
        assert_eq!(seen[10].attempt, 2);
        assert!(seen.windows(2).all(|w| w[0].id < w[1].id));
        let latest = store.latest_metrics(&rec.uid).await.unwrap().unwrap();
        assert_eq!(latest.values, json!({"note": "no step"}));
        assert_eq!(latest.step, None);

        let err = store
            .append_metrics("missing-uid", 1, &lines[..1])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    }

    pub async fn objects_bump_generation(fx: &Fixture) {
        let store = &*fx.store;
        let v1 = json!({"kind": "Queue", "metadata": {"name": "team-a"}, "spec": {"gpus": 8}});
        let created = store
            .put_object("Queue", "default", "team-a", &v1, true)
            .await
            .unwrap();
        assert_eq!(created.generation, 1);
        assert_eq!(created.doc, v1);
        assert_eq!(created.created_at, created.updated_at);

        let err = store
            .put_object("Queue", "default", "team-a", &v1, true)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        assert!(err.to_string().contains("Queue default/team-a"), "{err}");

        let v2 = json!({"kind": "Queue", "metadata": {"name": "team-a"}, "spec": {"gpus": 16}});
        let updated = store
            .put_object("Queue", "default", "team-a", &v2, false)
            .await
            .unwrap();
        assert_eq!(updated.generation, 2);
        assert_eq!(updated.uid, created.uid, "uid kept across updates");
        assert_eq!(updated.created_at, created.created_at);
        assert_eq!(updated.doc, v2);
        let again = store
            .put_object("Queue", "default", "team-a", &v2, false)
            .await
            .unwrap();
        assert_eq!(again.generation, 3);

        // Same name, other kind or namespace: separate objects.
        let dep = json!({"kind": "ModelDeployment", "spec": {"model": "qwen"}});
        store
            .put_object("ModelDeployment", "default", "team-a", &dep, false)
            .await
            .unwrap();
        store
            .put_object("Queue", "research", "team-b", &v1, false)
            .await
            .unwrap();

        let got = store
            .get_object("Queue", "default", "team-a")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, again);
        assert_eq!(store.list_objects("Queue", None).await.unwrap().len(), 2);
        let research = store.list_objects("Queue", Some("research")).await.unwrap();
        assert_eq!(
            research.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
            ["team-b"]
        );
        assert_eq!(
            store
                .list_objects("ModelDeployment", None)
                .await
                .unwrap()
                .len(),
            1
        );

        assert!(
            store
                .delete_object("Queue", "default", "team-a")
                .await
                .unwrap()
        );
        assert!(
            !store
                .delete_object("Queue", "default", "team-a")
                .await
                .unwrap()
        );
        assert!(
            store
                .get_object("Queue", "default", "team-a")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .get_object("ModelDeployment", "default", "team-a")
                .await
                .unwrap()
                .is_some()
        );
    }

    pub async fn objects_move_keeping_their_identity(fx: &Fixture) {
        let store = &*fx.store;
        let v1 = json!({"kind": "Queue", "metadata": {"name": "a", "namespace": "x"}});
        store
            .put_object("Queue", "x", "a", &v1, false)
            .await
            .unwrap();
        let before = store
            .put_object("Queue", "x", "a", &v1, false)
            .await
            .unwrap();
        let v2 = json!({"kind": "Queue", "metadata": {"name": "a"}});
        let moved = store
            .move_object("Queue", "x", "a", "", &v2)
            .await
            .unwrap()
            .expect("moved");
        assert_eq!(moved.namespace, "");
        assert_eq!(moved.doc, v2);
        assert_eq!(
            (
                &moved.uid,
                moved.generation,
                moved.created_at,
                moved.updated_at
            ),
            (&before.uid, 2, before.created_at, before.updated_at)
        );
        assert!(store.get_object("Queue", "x", "a").await.unwrap().is_none());
        assert_eq!(
            store.get_object("Queue", "", "a").await.unwrap(),
            Some(moved)
        );
        assert_eq!(
            store.list_objects("Queue", Some("")).await.unwrap().len(),
            1
        );

        // Nothing to move; a taken target is refused and both stay.
        assert!(
            store
                .move_object("Queue", "x", "a", "", &v2)
                .await
                .unwrap()
                .is_none()
        );
        store
            .put_object("Queue", "y", "a", &v1, false)
            .await
            .unwrap();
        let err = store
            .move_object("Queue", "y", "a", "", &v2)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        assert_eq!(store.list_objects("Queue", None).await.unwrap().len(), 2);
    }

    pub async fn model_registry(fx: &Fixture) {
        let store = &*fx.store;
        let rec = store
            .create_job(&job("reg", "sft"), "Applied")
            .await
            .unwrap();
        let mut model = ModelRecord::new("qwen-sft-v1", "/models/qwen-sft-v1", "hf-safetensors");
        model.source_job_uid = Some(rec.uid.clone());
        model.checkpoint = Some("/ckpt/step-1000".into());
        let stored = store.register_model(&model).await.unwrap();
        assert_eq!(stored, model);
        let err = store.register_model(&model).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        let base = ModelRecord {
            labels: [("ferry.dev/sweep".to_owned(), "lr-grid".to_owned())].into(),
            ..ModelRecord::new("tiny-base", "/models/tiny", "hf-safetensors")
        };
        assert_eq!(store.register_model(&base).await.unwrap(), base);
        assert_eq!(store.get_model("tiny-base").await.unwrap(), Some(base));

        assert_eq!(
            store.get_model("qwen-sft-v1").await.unwrap(),
            Some(model.clone())
        );
        assert_eq!(store.get_model("nope").await.unwrap(), None);
        let names = model_names(store).await;
        assert_eq!(names, ["qwen-sft-v1", "tiny-base"]);

        // Lineage outlives the job that produced the model.
        walk(store, &rec.uid, &[JobPhase::Pending, JobPhase::Cancelled]).await;
        store.delete_job(&rec.uid).await.unwrap();
        let kept = store.get_model("qwen-sft-v1").await.unwrap().unwrap();
        assert_eq!(kept.source_job_uid, Some(rec.uid));
    }

    /// The registered models' names, oldest first.
    async fn model_names(store: &dyn Store) -> Vec<String> {
        let models = store.list_models().await.unwrap();
        models.into_iter().map(|m| m.name).collect()
    }

    pub async fn a_deleted_models_name_is_free_again(fx: &Fixture) {
        let store = &*fx.store;
        let first = ModelRecord::new("tiny-lm-v1", "/models/tiny-lm-v1/a", "hf-safetensors");
        store.register_model(&first).await.unwrap();
        let other = ModelRecord::new("tiny-lm-v2", "/models/tiny-lm-v2/b", "hf-safetensors");
        store.register_model(&other).await.unwrap();

        assert!(!store.delete_model("no-such").await.unwrap());
        assert!(store.delete_model("tiny-lm-v1").await.unwrap());
        assert_eq!(store.get_model("tiny-lm-v1").await.unwrap(), None);
        assert!(!store.delete_model("tiny-lm-v1").await.unwrap());
        let names = model_names(store).await;
        assert_eq!(names, ["tiny-lm-v2"], "only the named model goes");

        // The name can be registered again, with a new path and lineage.
        let mut again = ModelRecord::new("tiny-lm-v1", "/models/tiny-lm-v1/c", "peft");
        again.source_job_uid = Some("job-c".into());
        assert_eq!(store.register_model(&again).await.unwrap(), again);
        assert_eq!(store.get_model("tiny-lm-v1").await.unwrap(), Some(again));
        let names = model_names(store).await;
        assert_eq!(
            names,
            ["tiny-lm-v2", "tiny-lm-v1"],
            "re-registered is newest"
        );
    }

    pub async fn a_suspended_job_round_trips_with_its_spec(fx: &Fixture) {
        let store = fx.store.clone();
        let rec = store
            .create_job(&job("held", "paused"), "Applied")
            .await
            .unwrap();
        walk(&*store, &rec.uid, &path_to(JobPhase::Running)).await;
        let mut spec = rec.job.spec.clone();
        spec.suspend = true;
        let suspended = store
            .transition(
                &rec.uid,
                JobPhase::Running,
                JobPhase::Suspended,
                "Suspended",
                "suspended by request",
                StatusPatch {
                    spec: Some(spec.clone()),
                    ..StatusPatch::default()
                },
            )
            .await
            .unwrap();
        // Phase and spec change in the one write; the metadata stays the stored one.
        assert_eq!(suspended.phase, JobPhase::Suspended);
        assert!(suspended.job.spec.suspend);
        assert_eq!(suspended.job.metadata, rec.job.metadata);
        assert!(
            suspended.finished_at.is_none(),
            "a suspended job has not ended"
        );
        let unfinished = store.list_jobs(&JobFilter::unfinished()).await.unwrap();
        assert!(unfinished.iter().any(|j| j.uid == rec.uid));
        store.close().await;
        drop(store);

        // A restart reads it back suspended, with its spec and its event.
        let store = fx.reopen().await;
        let back = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        assert_eq!(back, suspended);
        assert_eq!(
            back.to_train_job().status.unwrap().phase,
            JobPhase::Suspended
        );
        let last = store.events(&rec.uid).await.unwrap().pop().unwrap();
        assert_eq!(
            (last.from, last.to, last.reason.as_str()),
            (Some(JobPhase::Running), JobPhase::Suspended, "Suspended")
        );
        // A spec patch is conditional like the phase: a stale `from` writes neither.
        spec.suspend = false;
        let err = store
            .transition(
                &rec.uid,
                JobPhase::Running,
                JobPhase::Suspended,
                "Suspended",
                "",
                StatusPatch {
                    spec: Some(spec.clone()),
                    ..StatusPatch::default()
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
        assert!(
            store
                .get_job_by_uid(&rec.uid)
                .await
                .unwrap()
                .unwrap()
                .job
                .spec
                .suspend
        );
        let resumed = store
            .transition(
                &rec.uid,
                JobPhase::Suspended,
                JobPhase::Queued,
                "Resumed",
                "resumed by request",
                StatusPatch {
                    spec: Some(spec),
                    ..StatusPatch::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(resumed.phase, JobPhase::Queued);
        assert!(!resumed.job.spec.suspend);
        store.close().await;
    }

    pub async fn reopening_keeps_everything(fx: &Fixture) {
        let store = fx.store.clone();
        let rec = store
            .create_job(&job("dur", "kept"), "Applied")
            .await
            .unwrap();
        walk(&*store, &rec.uid, &path_to(JobPhase::Running)).await;
        store
            .note(&rec.uid, "Checkpoint", "step 500")
            .await
            .unwrap();
        store
            .put_gang(&rec.uid, 1, &json!({"pid": 77}))
            .await
            .unwrap();
        store
            .append_metrics(&rec.uid, 1, &[json!({"step": 1, "loss": 3.5})])
            .await
            .unwrap();
        store
            .put_object("Queue", "default", "q", &json!({"spec": {}}), false)
            .await
            .unwrap();
        store
            .register_model(&ModelRecord::new("m1", "/m1", "peft"))
            .await
            .unwrap();
        let version = store.schema_version().await.unwrap();
        assert!(version >= 1, "migrations applied (version {version})");

        let job_before = store.get_job_by_uid(&rec.uid).await.unwrap().unwrap();
        let events_before = store.events(&rec.uid).await.unwrap();
        store.close().await;
        drop(store);

        // Reopen twice: migrations run again and change nothing.
        for _ in 0..2 {
            let store = fx.reopen().await;
            assert_eq!(store.schema_version().await.unwrap(), version);
            assert_eq!(
                store.get_job_by_uid(&rec.uid).await.unwrap(),
                Some(job_before.clone())
            );
            let events = store.events(&rec.uid).await.unwrap();
            assert_eq!(events[..events_before.len()], events_before[..]);
            assert_eq!(
                store.get_gang(&rec.uid).await.unwrap(),
                Some((1, json!({"pid": 77})))
            );
            assert_eq!(
                store.latest_metrics(&rec.uid).await.unwrap().unwrap().step,
                Some(1)
            );
            assert_eq!(
                store
                    .get_object("Queue", "default", "q")
                    .await
                    .unwrap()
                    .unwrap()
                    .generation,
                1
            );
            assert!(store.get_model("m1").await.unwrap().is_some());
            // The reopened store keeps working, and ids keep increasing.
            let note = store
                .note(&rec.uid, "ControlPlaneRestarted", "reopened")
                .await
                .unwrap();
            assert!(note.id > events_before.last().unwrap().id);
            store.close().await;
        }
    }

    pub async fn phases_listed_in_filters_round_trip(fx: &Fixture) {
        let store = &*fx.store;
        let mut expected = BTreeSet::new();
        for (i, phase) in JobPhase::ALL.into_iter().enumerate() {
            let rec = store
                .create_job(&job("all", &format!("p{i}")), "Applied")
                .await
                .unwrap();
            walk(store, &rec.uid, &path_to(phase)).await;
            expected.insert((phase.as_str(), rec.uid));
        }
        for phase in JobPhase::ALL {
            let filter = JobFilter {
                namespace: Some("all".into()),
                phases: vec![phase],
            };
            let listed = store.list_jobs(&filter).await.unwrap();
            assert_eq!(listed.len(), 1, "{phase}");
            assert_eq!(listed[0].phase, phase);
            assert!(expected.contains(&(phase.as_str(), listed[0].uid.clone())));
        }
        let terminal = JobFilter {
            namespace: None,
            phases: JobPhase::ALL
                .into_iter()
                .filter(|p| p.is_terminal())
                .collect(),
        };
        assert_eq!(store.list_jobs(&terminal).await.unwrap().len(), 3);
    }
}

/// Runs every case against SQLite and against Postgres, one test function each.
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = super::Fixture::sqlite().await;
                    super::cases::$case(&fx).await;
                    fx.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let Some(fx) = super::Fixture::postgres().await else { return };
                    super::cases::$case(&fx).await;
                    fx.finish().await;
                }
            )*
        }
    };
}

suite!(
    create_get_list_delete,
    duplicate_names_are_refused,
    every_legal_and_illegal_transition,
    racing_transitions_have_one_winner,
    events_are_appended_in_order,
    notes_keep_the_phase,
    a_live_jobs_spec_is_replaced_with_an_event,
    patches_and_status,
    gang_round_trip,
    metrics_page_and_latest,
    objects_bump_generation,
    objects_move_keeping_their_identity,
    model_registry,
    a_deleted_models_name_is_free_again,
    reopening_keeps_everything,
    a_suspended_job_round_trips_with_its_spec,
    phases_listed_in_filters_round_trip,
);

/// Checks that only apply to SQLite: URL forms and two stores sharing one file.
mod sqlite_only {
    use super::*;

    /// A database the first schema wrote (before models had labels) is upgraded in place on
    /// open: its models keep everything and carry no labels.
    #[tokio::test]
    async fn a_database_of_the_first_schema_is_upgraded_and_keeps_its_models() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = dir.path().join("migrations");
        std::fs::create_dir(&first).unwrap();
        let migrations = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
        std::fs::copy(
            migrations.join("0001_init.sql"),
            first.join("0001_init.sql"),
        )
        .unwrap();
        let path = dir.path().join("old.db");
        let url = format!("sqlite:{}?mode=rwc", path.display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::migrate::Migrator::new(first.as_path())
            .await
            .unwrap()
            .run(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO models (name, path, format, source_job_uid, checkpoint, created_at) \
             VALUES ('old-v1', '/models/old', 'peft', 'uid-1', '/ckpt/5', 1700000000000)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();

        let store = ferry_store::open(&path.display().to_string())
            .await
            .unwrap();
        assert!(store.schema_version().await.unwrap() >= 2);
        let old = store.get_model("old-v1").await.unwrap().expect("kept");
        assert_eq!(
            (
                old.path.as_str(),
                old.format.as_str(),
                old.checkpoint.as_deref()
            ),
            ("/models/old", "peft", Some("/ckpt/5"))
        );
        assert!(old.labels.is_empty(), "{:?}", old.labels);
    }

    #[tokio::test]
    async fn open_accepts_paths_and_sqlite_urls() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a").join("b").join("ferry.db");
        for spec in [
            format!("sqlite://{}", path.display()),
            format!("sqlite:{}?mode=rwc", path.display()),
            path.display().to_string(),
        ] {
            let store = ferry_store::open(&spec).await.expect(&spec);
            assert_eq!(store.location(), path.display().to_string());
            store
                .create_job(&job("urls", &format!("j{}", spec.len())), "Applied")
                .await
                .unwrap();
            store.close().await;
        }
        assert!(
            path.exists(),
            "parent directories and the file were created"
        );
        let store = ferry_store::open(&path.display().to_string())
            .await
            .unwrap();
        assert_eq!(
            store.list_jobs(&JobFilter::default()).await.unwrap().len(),
            3
        );

        let memory = ferry_store::open("sqlite::memory:").await.unwrap();
        assert!(
            memory
                .list_jobs(&JobFilter::default())
                .await
                .unwrap()
                .is_empty()
        );
        memory
            .create_job(&job("mem", "one"), "Applied")
            .await
            .unwrap();
        assert_eq!(
            memory.list_jobs(&JobFilter::default()).await.unwrap().len(),
            1
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_stores_on_one_file_still_have_one_winner() {
        // An old and a new control plane (or two processes) sharing ferry.db.
        let fx = Fixture::sqlite().await;
        let other = fx.reopen().await;
        for round in 0..5 {
            let rec = fx
                .store
                .create_job(&job("two", &format!("r{round}")), "Applied")
                .await
                .unwrap();
            let (a, b) = tokio::join!(
                fx.store.transition(
                    &rec.uid,
                    JobPhase::Pending,
                    JobPhase::Queued,
                    "A",
                    "",
                    StatusPatch::default()
                ),
                other.transition(
                    &rec.uid,
                    JobPhase::Pending,
                    JobPhase::Cancelled,
                    "B",
                    "",
                    StatusPatch::default()
                ),
            );
            assert!(
                a.is_ok() != b.is_ok(),
                "round {round}: exactly one wins ({a:?}, {b:?})"
            );
            let loser = match (a, b) {
                (Ok(_), Err(e)) | (Err(e), Ok(_)) => e,
                (a, b) => panic!("round {round}: exactly one must win ({a:?}, {b:?})"),
            };
            assert!(matches!(loser, StoreError::Conflict { .. }), "{loser:?}");
            let events = other.events(&rec.uid).await.unwrap();
            assert_eq!(events.len(), 2, "creation plus the winner's event");
        }
        other.close().await;
        fx.finish().await;
    }
}
