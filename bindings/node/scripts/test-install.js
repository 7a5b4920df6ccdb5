#!/usr/bin/env node
'use strict';
// Installs loom-node the way an app does, from the prebuilt tarballs of this build's addon, and
// checks that it works on a machine without loom's build dependencies (CTest: node_binding_package).
//   1. scripts/pack.js packs the main and the platform package from $LOOM_NODE_ADDON;
//   2. for npm (PATH's, with and without --ignore-scripts) and npm 10 (npx's cache, fetched once
//      from the registry; skipped when unreachable): a clean app folder, `npm install` of both
//      tarballs with the registry pointed at a closed port and an empty cache (nothing may come
//      from the network), timed: over 30 s fails;
//   3. ldd of the installed addon with LD_LIBRARY_PATH emptied: nothing missing, nothing but glibc
//      and the libraries shipped beside it;
//   4. node, with LD_LIBRARY_PATH emptied, loads loom-node from the app (the platform package's
//      addon and shipped libraries, /proc/self/maps says) and runs a short completion on
//      stories260K.gguf; the package's messages without a platform package and without a source
//      tree say how to build from source, and `npx loom-node-build` with LOOM_SOURCE_DIR builds the
//      addon into the installed package (only the addon target, in this addon's build folder).
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pack, lddMap, elfDynamic, GLIBC, CXX_RUNTIME } = require('./pack.js');

const MAX_INSTALL_S = 30;
const pkgDir = path.resolve(__dirname, '..');
const repo = path.resolve(pkgDir, '..', '..');
const shared = path.resolve(process.env.LOOM_SHARED || path.join(repo, '..', 'shared'));
const model = path.join(shared, 'models', 'stories260K.gguf');
const platformKey = `${process.platform}-${process.arch}`;
const platformPkg = `loom-node-${platformKey}`;

let failures = 0;
function check(ok, msg) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!ok) failures++;
  return ok;
}
function die(msg) {
  console.error(`FAIL ${msg}`);
  process.exit(1);
}

if (!fs.existsSync(model)) die(`shared test data not found at ${shared} (set LOOM_SHARED or put ../shared beside the repository)`);
if (process.platform !== 'linux') die(`${platformKey}: this test checks the Linux package (ldd, /proc/self/maps)`);

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-node-install-'));
const keep = process.env.LOOM_KEEP_TMP === '1';
process.on('exit', () => {
  if (!keep) fs.rmSync(tmp, { recursive: true, force: true });
  else console.log(`kept ${tmp}`);
});

// npm 10 from npx's cache (~/.npm/_npx), fetched from the registry the first time (bounded).
function findNpm10() {
  const npx = path.join(os.homedir(), '.npm', '_npx');
  if (!fs.existsSync(npx)) return null;
  for (const d of fs.readdirSync(npx)) {
    const pj = path.join(npx, d, 'node_modules', 'npm', 'package.json');
    try {
      const v = JSON.parse(fs.readFileSync(pj, 'utf8')).version;
      if (v.startsWith('10.')) return { version: v, cli: path.join(path.dirname(pj), 'bin', 'npm-cli.js') };
    } catch {
      // not this one
    }
  }
  return null;
}
let npm10 = findNpm10();
if (!npm10) {
  const t = Date.now();
  const r = spawnSync('npx', ['-y', 'npm@10', '--version'], { encoding: 'utf8', timeout: 60000,
    env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fetch_retries: '0' } });
  npm10 = findNpm10();
  if (!npm10) {
    console.log(`SKIP npm 10: npx -y npm@10 could not fetch it from the registry in ${((Date.now() - t) / 1000).toFixed(0)} s ` +
                `(${(r.error && r.error.message) || (r.stderr || '').split('\n').filter((l) => /\S/.test(l) && !/complete log/.test(l)).slice(0, 2).join(' ') || `exit ${r.status}`}); npm 11 is still tested`);
  }
}

// 1. the tarballs
const addon = process.env.LOOM_NODE_ADDON || path.join(repo, 'build', 'bin', 'loom_node.node');
let t0 = Date.now();
const packed = pack({ addon, out: path.join(tmp, 'tarballs') });
console.log(`packed in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${path.basename(packed.main)} ` +
            `(${(fs.statSync(packed.main).size / 1e3).toFixed(0)} kB), ${path.basename(packed.platform)} ` +
            `(${(fs.statSync(packed.platform).size / 1e6).toFixed(1)} MB, shipped beside the addon: ${packed.shipped.join(', ') || 'nothing'})`);

const systemNpm = spawnSync('npm', ['--version'], { encoding: 'utf8' }).stdout.trim();
const variants = [
  { label: `npm ${systemNpm} --ignore-scripts`, npm: ['npm'], flags: ['--ignore-scripts'] },
  { label: `npm ${systemNpm}`, npm: ['npm'], flags: [] },
];
if (npm10) variants.push({ label: `npm ${npm10.version}`, npm: [process.execPath, npm10.cli], flags: [] });

