// Runs apps of apps.mjs, in sequence, in this one process, against one module (argv[2]: a path to
// node-llama-cpp's dist/index.js, or "loom") on argv[3] (a model path), loading the model once.
// argv[4]: the apps, comma-separated (all of them by default). Prints {app: result | {error}, ms}
// as JSON; {fatal} when the module cannot even start (getLlama fails: e.g. node-llama-cpp's
// prebuilt binary does not load on this machine).
import { pathToFileURL } from 'node:url';
import * as apps from './apps.mjs';

export const ALL = ['gettingStarted', 'chatWithHistory', 'streaming', 'jsonSchemaOutput', 'functionCalling', 'embeddingsSearch', 'ranking', 'contextShift', 'stateFile', 'functionStreaming', 'chatWrappers', 'llamaChat', 'templatedModel', 'fallbackWrappers'];
const [which, modelPath, list] = process.argv.slice(2);
const names = list ? list.split(',') : ALL;
const out = {};
const t0 = Date.now();
try {
  const m = which === 'loom' ? (await import('../../lib/node-llama-cpp.js')).default : await import(pathToFileURL(which).href);
  await apps.llamaOf(m);
  out.startMs = Date.now() - t0;
  for (const name of names) {
    const t = Date.now();
    try {
      out[name] = await apps[name](m, modelPath);
    } catch (e) {
      out[name] = { error: `${e?.name}: ${e?.message}` };
    }
    out[name].ms = Date.now() - t;
  }
  await apps.disposeModels(m);
} catch (e) {
  out.fatal = `${e?.name}: ${e?.message}`;
}
out.totalMs = Date.now() - t0;
process.stdout.write(JSON.stringify(out));
process.exit(0);
