// Types of the sandbox-run package's API (index.js).

import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';

/** A duration: a number of milliseconds, or sandbox-run's own form ("90s", "5m", "500ms"). */
export type Duration = number | string;

/** Options every call takes. */
export interface CommonOptions {
  /** The sandbox-run binary (default: $SANDBOX_RUN_BIN, else the package's own, else PATH's). */
  bin?: string;
  /**
   * sandbox-run's own environment, used as it is. Default: PATH, HOME, USER, LOGNAME, TMPDIR,
   * the XDG_* directories, the locale and terminal names, CI and the toolchain variables the
   * profiles keep (DEFAULT_ENV_NAMES), plus the names in keepEnv, passEnv and secrets, each
   * from process.env when set. The command's environment is then built by sandbox-run from
   * its profile's allow-list.
   */
  env?: NodeJS.ProcessEnv;
  /** sandbox-run's working directory (the repo defaults to the git top level above it). */
  cwd?: string;
  /** Aborting sends SIGTERM to sandbox-run, which tears the whole sandbox down; the call
   * rejects with an AbortError once sandbox-run has exited. */
  signal?: AbortSignal;
  /** Bytes of stdout and of stderr kept in memory, the last ones (default 16 MiB). */
  maxOutput?: number;
}

/** A layer `without` may name. */
export type Layer = 'cgroup' | 'landlock' | 'seccomp' | 'namespaces';

/** The options `run` and `runGene` share (flags of both `sandbox-run run` and `validate`). */
export interface SandboxOptions extends CommonOptions {
  /** --profile: a profile name (validate, ci, adapter, ...) or the path of a .toml file. Required. */
  profile: string;
  /** --repo: the repository the command works on. */
  repo?: string;
  /** --timeout: at the deadline every process of the sandbox gets SIGTERM, then SIGKILL (exit 124).
   * For runGene, each command's. */
  timeout?: Duration;
  /** --without, each: run without that layer where this host or user cannot give it (it is
   * then listed under the report's `sandbox.degraded`); where the host has it, it is used. */
  without?: Layer | Layer[];
  /** --secret NAME=HOST,...: the value stays outside; the proxy puts it in requests to HOST only. */
  secrets?: Record<string, string | string[]>;
  /** --secret-file, each: NAME=VALUE lines giving the secrets' values (the caller's own file, chmod 600). */
  secretFile?: string | string[];
  /** --changes: what becomes of the run's writes to the repo. */
  changes?: 'apply' | 'keep' | 'discard';
  /** --with-changes ID: the kept changeset laid over the repo, copy-on-write. */
  withChanges?: string;
  /** -v (true or 1), -vv (2), -vvv (3): more of sandbox-run's log in `stderr`. */
  verbose?: boolean | 0 | 1 | 2 | 3;
  /** --quiet: only errors on sandbox-run's stderr. */
  quiet?: boolean;
  /** Any other sandbox-run flags, put before `--`. */
  args?: string | string[];
  /** Called with the sandbox-run ChildProcess right after the spawn. */
  onSpawn?: (child: ChildProcess) => void;
  /** Called with each chunk of output as it arrives (it is also kept in the result). */
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
}

/** The options of `run`: each is a flag of `sandbox-run run`. An unknown key, or a value of
 * the wrong type, is a TypeError. */
export interface RunOptions extends SandboxOptions {
  /** --kill-grace: from SIGTERM to SIGKILL at a timeout or an abort (default 5 s). */
  killGrace?: Duration;
  /** --memory: "512M", "2G", or a number of bytes. */
  memory?: string | number;
  /** --cpus: CPUs, fractions allowed. */
  cpus?: number | string;
  /** --pids: processes and threads of the whole sandbox. */
  pids?: number;
  /** --net */
  net?: 'none' | 'filtered' | 'host';
  /** --allow-host, each. */
  allowHost?: string | string[];
  /** --allow-program, each: a program the gate allows for this run beside the profile's
   * (needs a sandbox-run that has the flag: `npx sandbox-run run --help`). */
  allowProgram?: string | string[];
  /** --home: $HOME a private tmpfs gone after the run, or kept per user and profile. */
  home?: 'tmp' | 'persist';
  /** --keep-env NAME, each (harmless names; the value comes from process.env by default). */
  keepEnv?: string | string[];
  /** --pass-env NAME, each (secret-looking names, passed by name, never on a command line). */
  passEnv?: string | string[];
  /** --env KEY=VALUE, each: set inside the sandbox. Never put a secret here (command lines are public). */
  setEnv?: Record<string, string>;
  /** --env-file, each: NAME=VALUE lines set inside (the caller's own file, chmod 600). */
  envFile?: string | string[];
  /** The command's stdin (--stdin -). Without it (and without stdinFile), stdin is /dev/null. */
  stdin?: string | Buffer | Uint8Array | Readable;
  /** --stdin FILE: sandbox-run feeds the command's stdin from FILE. Not with `stdin`. */
  stdinFile?: string;
  /** --ca-certs: a CA bundle (PEM) trusted inside beside the system roots; outside the repo,
   * not writable by other users. */
  caCerts?: string;
  /** --capture: the last 64 KiB of stdout and stderr also in the report. */
  capture?: boolean;
  /** --timings: how long each setup step took, on sandbox-run's stderr. */
  timings?: boolean;
  /** Slack past timeout + killGrace before the call stops sandbox-run itself (default 5000 ms). */
  slackMs?: number;
}

