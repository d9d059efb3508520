#!/usr/bin/env node
// The `switchyard` command of the switchyard-mcp package: runs the native binary of this
// machine's platform package (an optional dependency; npm installs the one whose `os` and `cpu`
// match) with the same arguments, standard streams and exit status.
'use strict';

const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

const VERSION = '@VERSION@';
// "platform arch" (Node's names) -> the package that holds the binary built for it.
const PACKAGES = @PACKAGES@;

function fail(message) {
  process.stderr.write(`switchyard (npm package switchyard-mcp): ${message}\n`);
  process.exit(1);
}

function isMusl() {
  if (process.platform !== 'linux') return false;
  const report = process.report && process.report.getReport();
  return !!report && !(report.header && report.header.glibcVersionRuntime);
}

function binary() {
  const key = `${process.platform} ${process.arch}`;
  const pkg = PACKAGES[key];
  const built = Object.keys(PACKAGES).join(', ');
  if (!pkg) {
    fail(`no prebuilt binary for ${key} (there are for: ${built}); build switchyard from source with Rust instead (its README says how)`);
  }
  if (isMusl()) {
    fail(`the Linux binaries are built for glibc and this system uses musl (Alpine, say); build switchyard from source with Rust instead (its README says how)`);
  }
  const file = process.platform === 'win32' ? 'switchyard.exe' : 'switchyard';
  try {
    return require.resolve(`${pkg}/bin/${file}`);
  } catch (e) {
    fail(`the package ${pkg}, which holds the binary for ${key}, is not installed: npm leaves it out when told to omit optional dependencies (--omit=optional, --no-optional); install again without that, or add it: npm install -g ${pkg}@${VERSION} (without -g where switchyard-mcp is a project's dependency)`);
  }
}

// Whether this install stays where it is until the user changes it (npm install -g, or a
// project's node_modules), as opposed to a package runner's cache (npx, pnpm dlx, bunx), whose
// files are replaced or cleared: `switchyard wrap` writes the binary's path into client entries
// only when it stays.
function stays(file) {
  return !file.split(/[\\/]/).some((part) => part === '_npx' || part === 'dlx' || part.startsWith('dlx-') || part.startsWith('bunx-'));
}

const bin = binary();
if (process.platform !== 'win32') {
  try {
    fs.accessSync(bin, fs.constants.X_OK);
  } catch (e) {
    // A package manager that dropped the executable bit (some do when unpacking).
    try {
      fs.chmodSync(bin, 0o755);
    } catch (e2) {
      fail(`${bin} is not executable and cannot be made so (${e2.message}): run chmod +x on it`);
    }
  }
}
const env = Object.assign({}, process.env);
if (!env.SWITCHYARD_STABLE_BIN && stays(fs.realpathSync(__filename))) {
  env.SWITCHYARD_STABLE_BIN = path.resolve(bin);
}

// The binary inherits the streams themselves, not a copy through this process: an MCP client's
// pipes reach switchyard as they are.
const child = spawn(bin, process.argv.slice(2), { stdio: 'inherit', env, windowsHide: true });
const forwarded = ['SIGINT', 'SIGTERM', 'SIGHUP'];
for (const signal of forwarded) {
  process.on(signal, () => {
    try {
      child.kill(signal);
    } catch (e) {
      // Already gone: its exit ends this process.
    }
  });
}
child.on('error', (e) => fail(`cannot start ${bin}: ${e.message}`));
child.on('exit', (code, signal) => {
  if (signal) {
    // Die of the same signal, so whoever started this process sees what happened.
    for (const s of forwarded) process.removeAllListeners(s);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code === null ? 1 : code);
});
