'use strict';
// The JavaScript API against the installed package's own binary: run(), its exit codes,
// output and report, stdin, the timeout, an abort that tears the sandbox down, a gene, and
// what the API passes to sandbox-run from the caller's environment.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Readable } = require('node:stream');
const h = require('./helpers');

const sbx = h.pkg();

test('run(): exit code, output and the parsed report of an ok and a failing command', async (t) => {
  const fx = h.fixture('codes', {
    'ok.sh': 'echo "hello from $1"\necho "to stderr" >&2\n',
    'fail.sh': 'echo "about to fail" >&2\nexit 3\n',
  });
  t.after(fx.cleanup);
  const opts = { profile: fx.profile, repo: fx.repo };

  const ok = await sbx.run(['sh', './ok.sh', 'a step'], opts);
  assert.equal(ok.exitCode, 0, ok.stderr);
  assert.equal(ok.status, 'ok');
  assert.equal(ok.stdout, 'hello from a step\n');
  assert.match(ok.stderr, /to stderr/);
  assert.equal(ok.report.results[0].status, 'ok');
  assert.deepEqual(ok.report.results[0].argv, ['sh', './ok.sh', 'a step']);
  assert.equal(ok.report.sandbox.no_new_privs, true);
  assert.equal(ok.signal, null);
  assert.equal(ok.aborted, false);

  const failed = await sbx.run(['sh', './fail.sh'], opts);
  assert.equal(failed.exitCode, 3);
  assert.equal(failed.status, 'failed');
  assert.equal(failed.report.results[0].exit_code, 3);
  assert.match(failed.stderr, /about to fail/);

  // The gate: rm is not on ci's program list. Denied, nothing ran.
  const denied = await sbx.run(['rm', '-rf', '.'], opts);
  assert.equal(denied.exitCode, 126);
  assert.equal(denied.status, 'denied');
  assert.equal(denied.report.results[0].denied.word, 'rm');

  // A bad flag: exit 125 and a report that says so; the call still resolves.
  const bad = await sbx.run(['true'], { ...opts, args: ['--memory', 'lots'] });
  assert.equal(bad.exitCode, 125);
  assert.equal(bad.status, 'sandbox_error');
  assert.ok(fs.readdirSync(fx.repo).every((n) => !n.startsWith('.sandbox-run')), 'nothing left in the repo');
});

test('run(): stdin reaches the command; without it stdin is /dev/null', async (t) => {
  const fx = h.fixture('stdin', { 'read.sh': 'n=0\nwhile read -r l; do n=$((n+1)); echo "got $l"; done\necho "lines $n"\n' });
  t.after(fx.cleanup);
  const opts = { profile: fx.profile, repo: fx.repo };
  const fed = await sbx.run(['sh', './read.sh'], { ...opts, stdin: 'one\ntwo\n' });
  assert.equal(fed.stdout, 'got one\ngot two\nlines 2\n', fed.stderr);
  assert.equal(fed.report.sandbox.stdin, 'pipe');
  const streamed = await sbx.run(['sh', './read.sh'], { ...opts, stdin: Readable.from(['a\n', 'b\n', 'c\n']) });
  assert.equal(streamed.stdout, 'got a\ngot b\ngot c\nlines 3\n', streamed.stderr);
  const none = await sbx.run(['sh', './read.sh'], opts);
  assert.equal(none.stdout, 'lines 0\n', none.stderr);
  assert.equal(none.report.sandbox.stdin, 'null');
});

test('run(): the timeout ends a SIGTERM-ignoring command with exit 124', async (t) => {
  const fx = h.fixture('timeout', { 'slow.sh': "trap '' TERM\nwhile :; do sleep 1; done\n" });
  t.after(fx.cleanup);
  const t0 = Date.now();
  const r = await sbx.run(['sh', './slow.sh'], { profile: fx.profile, repo: fx.repo, timeout: 1000, killGrace: 300 });
  const took = Date.now() - t0;
  assert.equal(r.exitCode, 124, r.stderr);
  assert.equal(r.status, 'timeout');
  assert.equal(r.aborted, false);
  assert.ok(took >= 1000 && took < 1300 + h.slack(3000), `${took} ms`);
});

// A parent that ignores SIGTERM and a daemon (double fork, own session) that ignores SIGTERM
// and SIGHUP, both carrying the marker: only SIGKILL ends them.
const TREE = {
  'tree.sh': `trap '' TERM
( setsid sh ./daemon.sh "$1" daemon & )
while :; do sleep 1; done
`,
  'daemon.sh': `trap '' TERM HUP
while :; do sleep 1; done
`,
};

