-- Ferry metadata, first version. Timestamps are milliseconds since the Unix epoch;
-- JSON documents are stored as text so the same queries run on SQLite and Postgres.

CREATE TABLE jobs (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    uid          TEXT    NOT NULL UNIQUE,
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    doc          TEXT    NOT NULL,
    phase        TEXT    NOT NULL,
    attempt      BIGINT  NOT NULL DEFAULT 0,
    restarts     BIGINT  NOT NULL DEFAULT 0,
    message      TEXT,
    gpus         TEXT    NOT NULL DEFAULT '[]',
    resumed_from TEXT,
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL,
    started_at   BIGINT,
    finished_at  BIGINT,
    UNIQUE (namespace, name)
);
CREATE INDEX jobs_phase ON jobs (phase);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_uid    TEXT    NOT NULL REFERENCES jobs (uid) ON DELETE CASCADE,
    at         BIGINT  NOT NULL,
    from_phase TEXT,
    to_phase   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    message    TEXT    NOT NULL
);
CREATE INDEX events_job ON events (job_uid, id);

CREATE TABLE gangs (
    job_uid    TEXT    PRIMARY KEY REFERENCES jobs (uid) ON DELETE CASCADE,
    attempt    BIGINT  NOT NULL,
    doc        TEXT    NOT NULL,
    updated_at BIGINT  NOT NULL
);

CREATE TABLE metrics (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_uid TEXT    NOT NULL REFERENCES jobs (uid) ON DELETE CASCADE,
    attempt BIGINT  NOT NULL,
    at      BIGINT  NOT NULL,
    step    BIGINT,
    doc     TEXT    NOT NULL
);
CREATE INDEX metrics_job ON metrics (job_uid, id);

CREATE TABLE objects (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    uid        TEXT    NOT NULL UNIQUE,
    kind       TEXT    NOT NULL,
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    doc        TEXT    NOT NULL,
    generation BIGINT  NOT NULL,
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL,
    UNIQUE (kind, namespace, name)
);

-- Lineage outlives jobs: no foreign key to jobs.
CREATE TABLE models (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL UNIQUE,
    path           TEXT    NOT NULL,
    format         TEXT    NOT NULL,
    source_job_uid TEXT,
    checkpoint     TEXT,
    created_at     BIGINT  NOT NULL
);
