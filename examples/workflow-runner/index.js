'use strict';
// A workflow runner that runs every step through sandbox-run, with the sandbox-run npm
// package's API (packages/node): each step is one argv (never a shell line) run by `run()`,
// which spawns sandbox-run without a shell, stdin ignored, with `--timeout`/`--kill-grace`
// and `--report` read back when it exits. An AbortSignal (per step or for the whole workflow)
// tears the step's sandbox down: the API sends SIGTERM to sandbox-run, which relays it to every
// process of the sandbox and SIGKILLs them after the kill grace, and SIGKILLs sandbox-run
// itself if it has not exited by then. No dependencies beyond that package; Node 18+.

// In a project: require('sandbox-run'). Here, the checkout's copy of the package.
const sandbox = require('../../packages/node');

const DEFAULT_TIMEOUT_MS = 300_000;
const DEFAULT_KILL_GRACE_MS = 5_000;
const DEFAULT_MAX_OUTPUT = 1 << 20;

function ms(n, what) {
  if (!Number.isFinite(n) || n <= 0) throw new TypeError(`${what} must be a positive number of ms`);
  return Math.ceil(n);
}

/** The sandbox-run argv for one step (for logging, and the bench): what run() spawns. */
function buildArgs(step, reportFile) {
  const args = ['--profile', step.profile];
  if (step.repo) args.push('--repo', step.repo);
  args.push('--timeout', `${step.timeoutMs}ms`, '--kill-grace', `${step.killGraceMs}ms`);
  if (step.capture) args.push('--capture');
  for (const name of step.keepEnv || []) args.push('--keep-env', name);
  for (const a of step.sandboxArgs || []) args.push(a);
  args.push('--report', reportFile);
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
    bin: step.bin || opts.bin,
    profile: step.profile || opts.profile,
    repo: step.repo || opts.repo,
    cwd: step.cwd || opts.cwd,
    env: step.env || opts.env,
    keepEnv: step.keepEnv || opts.keepEnv || [],
    sandboxArgs: [...(opts.sandboxArgs || []), ...(step.sandboxArgs || [])],
    timeoutMs: ms(step.timeoutMs ?? opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, 'timeoutMs'),
    killGraceMs: ms(step.killGraceMs ?? opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS, 'killGraceMs'),
    slackMs: opts.slackMs,
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
  const result = baseResult(s);
  if (options.signal && options.signal.aborted) {
    return { ...result, status: 'skipped', aborted: true, error: 'aborted before it started' };
  }
  const started = process.hrtime.bigint();
  let run;
  try {
    run = await sandbox.run(s.argv, {
      bin: s.bin,
      profile: s.profile,
      repo: s.repo,
      cwd: s.cwd,
      env: s.env,
      keepEnv: s.keepEnv,
      args: s.sandboxArgs,
      timeout: s.timeoutMs,
      killGrace: s.killGraceMs,
      slackMs: s.slackMs,
      capture: s.capture,
      maxOutput: s.maxOutput,
      signal: options.signal,
      onSpawn: s.onSpawn,
    });
  } catch (e) {
    if (e instanceof TypeError) throw e; // a malformed step
    if (e.name !== 'AbortError' || !e.result) {
      return { ...result, error: e.message }; // e.g. "spawn /x/sandbox-run ENOENT"
    }
    run = e.result; // aborted: what the torn-down sandbox left
  }
  result.wallMs = Number(process.hrtime.bigint() - started) / 1e6;
  result.stdout = run.stdout;
  result.stderr = run.stderr;
  result.aborted = run.aborted;
  result.exitCode = run.exitCode;
  result.signal = run.signal;
  if (!run.report) {
    result.status = run.aborted ? 'aborted' : 'sandbox_error';
    result.error = run.reportError + (run.killed ? ' (killed by the runner)' : '');
    return result;
  }
  const r = run.report.results[0] || {};
  result.report = r;
  result.sandbox = run.report.sandbox || null;
  result.status = r.status || 'sandbox_error';
  result.limitsHit = r.limits_hit || [];
  result.durationMs = r.duration_ms ?? null;
  result.error = r.error ?? null;
  result.ok = result.status === 'ok' && !result.aborted;
  return result;
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
async function changes(args, options = {}) {
  try {
    const r = await sandbox.changesCommand(args, options);
    return { code: r.exitCode, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    return { code: null, stdout: '', stderr: e.message };
  }
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
