'use strict';
// End-to-end tests of the workflow runner against the real sandbox-run binary.
// Run: node --test examples/workflow-runner/test/   (tests/workflow_runner.rs does, for scripts/test)

const { test, before } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { runStep, runWorkflow } = require('..');
const h = require('./helpers');

let bin;
let skipAll = null;

before(() => {
  bin = h.sandboxRunBin();
  const fx = h.fixture('probe');
  try {
    skipAll = h.sandboxUnavailable(bin, fx);
  } finally {
    fx.cleanup();
  }
  if (skipAll) console.log(`SKIP workflow-runner: ${skipAll}`);
});

const marker = () => `wfr-marker-${process.pid}-${crypto.randomBytes(6).toString('hex')}`;

// The tree: a parent that ignores SIGTERM, and a daemon (double fork, own session) that ignores
// SIGTERM and SIGHUP. Both carry the marker on their command lines; only SIGKILL ends them.
const TREE = {
  'tree.sh': `trap '' TERM
( setsid sh ./daemon.sh "$1" daemon & )
while :; do sleep 1; done
`,
  'daemon.sh': `trap '' TERM HUP
while :; do sleep 1; done
`,
};

test('an abort kills a SIGTERM-ignoring tree and its daemon: nothing of it survives', { timeout: 60_000 }, async (t) => {
  if (skipAll) return t.skip(skipAll);
  const fx = h.fixture('abort', TREE);
  const mark = marker();
  const ac = new AbortController();
  const killGraceMs = 1000;
  const pending = runStep(
    { argv: ['sh', './tree.sh', mark], timeoutMs: 30_000, killGraceMs },
    { bin, profile: fx.profile, repo: fx.repo, signal: ac.signal },
  );
  // Both the parent and the daemon are running before the abort.
  const started = (what) => () => h.processesWith(mark).some((p) => p.includes(`sh ./${what}`));
  await h.waitFor('the tree', started('tree.sh'), h.slack(10_000));
  await h.waitFor('the daemon', started('daemon.sh'), h.slack(10_000));
  const abortedAt = Date.now();
  ac.abort();
  const r = await pending;
  const took = Date.now() - abortedAt;

  assert.equal(r.aborted, true);
  assert.equal(r.ok, false);
  // sandbox-run relayed the SIGTERM, SIGKILLed the sandbox after the grace, and exited 143
  // (killed by SIGTERM) with its report.
  assert.equal(r.exitCode, 143, JSON.stringify(r));
  assert.notEqual(r.report, null, r.error);
  assert.equal(r.status, 'signaled', JSON.stringify(r.report));
  assert.ok(took >= killGraceMs - 50, `the tree ignored SIGTERM, yet it ended after ${took} ms`);
  assert.ok(took < killGraceMs + h.slack(3000), `took ${took} ms after the abort`);
  // Nothing carrying the marker: not the tree, not the daemon, not sandbox-run.
  assert.deepEqual(h.processesWith(mark), []);
  await new Promise((res) => setTimeout(res, 300));
  assert.deepEqual(h.processesWith(mark), [], 'something came back after the step ended');
  fx.cleanup();
});

test('the runner SIGKILLs a sandbox-run that does not exit after the abort', { timeout: 20_000 }, async (t) => {
  if (skipAll) return t.skip(skipAll);
  // A stand-in for a hung sandbox-run: ignores SIGTERM, never writes a report.
  const fx = h.fixture('hung');
  const fake = path.join(fx.dir, 'hung-sandbox-run');
  const ready = path.join(fx.dir, 'ready');
  const mark = marker();
  fs.writeFileSync(
    fake,
    `#!${process.execPath}\nprocess.on('SIGTERM', () => {});\n` +
      `require('fs').writeFileSync(${JSON.stringify(ready)}, '');\nsetInterval(() => {}, 1000);\n`,
    { mode: 0o755 },
  );
  const ac = new AbortController();
  let child;
  t.after(() => child && child.exitCode === null && child.signalCode === null && child.kill('SIGKILL'));
  const pending = runStep(
    { argv: ['true', mark], killGraceMs: 200 },
    { bin: fake, profile: fx.profile, repo: fx.repo, signal: ac.signal, onSpawn: (c) => (child = c) },
  );
  // (its SIGTERM handler is in place once it has written the file)
  await h.waitFor('the fake', () => fs.existsSync(ready), h.slack(10_000));
  assert.equal(h.processesWith(mark).length, 1);
  ac.abort();
  const r = await pending;
  assert.equal(r.aborted, true);
  assert.equal(r.status, 'aborted');
  assert.equal(r.signal, 'SIGKILL');
  assert.match(r.error, /killed by the runner/);
  assert.deepEqual(h.processesWith(mark), []);
  fx.cleanup();
});

