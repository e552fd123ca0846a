'use strict';
// The package README's examples run as written, the way scripts/doc-test runs them (the
// marker format of `<!-- doc-test: ... -->` above a fence): each `js` block as an ES module
// (`node example.mjs`) in a user's project, and each `sh` block marked `setup=project` with
// bash there. The project is a scratch copy of examples/hello-node made a git repo, with the
// packed tarball installed; HOME and TMPDIR are fresh, so kept changesets and homes land in
// the scratch place. The outcome is the one written above the block (exit 0 by default).

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const h = require('./helpers');

const README = path.join(h.checkout, 'packages', 'node', 'README.md');

/** Every fenced block: { line, lang, body, marker: { directive: [values] } }. */
function blocks(text) {
  const lines = text.split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,})\s*([\w-]*)\s*$/.exec(lines[i]);
    if (!open) continue;
    const fence = open[1];
    const start = i;
    const body = [];
    for (i++; i < lines.length && !lines[i].startsWith(fence); i++) body.push(lines[i]);
    const marker = {};
    const m = start > 0 && /^<!--\s*doc-test:(.*)-->\s*$/.exec(lines[start - 1]);
    if (m) {
      for (const part of m[1].split(';')) {
        const d = part.trim();
        if (!d) continue;
        const eq = d.indexOf('=');
        if (eq < 0) throw new Error(`README.md:${start}: doc-test directive without a value: ${d}`);
        (marker[d.slice(0, eq).trim()] ||= []).push(d.slice(eq + 1).trim());
      }
    }
    out.push({ line: start + 1, lang: open[2], body: `${body.join('\n')}\n`, marker });
  }
  return out;
}

const NPM_QUIET = { npm_config_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' };

/** A user's project: hello-node, a git repo, the packed tarball copied in and installed. */
function project(place) {
  const dir = path.join(place, 'project');
  fs.cpSync(path.join(h.checkout, 'examples', 'hello-node'), dir, { recursive: true });
  const tgz = path.join(dir, path.basename(h.tarball()));
  fs.copyFileSync(h.tarball(), tgz);
  const env = {
    PATH: process.env.PATH,
    HOME: path.join(place, 'home'),
    GIT_AUTHOR_NAME: 'npm-test',
    GIT_AUTHOR_EMAIL: 'npm-test@localhost',
    GIT_COMMITTER_NAME: 'npm-test',
    GIT_COMMITTER_EMAIL: 'npm-test@localhost',
    ...NPM_QUIET,
  };
  for (const step of [['git', 'init', '-q'], ['git', 'add', '-A'], ['git', 'commit', '-qm', 'hello-node'], ['npm', 'install', '--no-save', `./${path.basename(tgz)}`]]) {
    const r = spawnSync(step[0], step.slice(1), { cwd: dir, env, encoding: 'utf8' });
    assert.equal(r.status, 0, `${step.join(' ')}: ${r.stdout}${r.stderr}`);
  }
  return dir;
}

const all = blocks(fs.readFileSync(README, 'utf8'));
const runnable = all.filter((b) => b.lang === 'js' || (['sh', 'bash', 'shell'].includes(b.lang) && (b.marker.setup || []).includes('project')));

test('the README has its examples: at least two js blocks, each with a known marker', () => {
  assert.ok(all.filter((b) => b.lang === 'js').length >= 2, 'js blocks found');
  for (const b of all) {
    for (const d of Object.keys(b.marker)) {
      assert.ok(['exit', 'stdout-has', 'stderr-has', 'setup', 'as', 'skip'].includes(d), `README.md:${b.line}: unknown directive ${d}`);
    }
    assert.ok(b.lang, `README.md:${b.line}: a fence without a language`);
    // A js block runs as an ES module: CommonJS's require() there is a ReferenceError.
    if (b.lang === 'js') assert.doesNotMatch(b.body, /\brequire\(/, `README.md:${b.line}: require() in an ES module`);
  }
});

for (const b of runnable) {
  test(`README.md:${b.line} (${b.lang}) runs as written in a user's project`, { timeout: 300_000 }, (t) => {
    if (b.marker.skip) return t.skip(b.marker.skip[0]);
    assert.ok(!b.marker.as, `README.md:${b.line}: as=${b.marker.as} is not run by this test`);
    const place = fs.mkdtempSync(path.join(h.testBase(), 'npm-readme-'));
    t.after(() => fs.rmSync(place, { recursive: true, force: true }));
    for (const d of ['home', 'tmp']) fs.mkdirSync(path.join(place, d), { mode: 0o700 });
    const cwd = project(place);
    let cmd;
    if (b.lang === 'js') {
      fs.writeFileSync(path.join(cwd, 'example.mjs'), b.body);
      cmd = [process.execPath, ['example.mjs']];
    } else {
      fs.writeFileSync(path.join(place, 'block.sh'), `set -e -o pipefail\n${b.body}`);
      cmd = ['bash', [path.join(place, 'block.sh')]];
    }
    const r = spawnSync(cmd[0], cmd[1], {
      cwd,
      encoding: 'utf8',
      timeout: 280_000,
      env: {
        PATH: `${path.dirname(process.execPath)}:${process.env.PATH}`,
        HOME: path.join(place, 'home'),
        TMPDIR: path.join(place, 'tmp'),
        LANG: 'C.UTF-8',
        TERM: 'dumb',
        USER: os.userInfo().username,
        LOGNAME: os.userInfo().username,
        ...NPM_QUIET,
      },
    });
    const all = `exit ${r.status}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
    assert.equal(r.status, Number((b.marker.exit || ['0'])[0]), all);
    for (const want of b.marker['stdout-has'] || []) assert.ok(r.stdout.includes(want), `stdout lacks ${JSON.stringify(want)}\n${all}`);
    for (const want of b.marker['stderr-has'] || []) assert.ok(r.stderr.includes(want), `stderr lacks ${JSON.stringify(want)}\n${all}`);
  });
}
