'use strict';
// sandbox-run from Node: run a command or a gene in a fresh sandbox and get its exit code,
// output and parsed report; review, apply or drop the changes a run kept. Each call spawns
// the sandbox-run binary (no shell) with `--report` to a private file it reads and removes.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { constants } = require('node:os');
const platform = require('./lib/platform');
const { hostEnv, DEFAULT_NAMES } = require('./lib/env');
const { runProcess, DEFAULT_KILL_GRACE_MS, DEADLINE_SLACK_MS } = require('./lib/spawn');
const { checkOptions, CHANGESET_ID } = require('./lib/options');

{
  const why = platform.unsupported();
  if (why) throw new Error(why);
}

const DEFAULT_MAX_OUTPUT = 16 << 20;
/** The binary inside this package (put there by the package's build; absent in a checkout). */
const BUNDLED_BIN = path.join(__dirname, 'bin', 'sandbox-run');

/** The binary a call runs: `bin`, else $SANDBOX_RUN_BIN, else the bundled one, else PATH's. */
function binPath(bin) {
  if (bin) return bin;
  if (process.env.SANDBOX_RUN_BIN) return process.env.SANDBOX_RUN_BIN;
  if (fs.existsSync(BUNDLED_BIN)) return BUNDLED_BIN;
  return 'sandbox-run';
}

/** The rejection of an aborted call; `result` holds what the run left (its report included). */
class AbortError extends Error {
  constructor(reason, result) {
    super('the sandbox-run call was aborted', reason === undefined ? undefined : { cause: reason });
    this.name = 'AbortError';
    this.code = 'ABORT_ERR';
    this.result = result;
  }
}

/** A `changes` command that sandbox-run refused or failed: its exit code and stderr. */
class SandboxRunError extends Error {
  constructor(what, run) {
    const line = run.stderr.trim().split('\n').pop() || `exit ${run.code ?? run.signal}`;
    super(`${what}: ${line}`);
    this.name = 'SandboxRunError';
    this.exitCode = run.code;
    this.stderr = run.stderr;
  }
}

// ---- options to flags ----
// The options were checked (lib/options.js) before any of this runs: each given one has its
// type. Each value goes in the flag's own word (`--repo=DIR`), so that no value, whatever it
// starts with, is read as a flag of its own (`repo: '--help'` is a directory named --help).

const list = (v) => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** A duration flag: a number of milliseconds, or sandbox-run's own form (`90s`, `5m`). */
function duration(v) {
  return typeof v === 'number' ? `${Math.ceil(v)}ms` : v;
}

/** Milliseconds of a duration flag, or null when it is not one this code reads. */
function millis(flag) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(flag);
  if (!m) return null;
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] || 's'];
  return Number(m[1]) * unit;
}

/** `--secret NAME=HOST,HOST` for each of { NAME: HOST | [HOST...] }. */
function secretFlags(secrets) {
  return Object.entries(secrets || {}).map(([name, hosts]) => `--secret=${name}=${list(hosts).join(',')}`);
}

function checkId(id) {
  if (typeof id !== 'string' || !CHANGESET_ID.test(id)) {
    throw new TypeError(`${JSON.stringify(id)} is not a changeset ID (c and 8 of a-z2-7)`);
  }
  return id;
}

function requireProfile(what, o) {
  if (o.profile === undefined) throw new TypeError(`${what}(): option "profile" is required (a profile name or a .toml path)`);
}

/** The flags `run` and `validate` share, in front of the ones of each. */
function sharedFlags(o) {
  const a = [];
  if (o.verbose) a.push(`-${'v'.repeat(o.verbose === true ? 1 : o.verbose)}`);
  if (o.quiet) a.push('--quiet');
  a.push(`--profile=${o.profile}`);
  if (o.repo !== undefined) a.push(`--repo=${o.repo}`);
  if (o.timeout !== undefined) a.push(`--timeout=${duration(o.timeout)}`);
  for (const l of list(o.without)) a.push(`--without=${l}`);
  a.push(...secretFlags(o.secrets));
  for (const f of list(o.secretFile)) a.push(`--secret-file=${f}`);
  if (o.changes !== undefined) a.push(`--changes=${o.changes}`);
  if (o.withChanges !== undefined) a.push(`--with-changes=${o.withChanges}`);
  return a;
}

