'use strict';
// The options of the API: an unknown key or a wrongly typed value is a TypeError before
// anything starts; every option reaches sandbox-run's command line, seen in what the real
// binary did (its report, or the command's behaviour), never by looking at the argv built.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync, execFileSync } = require('node:child_process');
const h = require('./helpers');

const sbx = h.pkg();

/** Run `fn` with process.env[name] set (the API passes names it is asked for from there). */
function withEnv(t, vars) {
  for (const [k, v] of Object.entries(vars)) process.env[k] = v;
  t.after(() => {
    for (const k of Object.keys(vars)) delete process.env[k];
  });
}

/** A file only its owner may read (what --env-file and --secret-file require). */
function privateFile(dir, name, text) {
  const f = path.join(dir, name);
  fs.writeFileSync(f, text, { mode: 0o600 });
  return f;
}

/** The flags the installed sandbox-run's `run` knows. */
const runHelp = () => execFileSync(sbx.binPath(), ['run', '--help'], { encoding: 'utf8' });

test('an unknown option is a TypeError naming it, with the name it most likely meant', async () => {
  const o = { profile: 'ci', repo: h.checkout };
  // The call: all three were silently ignored.
  await assert.rejects(sbx.run(['true'], { ...o, without: 'cgroup', home: 'persist', timout: 5 }), {
    name: 'TypeError',
    message: 'run(): unknown option "timout" (did you mean "timeout"?)',
  });
  const near = {
    ca_certs: 'caCerts',
    'allow-host': 'allowHost',
    cacerts: 'caCerts',
    secret: 'secrets',
    homee: 'home',
    withoutt: 'without',
    passenv: 'passEnv',
    kilGrace: 'killGrace',
    stdinfile: 'stdinFile',
    allowPrograms: 'allowProgram',
  };
  for (const [typo, meant] of Object.entries(near)) {
    await assert.rejects(sbx.run(['true'], { ...o, [typo]: 'x' }), {
      name: 'TypeError',
      message: `run(): unknown option ${JSON.stringify(typo)} (did you mean ${JSON.stringify(meant)}?)`,
    });
  }
  // Nothing near: the message lists what the call takes.
  await assert.rejects(sbx.run(['true'], { ...o, frobnicate: true }), {
    name: 'TypeError',
    message: /^run\(\): unknown option "frobnicate" \(run\(\) takes bin, env, cwd, signal, .*caCerts.*\)$/,
  });
  // An option of run() that `validate` has no flag for is unknown to runGene().
  for (const key of ['killGrace', 'memory', 'home', 'stdin']) {
    await assert.rejects(sbx.runGene({ type: 'Gene', id: 'g', validation: ['true'] }, { profile: 'ci', [key]: 1 }), {
      name: 'TypeError',
      message: new RegExp(`^runGene\\(\\): unknown option "${key}"`),
    });
  }
  // The changes functions take the common options only.
  await assert.rejects(sbx.listChanges({ cwdd: '/' }), { name: 'TypeError', message: 'listChanges(): unknown option "cwdd" (did you mean "cwd"?)' });
  await assert.rejects(sbx.diffChanges('caaaaaaaa', { profile: 'ci' }), { name: 'TypeError', message: /^diffChanges\(\): unknown option "profile"/ });
  await assert.rejects(sbx.changesCommand(['list'], { repo: '.' }), { name: 'TypeError', message: /^changesCommand\(\): unknown option "repo"/ });
  await assert.rejects(sbx.run(['true'], 'ci'), { name: 'TypeError', message: 'run(): options must be a plain object ({ ... }), not "ci"' });
});

