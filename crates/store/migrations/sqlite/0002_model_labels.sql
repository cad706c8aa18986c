-- A registered model carries the labels of the job that exported it (JSON object as text),
-- so label selectors find a sweep's or a team's models. Models registered before have none.
ALTER TABLE models ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
