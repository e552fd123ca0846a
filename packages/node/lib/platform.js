'use strict';
// The one platform the package's binary runs on. npm refuses to install the package elsewhere
// (package.json's "os" and "cpu": EBADPLATFORM); an install forced past that (`--force`) gets
// this line when the package is loaded, instead of an exec format error later. No install
// script: npm warns about every package that has one.

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

