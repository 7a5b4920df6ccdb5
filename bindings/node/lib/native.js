'use strict';
// Finds and loads the addon: $LOOM_NODE_ADDON, then this package's own build (npm install), then
// the project's build folder (a source checkout built with ./scripts/build.sh).
const fs = require('node:fs');
const path = require('node:path');

const candidates = [
  process.env.LOOM_NODE_ADDON,
  path.join(__dirname, '..', 'build', 'bin', 'loom_node.node'),
  path.join(__dirname, '..', '..', '..', 'build', 'bin', 'loom_node.node'),
].filter(Boolean);

let native = null;
const tried = [];
for (const file of candidates) {
  if (!fs.existsSync(file)) {
    tried.push(`${file} (missing)`);
    continue;
  }
  try {
    native = require(file);
    break;
  } catch (err) {
    tried.push(`${file} (${err.message})`);
  }
}
if (!native) {
  throw new Error(
    'loom-node: the native addon is not built. Run `npm install` (or `npm run build`) in ' +
      `${path.join(__dirname, '..')}. Looked for:\n  ${tried.join('\n  ')}`,
  );
}

module.exports = native;