test('a wrongly typed value is a TypeError naming the option and what it must be', async () => {
  const o = { profile: 'ci', repo: h.checkout };
  const bad = [
    ['profile', 42, 'a non-empty string'],
    ['repo', '', 'a non-empty string'],
    ['home', 'persistent', "'tmp' or 'persist'"],
    ['without', 'cgroups', "one of 'cgroup', 'landlock', 'seccomp', 'namespaces' or an array of them"],
    ['without', ['cgroup', 'selinux'], 'one of'],
    ['net', 'all', "'none' or 'filtered' or 'host'"],
    ['changes', 'commit', "'apply' or 'keep' or 'discard'"],
    ['timeout', -1, 'a positive number of ms'],
    ['timeout', '', 'a positive number of ms'],
    ['killGrace', Infinity, 'a positive number of ms'],
    ['memory', 1.5, 'a number of bytes or a size'],
    ['cpus', 0, 'a positive number of CPUs'],
    ['pids', 1.5, 'a positive integer'],
    ['capture', 'yes', 'true or false'],
    ['timings', 1, 'true or false'],
    ['verbose', 4, 'true, false or 0 to 3'],
    ['allowHost', ['example.com', 443], 'a string or an array of strings'],
    ['allowProgram', [''], 'a string or an array of strings'],
    ['keepEnv', { A: 1 }, 'a string or an array of strings'],
    ['passEnv', 7, 'a string or an array of strings'],
    ['envFile', null, 'a string or an array of strings'],
    ['setEnv', { A: 1 }, 'an object of strings'],
    ['setEnv', ['A=1'], 'an object of strings'],
    ['secrets', { TOKEN: [] }, 'an object { NAME:'],
    ['secrets', 'TOKEN=api.example.com', 'an object { NAME:'],
    ['secretFile', false, 'a string or an array of strings'],
    ['caCerts', ['a.pem'], 'a non-empty string'],
    ['stdin', 42, 'a string, a Buffer'],
    ['stdinFile', 1, 'a non-empty string'],
    ['withChanges', 'nope', 'a changeset ID'],
    ['signal', {}, 'an AbortSignal'],
    ['env', { PATH: 1 }, 'an object of strings'],
    ['onSpawn', 'log', 'a function'],
    ['maxOutput', -1, 'a positive integer'],
    ['slackMs', '5s', 'a number of ms'],
  ];
  for (const [key, value, must] of bad) {
    let spawned = false;
    const err = await sbx.run(['true'], { ...o, onSpawn: () => (spawned = true), [key]: value }).catch((e) => e);
    assert.equal(err.name, 'TypeError', `${key}: ${err}`);
    assert.ok(err.message.startsWith(`run(): option "${key}" must be `), err.message);
    assert.ok(err.message.includes(must), `${key}: ${err.message}`);
    assert.equal(spawned, false, `${key}: sandbox-run was started`);
  }
  await assert.rejects(sbx.run(['true'], { ...o, stdin: 'x', stdinFile: '/dev/null' }), { message: 'run(): give stdin or stdinFile, not both' });
  await assert.rejects(sbx.run(['true'], { ...o, verbose: true, quiet: true }), { message: 'run(): give verbose or quiet, not both' });
  await assert.rejects(sbx.run(['true'], { repo: h.checkout }), { message: /^run\(\): option "profile" is required/ });
  await assert.rejects(sbx.runGene({}, { profile: 'ci', without: 'cgroups' }), { name: 'TypeError', message: /^runGene\(\): option "without" must be/ });
  await assert.rejects(sbx.showChanges('caaaaaaaa', { maxOutput: 'lots' }), { name: 'TypeError', message: /^showChanges\(\): option "maxOutput"/ });
});

test('what is checked is what is used: flag-like values, prototypes, getters, commas and "=" in names', async (t) => {
  const fx = h.fixture('variants', { 'show.sh': 'echo "home=$HOME"\n' });
  t.after(fx.cleanup);
  const o = { profile: fx.profile, repo: fx.repo };
  // A value that looks like a flag stays the value of its own flag: `--repo=--help` is a
  // directory that does not exist (125), not `--repo --help` printing the help (exit 0).
  for (const [key, value] of [['repo', '--help'], ['profile', '--version'], ['caCerts', '--help']]) {
    const r = await sbx.run(['true'], { ...o, [key]: value });
    assert.equal(r.exitCode, 125, `${key}: ${value}: ${r.stdout}${r.stderr}`);
    assert.doesNotMatch(r.stdout, /Usage:|^sandbox-run \d/m);
  }
  // Keys on Object.prototype are never read as options.
  Object.prototype.args = ['--memory', 'lots'];
  try {
    const r = await sbx.run(['true'], o);
    assert.equal(r.exitCode, 0, r.stderr);
  } finally {
    delete Object.prototype.args;
  }
  // A class instance (or any object whose prototype holds options) is refused, not half read.
  class Opts {
    constructor() {
      this.profile = fx.profile;
    }
    get home() {
      return 'persist';
    }
  }
  await assert.rejects(sbx.run(['true'], new Opts()), { name: 'TypeError', message: /options must be a plain object/ });
  // A getter is read once: the value checked is the value passed.
  let reads = 0;
  const tricky = {
    ...o,
    get home() {
      reads += 1;
      return reads === 1 ? 'tmp' : 'bogus';
    },
  };
  const r = await sbx.run(['sh', './show.sh'], tricky);
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(reads, 1);
  // A host with a comma would be two hosts the secret goes to; a KEY with "=" another variable.
  await assert.rejects(sbx.run(['true'], { ...o, secrets: { NPM_T_SECRET: 'api.example.com,evil.example' } }), {
    name: 'TypeError',
    message: /option "secrets" must be .*no ',' in a host/,
  });
  await assert.rejects(sbx.run(['true'], { ...o, secrets: { 'NPM_T_SECRET=x': 'api.example.com' } }), { name: 'TypeError' });
  await assert.rejects(sbx.run(['true'], { ...o, setEnv: { 'PATH=/tmp/evil:/usr/bin MORE': 'x' } }), {
    name: 'TypeError',
    message: /option "setEnv" must be .*no "=" in a KEY/,
  });
  await assert.rejects(sbx.run(['true'], { ...o, [Symbol('timeout')]: 5 }), { name: 'TypeError', message: /unknown option Symbol\(timeout\)/ });
  const hidden = { ...o };
  Object.defineProperty(hidden, 'timout', { value: 5, enumerable: false });
  await assert.rejects(sbx.run(['true'], hidden), { name: 'TypeError', message: /unknown option "timout"/ });
});

