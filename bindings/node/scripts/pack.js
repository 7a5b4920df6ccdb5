#!/usr/bin/env node
'use strict';
// Packs loom-node as prebuilt packages, the layout of @fugood/llama.node and node-llama-cpp:
//   loom-node-<platform>-<version>.tgz  the platform package (packages/<platform>/package.json: its
//                                       os/cpu/libc fields) with the compiled addon, loom_node.node,
//                                       and the shared libraries it needs beyond the C library,
//                                       found beside it through its RUNPATH $ORIGIN (libhwy.so.1);
//   loom-node-<version>.tgz             the main package (lib/, index.d.ts, scripts/build.js), whose
//                                       optionalDependencies name the platform packages at exactly its
//                                       version: npm installs the one whose os/cpu/libc match.
// By default the main package lists only the platform packages packed in the same run, so that
// installing the tarballs needs no registry (npm would look the others up there); a release to the
// registry packs it with --all-platforms after each platform's package has been packed on its own
// machine.
//
//   node scripts/pack.js [--addon FILE] [--out DIR] [--all-platforms] [--no-main] [--no-platform]
//     --addon  the addon to pack (default: $LOOM_NODE_ADDON, the checkout's build/bin/loom_node.node,
//              then this package's build/bin/loom_node.node)
//     --out    where the tarballs go (default: dist/ in this folder)
//
// Also usable as a module: require('./pack.js').pack({ addon, out }) -> { main, platform } paths.
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const pkgDir = path.resolve(__dirname, '..');
const platformKey = `${process.platform}-${process.arch}`;

// Libraries every Linux machine with glibc has: never shipped.
const GLIBC = /^(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[-\w.]*|linux-vdso|linux-gate)\.so(\.\d+)*$/;
// The C++ runtime: linked statically into the addon; allowed only as a dependency of a shipped
// library (libhwy.so.1 needs libstdc++.so.6 of GCC >= 5; node itself links it).
const CXX_RUNTIME = /^(libstdc\+\+|libgcc_s)\.so(\.\d+)*$/;

class PackError extends Error {}

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new PackError(`${cmd} ${args.join(' ')}: ${r.error.message}`);
  if (r.status !== 0) throw new PackError(`${cmd} ${args.join(' ')} failed (${r.status}):\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

// readelf -d: NEEDED entries and RUNPATH/RPATH.
function elfDynamic(file) {
  const out = sh('readelf', ['-d', '-W', file], { env: { ...process.env, LC_ALL: 'C' } });
  const needed = [...out.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
  const runpath = [...out.matchAll(/\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]+)\]/g)].flatMap((m) => m[1].split(':'));
  return { needed, runpath };
}

// ldd: soname -> resolved path (null when not found).
function lddMap(file, env = process.env) {
  const out = sh('ldd', [file], { env: { ...env, LC_ALL: 'C' } });
  const map = new Map();
  for (const line of out.split('\n')) {
    let m = line.match(/^\s*(\S+) => not found/);
    if (m) { map.set(m[1], null); continue; }
    m = line.match(/^\s*(\S+) => (\S+) \(0x/);
    if (m) { map.set(m[1], m[2]); continue; }
    m = line.match(/^\s*(\S+) \(0x/);
    if (m) map.set(path.basename(m[1]), m[1]);
  }
  return map;
}

function defaultAddon() {
  const c = [process.env.LOOM_NODE_ADDON, path.join(pkgDir, '..', '..', 'build', 'bin', 'loom_node.node'),
             path.join(pkgDir, 'build', 'bin', 'loom_node.node')].filter(Boolean);
  const found = c.find((f) => fs.existsSync(f));
  if (!found) {
    throw new PackError(`no addon to pack (looked for ${c.join(', ')}): build it first (npm run build in ${pkgDir}) or pass --addon`);
  }
  return found;
}

function npmPack(dir, out) {
  const json = sh('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', out], {
    cwd: dir, env: { ...process.env, npm_config_loglevel: 'error', npm_config_update_notifier: 'false' },
  });
  return path.join(out, JSON.parse(json)[0].filename);
}

// The platform package's folder: its package.json, the addon and (Linux) the non-glibc libraries.
function stagePlatform(addon, stage, version) {
  const manifest = readJson(path.join(pkgDir, 'packages', platformKey, 'package.json'));
  if (manifest.version !== version) {
    throw new PackError(`packages/${platformKey}/package.json has version ${manifest.version}, loom-node ${version}: they are released together`);
  }
  fs.mkdirSync(stage, { recursive: true });
  fs.writeFileSync(path.join(stage, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  fs.copyFileSync(addon, path.join(stage, 'loom_node.node'));
  const shipped = [];
  if (process.platform === 'linux') {
    const { needed, runpath } = elfDynamic(addon);
    const cxx = needed.filter((n) => CXX_RUNTIME.test(n));
    if (cxx.length) {
      throw new PackError(`${addon} needs ${cxx.join(', ')}: a prebuilt addon links the C++ runtime statically ` +
                          '(bindings/node/CMakeLists.txt does, except in sanitizer builds, which are not packed)');
    }
    const extra = needed.filter((n) => !GLIBC.test(n));
    if (extra.length && !runpath.includes('$ORIGIN')) {
      throw new PackError(`${addon} needs ${extra.join(', ')} but has no RUNPATH $ORIGIN to find them beside it (rebuild it with this CMakeLists.txt)`);
    }
    const resolved = lddMap(addon);
    for (const lib of extra) {
      const from = resolved.get(lib);
      if (!from) throw new PackError(`${addon} needs ${lib}, which ldd does not find on this machine`);
      // The shipped library's own dependencies must be on every machine (glibc, the C++ runtime).
      for (const dep of elfDynamic(from).needed) {
        if (!GLIBC.test(dep) && !CXX_RUNTIME.test(dep)) {
          throw new PackError(`${from} (shipped beside the addon) needs ${dep}, which pack.js does not ship`);
        }
      }
      fs.copyFileSync(fs.realpathSync(from), path.join(stage, lib));
      shipped.push(lib);
    }
  } else {
    throw new PackError(`packing on ${platformKey} is not implemented yet: the addon's dependencies must be checked ` +
                        'and shipped beside it as on Linux (otool -L / dumpbin /dependents)');
  }
  return shipped;
}