/** The flags of `run` that come from options, in front of `--`. */
function runFlags(o, reportFile) {
  const a = sharedFlags(o);
  if (o.killGrace !== undefined) a.push(`--kill-grace=${duration(o.killGrace)}`);
  if (o.memory !== undefined) a.push(`--memory=${o.memory}`);
  if (o.cpus !== undefined) a.push(`--cpus=${o.cpus}`);
  if (o.pids !== undefined) a.push(`--pids=${o.pids}`);
  if (o.net !== undefined) a.push(`--net=${o.net}`);
  for (const h of list(o.allowHost)) a.push(`--allow-host=${h}`);
  for (const p of list(o.allowProgram)) a.push(`--allow-program=${p}`);
  if (o.home !== undefined) a.push(`--home=${o.home}`);
  for (const n of list(o.keepEnv)) a.push(`--keep-env=${n}`);
  for (const n of list(o.passEnv)) a.push(`--pass-env=${n}`);
  for (const [k, v] of Object.entries(o.setEnv || {})) a.push(`--env=${k}=${v}`);
  for (const f of list(o.envFile)) a.push(`--env-file=${f}`);
  if (o.stdin !== undefined) a.push('--stdin=-');
  if (o.stdinFile !== undefined) a.push(`--stdin=${o.stdinFile}`);
  if (o.caCerts !== undefined) a.push(`--ca-certs=${o.caCerts}`);
  if (o.capture) a.push('--capture');
  if (o.timings) a.push('--timings');
  a.push(...list(o.args));
  a.push(`--report=${reportFile}`);
  return a;
}

/** The names a call asks sandbox-run to take from the caller's environment. */
function namesAskedFor(o) {
  return [...list(o.keepEnv), ...list(o.passEnv), ...Object.keys(o.secrets || {})];
}

// ---- the calls ----

/** A private (0700) directory for one call's files, removed by `done()`. */
function scratch() {
  const dir = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), 'sandbox-run-'));
  return { dir, file: (n) => path.join(dir, n), done: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

function signalName(n) {
  if (typeof n !== 'number') return null;
  return Object.keys(constants.signals).find((k) => constants.signals[k] === n) || `signal ${n}`;
}

/**
 * Spawn sandbox-run with `--report` into a scratch file, and shape what it left. Rejects with
 * the spawn error when the binary could not start, with an AbortError (its `result` filled)
 * when the signal fired before sandbox-run had exited.
 */
async function call(args, reportFile, o, deadlineMs) {
  if (o.signal && o.signal.aborted) throw new AbortError(o.signal.reason, null);
  const run = await runProcess(binPath(o.bin), args, {
    env: o.env,
    cwd: o.cwd,
    stdin: o.stdin,
    maxOutput: o.maxOutput ?? DEFAULT_MAX_OUTPUT,
    killGraceMs: o.killGrace === undefined ? DEFAULT_KILL_GRACE_MS : millis(duration(o.killGrace)),
    deadlineMs,
    signal: o.signal,
    onSpawn: o.onSpawn,
    onStdout: o.onStdout,
    onStderr: o.onStderr,
  });
  if (run.spawnError) throw run.spawnError;
  let report = null;
  let reportError = null;
  try {
    report = JSON.parse(fs.readFileSync(reportFile, 'utf8'));
  } catch (e) {
    const how = run.code !== null ? `exit ${run.code}` : `signal ${run.signal}`;
    reportError = `no report from sandbox-run (${how}${run.killed ? ', SIGKILLed: it had not exited after the kill grace' : ''}): ${e.code || e.message}`;
  }
  const first = (report && report.results && report.results[0]) || null;
  const result = {
    exitCode: run.code,
    signal: first && first.signal ? signalName(first.signal) : run.signal,
    status: first ? first.status : null,
    stdout: run.stdout,
    stderr: run.stderr,
    outputDropped: run.dropped,
    report,
    reportError,
    changeset: (first && first.repo_changes && first.repo_changes.changeset) || null,
    aborted: run.aborted,
    killed: run.killed,
  };
  if (run.aborted) throw new AbortError(o.signal && o.signal.reason, result);
  return result;
}

/**
 * Run `argv` (one word per element, never a shell line) in a fresh sandbox.
 * Resolves to { exitCode, signal, status, stdout, stderr, report, ... } whatever the command
 * did; see index.d.ts for every option and field.
 */
async function run(argv, options) {
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((w) => typeof w === 'string')) {
    throw new TypeError('run(): argv must be a non-empty array of strings (one word each, never a shell line)');
  }
  options = checkOptions('run', 'run', options);
  requireProfile('run', options);
  const s = scratch();
  try {
    const reportFile = s.file('report.json');
    const args = [...runFlags(options, reportFile), '--', ...argv];
    let deadlineMs;
    const t = options.timeout === undefined ? null : millis(duration(options.timeout));
    if (t !== null) {
      const grace = options.killGrace === undefined ? DEFAULT_KILL_GRACE_MS : millis(duration(options.killGrace));
      deadlineMs = t + (grace ?? DEFAULT_KILL_GRACE_MS) + (options.slackMs ?? DEADLINE_SLACK_MS);
    }
    const o = { ...options, env: hostEnv(options.env, namesAskedFor(options)) };
    return await call(args, reportFile, o, deadlineMs);
  } finally {
    s.done();
  }
}