test('undefined counts as not given', async (t) => {
  const fx = h.fixture('undef');
  t.after(fx.cleanup);
  const r = await sbx.run(['true'], { profile: fx.profile, repo: fx.repo, timeout: undefined, home: undefined, stdin: undefined });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.report.sandbox.stdin, 'null');
});

test('home: persist keeps $HOME across runs, tmp does not; without and timeout go with it', async (t) => {
  const fx = h.fixture('home', {
    'put.sh': 'echo "from the first run" > "$HOME/note"\n',
    'get.sh': 'cat "$HOME/note" 2>/dev/null || echo "no note"\n',
  });
  t.after(fx.cleanup);
  // kept homes live under $XDG_STATE_HOME: the fixture's own (the API passes the name)
  withEnv(t, { XDG_STATE_HOME: path.join(fx.dir, 'state') });
  // The call of the issue, spelt right: every option is in force.
  const o = { profile: fx.profile, repo: fx.repo, without: 'cgroup', home: 'persist', timeout: 30_000 };
  const put = await sbx.run(['sh', './put.sh'], o);
  assert.equal(put.exitCode, 0, put.stderr);
  const kept = await sbx.run(['sh', './get.sh'], o);
  assert.equal(kept.stdout, 'from the first run\n', kept.stderr);
  const tmp = await sbx.run(['sh', './get.sh'], { ...o, home: 'tmp' });
  assert.equal(tmp.stdout, 'no note\n', 'home: tmp is a fresh one');
  // root gets a cgroup here: `without` changes nothing, as the flag says; the timeout is
  // in force (the next test and api.test.js's show it end a command).
  assert.deepEqual(kept.report.sandbox.degraded, [], JSON.stringify(kept.report.sandbox));
  assert.ok(kept.report.sandbox.cgroup, 'the cgroup is used where the host has it');
  const slow = await sbx.run(['sh', '-c', 'while :; do :; done'], { ...o, timeout: '1s', killGrace: 100 });
  assert.equal(slow.exitCode, 124, slow.stderr);
});

