'use strict';
// One sandbox-run process: spawned without a shell, its output kept (the last bytes), its
// stdin fed or /dev/null, stopped on an abort or past its own deadline.
//
// Stopping it: SIGTERM to sandbox-run, which relays it to every process of the sandbox and
// SIGKILLs them after its kill grace, then exits with its report. Should sandbox-run itself
// still be there 2 s after that grace, it gets SIGKILL; its sandbox then dies by the
// parent-death chain (stage 2, then pid 1, then the pid namespace). Either way the promise
// settles only once sandbox-run has exited.

const { spawn } = require('node:child_process');
const { Readable } = require('node:stream');

/** sandbox-run's default `--kill-grace`. */
const DEFAULT_KILL_GRACE_MS = 5_000;
/** How long after the kill grace sandbox-run may take to exit before it is SIGKILLed. */
const EXIT_SLACK_MS = 2_000;
/** How long past timeout + grace sandbox-run may take to tear down before it is stopped. */
const DEADLINE_SLACK_MS = 5_000;

/** Keeps the last `max` bytes written to it, and counts the ones it let go. */
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

/**
 * Run `bin args` and resolve, once it has exited, to
 * { code, signal, stdout, stderr, dropped: { stdout, stderr }, aborted, killed, spawnError }.
 * Never rejects.
 *
 * o: { env, cwd, stdin (string | Buffer | Uint8Array | Readable | undefined), maxOutput,
 *      killGraceMs (for the SIGKILL after an abort), deadlineMs (stop after this, or none),
 *      signal, onSpawn, onStdout, onStderr }
 */
function runProcess(bin, args, o) {
  return new Promise((resolve) => {
    const out = new Tail(o.maxOutput);
    const err = new Tail(o.maxOutput);
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
      if (o.signal) o.signal.removeEventListener('abort', onAbort);
      resolve({
        code: exited ? exited.code : null,
        signal: exited ? exited.signal : null,
        stdout: out.text(),
        stderr: err.text(),
        dropped: { stdout: out.dropped, stderr: err.dropped },
        aborted,
        killed,
        spawnError: null,
        ...extra,
      });
    };
    const stop = () => {
      if (exited || !child || child.pid === undefined) return;
      child.kill('SIGTERM');
      const grace = o.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
      timers.push(
        setTimeout(() => {
          if (!exited) {
            killed = true;
            child.kill('SIGKILL');
          }
        }, grace + EXIT_SLACK_MS),
      );
    };
    const onAbort = () => {
      if (exited) return;
      aborted = true;
      stop();
    };

    const feed = o.stdin !== undefined && o.stdin !== null;
    try {
      child = spawn(bin, args, {
        shell: false,
        stdio: [feed ? 'pipe' : 'ignore', 'pipe', 'pipe'],
        env: o.env,
        cwd: o.cwd,
        windowsHide: true,
      });
    } catch (e) {
      finish({ spawnError: e });
      return;
    }
    child.stdout.on('data', (c) => {
      out.push(c);
      if (o.onStdout) o.onStdout(c);
    });
    child.stderr.on('data', (c) => {
      err.push(c);
      if (o.onStderr) o.onStderr(c);
    });
    child.on('error', (e) => {
      // ENOENT, EACCES: nothing ran. (A kill() after the exit is not an error to report.)
      if (!exited && child.pid === undefined) finish({ spawnError: e });
    });
    child.on('exit', (code, sig) => {
      exited = { code, signal: sig };
      // The pipes close when the last process holding them is gone. The sandbox is; do not
      // wait forever on a descriptor something outside it inherited.
      timers.push(
        setTimeout(() => {
          child.stdout.destroy();
          child.stderr.destroy();
          finish();
        }, 2_000),
      );
    });
    child.on('close', () => {
      if (exited) finish();
    });
    if (child.pid === undefined) return; // the 'error' event finishes it
    if (feed) {
      // sandbox-run may be done (or refuse) before it has read everything: not an error here.
      child.stdin.on('error', () => {});
      const src = o.stdin;
      if (src instanceof Readable || (src && typeof src.pipe === 'function')) {
        src.pipe(child.stdin);
      } else {
        child.stdin.end(src);
      }
    }
    if (o.signal) {
      if (o.signal.aborted) onAbort();
      else o.signal.addEventListener('abort', onAbort, { once: true });
    }
    if (o.deadlineMs) timers.push(setTimeout(stop, o.deadlineMs));
    if (o.onSpawn) o.onSpawn(child);
  });
}

module.exports = { runProcess, Tail, DEFAULT_KILL_GRACE_MS, EXIT_SLACK_MS, DEADLINE_SLACK_MS };
