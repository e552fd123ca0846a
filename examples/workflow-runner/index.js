'use strict';
// A workflow runner that runs every step through sandbox-run.
//
// Each step is one argv (never a shell line): sandbox-run is spawned with `shell: false`,
// stdin ignored, its own `--timeout`/`--kill-grace`, and `--report FILE`; the report is read
// back when it exits. An AbortSignal (per step or for the whole workflow) sends SIGTERM to
// sandbox-run, which relays it to every process of the sandbox and SIGKILLs them after the
// kill grace; the runner SIGKILLs sandbox-run itself if it has not exited by then, and the
// parent-death chain takes the sandbox down with it. No dependencies; Node 18+.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const DEFAULT_TIMEOUT_MS = 300_000;
const DEFAULT_KILL_GRACE_MS = 5_000;
// How long past its own deadline sandbox-run may take to tear down and write the report
// before the runner signals it.
const DEFAULT_SLACK_MS = 5_000;
const DEFAULT_MAX_OUTPUT = 1 << 20;

/** The sandbox-run binary: the option, else $SANDBOX_RUN_BIN, else `sandbox-run` on PATH. */
function defaultBin() {
  return process.env.SANDBOX_RUN_BIN || 'sandbox-run';
}

// The reports go to one private directory (0700) per process, made on first use and removed
// at exit: nobody else can plant a file or link where sandbox-run writes (it also opens the
// path without following links it does not trust). Each step's report is removed once read.
let reportDirPath = null;
let reportCount = 0;
function reportDir() {
  if (reportDirPath === null) {
    reportDirPath = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), 'sandbox-run-reports-'));
    process.once('exit', () => fs.rmSync(reportDirPath, { recursive: true, force: true }));
  }
  return reportDirPath;
}