test('without: a user without a cgroup is refused by a profile that requires one, and runs degraded with it', { timeout: 120_000 }, async (t) => {
  let user;
  try {
    user = execFileSync('id', ['-u', 'sbxtest'], { encoding: 'utf8' }).trim();
  } catch {
    return t.skip('no user sbxtest to run rootless as (useradd -m sbxtest)');
  }
  if (process.getuid() !== 0) return t.skip('not root: cannot become sbxtest');
  const fx = h.fixture('without');
  t.after(fx.cleanup);
  // The install, the fixture and the node binary must be reachable by sbxtest: they are, under
  // 0755 directories; the scratch files of the call go to sbxtest's own TMPDIR.
  const tmp = path.join(fx.dir, 'tmp');
  fs.mkdirSync(tmp, { mode: 0o700 });
  fs.chownSync(tmp, Number(user), Number(user));
  const script = `
    const sbx = require(${JSON.stringify(path.join(h.prefix(), 'node_modules', 'sandbox-run'))});
    (async () => {
      const o = { profile: 'validate', repo: ${JSON.stringify(fx.repo)} };
      const plain = await sbx.run(['node', '--version'], o);
      const degraded = await sbx.run(['node', '--version'], { ...o, without: ['cgroup'] });
      const pick = (r) => ({ exitCode: r.exitCode, stderr: r.stderr, reportError: r.reportError, degraded: r.report?.sandbox?.degraded, stdout: r.stdout });
      const gene = { type: 'Gene', id: 'g-rootless', validation: ['node --version'] };
      const genePlain = await sbx.runGene(gene, o);
      const geneDegraded = await sbx.runGene(gene, { ...o, without: 'cgroup' });
      const g = (r) => ({ exitCode: r.exitCode, ok: r.ok, stderr: r.stderr });
      console.log(JSON.stringify({ plain: pick(plain), degraded: pick(degraded), genePlain: g(genePlain), geneDegraded: g(geneDegraded) }));
    })();`;
  const r = spawnSync(process.execPath, ['-e', script], {
    uid: Number(user),
    gid: Number(user),
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: tmp, TMPDIR: tmp, XDG_STATE_HOME: tmp, USER: 'sbxtest', LOGNAME: 'sbxtest' },
  });
  assert.equal(r.status, 0, r.stderr);
  const { plain, degraded, genePlain, geneDegraded } = JSON.parse(r.stdout);
  if (plain.exitCode === 0) {
    // sbxtest has a cgroup of its own here (a delegated cgroup v2 subtree): nothing to show.
    return t.skip('sbxtest gets a cgroup on this host: validate runs without --without');
  }
  // The refusal names the flag; with it the run works, the cgroup listed as degraded.
  assert.equal(plain.exitCode, 125, JSON.stringify(plain));
  assert.match(plain.stderr, /--without cgroup/);
  assert.equal(degraded.exitCode, 0, JSON.stringify(degraded));
  assert.equal(degraded.stdout, `${process.version}\n`);
  assert.deepEqual(degraded.degraded, ['cgroup']);
  // runGene passes it to `sandbox-run validate` the same way
  assert.equal(genePlain.ok, false, JSON.stringify(genePlain));
  assert.equal(geneDegraded.ok, true, JSON.stringify(geneDegraded));
});

test('caCerts: the bundle joins the sandbox trust store', async (t) => {
  const fx = h.fixture('ca', { 'trust.sh': 'grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE"; grep -q "$1" "$SSL_CERT_FILE" && echo "ours is in"\n' });
  t.after(fx.cleanup);
  const pem = path.join(fx.dir, 'test-ca.pem');
  const made = spawnSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', path.join(fx.dir, 'ca.key'), '-out', pem, '-days', '1', '-subj', '/CN=sandbox-run npm test CA'],
    { encoding: 'utf8' },
  );
  if (made.error) return t.skip(`openssl is not installed (${made.error.code}): no CA to make`);
  assert.equal(made.status, 0, made.stderr);
  const body = fs.readFileSync(pem, 'utf8').split('\n')[1]; // a line of the certificate's base64
  const o = { profile: fx.profile, repo: fx.repo };
  const without = await sbx.run(['sh', './trust.sh', body], o);
  assert.ok(!without.stdout.includes('ours is in'), without.stdout + without.stderr);
  const r = await sbx.run(['sh', './trust.sh', body], { ...o, caCerts: pem });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.match(r.stdout, /ours is in/);
  assert.deepEqual(r.report.sandbox.ca_certs.filter((c) => c.from === '--ca-certs'), [{ path: pem, from: '--ca-certs' }]);
});

