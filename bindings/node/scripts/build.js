#!/usr/bin/env node
'use strict';
// `npm install` in bindings/node (or from an app: npm install path/to/bindings/node) builds the
// addon from loom's source tree with the project's CMake. Nothing is downloaded: Node's own
// headers (node_api.h, from the Node.js installation or Debian's libnode-dev) and node-addon-api
// (an npm dependency) are all it needs beyond the project's build dependencies.
//   LOOM_SOURCE_DIR  loom's source tree (default: two folders up, this package's home)
//   LOOM_BUILD_DIR   build folder (default: bindings/node/build); pointing it at an existing
//                    project build (e.g. ../../build) builds only the addon target there
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
  fail(`loom's source tree was not found at ${sourceDir}. loom-node builds from it: keep this package in ` +
       'bindings/node of a loom checkout, or set LOOM_SOURCE_DIR.');
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
let napiInclude;
try {
  napiInclude = path.dirname(require.resolve('node-addon-api/package.json', { paths: [pkgDir] }));
} catch {
  fail('node-addon-api is missing: run npm install in bindings/node first (it is a dependency).');
}

const buildDir = path.resolve(process.env.LOOM_BUILD_DIR || path.join(pkgDir, 'build'));
const configured = fs.existsSync(path.join(buildDir, 'CMakeCache.txt'));
const configure = ['-S', sourceDir, '-B', buildDir, `-DLOOM_NODE_INCLUDE=${nodeInclude}`, `-DLOOM_NAPI_INCLUDE=${napiInclude}`];
if (!configured) configure.push('-DCMAKE_BUILD_TYPE=Release', '-DLOOM_BUILD_TESTS=OFF', '-DLOOM_BUILD_BENCH=OFF');
const jobs = process.env.LOOM_JOBS || String(os.availableParallelism ? os.availableParallelism() : os.cpus().length);

function run(args) {
  console.log(`loom-node: cmake ${args.join(' ')}`);
  const r = spawnSync('cmake', args, { stdio: 'inherit' });
  if (r.status !== 0) {
    fail('the build failed (see above). loom needs its Debian build dependencies: run scripts/install-deps.sh in ' +
         `${sourceDir}, or install what CMake reported missing.`);
  }
}
run(configure);
run(['--build', buildDir, '--target', 'loom_node', '-j', jobs]);
const addon = path.join(buildDir, 'bin', 'loom_node.node');
if (!fs.existsSync(addon)) fail(`the build finished but ${addon} is missing`);
console.log(`loom-node: built ${addon}`);