/** Keeps the last `max` bytes written to it. */
class Tail {
  constructor(max) {
    this.max = max;
    this.chunks = [];
    this.size = 0;
    this.dropped = 0;
  }
  push(chunk) {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size > this.max && this.chunks.length > 0) {
      const over = this.size - this.max;
      const first = this.chunks[0];
      if (first.length <= over) {
        this.chunks.shift();
        this.size -= first.length;
        this.dropped += first.length;
      } else {
        this.chunks[0] = first.subarray(over);
        this.size -= over;
        this.dropped += over;
      }
    }
  }
  text() {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

function ms(n, what) {
  if (!Number.isFinite(n) || n <= 0) throw new TypeError(`${what} must be a positive number of ms`);
  return Math.ceil(n);
}

/** The sandbox-run argv for one step (exported for tests and the bench). */
function buildArgs(step, reportFile) {
  const args = ['--profile', step.profile];
  if (step.repo) args.push('--repo', step.repo);
  args.push('--timeout', `${step.timeoutMs}ms`, '--kill-grace', `${step.killGraceMs}ms`);
  args.push('--report', reportFile);
  // --capture: the output goes through sandbox-run, which enforces [limits] output and keeps
  // the last 64 KiB of each stream in the report (`out`, `err`).
  if (step.capture) args.push('--capture');
  for (const name of step.keepEnv || []) args.push('--keep-env', name);
  for (const a of step.sandboxArgs || []) args.push(a);
  args.push('--', ...step.argv);
  return args;
}

function normalize(step, opts) {
  if (!step || !Array.isArray(step.argv) || step.argv.length === 0) {
    throw new TypeError('a step needs argv: a non-empty array of strings');
  }
  for (const a of step.argv) {
    if (typeof a !== 'string') throw new TypeError('argv holds strings only');
  }
  const s = {
    name: step.name || step.argv.join(' '),
    argv: step.argv.slice(),
    bin: step.bin || opts.bin || defaultBin(),
    profile: step.profile || opts.profile,
    repo: step.repo || opts.repo,
    cwd: step.cwd || opts.cwd,
    env: step.env || opts.env || process.env,
    keepEnv: step.keepEnv || opts.keepEnv || [],
    sandboxArgs: [...(opts.sandboxArgs || []), ...(step.sandboxArgs || [])],
    timeoutMs: ms(step.timeoutMs ?? opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, 'timeoutMs'),
    killGraceMs: ms(step.killGraceMs ?? opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS, 'killGraceMs'),
    slackMs: ms(opts.slackMs ?? DEFAULT_SLACK_MS, 'slackMs'),
    capture: step.capture ?? opts.capture ?? false,
    maxOutput: step.maxOutput ?? opts.maxOutput ?? DEFAULT_MAX_OUTPUT,
    onSpawn: step.onSpawn || opts.onSpawn,
  };
  if (!s.profile) throw new TypeError('a step needs a profile (step.profile or options.profile)');
  return s;
}

function baseResult(s) {
  return {
    name: s.name,
    argv: s.argv,
    ok: false,
    status: 'sandbox_error',
    exitCode: null,
    signal: null,
    limitsHit: [],
    durationMs: null,
    wallMs: 0,
    aborted: false,
    stdout: '',
    stderr: '',
    error: null,
    report: null,
  };
}

/**
 * Run one step in a fresh sandbox. Never rejects for what the step does: the result says it.
 * Rejects only for a malformed step (TypeError).
 *
 * step: { argv, name?, profile?, repo?, cwd?, env?, keepEnv?, sandboxArgs?, timeoutMs?,
 *         killGraceMs?, capture?, maxOutput?, bin? }
 * options: the same defaults for every step, plus { signal, slackMs, onSpawn }
 */
async function runStep(step, options = {}) {
  const s = normalize(step, options);
  const signal = options.signal;
  const result = baseResult(s);
  if (signal && signal.aborted) {
    return { ...result, status: 'skipped', aborted: true, error: 'aborted before it started' };
  }

  const reportFile = path.join(reportDir(), `step-${++reportCount}.json`);
  const started = process.hrtime.bigint();
  try {
    const run = await spawnStep(s, buildArgs(s, reportFile), signal);
    result.wallMs = Number(process.hrtime.bigint() - started) / 1e6;
    result.stdout = run.stdout;
    result.stderr = run.stderr;
    result.aborted = run.aborted;
    if (run.spawnError) {
      result.error = `spawn ${s.bin}: ${run.spawnError.message}`;
      return result;
    }
    let report = null;
    try {
      report = JSON.parse(fs.readFileSync(reportFile, 'utf8'));
    } catch (e) {
      const how = run.code !== null ? `exit ${run.code}` : `signal ${run.signal}`;
      result.exitCode = run.code;
      result.signal = run.signal;
      result.status = run.aborted ? 'aborted' : 'sandbox_error';
      result.error = `no report from sandbox-run (${how}${run.killed ? ', killed by the runner' : ''}): ${e.code || e.message}`;
      return result;
    }
    const r = (report.results || [])[0] || {};
    result.report = r;
    result.sandbox = report.sandbox || null;
    result.status = r.status || 'sandbox_error';
    // sandbox-run's own exit status is the step's (0-123, 124 timeout, 125, 126, 127, 128+N).
    result.exitCode = run.code !== null ? run.code : (r.exit_code ?? null);
    result.signal = r.signal ?? null;
    result.limitsHit = r.limits_hit || [];
    result.durationMs = r.duration_ms ?? null;
    result.error = r.error ?? null;
    result.ok = result.status === 'ok' && !result.aborted;
    return result;
  } finally {
    fs.rmSync(reportFile, { force: true });
  }
}

function spawnStep(s, args, signal) {
  return new Promise((resolve) => {
    const out = new Tail(s.maxOutput);
    const err = new Tail(s.maxOutput);
    const timers = [];
    let aborted = false;
    let killed = false;
    let exited = null;
    let done = false;
    let child;

    const finish = (extra) => {
      if (done) return;
      done = true;
      for (const t of timers) clearTimeout(t);
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve({
        stdout: out.text(),
        stderr: err.text(),
        aborted,
        killed,
        code: exited ? exited.code : null,
        signal: exited ? exited.signal : null,
        ...extra,
      });
    };
    // SIGTERM now (sandbox-run relays it and SIGKILLs the sandbox after the kill grace),
    // SIGKILL to sandbox-run itself if it is still there after the grace and some slack.
    const stop = () => {
      if (exited || !child) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => {
        if (!exited) {
          killed = true;
          child.kill('SIGKILL');
        }
      }, s.killGraceMs + 2_000);
      timers.push(t);
    };
    const onAbort = () => {
      aborted = true;
      stop();
    };

    try {
      child = spawn(s.bin, args, {
        shell: false,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: s.env,
        cwd: s.cwd,
        windowsHide: true,
      });
    } catch (e) {
      finish({ spawnError: e });
      return;
    }
    child.stdout.on('data', (c) => out.push(c));
    child.stderr.on('data', (c) => err.push(c));
    child.on('error', (e) => {
      // ENOENT/EACCES: nothing ran. (Errors from kill() after exit are ignored.)
      if (!exited && child.pid === undefined) finish({ spawnError: e });
    });
    child.on('exit', (code, sig) => {
      exited = { code, signal: sig };
      // The pipes close when the last process holding them is gone; the sandbox is, but do
      // not wait forever on a descriptor something else inherited.
      const t = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, 2_000);
      timers.push(t);
    });
    child.on('close', () => {
      if (exited) finish();
    });
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    // The runner's own deadline: sandbox-run's timeout plus its kill grace plus slack.
    timers.push(setTimeout(stop, s.timeoutMs + s.killGraceMs + s.slackMs));
    if (s.onSpawn && child.pid !== undefined) s.onSpawn(child);
  });
}

