// Runs every app of apps.mjs against one module (argv[2]: a path to node-llama-cpp's dist/index.js,
// or "loom") on argv[3] (stories260K by default) and prints {app: result | {error}} as JSON.
import { pathToFileURL } from 'node:url';
import * as apps from './apps.mjs';

const which = process.argv[2];
const m = which === 'loom' ? (await import('../../lib/node-llama-cpp.js')).default : await import(pathToFileURL(which).href);
const out = {};
for (const name of ['gettingStarted', 'chatWithHistory', 'streaming', 'jsonSchemaOutput', 'functionCalling', 'embeddingsSearch', 'ranking']) {
  const t0 = Date.now();
  try {
    out[name] = await apps[name](m, process.argv[3]);
  } catch (e) {
    out[name] = { error: `${e?.name}: ${e?.message}` };
  }
  out[name].ms = Date.now() - t0;
}
process.stdout.write(JSON.stringify(out));
process.exit(0);