test('secrets, secretFile, passEnv, envFile and setEnv reach the command as the flags say', async (t) => {
  const fx = h.fixture('env-flags', {
    'show.sh': 'for n in NPM_T_SECRET NPM_T_FILE_SECRET NPM_T_PASSED_TOKEN NPM_T_FROM_FILE NPM_T_SET; do eval "echo $n=\\${$n-unset}"; done\n',
  });
  t.after(fx.cleanup);
  withEnv(t, { NPM_T_SECRET: 'sk-env-value-1234567890', NPM_T_PASSED_TOKEN: 'tok-passed-by-name' });
  const secretFile = privateFile(fx.dir, 'secrets.env', 'NPM_T_FILE_SECRET=sk-file-value-0987654321\n');
  const envFile = privateFile(fx.dir, 'vars.env', 'NPM_T_FROM_FILE=from the env file\n');
  const r = await sbx.run(['sh', './show.sh'], {
    profile: fx.profile,
    repo: fx.repo,
    secrets: { NPM_T_SECRET: '127.0.0.1:9', NPM_T_FILE_SECRET: ['127.0.0.1:9'] },
    secretFile,
    passEnv: 'NPM_T_PASSED_TOKEN',
    envFile: [envFile],
    setEnv: { NPM_T_SET: 'set by --env' },
  });
  assert.equal(r.exitCode, 0, r.stderr);
  const seen = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split(/=(.*)/s).slice(0, 2)));
  // the secrets: a placeholder inside, never the value
  for (const [name, value] of [['NPM_T_SECRET', 'sk-env-value-1234567890'], ['NPM_T_FILE_SECRET', 'sk-file-value-0987654321']]) {
    assert.notEqual(seen[name], 'unset', `${name} has a placeholder inside`);
    assert.notEqual(seen[name], value);
    assert.ok(!r.stdout.includes(value));
  }
  assert.deepEqual(
    r.report.sandbox.secrets.map((s) => [s.name, s.hosts]).sort(),
    [['NPM_T_FILE_SECRET', ['127.0.0.1:9']], ['NPM_T_SECRET', ['127.0.0.1:9']]],
  );
  assert.equal(r.report.sandbox.network.mode, 'filtered', 'a secret implies --net filtered');
  assert.equal(seen.NPM_T_PASSED_TOKEN, 'tok-passed-by-name');
  assert.ok(r.report.sandbox.env_passed.includes('NPM_T_PASSED_TOKEN'));
  assert.equal(seen.NPM_T_FROM_FILE, 'from the env file');
  assert.equal(seen.NPM_T_SET, 'set by --env');
});

test('net and allowHost set the network; memory, cpus and pids the cgroup caps', async (t) => {
  const fx = h.fixture('net');
  t.after(fx.cleanup);
  const o = { profile: fx.profile, repo: fx.repo };
  const plain = await sbx.run(['true'], o);
  assert.equal(plain.report.sandbox.network.mode, 'none', 'ci has no network');
  const allowed = await sbx.run(['true'], { ...o, allowHost: ['api.example.com', 'example.net:8443'] });
  assert.equal(allowed.exitCode, 0, allowed.stderr);
  assert.equal(allowed.report.sandbox.network.mode, 'filtered');
  for (const host of ['api.example.com', 'example.net:8443']) {
    assert.ok(JSON.stringify(allowed.report.sandbox.network.allow).includes(host), JSON.stringify(allowed.report.sandbox.network.allow));
  }
  const filtered = await sbx.run(['true'], { ...o, net: 'filtered' });
  assert.equal(filtered.report.sandbox.network.mode, 'filtered');

  const capped = await sbx.run(['true'], { ...o, memory: '256M', cpus: 0.5, pids: 64 });
  assert.equal(capped.exitCode, 0, capped.stderr);
  assert.ok(capped.report.sandbox.cgroup, 'root gets a cgroup here');
  assert.equal(capped.report.sandbox.cgroup.memory_max, 256 << 20);
  assert.equal(capped.report.sandbox.cgroup.pids_max, 64);
  const [quota, period] = capped.report.sandbox.cgroup.cpu_max.split(' ').map(Number);
  assert.equal(quota / period, 0.5);
  const bytes = await sbx.run(['true'], { ...o, memory: 128 << 20 });
  assert.equal(bytes.report.sandbox.cgroup.memory_max, 128 << 20, 'a number is bytes');
});

