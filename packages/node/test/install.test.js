'use strict';
// The package as installed from its tarball: the binary on PATH (the native binary itself,
// no node shim), the README's first command through npx, and the refusal of other platforms.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const h = require('./helpers');

/**
 * npm or npx from next to this node, run without a shell. Offline: a test must never fetch a
 * package of the same name from the registry instead of using the installed one.
 */
function npmTool(tool, args, opts = {}) {
  const exe = path.join(path.dirname(process.execPath), tool);
  const r = spawnSync(fs.existsSync(exe) ? exe : tool, args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 120_000,
    env: { ...process.env, npm_config_offline: 'true', npm_config_update_notifier: 'false' },
    ...opts,
  });
  return { ...r, all: `exit ${r.status}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}` };
}

const version = () =>
  JSON.parse(fs.readFileSync(path.join(h.prefix(), 'node_modules/sandbox-run/package.json'), 'utf8')).version;

test('npx finds sandbox-run, and the bin link is the static binary itself', () => {
  const r = npmTool('npx', ['sandbox-run', '--version'], { cwd: h.prefix() });
  assert.equal(r.status, 0, r.all);
  assert.equal(r.stdout.trim(), `sandbox-run ${version()}`);

  const link = path.join(h.prefix(), 'node_modules/.bin/sandbox-run');
  const real = fs.realpathSync(link);
  assert.equal(real, path.join(h.prefix(), 'node_modules/sandbox-run/bin/sandbox-run'));
  const head = Buffer.alloc(4);
  const fd = fs.openSync(real, 'r');
  fs.readSync(fd, head, 0, 4, 0);
  fs.closeSync(fd);
  assert.deepEqual(head, Buffer.from([0x7f, 0x45, 0x4c, 0x46]), 'an ELF binary, not a script');
  assert.ok(fs.statSync(real).mode & 0o111, 'executable');
  // the API runs the same binary
  assert.equal(h.pkg().binPath(), real);
});

test('a global install (--prefix) puts sandbox-run in PREFIX/bin', (t) => {
  const dir = fs.mkdtempSync(path.join(h.testBase(), 'npm-global-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = npmTool('npm', ['install', '--global', '--prefix', dir, '--offline', '--no-audit', '--no-fund', h.tarball()]);
  assert.equal(r.status, 0, r.all);
  const v = spawnSync(path.join(dir, 'bin/sandbox-run'), ['--version'], { encoding: 'utf8' });
  assert.equal(v.stdout.trim(), `sandbox-run ${version()}`, v.stderr);
});

test("the README's first command: npx sandbox-run --profile validate --repo hello-node -- npm test", (t) => {
  const fx = h.helloNode();
  t.after(fx.cleanup);
  const report = path.join(fx.dir, 'report.json');
  const r = npmTool(
    'npx',
    ['sandbox-run', '--profile', 'validate', '--repo', fx.repo, '--report', report, '--', 'npm', 'test'],
    { cwd: h.prefix() },
  );
  assert.equal(r.status, 0, r.all);
  assert.match(r.stdout, /# pass [1-9]/, r.all);
  assert.match(r.stdout, /# fail 0/, r.all);
  const rep = JSON.parse(fs.readFileSync(report, 'utf8'));
  assert.equal(rep.results[0].status, 'ok');
  assert.deepEqual(rep.results[0].argv, ['npm', 'test']);
  assert.deepEqual(rep.sandbox.degraded || [], [], 'every layer of validate in force');
});

test('npm refuses the package on another platform, and loading it there says what to do', () => {
  const dir = path.join(h.prefix(), 'node_modules/sandbox-run');
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  assert.deepEqual([manifest.os, manifest.cpu], [['linux'], ['x64']]);
  assert.equal(manifest.scripts, undefined, 'no install script (npm warns about each)');
  // npm's own platform check (the module its installer calls) on the installed manifest
  const checks = path.join(path.dirname(process.execPath), '../lib/node_modules/npm/node_modules/npm-install-checks');
  if (fs.existsSync(checks)) {
    const { checkPlatform } = require(checks);
    checkPlatform(manifest, false, { os: 'linux', cpu: 'x64' });
    assert.throws(() => checkPlatform(manifest, false, { os: 'darwin', cpu: 'arm64' }), { code: 'EBADPLATFORM' });
    assert.throws(() => checkPlatform(manifest, false, { os: 'linux', cpu: 'arm64' }), { code: 'EBADPLATFORM' });
  }

  // An install forced past that: loading the package says what to do, in one line.
  const r = spawnSync(
    process.execPath,
    ['-e', `Object.defineProperty(process, 'arch', { value: 'arm64' }); require(${JSON.stringify(dir)})`],
    { encoding: 'utf8' },
  );
  assert.notEqual(r.status, 0);
  const line = r.stderr.split('\n').find((l) => l.includes('sandbox-run:'));
  assert.match(line, /supports linux-x64 only \(this is linux-arm64\)/, r.stderr);
  assert.match(line, /cargo install --locked --path \./);
});