/**
 * Run a gene's validation commands (`sandbox-run validate --gene`): each in a fresh sandbox,
 * in order, on one copy-on-write workspace, stopping at the first failure. `gene` is the gene
 * object, or the path of its JSON file. Resolves like run(); `report` is the ValidationReport
 * (one entry per command under `results`), `ok` its verdict.
 */
async function runGene(gene, options) {
  options = checkOptions('runGene', 'runGene', options);
  requireProfile('runGene', options);
  const s = scratch();
  try {
    let geneFile;
    if (typeof gene === 'string') {
      geneFile = gene;
    } else if (gene && typeof gene === 'object') {
      geneFile = s.file('gene.json');
      fs.writeFileSync(geneFile, JSON.stringify(gene), { mode: 0o600 });
    } else {
      throw new TypeError('runGene(): gene must be a gene object or the path of its JSON file');
    }
    const reportFile = s.file('report.json');
    const a = ['validate', ...sharedFlags(options), `--gene=${geneFile}`, ...list(options.args), `--report=${reportFile}`];
    const o = { ...options, stdin: undefined, env: hostEnv(options.env, Object.keys(options.secrets || {})) };
    const r = await call(a, reportFile, o, undefined);
    return { ...r, ok: Boolean(r.report && r.report.ok) };
  } finally {
    s.done();
  }
}

// ---- kept changes ----

/**
 * `sandbox-run changes ARGS...` as it is: resolves to { exitCode, stdout, stderr } (rejects
 * only when the binary cannot start). The functions below are built on it.
 */
async function changesCommand(args, options) {
  if (!Array.isArray(args) || !args.every((w) => typeof w === 'string')) {
    throw new TypeError('changesCommand(): args must be an array of strings');
  }
  options = checkOptions('changesCommand', 'changes', options);
  const run = await runProcess(binPath(options.bin), ['changes', ...args], {
    env: hostEnv(options.env),
    cwd: options.cwd,
    maxOutput: options.maxOutput ?? DEFAULT_MAX_OUTPUT,
    signal: options.signal,
  });
  if (run.spawnError) throw run.spawnError;
  const result = { exitCode: run.code, signal: run.signal, stdout: run.stdout, stderr: run.stderr };
  if (run.aborted) throw new AbortError(options.signal && options.signal.reason, result);
  return result;
}

async function changesOrThrow(what, args, options) {
  const r = await changesCommand(args, options);
  if (r.exitCode !== 0) throw new SandboxRunError(`sandbox-run changes ${what}`, { ...r, code: r.exitCode });
  return r;
}

/** A kept changeset's manifest (`changes show ID --json`), parsed. */
async function showChanges(id, options) {
  checkOptions('showChanges', 'changes', options);
  const r = await changesOrThrow(`show ${id}`, ['show', checkId(id), '--json'], options);
  return JSON.parse(r.stdout);
}

/** Every kept changeset of this user: [{ id, manifest }] oldest first ({ id, error } if unreadable). */
async function listChanges(options) {
  checkOptions('listChanges', 'changes', options);
  const r = await changesOrThrow('list', ['list'], options);
  const ids = r.stdout
    .split('\n')
    .map((l) => l.split(' ')[0])
    .filter((w) => /^c[a-z2-7]{8}$/.test(w));
  const out = [];
  for (const id of ids) {
    try {
      out.push({ id, manifest: await showChanges(id, options) });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      out.push({ id, error: e.message });
    }
  }
  return out;
}

/** A unified diff of a kept changeset against the repo as it is now. */
async function diffChanges(id, options) {
  checkOptions('diffChanges', 'changes', options);
  return (await changesOrThrow(`diff ${id}`, ['diff', checkId(id)], options)).stdout;
}

/** Apply a kept changeset to its repo, all or nothing; rejects (SandboxRunError) when refused. */
async function applyChanges(id, options) {
  checkOptions('applyChanges', 'changes', options);
  await changesOrThrow(`apply ${id}`, ['apply', checkId(id)], options);
}

/** Throw a kept changeset away. */
async function dropChanges(id, options) {
  checkOptions('dropChanges', 'changes', options);
  await changesOrThrow(`drop ${id}`, ['drop', checkId(id)], options);
}

module.exports = {
  run,
  runGene,
  listChanges,
  showChanges,
  diffChanges,
  applyChanges,
  dropChanges,
  changesCommand,
  binPath,
  AbortError,
  SandboxRunError,
  DEFAULT_ENV_NAMES: DEFAULT_NAMES,
  BUNDLED_BIN,
};