test('an AbortSignal tears the whole sandbox down and rejects with an AbortError', { timeout: 60_000 }, async (t) => {
  const fx = h.fixture('abort', TREE);
  t.after(fx.cleanup);
  const mark = h.marker();
  const ac = new AbortController();
  let pid;
  const pending = sbx.run(['sh', './tree.sh', mark], {
    profile: fx.profile,
    repo: fx.repo,
    timeout: 30_000,
    killGrace: 1000,
    signal: ac.signal,
    onSpawn: (c) => (pid = c.pid),
  });
  const started = (what) => () => h.processesWith(mark).some((p) => p.includes(`sh ./${what}`));
  await h.waitFor('the tree', started('tree.sh'), h.slack(10_000));
  await h.waitFor('the daemon', started('daemon.sh'), h.slack(10_000));
  const abortedAt = Date.now();
  ac.abort(new Error('the user pressed stop'));
  const err = await pending.then(
    () => assert.fail('an aborted run resolved'),
    (e) => e,
  );
  const took = Date.now() - abortedAt;
  assert.equal(err.name, 'AbortError');
  assert.equal(err.code, 'ABORT_ERR');
  assert.equal(err.cause.message, 'the user pressed stop');
  // sandbox-run relayed SIGTERM, SIGKILLed the sandbox after the grace, exited 143 with its report
  const r = err.result;
  assert.equal(r.aborted, true);
  assert.equal(r.exitCode, 143, JSON.stringify(r));
  assert.equal(r.killed, false, 'sandbox-run exited by itself');
  assert.equal(r.status, 'signaled', JSON.stringify(r.report));
  assert.ok(took >= 1000 - 50, `the tree ignored SIGTERM, yet it ended after ${took} ms`);
  assert.ok(took < 1000 + h.slack(3000), `took ${took} ms after the abort`);
  // nothing is left: not the tree, not the daemon, not sandbox-run
  assert.ok(!fs.existsSync(`/proc/${pid}`), 'sandbox-run is gone');
  assert.deepEqual(h.processesWith(mark), []);
  await new Promise((res) => setTimeout(res, 300));
  assert.deepEqual(h.processesWith(mark), [], 'something came back after the run ended');
});

test('a sandbox-run that does not exit after the abort is SIGKILLed before the call rejects', { timeout: 20_000 }, async (t) => {
  // A stand-in for a hung sandbox-run: ignores SIGTERM, never writes a report.
  const fx = h.fixture('hung');
  t.after(fx.cleanup);
  const fake = path.join(fx.dir, 'hung-sandbox-run');
  const ready = path.join(fx.dir, 'ready');
  const mark = h.marker();
  fs.writeFileSync(
    fake,
    `#!${process.execPath}\nprocess.on('SIGTERM', () => {});\n` +
      `require('fs').writeFileSync(${JSON.stringify(ready)}, '');\nsetInterval(() => {}, 1000);\n`,
    { mode: 0o755 },
  );
  const ac = new AbortController();
  const pending = sbx.run(['true', mark], { profile: fx.profile, bin: fake, killGrace: 200, signal: ac.signal });
  await h.waitFor('the fake', () => fs.existsSync(ready), h.slack(10_000));
  assert.equal(h.processesWith(mark).length, 1);
  const t0 = Date.now();
  ac.abort();
  const err = await pending.catch((e) => e);
  assert.equal(err.name, 'AbortError');
  assert.equal(err.result.killed, true);
  assert.equal(err.result.signal, 'SIGKILL');
  assert.equal(err.result.report, null);
  assert.match(err.result.reportError, /SIGKILLed/);
  assert.ok(Date.now() - t0 >= 200 + 2000 - 50, 'the kill grace and the slack were given');
  assert.deepEqual(h.processesWith(mark), []);
});

test('an already aborted signal starts nothing', async (t) => {
  const fx = h.fixture('pre-abort');
  t.after(fx.cleanup);
  let spawned = false;
  const err = await sbx
    .run(['true'], { profile: fx.profile, repo: fx.repo, signal: AbortSignal.abort(), onSpawn: () => (spawned = true) })
    .catch((e) => e);
  assert.equal(err.name, 'AbortError');
  assert.equal(err.result, null);
  assert.equal(spawned, false);
});