// The main package's folder: the files `npm pack` would take from this folder, and its package.json
// with the platform packages as optionalDependencies and without the checkout's build scripts.
function stageMain(stage, version, platforms) {
  const list = JSON.parse(sh('npm', ['pack', '--dry-run', '--ignore-scripts', '--json'], {
    cwd: pkgDir, env: { ...process.env, npm_config_loglevel: 'error', npm_config_update_notifier: 'false' },
  }))[0].files.map((f) => f.path);
  for (const rel of list) {
    if (rel === 'package.json') continue;
    fs.mkdirSync(path.join(stage, path.dirname(rel)), { recursive: true });
    fs.copyFileSync(path.join(pkgDir, rel), path.join(stage, rel));
  }
  const manifest = readJson(path.join(pkgDir, 'package.json'));
  if (manifest.dependencies && Object.keys(manifest.dependencies).length) {
    throw new PackError(`loom-node has runtime dependencies (${Object.keys(manifest.dependencies).join(', ')}): ` +
                        'the prebuilt install must need nothing from the registry');
  }
  manifest.scripts = { build: manifest.scripts.build };
  manifest.optionalDependencies = Object.fromEntries(platforms.map((p) => [`loom-node-${p}`, version]));
  fs.writeFileSync(path.join(stage, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
}

function pack({ addon = defaultAddon(), out = path.join(pkgDir, 'dist'), allPlatforms = false, main = true, platform = true } = {}) {
  const version = readJson(path.join(pkgDir, 'package.json')).version;
  fs.mkdirSync(out, { recursive: true });
  out = fs.realpathSync(out);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-node-pack-'));
  const result = { version };
  try {
    if (platform) {
      const stage = path.join(tmp, platformKey);
      result.shipped = stagePlatform(addon, stage, version);
      result.platform = npmPack(stage, out);
    }
    if (main) {
      const all = fs.readdirSync(path.join(pkgDir, 'packages')).filter((p) => fs.existsSync(path.join(pkgDir, 'packages', p, 'package.json'))).sort();
      const stage = path.join(tmp, 'main');
      stageMain(stage, version, allPlatforms ? all : platform ? [platformKey] : []);
      result.main = npmPack(stage, out);
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return result;
}

module.exports = { pack, lddMap, elfDynamic, GLIBC, CXX_RUNTIME, PackError };

if (require.main === module) {
  const args = process.argv.slice(2);
  const opts = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--addon') opts.addon = path.resolve(args[++i]);
    else if (a === '--out') opts.out = path.resolve(args[++i]);
    else if (a === '--all-platforms') opts.allPlatforms = true;
    else if (a === '--no-main') opts.main = false;
    else if (a === '--no-platform') opts.platform = false;
    else {
      console.error(`loom-node pack: unknown argument ${a}\nusage: node scripts/pack.js [--addon FILE] [--out DIR] [--all-platforms] [--no-main] [--no-platform]`);
      process.exit(2);
    }
  }
  try {
    const r = pack(opts);
    for (const f of [r.platform, r.main].filter(Boolean)) {
      const size = fs.statSync(f).size;
      console.log(`${f} (${size < 1e6 ? `${(size / 1e3).toFixed(0)} kB` : `${(size / 1e6).toFixed(1)} MB`})`);
    }
    if (r.shipped && r.shipped.length) console.log(`shipped beside the addon: ${r.shipped.join(', ')}`);
  } catch (err) {
    if (!(err instanceof PackError)) throw err;
    console.error(`loom-node pack: ${err.message}`);
    process.exit(1);
  }
}
