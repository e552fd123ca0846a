'use strict';
// sandbox-run's own environment when the caller gives none.
//
// sandbox-run builds the command's environment from its profile's allow-list and never passes
// code-loading or secret-looking names unless asked, so handing it the caller's whole
// environment would be safe there; but sandbox-run itself then holds every secret of the
// Node process for the length of the run, visible to root in /proc/PID/environ. So by
// default it gets only what it uses itself or what a shipped profile keeps, plus the names the
// call asks for by name (keepEnv, passEnv, secrets).

/** Names passed from process.env by default (each only when set). */
const DEFAULT_NAMES = [
  // what sandbox-run reads for itself: the programs' PATH, where profiles, kept changesets,
  // kept homes and gene workspaces live, the user's systemd manager for a delegated cgroup
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'TMPDIR',
  'XDG_CONFIG_HOME',
  'XDG_STATE_HOME',
  'XDG_RUNTIME_DIR',
  'DBUS_SESSION_BUS_ADDRESS',
  'SANDBOX_RUN_PROFILE_PATH',
  // toolchains the shipped profiles bind in and keep
  'CARGO_HOME',
  'RUSTUP_HOME',
  'RUSTUP_TOOLCHAIN',
  'PYENV_ROOT',
  'PYENV_VERSION',
  // what the shipped profiles keep for the command: locale, terminal, CI markers
  'LANG',
  'LANGUAGE',
  'LC_ALL',
  'LC_CTYPE',
  'LC_MESSAGES',
  'TERM',
  'TZ',
  'NO_COLOR',
  'FORCE_COLOR',
  'CI',
  'COLUMNS',
  // a GitHub Actions runner's workspace and scratch directory (`changes` writes there)
  'GITHUB_WORKSPACE',
  'RUNNER_TEMP',
];

/**
 * The environment sandbox-run is started with: `explicit` as it is when given, else the
 * default names plus `byName` (names the call asked for), each from `from` when set there.
 */
function hostEnv(explicit, byName = [], from = process.env) {
  if (explicit) return explicit;
  const env = {};
  for (const name of [...DEFAULT_NAMES, ...byName]) {
    if (Object.prototype.hasOwnProperty.call(from, name) && from[name] !== undefined) {
      env[name] = from[name];
    }
  }
  return env;
}

module.exports = { DEFAULT_NAMES, hostEnv };
