'use strict';
// Finds and loads the addon, in this order:
//   1. $LOOM_NODE_ADDON, when set (an explicit choice: the test suite points it at the build under
//      test, e.g. a sanitizer build, so that an installed prebuilt addon cannot stand in for it);
//   2. the prebuilt platform package, loom-node-<platform>-<arch> (an optional dependency of the
//      published package: npm installs the one whose os/cpu/libc match this machine);
//   3. this package's own build (build/bin/loom_node.node: `npm install` / `npm run build` in
//      bindings/node, or `npx loom-node-build` in an app);
//   4. the project's build folder of the checkout this package sits in (../../build/bin).
// None found: an error that says how to get one (platform package or a build from source).
const fs = require('node:fs');
const path = require('node:path');

const pkgDir = path.join(__dirname, '..');
const platformKey = `${process.platform}-${process.arch}`;
const platformPackage = `loom-node-${platformKey}`;
// Platforms with a platform package (packages/<platform>/package.json in loom's tree).
const PREBUILT = ['linux-x64', 'linux-arm64', 'darwin-x64', 'darwin-arm64', 'win32-x64'];

function platformAddon() {
  try {
    return path.join(path.dirname(require.resolve(`${platformPackage}/package.json`, { paths: [pkgDir] })), 'loom_node.node');
  } catch {
    return null;
  }
}

const candidates = [];
if (process.env.LOOM_NODE_ADDON) candidates.push(['$LOOM_NODE_ADDON', process.env.LOOM_NODE_ADDON]);
candidates.push(
  [platformPackage, platformAddon()],
  ["this package's build", path.join(pkgDir, 'build', 'bin', 'loom_node.node')],
  ["the checkout's build", path.join(pkgDir, '..', '..', 'build', 'bin', 'loom_node.node')],
);

let native = null;
const tried = [];
for (const [what, file] of candidates) {
  if (!file) {
    tried.push(`${what}: not installed`);
    continue;
  }
  if (!fs.existsSync(file)) {
    tried.push(`${what}: ${file} (missing)`);
    continue;
  }
  try {
    native = require(file);
    break;
  } catch (err) {
    tried.push(`${what}: ${file} (${err.message})`);
  }
}
if (!native) {
  const prebuilt = PREBUILT.includes(platformKey)
    ? `The prebuilt addon for ${platformKey} is the package ${platformPackage}, an optional dependency of ` +
      'loom-node: reinstall without omitting optional dependencies (npm install --include=optional), or ' +
      `install its tarball beside loom-node's (npm install loom-node-<version>.tgz ${platformPackage}-<version>.tgz).`
    : `There is no prebuilt addon for ${platformKey}.`;
  throw new Error(
    `loom-node: no native addon could be loaded. ${prebuilt}\n` +
      'To build it from source (CMake, a C++20 compiler and loom\'s build dependencies; see README.md, "Install"):\n' +
      `  cd ${pkgDir} && npm install --no-save node-addon-api && LOOM_SOURCE_DIR=/path/to/loom node scripts/build.js\n` +
      '  (in loom\'s own checkout: npm install in bindings/node). Looked for:\n' +
      `  ${tried.join('\n  ')}`,
  );
}

module.exports = native;
