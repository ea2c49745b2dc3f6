#!/usr/bin/env bash
# The main job: build Iris and run an unmodified sqlite3 on the default volume
# (~/.local/share/iris/default.vol, created on first use), twice, to show the data persists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --workspace
iris=target/release/iris
$iris run -- sqlite3 /iris/demo.db \
  "create table if not exists visits(at text); insert into visits values(datetime('now'));"
$iris run -- sqlite3 /iris/demo.db "select count(*) || ' visit(s) so far' from visits; pragma integrity_check;"
$iris stat "${IRIS_VOLUME:-${XDG_DATA_HOME:-$HOME/.local/share}/iris/default.vol}"
