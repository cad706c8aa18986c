#!/usr/bin/env bash
# The project's one test command (README, `.ci/run`): installs what the tests need,
# checks formatting and lints, then runs every test in the workspace.
#
# Needs only a Rust toolchain, Python 3 and the package registries: PostgreSQL comes
# from Debian's packages, Python packages from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# A from-scratch build gains nothing from incremental caches, which would take several GB of
# disk beside the artifacts (CI's disk is not large). Set CARGO_INCREMENTAL=1 to keep them.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step "PostgreSQL for the store's test suite"
pg_env="$(bash scripts/postgres-test-server.sh)"
eval "$pg_env"

step "Python packages for the client tests"
python3 -m pip install --quiet --disable-pip-version-check -r tests/openai_client/requirements.txt
export FERRY_REQUIRE_OPENAI_CLIENT=1

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
if cargo nextest --version >/dev/null 2>&1; then
    # Doc tests first, so the run closes on nextest's summary of every test.
    cargo test --workspace --locked --doc
    cargo nextest run --workspace --locked --no-fail-fast
else
    cargo test --workspace --locked --no-fail-fast
fi
