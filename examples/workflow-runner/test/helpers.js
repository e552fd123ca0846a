'use strict';
// Fixtures for the workflow runner's tests: the sandbox-run binary, a scratch base that the
// gate accepts (not world-writable, so not /tmp), a repo with scripts, a test profile, and
// the processes left in /proc.

const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { spawnSync } = require('node:child_process');

const checkout = path.resolve(__dirname, '../../..');

/** $SANDBOX_RUN_BIN, else the checkout's debug build (the Rust test passes its own). */
function sandboxRunBin() {
  if (process.env.SANDBOX_RUN_BIN) return process.env.SANDBOX_RUN_BIN;
  const target = process.env.CARGO_TARGET_DIR || path.join(checkout, 'target');
  // .cargo/config.toml names an explicit target triple, so the build lands under it.
  const candidates = fs.existsSync(target)
    ? fs.readdirSync(target).map((d) => path.join(target, d, 'debug/sandbox-run'))
    : [];
  candidates.push(path.join(target, 'debug/sandbox-run'));
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) {
    throw new Error(
      `no sandbox-run binary under ${target}: run \`cargo build\` or set SANDBOX_RUN_BIN`,
    );
  }
  return found;
}

/** Where fixtures go: $SANDBOX_RUN_TEST_TMP (rootless runs of scripts/test), else target/tmp. */
function testBase() {
  const base =
    process.env.SANDBOX_RUN_TEST_TMP ||
    path.join(process.env.CARGO_TARGET_DIR || path.join(checkout, 'target'), 'tmp');
  fs.mkdirSync(base, { recursive: true });
  const real = fs.realpathSync(base);
  for (let d = real; d !== path.dirname(d); d = path.dirname(d)) {
    if (fs.statSync(d).mode & 0o002) {
      throw new Error(`${d} is world-writable: the gate refuses programs under it; use another base`);
    }
  }
  return real;
}

/**
 * A scratch directory with `repo/` (the given scripts written into it) and `p.toml`: a profile
 * extending `ci` (shells allowed) with the cgroup layer best-effort and `extraToml` appended.
 */
function fixture(name, scripts = {}, extraToml = '') {
  const dir = path.join(testBase(), `wfr-${name}-${process.pid}-${crypto.randomBytes(3).toString('hex')}`);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, 'repo'), { recursive: true, mode: 0o755 });
  for (const [file, text] of Object.entries(scripts)) {
    fs.writeFileSync(path.join(dir, 'repo', file), text, { mode: 0o755 });
  }
  const profile = path.join(dir, 'p.toml');
  fs.writeFileSync(
    profile,
    `extends = "ci"\n${extraToml}\n[layers]\ncgroup = "best-effort"\n`,
  );
  return {
    dir,
    repo: path.join(dir, 'repo'),
    profile,
    cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

/** Processes (other than this one) whose command line contains `marker`. */
function processesWith(marker) {
  const found = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let cmd;
    try {
      cmd = fs.readFileSync(`/proc/${name}/cmdline`).toString('utf8').replace(/\0/g, ' ').trim();
    } catch {
      continue; // gone meanwhile, or not ours to read
    }
    if (cmd.includes(marker)) found.push(`${name}: ${cmd}`);
  }
  return found;
}

async function waitFor(what, cond, ms) {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** An upper bound stretched by $SANDBOX_RUN_TEST_SLOWDOWN (emulated VMs), as in tests/support. */
function slack(ms) {
  const f = Number(process.env.SANDBOX_RUN_TEST_SLOWDOWN);
  return Number.isFinite(f) && f >= 1 ? ms * f : ms;
}

/**
 * Can a sandbox start here at all? Runs `true` under the profile. Returns null when it can,
 * else the reason (the caller skips; a failure when SANDBOX_RUN_TEST_REQUIRE is set, as in the
 * Rust suites).
 */
function sandboxUnavailable(bin, fx) {
  const r = spawnSync(bin, ['--profile', fx.profile, '--repo', fx.repo, '--', 'true'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    encoding: 'utf8',
  });
  if (r.status === 0) return null;
  const why = `sandbox-run cannot start a sandbox here (exit ${r.status}): ${r.stderr.trim()}`;
  if (process.env.SANDBOX_RUN_TEST_REQUIRE) throw new Error(`${why}; SANDBOX_RUN_TEST_REQUIRE is set`);
  return why;
}

module.exports = { sandboxRunBin, testBase, fixture, processesWith, waitFor, slack, sandboxUnavailable };