test('exit codes and the report come back: ok, failed, timeout, denied, output cap', { timeout: 60_000 }, async (t) => {
  if (skipAll) return t.skip(skipAll);
  const fx = h.fixture(
    'codes',
    {
      'ok.sh': 'echo "hello from $1"\n',
      'fail.sh': 'echo "about to fail" >&2\nexit 3\n',
      'slow.sh': "trap '' TERM\nwhile :; do sleep 1; done\n",
      'big.sh': 'yes x | head -c 3000000\n',
    },
    '[limits]\noutput = "1M"\n',
  );
  const opts = { bin, profile: fx.profile, repo: fx.repo, maxOutput: 4 << 20 };

  const ok = await runStep({ argv: ['sh', './ok.sh', 'a step'] }, opts);
  assert.equal(ok.status, 'ok', JSON.stringify(ok));
  assert.equal(ok.ok, true);
  assert.equal(ok.exitCode, 0);
  assert.equal(ok.stdout, 'hello from a step\n');
  assert.deepEqual(ok.report.argv, ['sh', './ok.sh', 'a step']);
  assert.deepEqual(ok.limitsHit, []);
  assert.equal(ok.sandbox.no_new_privs, true);

  const failed = await runStep({ argv: ['sh', './fail.sh'] }, opts);
  assert.equal(failed.status, 'failed', JSON.stringify(failed));
  assert.equal(failed.ok, false);
  assert.equal(failed.exitCode, 3);
  assert.equal(failed.report.exit_code, 3);
  assert.match(failed.stderr, /about to fail/);

  // The sandbox's own timeout: SIGTERM (ignored), SIGKILL after the grace, exit 124.
  const timeout = await runStep({ argv: ['sh', './slow.sh'], timeoutMs: 1000, killGraceMs: 300 }, opts);
  assert.equal(timeout.status, 'timeout', JSON.stringify(timeout));
  assert.equal(timeout.exitCode, 124);
  assert.equal(timeout.aborted, false);
  assert.ok(timeout.wallMs >= 1000 && timeout.wallMs < 1300 + h.slack(3000), `${timeout.wallMs} ms`);

  // The gate: rm is not on the ci profile's program list.
  const denied = await runStep({ argv: ['rm', '-f', 'inside-nothing'] }, opts);
  assert.equal(denied.status, 'denied', JSON.stringify(denied));
  assert.equal(denied.exitCode, 126);
  assert.equal(denied.report.denied.rule, 'not-allowed', JSON.stringify(denied.report.denied));
  assert.equal(denied.report.denied.word, 'rm');

  // A limit hit: 3 MB on stdout through the profile's 1M output cap (enforced on the streams
  // sandbox-run passes through: --capture).
  const big = await runStep({ argv: ['sh', './big.sh'], capture: true }, opts);
  assert.equal(big.status, 'ok', JSON.stringify(big.report));
  assert.deepEqual(big.limitsHit, ['output'], JSON.stringify(big.report));
  assert.equal(big.stdout.length, 1 << 20);
  assert.equal(big.report.out.length, 64 * 1024);
  assert.match(big.stderr, /output: stdout passed the 1M cap/);

  // sandbox-run not there: a result, not an exception.
  const missing = await runStep({ argv: ['true'] }, { ...opts, bin: path.join(fx.dir, 'nope') });
  assert.equal(missing.status, 'sandbox_error');
  assert.match(missing.error, /ENOENT/);

  // A workflow stops at the first failure; the rest is skipped, never run.
  const wf = await runWorkflow(
    [{ argv: ['sh', './ok.sh', 'one'] }, { argv: ['sh', './fail.sh'] }, { argv: ['sh', './ok.sh', 'three'] }],
    opts,
  );
  assert.equal(wf.ok, false);
  assert.deepEqual(wf.results.map((r) => r.status), ['ok', 'failed', 'skipped']);
  assert.deepEqual(wf.results.map((r) => r.exitCode), [0, 3, null]);
  fx.cleanup();
});

