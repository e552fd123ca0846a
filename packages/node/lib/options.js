'use strict';
// The options each call takes, checked before anything starts. An option the call does not
// know is a TypeError naming it (with the nearest known name when it looks like a typo), and
// so is a value of the wrong type: an option silently ignored would run the command in a
// sandbox other than the one the caller asked for (no `--without`, a different `--home`, no
// timeout at all for a mistyped `timout`).
//
// `undefined` means "not given", as for a missing key. Any other value must have the type.

const { Readable } = require('node:stream');

const LAYERS = ['cgroup', 'landlock', 'seccomp', 'namespaces'];
const CHANGESET_ID = /^c[a-z2-7]{8}$/;

/** How a value is shown in a message: short, and never a whole object's content. */
function shown(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (Buffer.isBuffer(v)) return 'a Buffer';
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
    case 'number':
    case 'boolean':
    case 'bigint':
      return String(v);
    case 'function':
      return 'a function';
    case 'object':
      return 'an object';
    default:
      return `a ${typeof v}`;
  }
}

const isPlainObject = (v) =>
  v !== null && typeof v === 'object' && !Array.isArray(v) && [Object.prototype, null].includes(Object.getPrototypeOf(v));

const nonEmpty = (v) => typeof v === 'string' && v !== '';
const host = (v) => nonEmpty(v) && !v.includes(',');
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

// Each kind: [test, what it must be (for the message)].
const kind = {
  string: [nonEmpty, 'a non-empty string'],
  strings: [(v) => nonEmpty(v) || (Array.isArray(v) && v.every(nonEmpty)), 'a string or an array of strings'],
  boolean: [(v) => typeof v === 'boolean', 'true or false'],
  duration: [
    (v) => (typeof v === 'number' && Number.isFinite(v) && v > 0) || nonEmpty(v),
    'a positive number of ms or a duration such as "90s"',
  ],
  size: [(v) => (Number.isSafeInteger(v) && v > 0) || nonEmpty(v), 'a number of bytes or a size such as "512M"'],
  cpus: [(v) => (typeof v === 'number' && Number.isFinite(v) && v > 0) || nonEmpty(v), 'a positive number of CPUs'],
  count: [(v) => Number.isSafeInteger(v) && v > 0, 'a positive integer'],
  ms: [(v) => typeof v === 'number' && Number.isFinite(v) && v >= 0, 'a number of ms (0 or more)'],
  verbose: [(v) => typeof v === 'boolean' || (Number.isInteger(v) && v >= 0 && v <= 3), 'true, false or 0 to 3 (-v to -vvv)'],
  fn: [(v) => typeof v === 'function', 'a function'],
  signal: [
    (v) => v !== null && typeof v === 'object' && typeof v.aborted === 'boolean' && typeof v.addEventListener === 'function',
    'an AbortSignal',
  ],
  env: [(v) => isPlainObject(v) && Object.values(v).every((x) => x === undefined || typeof x === 'string'), 'an object of strings'],
  // A KEY with `=` would set another variable (`--env A=B=c` sets A to "B=c").
  setEnv: [
    (v) => isPlainObject(v) && Object.entries(v).every(([k, x]) => /^[^=]+$/.test(k) && typeof x === 'string'),
    'an object of strings ({ KEY: "value" }, no "=" in a KEY)',
  ],
  // A host with `,` would be two hosts the secret goes to; a name is an environment name.
  secrets: [
    (v) =>
      isPlainObject(v) &&
      Object.entries(v).every(([name, h]) => ENV_NAME.test(name) && (host(h) || (Array.isArray(h) && h.length > 0 && h.every(host)))),
    "an object { NAME: 'host' | ['host', ...] } (NAME a variable name, no ',' in a host)",
  ],
  stdin: [
    (v) => typeof v === 'string' || v instanceof Uint8Array || v instanceof Readable || (v !== null && typeof v === 'object' && typeof v.pipe === 'function'),
    'a string, a Buffer, a Uint8Array or a readable stream',
  ],
  changesetId: [(v) => typeof v === 'string' && CHANGESET_ID.test(v), 'a changeset ID (c and 8 of a-z2-7)'],
  layers: [(v) => LAYERS.includes(v) || (Array.isArray(v) && v.every((x) => LAYERS.includes(x))), `one of ${LAYERS.map((l) => `'${l}'`).join(', ')} or an array of them`],
};