/** The options of `runGene`: each is a flag of `sandbox-run validate`. */
export type GeneOptions = SandboxOptions;

/** The report's status of a command. */
export type Status = 'ok' | 'failed' | 'signaled' | 'timeout' | 'oom' | 'denied' | 'not_found' | 'sandbox_error';

/** The report (schemas/report.schema.json in sandbox-run's source); the common fields typed. */
export interface Report {
  type: string;
  ok: boolean;
  profile?: string;
  /** `allowProgram`: the programs the gate allowed for this command beside the profile's. */
  allowed_programs?: string[];
  repo?: string;
  results: ReportResult[];
  sandbox: Record<string, unknown>;
  [key: string]: unknown;
}

export interface ReportResult {
  cmd: string;
  argv: string[];
  ok: boolean;
  status: Status | 'skipped';
  exit_code: number | null;
  signal: number | null;
  duration_ms: number;
  cpu_user_ms: number | null;
  cpu_system_ms: number | null;
  peak_memory_bytes: number | null;
  denied: { rule: string; word?: string; [key: string]: unknown } | null;
  error: string | null;
  limits_hit: Array<'memory' | 'pids' | 'output' | 'disk'>;
  repo_changes?: { applied: string; changeset?: string; [key: string]: unknown };
  out?: string;
  err?: string;
  [key: string]: unknown;
}

export interface RunResult {
  /** sandbox-run's exit status: the command's own 0-123, 124 timeout, 125 sandbox error,
   * 126 denied, 127 not found, 128+N killed by signal N; null if sandbox-run itself was killed. */
  exitCode: number | null;
  /** The signal that ended the command (from the report), else the one that ended sandbox-run. */
  signal: string | null;
  /** The first command's status in the report, or null without a report. */
  status: Status | 'skipped' | null;
  stdout: string;
  stderr: string;
  /** Bytes of each stream let go past maxOutput (the start of it). */
  outputDropped: { stdout: number; stderr: number };
  /** The parsed --report JSON, or null when sandbox-run wrote none (reportError says why). */
  report: Report | null;
  reportError: string | null;
  /** The changeset ID kept by `changes: 'keep'`, else null. */
  changeset: string | null;
  aborted: boolean;
  /** sandbox-run itself was SIGKILLed (it had not exited 2 s after the kill grace). */
  killed: boolean;
}

export interface GeneResult extends RunResult {
  /** The ValidationReport's verdict: every command ok. */
  ok: boolean;
}

export function run(argv: string[], options: RunOptions): Promise<RunResult>;
export function runGene(gene: object | string, options: GeneOptions): Promise<GeneResult>;

/** A kept changeset's manifest, as `sandbox-run changes show ID --json` prints it. */
export type Manifest = Record<string, unknown>;

export function listChanges(options?: CommonOptions): Promise<Array<{ id: string; manifest?: Manifest; error?: string }>>;
export function showChanges(id: string, options?: CommonOptions): Promise<Manifest>;
export function diffChanges(id: string, options?: CommonOptions): Promise<string>;
export function applyChanges(id: string, options?: CommonOptions): Promise<void>;
export function dropChanges(id: string, options?: CommonOptions): Promise<void>;
/** The options of the `changes` functions are the common ones only (an unknown key is a TypeError). */
export function changesCommand(
  args: string[],
  options?: CommonOptions,
): Promise<{ exitCode: number | null; signal: string | null; stdout: string; stderr: string }>;

/** The binary a call would run. */
export function binPath(bin?: string): string;

export class AbortError extends Error {
  name: 'AbortError';
  code: 'ABORT_ERR';
  /** What the aborted run left: exit 143 and its report, normally. Null if it never started. */
  result: RunResult | GeneResult | null;
}

export class SandboxRunError extends Error {
  name: 'SandboxRunError';
  exitCode: number | null;
  stderr: string;
}

export const DEFAULT_ENV_NAMES: readonly string[];
export const BUNDLED_BIN: string;