test('8 concurrent steps each get their own sandbox, output and report', { timeout: 60_000 }, async (t) => {
  if (skipAll) return t.skip(skipAll);
  const fx = h.fixture('concurrent', {
    'step.sh': 'sleep 1\necho "step $1 done"\nexit "$1"\n',
  });
  const steps = Array.from({ length: 8 }, (_, i) => ({ name: `s${i}`, argv: ['sh', './step.sh', String(i)] }));
  const t0 = Date.now();
  const wf = await runWorkflow(steps, {
    bin,
    profile: fx.profile,
    repo: fx.repo,
    concurrency: 8,
    failFast: false,
  });
  const took = Date.now() - t0;
  assert.equal(wf.results.length, 8);
  wf.results.forEach((r, i) => {
    assert.equal(r.name, `s${i}`);
    assert.equal(r.stdout, `step ${i} done\n`, JSON.stringify(r));
    assert.equal(r.exitCode, i);
    assert.equal(r.status, i === 0 ? 'ok' : 'failed');
    assert.equal(r.report.exit_code, i);
  });
  // Side by side, not one after another (8 x 1 s).
  assert.ok(took < h.slack(4000), `8 steps of 1 s took ${took} ms`);
  fx.cleanup();
});

test('an edit is kept, validated with it laid over the repo, and applied only when green', { timeout: 60_000 }, async (t) => {
  const { proposeValidateApply, changes } = require('..');
  const fx = h.fixture('review', {
    'edit-good.sh': '#!/bin/sh\necho fixed > answer.txt\n',
    'edit-bad.sh': '#!/bin/sh\necho broken > answer.txt\n',
    'check.sh': '#!/bin/sh\ngrep -qx fixed answer.txt\n',
  });
  t.after(fx.cleanup);
  fs.writeFileSync(path.join(fx.repo, 'answer.txt'), 'todo\n');
  const why = h.sandboxUnavailable(bin, fx);
  if (why) return t.skip(why);
  const env = { ...process.env, XDG_STATE_HOME: path.join(fx.dir, 'state') };
  const base = { bin, profile: fx.profile, repo: fx.repo, env, timeoutMs: 30_000 };
  const answer = () => fs.readFileSync(path.join(fx.repo, 'answer.txt'), 'utf8');

  const bad = await proposeValidateApply({ argv: ['./edit-bad.sh'] }, [{ argv: ['./check.sh'] }], base);
  // A kernel without the repo's copy-on-write layer (before Linux 6.6) cannot keep changes.
  if (bad.agent.status === 'sandbox_error' && /--changes keep/.test(bad.agent.error || '')) {
    return t.skip(bad.agent.error);
  }
  assert.equal(bad.ok, false, JSON.stringify(bad.error));
  assert.ok(bad.changeset, 'the bad edit was kept');
  assert.match(bad.diff, /\+broken/);
  assert.equal(bad.validation.ok, false);
  assert.equal(bad.applied, false);
  assert.equal(answer(), 'todo\n', 'a rejected edit never reached the repo');
  assert.ok(!(await changes(['list'], { bin, env })).stdout.includes(bad.changeset), 'dropped');

  const good = await proposeValidateApply({ argv: ['./edit-good.sh'] }, [{ argv: ['./check.sh'] }], base);
  assert.equal(good.ok, true, JSON.stringify(good.error));
  assert.equal(good.validation.ok, true);
  assert.equal(good.applied, true);
  assert.equal(answer(), 'fixed\n');
});
