'use strict';
// The one platform the package's binary runs on. Checked when the package is installed (the
// preinstall script, for an install forced past npm's own "os"/"cpu" check) and when it is
// loaded, so that another platform gets one line saying what to do instead of an ELF error.

const SUPPORTED = 'linux-x64';

/** null on the supported platform, else the one line that says why not and what to do. */
function unsupported(platform = process.platform, arch = process.arch) {
  if (`${platform}-${arch}` === SUPPORTED) return null;
  return (
    `sandbox-run: the npm package supports ${SUPPORTED} only (this is ${platform}-${arch}); ` +
    'sandbox-run runs on Linux only: on another Linux architecture build it from source ' +
    '(set the target triple in .cargo/config.toml, then `cargo install --locked --path .`)'
  );
}

module.exports = { SUPPORTED, unsupported };

// `node lib/platform.js`: the preinstall check.
if (require.main === module) {
  const why = unsupported();
  if (why) {
    console.error(why);
    process.exit(1);
  }
}
