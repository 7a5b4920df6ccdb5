#!/usr/bin/env node
'use strict';
// Builds loom-node's addon from loom's source tree with the project's CMake. Apps normally never
// run it: the published loom-node loads the prebuilt addon of its platform package
// (loom-node-<platform>-<arch>, an optional dependency). It runs
//   - as `npm install` / `npm run build` in bindings/node of a loom checkout (the prepare script);
//   - from an app, as `npx loom-node-build` or `node node_modules/loom-node/scripts/build.js`, with
//     LOOM_SOURCE_DIR naming a loom checkout: the addon lands in node_modules/loom-node/build/bin.
// Nothing is downloaded: Node's own headers (node_api.h, from the Node.js installation or Debian's
// libnode-dev) and node-addon-api (headers; a devDependency) are all it needs beyond loom's build
// dependencies.
//   LOOM_SOURCE_DIR  loom's source tree (default: two folders up, this package's home in a checkout)
//   LOOM_BUILD_DIR   build folder (default: the checkout's build/ when it is configured, so that only
//                    the addon target is built there; otherwise this package's build/)
//   LOOM_JOBS        parallel compile jobs (default: the CPU count)
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function fail(msg) {
  console.error(`\nloom-node: ${msg}\n`);
  process.exit(1);
}

function have(cmd, args = ['--version']) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0;
}

const pkgDir = path.resolve(__dirname, '..');
const sourceDir = path.resolve(process.env.LOOM_SOURCE_DIR || path.join(pkgDir, '..', '..'));
if (!fs.existsSync(path.join(sourceDir, 'include', 'loom', 'loom_serve.h'))) {
  fail(`loom's source tree was not found at ${sourceDir}. Building the addon from source needs a loom ` +
       'checkout: set LOOM_SOURCE_DIR=/path/to/loom and run this again (npx loom-node-build). ' +
       `Prebuilt addons need no build: they come in the platform packages loom-node-<platform>-<arch> ` +
       '(optional dependencies of loom-node).');
}
if (!have('cmake')) fail('cmake is missing. On Debian: sudo apt-get install cmake (or run scripts/install-deps.sh in loom\'s tree).');
const cxx = process.env.CXX || ['c++', 'g++', 'clang++'].find((c) => have(c));
if (!cxx || !have(cxx)) fail('no C++ compiler found (c++, g++ or clang++). On Debian: sudo apt-get install g++.');

// Node's headers: beside this node binary (official tarballs, nodesource), or Debian's libnode-dev.
const nodeIncludeCandidates = [
  process.env.LOOM_NODE_INCLUDE,
  path.join(path.dirname(fs.realpathSync(process.execPath)), '..', 'include', 'node'),
  '/usr/include/node',
  '/usr/local/include/node',
].filter(Boolean);
const nodeInclude = nodeIncludeCandidates.find((d) => fs.existsSync(path.join(d, 'node_api.h')));
if (!nodeInclude) {
  fail(`Node's C headers (node_api.h) were not found (looked in ${nodeIncludeCandidates.join(', ')}). ` +
       'On Debian: sudo apt-get install libnode-dev; or set LOOM_NODE_INCLUDE.');
}
// node-addon-api: headers only, a devDependency (apps that install the prebuilt addon never need it).
let napiInclude;
for (const from of [pkgDir, path.join(sourceDir, 'bindings', 'node')]) {
  try {
    napiInclude = path.dirname(require.resolve('node-addon-api/package.json', { paths: [from] }));
    break;
  } catch {
    // next
  }
}
if (!napiInclude) {
  fail('node-addon-api (C++ headers, needed only to build the addon from source) is missing. Install it: ' +
       `cd ${pkgDir} && npm install --no-save node-addon-api (in loom's checkout: npm install in bindings/node).`);
}

// The checkout's own build folder, when configured, is reused: only the addon target is built there
// (the engine's libraries are already built or shared with the rest of the project).
const checkoutBuild = path.join(sourceDir, 'build');
const buildDir = path.resolve(process.env.LOOM_BUILD_DIR ||
  (fs.existsSync(path.join(checkoutBuild, 'CMakeCache.txt')) ? checkoutBuild : path.join(pkgDir, 'build')));
const configured = fs.existsSync(path.join(buildDir, 'CMakeCache.txt'));
// The project configures the addon target when it finds node_api.h and node-addon-api; a build
// folder configured before node-addon-api was installed lacks it (CMake makes CMakeFiles/<target>.dir
// for every target, with Makefiles and Ninja alike).
const hasTarget = fs.existsSync(path.join(buildDir, 'bindings', 'node', 'CMakeFiles', 'loom_node.dir'));
const jobs = process.env.LOOM_JOBS || String(os.availableParallelism ? os.availableParallelism() : os.cpus().length);

function run(args) {
  console.log(`loom-node: cmake ${args.join(' ')}`);
  const r = spawnSync('cmake', args, { stdio: 'inherit' });
  if (r.status !== 0) {
    fail('the build failed (see above). loom needs its Debian build dependencies: run scripts/install-deps.sh in ' +
         `${sourceDir}, or install what CMake reported missing.`);
  }
}
if (!configured || !hasTarget) {
  const configure = ['-S', sourceDir, '-B', buildDir, `-DLOOM_NODE_INCLUDE=${nodeInclude}`, `-DLOOM_NAPI_INCLUDE=${napiInclude}`];
  if (!configured) configure.push('-DCMAKE_BUILD_TYPE=Release', '-DLOOM_BUILD_TESTS=OFF', '-DLOOM_BUILD_BENCH=OFF');
  run(configure);
}
run(['--build', buildDir, '--target', 'loom_node', '-j', jobs]);
const addon = path.join(buildDir, 'bin', 'loom_node.node');
if (!fs.existsSync(addon)) fail(`the build finished but ${addon} is missing`);

// lib/native.js looks in this package's build/bin and in the build/bin of the checkout it sits in;
// an addon built elsewhere (an installed package built against LOOM_SOURCE_DIR's build folder)
// is copied into this package's build/bin.
const real = (p) => (fs.existsSync(p) ? fs.realpathSync(p) : path.resolve(p));
const inCheckout = real(pkgDir) === real(path.join(sourceDir, 'bindings', 'node'));
const own = path.join(pkgDir, 'build', 'bin', 'loom_node.node');
if (!inCheckout && real(addon) !== real(own)) {
  fs.mkdirSync(path.dirname(own), { recursive: true });
  fs.copyFileSync(addon, own);
  console.log(`loom-node: built ${addon}, copied to ${own}`);
} else {
  console.log(`loom-node: built ${addon}`);
}