/**
 * Run steps, `concurrency` at a time (default 1, in order). With `failFast` (default true) a
 * step that is not ok stops the workflow: the steps not yet started get status `skipped`;
 * those already running finish. The signal aborts every running step.
 * Returns { ok, results } with one result per step, in the order of `steps`.
 */
async function runWorkflow(steps, options = {}) {
  const concurrency = Math.max(1, Math.floor(options.concurrency ?? 1));
  const failFast = options.failFast ?? true;
  const results = new Array(steps.length);
  for (const st of steps) normalize(st, options); // refuse a malformed workflow up front
  let next = 0;
  let stopped = false;
  const worker = async () => {
    while (next < steps.length) {
      const i = next++;
      if (stopped) {
        results[i] = { ...baseResult(normalize(steps[i], options)), status: 'skipped' };
        continue;
      }
      results[i] = await runStep(steps[i], options);
      if (failFast && !results[i].ok) stopped = true;
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, steps.length) }, worker));
  return { ok: results.every((r) => r.ok), results };
}

/**
 * `sandbox-run changes ARGS...` (list, show, diff, apply, drop): { code, stdout, stderr }.
 * options: { bin, env, cwd }.
 */
function changes(args, options = {}) {
  const bin = options.bin || defaultBin();
  return new Promise((resolve) => {
    const child = spawn(bin, ['changes', ...args], {
      shell: false,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: options.env || process.env,
      cwd: options.cwd,
    });
    const out = [];
    const err = [];
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => err.push(d));
    child.on('error', (e) => resolve({ code: null, stdout: '', stderr: e.message }));
    child.on('close', (code) => {
      resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
  });
}

/**
 * The validation job done the way it should be: an agent's edit is made with its writes kept
 * aside (`--changes keep`: the repo is untouched), the validation steps run on the repo with
 * that edit laid over it (`--with-changes ID`, copy-on-write), and the edit reaches the repo
 * only if every validation step is green (`sandbox-run changes apply ID`: all or nothing,
 * refused if the repo changed at its paths meanwhile). Otherwise it is dropped, or kept for a
 * human with `keepRejected`.
 *
 * agent: a step (profile such as `adapter`); validation: steps (profile such as `validate`);
 * options: as runWorkflow's, plus { keepRejected }.
 * Resolves to { ok, changeset, agent, validation: { ok, results }, applied, diff, error }.
 */
async function proposeValidateApply(agent, validation, options = {}) {
  const out = { ok: false, changeset: null, agent: null, validation: null, applied: false, diff: '', error: null };
  out.agent = await runStep(
    { ...agent, sandboxArgs: [...(agent.sandboxArgs || []), '--changes', 'keep'] },
    options,
  );
  const changes_ = (out.agent.report && out.agent.report.repo_changes) || {};
  out.changeset = changes_.changeset || null;
  if (!out.agent.ok) {
    out.error = `the agent step failed (${out.agent.status})`;
  } else if (!out.changeset) {
    out.error = 'the agent step changed nothing';
    out.ok = true;
  }
  if (!out.changeset) return out;
  const opts = { bin: options.bin, env: options.env, cwd: options.cwd };
  out.diff = (await changes(['diff', out.changeset], opts)).stdout;
  if (out.agent.ok) {
    const laid = ['--with-changes', out.changeset];
    out.validation = await runWorkflow(
      validation.map((st) => ({ ...st, sandboxArgs: [...(st.sandboxArgs || []), ...laid] })),
      options,
    );
    if (out.validation.ok) {
      const a = await changes(['apply', out.changeset], opts);
      out.applied = a.code === 0;
      out.ok = out.applied;
      if (!out.applied) out.error = a.stderr.trim() || `changes apply exited ${a.code}`;
      return out;
    }
    out.error = 'validation failed: the edit was not applied';
  }
  if (!options.keepRejected) await changes(['drop', out.changeset], opts);
  return out;
}

module.exports = {
  runStep,
  runWorkflow,
  changes,
  proposeValidateApply,
  buildArgs,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_KILL_GRACE_MS,
};