test('stdinFile, capture, timings, verbose and quiet', async (t) => {
  const fx = h.fixture('io', { 'count.sh': 'n=0\nwhile read -r l; do n=$((n+1)); done\necho "lines $n"\n' });
  t.after(fx.cleanup);
  const o = { profile: fx.profile, repo: fx.repo };
  const input = path.join(fx.dir, 'input.txt');
  fs.writeFileSync(input, 'a\nb\nc\n');
  const fed = await sbx.run(['sh', './count.sh'], { ...o, stdinFile: input });
  assert.equal(fed.stdout, 'lines 3\n', fed.stderr);
  assert.equal(fed.report.sandbox.stdin, 'pipe');

  const plain = await sbx.run(['echo', 'captured'], o);
  assert.equal(plain.report.results[0].out, undefined, 'ci does not capture by itself');
  const captured = await sbx.run(['echo', 'captured'], { ...o, capture: true });
  assert.equal(captured.report.results[0].out, 'captured\n');

  assert.doesNotMatch(plain.stderr, /timings:/);
  const timed = await sbx.run(['true'], { ...o, timings: true });
  assert.match(timed.stderr, /^sandbox-run: timings: .*total/m);

  assert.doesNotMatch(plain.stderr, /^sandbox-run: bind \/usr -> \/usr ro$/m);
  const verbose = await sbx.run(['true'], { ...o, verbose: true });
  assert.match(verbose.stderr, /^sandbox-run: bind \/usr -> \/usr ro$/m, '-v says what the sandbox holds');
  const vv = await sbx.run(['true'], { ...o, verbose: 2 });
  assert.match(vv.stderr, /timings:/, '-vv prints the timings too');

  // a --pass-env name that is not set is warned about; --quiet keeps only errors
  const unset = { ...o, passEnv: 'NPM_T_NOT_SET_ANYWHERE' };
  const loud = await sbx.run(['true'], unset);
  assert.match(loud.stderr, /--pass-env NPM_T_NOT_SET_ANYWHERE: not set/);
  const quiet = await sbx.run(['true'], { ...unset, quiet: true });
  assert.equal(quiet.exitCode, 0, quiet.stderr);
  assert.equal(quiet.stderr, '');
});

test("changes: 'discard' throws the run's writes away", async (t) => {
  const fx = h.fixture('discard', { 'write.sh': 'echo written > out.txt\n' });
  t.after(fx.cleanup);
  const o = { profile: fx.profile, repo: fx.repo };
  const discarded = await sbx.run(['sh', './write.sh'], { ...o, changes: 'discard' });
  assert.equal(discarded.exitCode, 0, discarded.stderr);
  assert.equal(fs.existsSync(path.join(fx.repo, 'out.txt')), false);
  const applied = await sbx.run(['sh', './write.sh'], o);
  assert.equal(applied.exitCode, 0, applied.stderr);
  assert.equal(fs.readFileSync(path.join(fx.repo, 'out.txt'), 'utf8'), 'written\n', 'ci applies by default');
});

test('allowProgram: a program off the profile list runs for this one call', async (t) => {
  if (!/--allow-program/.test(runHelp())) {
    return t.skip('this sandbox-run has no --allow-program flag (run --help does not list it)');
  }
  const fx = h.fixture('allow-program');
  t.after(fx.cleanup);
  fs.writeFileSync(path.join(fx.repo, 'gone.txt'), 'x\n');
  const o = { profile: fx.profile, repo: fx.repo };
  const denied = await sbx.run(['rm', 'gone.txt'], o);
  assert.equal(denied.exitCode, 126, 'rm is not on ci list');
  const allowed = await sbx.run(['rm', 'gone.txt'], { ...o, allowProgram: 'rm' });
  assert.equal(allowed.exitCode, 0, allowed.stderr);
  assert.equal(fs.existsSync(path.join(fx.repo, 'gone.txt')), false);
});

test('runGene(): timeout, without, changes and verbose reach `sandbox-run validate`', async (t) => {
  const fx = h.fixture('gene-flags', {
    'slow.sh': 'while :; do :; done\n',
    'write.sh': 'echo from-the-gene > gene.txt\n',
  });
  t.after(fx.cleanup);
  withEnv(t, { XDG_STATE_HOME: path.join(fx.dir, 'state') });
  const o = { profile: fx.profile, repo: fx.repo };
  const slow = await sbx.runGene({ type: 'Gene', id: 'g-slow', validation: ['sh ./slow.sh'] }, { ...o, timeout: 1000, without: 'cgroup' });
  assert.equal(slow.ok, false);
  assert.equal(slow.report.results[0].status, 'timeout', JSON.stringify(slow.report.results[0]));

  const kept = await sbx.runGene({ type: 'Gene', id: 'g-keep', validation: ['sh ./write.sh'] }, { ...o, changes: 'keep', verbose: true });
  assert.equal(kept.ok, true, kept.stderr);
  assert.match(kept.stderr, /^sandbox-run: bind \/usr -> \/usr ro$/m, '-v reached validate');
  assert.equal(fs.existsSync(path.join(fx.repo, 'gene.txt')), false, 'kept, not applied');
  const list = await sbx.listChanges();
  assert.equal(list.length, 1, JSON.stringify(list));
  assert.match(await sbx.diffChanges(list[0].id), /^\+from-the-gene$/m);
  await sbx.dropChanges(list[0].id);
});