// What runs inside the app: which files got loaded, and a completion.
const probe = `
const fs = require('node:fs');
(async () => {
  const loom = require('loom-node');
  const esm = await import('loom-node');
  if (typeof esm.loadModel !== 'function') throw new Error('import("loom-node") has no loadModel');
  const maps = fs.readFileSync('/proc/self/maps', 'utf8').split('\\n').map((l) => l.split(/\\s+/)[5]).filter(Boolean);
  const loaded = [...new Set(maps.filter((f) => /\\.node$|\\.so(\\.\\d+)*$/.test(f)))];
  const ctx = await loom.loadModel({ model: process.argv[1], n_ctx: 256, n_threads: 1 });
  const r = await ctx.completion({ prompt: 'Once upon a time', n_predict: 8, temperature: 0 });
  await ctx.release();
  console.log(JSON.stringify({ loaded, tokens_predicted: r.tokens_predicted, text: r.text }));
})().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
`;

const timings = [];
variants.forEach((v, i) => {
  console.log(`\n== ${v.label}`);
  const app = path.join(tmp, `app${i}`);
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, 'package.json'), `${JSON.stringify({ name: 'loom-node-install-test', version: '1.0.0', private: true }, null, 2)}\n`);
  // No network: the registry is a closed local port, the cache empty, no retries (a lookup fails at
  // once and shows in the output).
  const env = { ...process.env, npm_config_registry: 'http://127.0.0.1:9/', npm_config_cache: path.join(tmp, `cache${i}`),
                npm_config_fetch_retries: '0', npm_config_update_notifier: 'false', npm_config_loglevel: 'warn' };
  delete env.LOOM_NODE_ADDON;
  const args = [...v.npm.slice(1), 'install', '--no-audit', '--no-fund', ...v.flags, packed.main, packed.platform];
  t0 = process.hrtime.bigint();
  const r = spawnSync(v.npm[0], args, { cwd: app, env, encoding: 'utf8' });
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const out = `${r.stdout}${r.stderr}`;
  if (!check(r.status === 0, `${v.label}: npm install exited ${r.status}`)) console.log(out);
  check(!/ECONNREFUSED|127\.0\.0\.1:9|ENOTFOUND|ETIMEDOUT/.test(out), `${v.label}: no registry request${/ECONNREFUSED|127\.0\.0\.1:9/.test(out) ? `:\n${out}` : ''}`);
  check(seconds <= MAX_INSTALL_S, `${v.label}: installed in ${seconds.toFixed(1)} s (limit ${MAX_INSTALL_S} s)`);
  timings.push(`${v.label}: ${seconds.toFixed(1)} s`);

  const nm = path.join(app, 'node_modules');
  const installed = path.join(nm, platformPkg, 'loom_node.node');
  if (!check(fs.existsSync(installed), `${v.label}: ${platformPkg} installed`)) return;
  check(!fs.existsSync(path.join(nm, 'node-addon-api')), `${v.label}: node-addon-api not installed (build-time only)`);
  check(fs.existsSync(path.join(nm, '.bin', 'loom-node-build')), `${v.label}: bin loom-node-build linked`);

  // 3. ldd with LD_LIBRARY_PATH emptied
  const noLdPath = { ...env, LD_LIBRARY_PATH: '' };
  const platDir = fs.realpathSync(path.join(nm, platformPkg));
  const libs = lddMap(installed, noLdPath);
  const direct = elfDynamic(installed).needed;
  const bad = [];
  for (const [name, where] of libs) {
    if (!where) bad.push(`${name} not found`);
    else if (GLIBC.test(name)) continue;
    else if (fs.realpathSync(where).startsWith(`${platDir}${path.sep}`)) continue;
    else if (CXX_RUNTIME.test(name) && !direct.includes(name)) continue; // needed by a shipped library only
    else bad.push(`${name} => ${where}`);
  }
  if (i === 0) console.log(`ldd ${path.relative(app, installed)}:\n${sh(['ldd', installed], noLdPath).replace(/^/gm, '  ')}`);
  if (i === 0) {
    // What the machine must provide: glibc of at least the addon's newest symbol version; the C++
    // runtime only for the shipped libraries (the addon has its own, linked in).
    const versions = (f, re) => [...new Set([...sh(['objdump', '-T', f], env).matchAll(re)].map((m) => m[1]))]
      .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
    check(versions(installed, /\((GLIBCXX_[\d.]+|CXXABI_[\d.]+)\)/g).length === 0, 'the addon needs no libstdc++ (linked in)');
    console.log(`  the addon needs glibc ${versions(installed, /\(GLIBC_([\d.]+)\)/g).pop()}; ` + packed.shipped.map((l) => {
      const cxx = versions(path.join(platDir, l), /\((GLIBCXX_[\d.]+)\)/g).pop();
      return `${l}: ${cxx ? `libstdc++ ${cxx}` : 'no libstdc++'}`;
    }).join(', '));
  }
  check(bad.length === 0, `${v.label}: ldd: only glibc and the shipped libraries${bad.length ? ` (not: ${bad.join('; ')})` : ''}`);

  // 4. load and complete with LD_LIBRARY_PATH emptied
  const run = spawnSync(process.execPath, ['-e', probe, model], { cwd: app, env: noLdPath, encoding: 'utf8', timeout: 120000 });
  let res = null;
  try {
    res = JSON.parse(run.stdout.trim().split('\n').pop());
  } catch {
    // reported below
  }
  if (!check(run.status === 0 && res, `${v.label}: require('loom-node') and a completion`)) {
    console.log(`${run.stdout}${run.stderr}`);
    return;
  }
  const addonLoaded = res.loaded.filter((f) => f.endsWith('loom_node.node'));
  check(addonLoaded.length === 1 && fs.realpathSync(addonLoaded[0]) === fs.realpathSync(installed),
        `${v.label}: the platform package's addon was loaded (${addonLoaded.join(', ')})`);
  for (const lib of packed.shipped) {
    const l = res.loaded.filter((f) => path.basename(f) === lib || path.basename(f).startsWith(`${lib}.`));
    check(l.length === 1 && fs.realpathSync(l[0]).startsWith(`${platDir}${path.sep}`), `${v.label}: ${lib} loaded from beside the addon (${l.join(', ')})`);
  }
  check(res.tokens_predicted > 0, `${v.label}: completion of ${res.tokens_predicted} tokens: ${JSON.stringify(res.text)}`);

  if (i === 0) {
    // Without a source tree the build script says how to build from source.
    const b = spawnSync(process.execPath, [path.join(nm, 'loom-node', 'scripts', 'build.js')], { cwd: app, env: noLdPath, encoding: 'utf8' });
    check(b.status !== 0 && /LOOM_SOURCE_DIR/.test(b.stderr), `build.js without a source tree fails with how to build from source: ${b.stderr.trim().split('\n')[0]}`);
    // Without the platform package (optional dependencies omitted) loading says what to do.
    fs.rmSync(path.join(nm, platformPkg), { recursive: true });
    const m = spawnSync(process.execPath, ['-e', "require('loom-node')"], { cwd: app, env: noLdPath, encoding: 'utf8' });
    check(m.status !== 0 && /--include=optional/.test(m.stderr) && /scripts\/build\.js/.test(m.stderr) && /node-addon-api/.test(m.stderr),
          'without the platform package, require() says how to get it or build from source');
    // The source build from the app: the bin, against loom's tree and the build folder of the addon
    // under test (only the addon target is built there; up to date, it takes a second), copies the
    // addon into the installed package, which then loads it.
    const buildDir = path.dirname(path.dirname(path.resolve(addon)));
    t0 = process.hrtime.bigint();
    const sb = spawnSync(path.join(nm, '.bin', 'loom-node-build'), [], { cwd: app, encoding: 'utf8',
      env: { ...noLdPath, LOOM_SOURCE_DIR: repo, LOOM_BUILD_DIR: buildDir, LOOM_JOBS: '2' } });
    const own = path.join(nm, 'loom-node', 'build', 'bin', 'loom_node.node');
    check(sb.status === 0 && fs.existsSync(own), `npx loom-node-build with LOOM_SOURCE_DIR (${(Number(process.hrtime.bigint() - t0) / 1e9).toFixed(1)} s) puts the addon in the package's build/bin` +
          (sb.status === 0 ? '' : `:\n${sb.stdout}${sb.stderr}`));
    const l = spawnSync(process.execPath, ['-e', "require('loom-node'); console.log(require('node:fs').readFileSync('/proc/self/maps', 'utf8').match(/\\S*loom_node\\.node/)[0])"],
                        { cwd: app, env: noLdPath, encoding: 'utf8' });
    check(l.status === 0 && fs.realpathSync(l.stdout.trim()) === fs.realpathSync(own), `then require('loom-node') loads it (${l.stdout.trim() || l.stderr.trim()})`);
  }
});

function sh(cmd, env) {
  const r = spawnSync(cmd[0], cmd.slice(1), { encoding: 'utf8', env: { ...env, LC_ALL: 'C' } });
  return `${r.stdout}${r.stderr}`.trimEnd();
}

console.log(`\ninstall times: ${timings.join(', ')}`);
if (failures) die(`${failures} check(s) failed`);
console.log('all install checks passed');
