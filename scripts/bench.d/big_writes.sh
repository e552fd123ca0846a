#!/usr/bin/env bash
# Big writes in a read-write repo (`scripts/bench --big-writes`): bare vs `sandbox-run --profile
# ci` for builds that write hundreds of MiB into the repo, timed whole from outside in
# interleaved pairs (bare, sandboxed, bare, ...; medians), each from a clean tree and the same
# clean environment, with the sandbox's peak memory from its report (`peak_memory_bytes`).
#
# Usage: scripts/bench.d/big_writes.sh [--bin PATH] [--pairs N] [--only cargo|npm|write|write256]
#   cargo   `cargo test --no-run --offline` of a copy of this project (crates fetched first,
#           outside, and vendored into the copy: the ci profile binds the toolchain read-only,
#           never ~/.cargo whole)
#   npm     `npm ci` of a real project from the registry (`npm config get registry`; its host
#           is given to the sandbox with --allow-host, never written anywhere); a fresh, empty
#           npm cache for both sides
#   write   `head -c 1G /dev/zero > big` (the layer's raw throughput, and the apply's rename)
#   write256  the same under `[limits] memory = "256M"`
# Prints one line per workload: bare and sandboxed medians, the ratio, the peak memory.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin=""
pairs=3
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift ;;
    --pairs) pairs="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "big_writes: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --locked --release -q)
  bin="${CARGO_TARGET_DIR:-$root/target}/release/sandbox-run"
  [ -x "$bin" ] || bin="$(ls -t "$root"/target/*/release/sandbox-run | head -1)"
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/bench-big-writes-XXXXXX")"
trap 'chmod -R u+rwX "$work" 2>/dev/null; rm -rf "$work"' EXIT
path="$(dirname "$(command -v cargo)"):/usr/local/bin:/usr/bin:/bin"
clean=(env -i "PATH=$path" "LANG=C.UTF-8")

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# pair NAME RESET-FN BARE-FN SANDBOX-FN: interleaved pairs, then the line.
pair() {
  local name=$1 reset=$2 bare=$3 sbx=$4 i t0 peak=0
  : >"$work/$name.bare"; : >"$work/$name.sbx"
  for i in $(seq 1 "$pairs"); do
    $reset; t0=$(now); $bare >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
    echo "$(now) - $t0" | bc >>"$work/$name.bare"
    echo "big_writes: $name pair $i: bare $(tail -1 "$work/$name.bare") s" >&2
    $reset; t0=$(now); $sbx >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
    echo "$(now) - $t0" | bc >>"$work/$name.sbx"
    p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0].get("peak_memory_bytes") or 0)' "$work/report.json")
    [ "$p" -gt "$peak" ] && peak=$p
    echo "big_writes: $name pair $i: sandboxed $(tail -1 "$work/$name.sbx") s, peak memory $((p >> 20)) MiB" >&2
  done
  local b s written
  b=$(median <"$work/$name.bare"); s=$(median <"$work/$name.sbx")
  written=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["results"][0].get("repo_changes") or {}; print(int(c.get("disk_used_bytes", 0)) >> 20)' "$work/report.json")
  printf '%-6s bare %7.2f s  sandbox-run %7.2f s  ratio %.2f  written %d MiB  peak memory %d MiB  (%d pairs; bare: %s; sandboxed: %s)\n' \
    "$name" "$b" "$s" "$(echo "$s / $b" | bc -l)" "$written" $((peak >> 20)) "$pairs" \
    "$(tr '\n' ' ' <"$work/$name.bare")" "$(tr '\n' ' ' <"$work/$name.sbx")"
}

# --- cargo ---
cargo_setup() {
  mkdir -p "$work/proj" "$work/home"
  git -C "$root" archive HEAD | tar -x -C "$work/proj"
  # the crates, fetched outside, vendored into the copy: inside, CARGO_HOME is not bound (the
  # ci profile binds the toolchain, never ~/.cargo whole); both sides build from the same tree
  (cd "$work/proj" && cargo fetch --locked -q && cargo vendor --locked vendor 2>/dev/null >>.cargo/config.toml)
}
cargo_reset() { rm -rf "$work/proj/target"; }
cargo_bare() { (cd "$work/proj" && "${clean[@]}" "HOME=$HOME" cargo test --no-run --offline --locked -q); }
cargo_sbx() {
  (cd "$work/proj" && "${clean[@]}" "HOME=$HOME" "$bin" --profile ci --repo "$work/proj" \
    --report "$work/report.json" -- cargo test --no-run --offline --locked -q)
}

# --- npm ---
npm_setup() {
  mkdir -p "$work/npm"
  cat >"$work/npm/package.json" <<'EOF'
{ "name": "bench-big-writes", "version": "1.0.0", "private": true,
  "dependencies": { "express": "4", "typescript": "5", "eslint": "8", "webpack": "5", "lodash": "4" } }
EOF
  (cd "$work/npm" && HOME="$work/npm-home-lock" npm install --package-lock-only --ignore-scripts --no-audit --no-fund -q >/dev/null)
  registry_host=$(npm config get registry | sed -E 's#^[a-z]+://##; s#[:/].*$##')
}
npm_reset() { rm -rf "$work/npm/node_modules" "$work/npm-home"; mkdir -p "$work/npm-home"; }
npm_bare() { (cd "$work/npm" && "${clean[@]}" "HOME=$work/npm-home" npm ci --no-audit --no-fund -q); }
npm_sbx() {
  (cd "$work/npm" && "${clean[@]}" "HOME=$work/npm-home" "$bin" --profile ci --repo "$work/npm" \
    --net filtered --allow-host "$registry_host" --report "$work/report.json" -- npm ci --no-audit --no-fund -q)
}

# --- write ---
write_setup() { mkdir -p "$work/w"; }
write_reset() { rm -f "$work/w/big"; }
write_bare() { (cd "$work/w" && "${clean[@]}" bash -c 'head -c 1G /dev/zero > big'); }
write_sbx() {
  (cd "$work/w" && "${clean[@]}" "HOME=$HOME" "$bin" --profile ci --repo "$work/w" \
    --report "$work/report.json" -- bash -c 'head -c 1G /dev/zero > big')
}

# --- write256: the same under [limits] memory = "256M": the page cache the writes fill is
# reclaimed, the run passes, its peak memory stays under the cap ---
write256_setup() {
  write_setup
  printf 'extends = "ci"\n[limits]\nmemory = "256M"\n' >"$work/ci-256m.toml"
}
write256_reset() { write_reset; }
write256_bare() { write_bare; }
write256_sbx() {
  (cd "$work/w" && "${clean[@]}" "HOME=$HOME" "$bin" --profile "$work/ci-256m.toml" --repo "$work/w" \
    --report "$work/report.json" -- bash -c 'head -c 1G /dev/zero > big')
}

for w in write write256 npm cargo; do
  [ -n "$only" ] && [ "$only" != "$w" ] && continue
  "${w}_setup"
  pair "$w" "${w}_reset" "${w}_bare" "${w}_sbx"
done
