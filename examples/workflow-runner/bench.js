#!/usr/bin/env node
'use strict';
// Per-step overhead of the runner: `true` run N times, interleaved, as
//   bare      spawn('/usr/bin/true')                                   (fork+exec+wait from node)
//   direct    spawn(sandbox-run ... -- true), waiting for its exit     (what sandbox-run costs)
//   report    the same with --report FILE, read and parsed afterwards  (what the report costs)
//   runner    runStep({ argv: ['true'] })                              (this module)
// and prints the median and mean wall time of each, and the differences.
//
// Usage: node bench.js [N] [PROFILE]   (default 200 runs; the profile: the tests' one, `ci`
// with the cgroup layer best-effort; SANDBOX_RUN_BIN as in the tests; a scratch repo under the
// checkout's target/tmp, or $SANDBOX_RUN_TEST_TMP)

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runStep, buildArgs } = require('.');
const h = require('./test/helpers');

const N = Number(process.argv[2] || 200);
const bin = h.sandboxRunBin();
const fx = h.fixture('bench');
const env = { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' };

function wait(cmd, args) {
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { shell: false, stdio: ['ignore', 'pipe', 'pipe'], env });
    c.stdout.resume();
    c.stderr.resume();
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} exited ${code}`))));
  });
}

const profile = process.argv[3] || fx.profile;
const step = { argv: ['true'], profile, repo: fx.repo, timeoutMs: 60_000, killGraceMs: 5_000 };
const tmp = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), 'wfr-bench-'));
const reportFile = path.join(tmp, 'r.json');
const plain = buildArgs(step, reportFile).filter((_, i, a) => a[i] !== '--report' && a[i - 1] !== '--report');

const kinds = {
  bare: () => wait('/usr/bin/true', []),
  direct: () => wait(bin, plain),
  report: async () => {
    await wait(bin, buildArgs(step, reportFile));
    const r = JSON.parse(fs.readFileSync(reportFile, 'utf8'));
    fs.rmSync(reportFile);
    if (r.results[0].status !== 'ok') throw new Error(JSON.stringify(r));
  },
  runner: async () => {
    const r = await runStep(step, { bin, env });
    if (!r.ok) throw new Error(JSON.stringify(r));
  },
};

async function main() {
  const times = Object.fromEntries(Object.keys(kinds).map((k) => [k, []]));
  for (const k of Object.keys(kinds)) await kinds[k](); // warm-up
  const order = Object.entries(kinds);
  for (let i = 0; i < N; i++) {
    // rotate the order: each kind follows each other kind equally often (a sandbox's teardown
    // can still load the kernel while the next run starts)
    for (let j = 0; j < order.length; j++) {
      const [k, f] = order[(i + j) % order.length];
      const t0 = process.hrtime.bigint();
      await f();
      times[k].push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  const median = (a) => {
    const s = [...a].sort((x, y) => x - y);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  const st = Object.fromEntries(Object.entries(times).map(([k, a]) => [k, { median: median(a), mean: mean(a) }]));
  const f = (x) => x.toFixed(2).padStart(7);
  console.log(`workflow-runner bench: \`true\`, ${N} interleaved runs each, ${os.cpus().length} CPUs, node ${process.version}`);
  console.log(`binary: ${bin}`);
  console.log(`profile: ${profile}`);
  console.log('                 median ms   mean ms');
  for (const [k, v] of Object.entries(st)) console.log(`  ${k.padEnd(14)} ${f(v.median)}   ${f(v.mean)}`);
  const d = (a, b) => `${f(st[a].median - st[b].median)}   ${f(st[a].mean - st[b].mean)}`;
  console.log('overhead');
  console.log(`  runner - direct ${d('runner', 'direct')}   (what the runner adds over calling sandbox-run)`);
  console.log(`  runner - report ${d('runner', 'report')}   (the runner's own code: tmp dir, timers, pipes)`);
  console.log(`  report - direct ${d('report', 'direct')}   (writing, reading and parsing the report)`);
  console.log(`  direct - bare   ${d('direct', 'bare')}   (sandbox-run itself)`);
  console.log(`  runner - bare   ${d('runner', 'bare')}   (a step through the runner against a bare exec)`);
}

main()
  .catch((e) => {
    console.error(e);
    process.exitCode = 1;
  })
  .finally(() => {
    fs.rmSync(tmp, { recursive: true, force: true });
    fx.cleanup();
  });