const oneOf = (...values) => [(v) => values.includes(v), values.map((x) => `'${x}'`).join(' or ')];

/** What every call takes: how sandbox-run itself is started. */
const COMMON = {
  bin: kind.string,
  env: kind.env,
  cwd: kind.string,
  signal: kind.signal,
  maxOutput: kind.count,
};

/** The flags `run` and `validate` share. */
const SHARED = {
  profile: kind.string,
  repo: kind.string,
  timeout: kind.duration,
  without: kind.layers,
  secrets: kind.secrets,
  secretFile: kind.strings,
  changes: oneOf('apply', 'keep', 'discard'),
  withChanges: kind.changesetId,
  verbose: kind.verbose,
  quiet: kind.boolean,
  args: kind.strings,
  onSpawn: kind.fn,
  onStdout: kind.fn,
  onStderr: kind.fn,
};

const SPECS = {
  run: {
    ...COMMON,
    ...SHARED,
    killGrace: kind.duration,
    memory: kind.size,
    cpus: kind.cpus,
    pids: kind.count,
    net: oneOf('none', 'filtered', 'host'),
    allowHost: kind.strings,
    allowProgram: kind.strings,
    home: oneOf('tmp', 'persist'),
    setEnv: kind.setEnv,
    keepEnv: kind.strings,
    passEnv: kind.strings,
    envFile: kind.strings,
    stdin: kind.stdin,
    stdinFile: kind.string,
    caCerts: kind.string,
    capture: kind.boolean,
    timings: kind.boolean,
    slackMs: kind.ms,
  },
  runGene: { ...COMMON, ...SHARED },
  changes: COMMON,
};

/** Edit distance (insert, delete, substitute, swap two neighbours). */
function distance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/**
 * The known name `key` most likely meant, or null: the same name spelt as a flag or in
 * another case (`ca-certs`, `cacerts` → `caCerts`), else the nearest within 2 edits (1 for
 * names of 4 letters or fewer).
 */
function didYouMean(key, known) {
  const flat = (s) => s.toLowerCase().replace(/[-_]/g, '');
  const same = known.find((k) => flat(k) === flat(key));
  if (same) return same;
  let best = null;
  let bestD = Infinity;
  for (const k of known) {
    const d = distance(key.toLowerCase(), k.toLowerCase());
    if (d < bestD) [best, bestD] = [k, d];
  }
  return bestD <= (key.length <= 4 ? 1 : 2) ? best : null;
}

/**
 * Throw a TypeError unless `options` is an object whose every key is in SPECS[specName] and
 * whose every given value has its type; `what` names the call in the message. Returns a
 * copy of the options (empty for undefined), the one the call then reads.
 */
function checkOptions(what, specName, given) {
  const spec = SPECS[specName];
  if (given === undefined) return Object.create(null);
  // A plain object only: a class instance's or a prototype's keys would be read below
  // without being checked here.
  if (!isPlainObject(given)) {
    throw new TypeError(`${what}(): options must be a plain object ({ ... }), not ${shown(given)}`);
  }
  // Each own key read once, into an object with no prototype: what is checked is what is
  // used (a getter cannot answer differently later; Object.prototype's keys are not read).
  const options = Object.create(null);
  for (const key of Reflect.ownKeys(given)) {
    if (typeof key === 'symbol') throw new TypeError(`${what}(): unknown option ${String(key)}`);
    options[key] = given[key];
  }
  const known = Object.keys(spec);
  for (const key of Object.keys(options)) {
    if (!Object.prototype.hasOwnProperty.call(spec, key)) {
      const near = didYouMean(key, known);
      throw new TypeError(
        `${what}(): unknown option ${JSON.stringify(key)}` +
          (near ? ` (did you mean ${JSON.stringify(near)}?)` : ` (${what}() takes ${known.join(', ')})`),
      );
    }
    const v = options[key];
    if (v === undefined) continue;
    const [ok, must] = spec[key];
    if (!ok(v)) throw new TypeError(`${what}(): option ${JSON.stringify(key)} must be ${must}, not ${shown(v)}`);
  }
  if (options.stdin !== undefined && options.stdinFile !== undefined) {
    throw new TypeError(`${what}(): give stdin or stdinFile, not both`);
  }
  if (options.verbose && options.quiet) {
    throw new TypeError(`${what}(): give verbose or quiet, not both`);
  }
  return options;
}

module.exports = { checkOptions, didYouMean, SPECS, LAYERS, CHANGESET_ID };
