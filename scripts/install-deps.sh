#!/usr/bin/env bash
# Install the Debian programs Iris is tested and demonstrated with, if missing.
set -euo pipefail
command -v cargo >/dev/null 2>&1 || { echo "cargo is required (rustup)"; exit 1; }
need=()
for pair in sqlite3:sqlite3 fio:fio git:git python3:python3 gzip:gzip tar:tar redis-server:redis-server redis-benchmark:redis-tools db_bench:rocksdb-tools mkfs.xfs:xfsprogs mkfs.ext4:e2fsprogs losetup:mount rsync:rsync; do
  cmd=${pair%%:*}; pkg=${pair##*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing: ${need[*]} (install them, or run as root)"; exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
