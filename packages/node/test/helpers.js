'use strict';
// Fixtures for the package's tests. They test the package as a user gets it: installed from
// its `npm pack` tarball into a fresh directory (scripts/test-npm-package does that and sets
// SANDBOX_RUN_NPM_PREFIX), never this checkout's files.

const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const checkout = path.resolve(__dirname, '../../..');

function need(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run scripts/test-npm-package, which packs, installs and tests the package`);
  }
  return v;
}

/** The directory the tarball was installed into (it has node_modules/sandbox-run). */
const prefix = () => need('SANDBOX_RUN_NPM_PREFIX');
/** The tarball itself. */
const tarball = () => need('SANDBOX_RUN_NPM_TARBALL');
/** The installed package, loaded from where npm put it. */
const pkg = () => require(path.join(prefix(), 'node_modules', 'sandbox-run'));

/** Where fixtures go: $SANDBOX_RUN_TEST_TMP, never under a world-writable directory (the gate
 * refuses programs there, and the sandbox replaces /tmp). */
function testBase() {
  const base = process.env.SANDBOX_RUN_TEST_TMP || path.join(checkout, 'target', 'tmp');
  fs.mkdirSync(base, { recursive: true });
  const real = fs.realpathSync(base);
  for (let d = real; d !== path.dirname(d); d = path.dirname(d)) {
    if (fs.statSync(d).mode & 0o002) {
      throw new Error(`${d} is world-writable: the gate refuses programs under it; set SANDBOX_RUN_TEST_TMP`);
    }
  }
  return real;
}

/**
 * A scratch directory with `repo/` (the given scripts written into it) and `p.toml`: a profile
 * extending `ci` (shells allowed, repo read-write) with `extraToml` appended.
 */
function fixture(name, scripts = {}, extraToml = '') {
  const dir = path.join(testBase(), `npm-${name}-${process.pid}-${crypto.randomBytes(3).toString('hex')}`);
  fs.mkdirSync(path.join(dir, 'repo'), { recursive: true, mode: 0o755 });
  for (const [file, text] of Object.entries(scripts)) {
    fs.writeFileSync(path.join(dir, 'repo', file), text, { mode: 0o755 });
  }
  const profile = path.join(dir, 'p.toml');
  fs.writeFileSync(profile, `extends = "ci"\n${extraToml}\n`);
  return { dir, repo: path.join(dir, 'repo'), profile, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** A copy of the bundled example examples/hello-node (a real `npm test`). */
function helloNode() {
  const fx = fixture('hello');
  fs.rmSync(fx.repo, { recursive: true });
  fs.cpSync(path.join(checkout, 'examples', 'hello-node'), fx.repo, { recursive: true });
  return fx;
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

/** An upper bound stretched by $SANDBOX_RUN_TEST_SLOWDOWN (emulated VMs). */
function slack(ms) {
  const f = Number(process.env.SANDBOX_RUN_TEST_SLOWDOWN);
  return Number.isFinite(f) && f >= 1 ? ms * f : ms;
}

const marker = () => `npm-marker-${process.pid}-${crypto.randomBytes(6).toString('hex')}`;

module.exports = { checkout, prefix, tarball, pkg, testBase, fixture, helloNode, processesWith, waitFor, slack, marker };
