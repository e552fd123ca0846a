'use strict';
// The way back through the API: a run keeps its writes as a changeset, which is listed,
// shown, diffed, then applied or dropped.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

const sbx = h.pkg();

test('keep, list, show, diff, apply and drop a changeset', async (t) => {
  const fx = h.fixture('changes', {
    'edit.sh': '#!/bin/sh\necho "$1" > answer.txt\n',
    'check.sh': '#!/bin/sh\ngrep -qx fixed answer.txt\n',
  });
  t.after(fx.cleanup);
  fs.writeFileSync(path.join(fx.repo, 'answer.txt'), 'todo\n');
  // kept changesets live under $XDG_STATE_HOME: the fixture's own (the API passes the name)
  process.env.XDG_STATE_HOME = path.join(fx.dir, 'state');
  t.after(() => delete process.env.XDG_STATE_HOME);
  const answer = () => fs.readFileSync(path.join(fx.repo, 'answer.txt'), 'utf8');
  const opts = { profile: fx.profile, repo: fx.repo, changes: 'keep' };

  const kept = await sbx.run(['./edit.sh', 'fixed'], opts);
  // A kernel without the repo's copy-on-write layer (before Linux 6.6) cannot keep changes.
  if (kept.exitCode === 125 && /--changes keep|overlay/.test(kept.stderr)) return t.skip(kept.stderr.trim());
  assert.equal(kept.exitCode, 0, kept.stderr);
  assert.match(kept.changeset, /^c[a-z2-7]{8}$/);
  assert.equal(kept.report.results[0].repo_changes.applied, 'kept');
  assert.equal(answer(), 'todo\n', 'the repo is untouched');

  const list = await sbx.listChanges();
  assert.deepEqual(list.map((c) => c.id), [kept.changeset]);
  const shown = await sbx.showChanges(kept.changeset);
  assert.deepEqual(list[0].manifest, shown);
  assert.match(JSON.stringify(shown), /answer\.txt/);

  const diff = await sbx.diffChanges(kept.changeset);
  assert.match(diff, /^-todo$/m);
  assert.match(diff, /^\+fixed$/m);

  // validated with the changes laid over the repo, copy-on-write
  const check = await sbx.run(['./check.sh'], {
    profile: fx.profile,
    repo: fx.repo,
    withChanges: kept.changeset,
  });
  assert.equal(check.exitCode, 0, check.stderr);
  assert.equal(answer(), 'todo\n');

  await sbx.applyChanges(kept.changeset);
  assert.equal(answer(), 'fixed\n');
  assert.deepEqual(await sbx.listChanges(), [], 'an applied changeset is removed');

  // a second edit, then the repo changes under it: apply is refused, drop throws it away
  const second = await sbx.run(['./edit.sh', 'again'], opts);
  assert.ok(second.changeset, second.stderr);
  fs.writeFileSync(path.join(fx.repo, 'answer.txt'), 'edited by a human\n');
  const refused = await sbx.applyChanges(second.changeset).catch((e) => e);
  assert.equal(refused.name, 'SandboxRunError');
  assert.equal(refused.exitCode, 125);
  assert.match(refused.message, /^sandbox-run changes apply c[a-z2-7]{8}: /);
  assert.equal(answer(), 'edited by a human\n');
  await sbx.dropChanges(second.changeset);
  assert.deepEqual(await sbx.listChanges(), []);
  await assert.rejects(sbx.showChanges(second.changeset), { name: 'SandboxRunError' });
});