test('a missing binary rejects with the spawn error; malformed calls throw TypeError', async (t) => {
  const fx = h.fixture('errors');
  t.after(fx.cleanup);
  await assert.rejects(sbx.run(['true'], { profile: fx.profile, bin: path.join(fx.dir, 'nope') }), { code: 'ENOENT' });
  await assert.rejects(sbx.run('true', { profile: fx.profile }), TypeError);
  await assert.rejects(sbx.run(['true'], {}), /option "profile" is required/);
  await assert.rejects(sbx.diffChanges('--json'), /not a changeset ID/);
});

test('runGene(): every command in order, fail-fast, one ValidationReport', async (t) => {
  const fx = h.helloNode();
  t.after(fx.cleanup);
  const opts = { profile: 'validate', repo: fx.repo };
  const green = await sbx.runGene({ type: 'Gene', id: 'g-green', validation: ['npm test'] }, opts);
  assert.equal(green.exitCode, 0, green.stderr);
  assert.equal(green.ok, true);
  assert.equal(green.report.gene_id, 'g-green');
  assert.deepEqual(green.report.results.map((r) => r.status), ['ok']);
  assert.match(green.stdout, /# fail 0/);

  const red = await sbx.runGene(
    { type: 'Gene', id: 'g-red', validation: ['npm test', 'npm run no-such-script', 'npm test'] },
    opts,
  );
  assert.equal(red.ok, false);
  assert.notEqual(red.exitCode, 0);
  assert.deepEqual(red.report.results.map((r) => r.status), ['ok', 'failed', 'skipped']);

  // a gene file by path works the same
  const file = path.join(fx.dir, 'gene.json');
  fs.writeFileSync(file, JSON.stringify({ type: 'Gene', id: 'g-file', validation: ['npm test'] }));
  const byPath = await sbx.runGene(file, opts);
  assert.equal(byPath.ok, true, byPath.stderr);
  assert.equal(byPath.report.gene_id, 'g-file');
});

test("sandbox-run gets only the environment the API documents, not the caller's whole one", async (t) => {
  const fx = h.fixture('env', { 'show.sh': 'echo "kept=${NPM_TEST_KEPT-unset} other=${NPM_TEST_OTHER-unset}"\n' });
  t.after(fx.cleanup);
  const fake = path.join(fx.dir, 'fake-sandbox-run');
  const dump = path.join(fx.dir, 'env.json');
  fs.writeFileSync(
    fake,
    `#!${process.execPath}\nrequire('fs').writeFileSync(${JSON.stringify(dump)}, JSON.stringify(process.env));\n`,
    { mode: 0o755 },
  );
  process.env.NPM_TEST_KEPT = 'yes';
  process.env.NPM_TEST_OTHER = 'no';
  process.env.NPM_TEST_API_TOKEN = 'sk-not-for-sandbox-run';
  t.after(() => {
    delete process.env.NPM_TEST_KEPT;
    delete process.env.NPM_TEST_OTHER;
    delete process.env.NPM_TEST_API_TOKEN;
  });

  // What reaches the binary: the default names plus the one asked for by name.
  await sbx.run(['true'], { profile: fx.profile, bin: fake, keepEnv: ['NPM_TEST_KEPT'] });
  const seen = JSON.parse(fs.readFileSync(dump, 'utf8'));
  assert.equal(seen.NPM_TEST_KEPT, 'yes');
  assert.equal(seen.NPM_TEST_OTHER, undefined);
  assert.equal(seen.NPM_TEST_API_TOKEN, undefined);
  assert.equal(seen.PATH, process.env.PATH);
  for (const name of Object.keys(seen)) {
    assert.ok(sbx.DEFAULT_ENV_NAMES.includes(name) || name === 'NPM_TEST_KEPT', `${name} passed`);
  }

  // And through the real binary: the kept name reaches the command, the other does not, and
  // sandbox-run never saw the token (it is not even in the report's env_dropped).
  const r = await sbx.run(['sh', './show.sh'], { profile: fx.profile, repo: fx.repo, keepEnv: ['NPM_TEST_KEPT'] });
  assert.equal(r.stdout, 'kept=yes other=unset\n', r.stderr);
  assert.ok(!JSON.stringify(r.report).includes('NPM_TEST_API_TOKEN'), JSON.stringify(r.report.sandbox.env_dropped));
});
