// Shared test data: ../shared beside the repository (or $LOOM_SHARED), with a clear failure when
// it is missing.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { gemma3nModel } from '../../../tests/server/js/harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '..', '..', '..');
export const shared = path.resolve(process.env.LOOM_SHARED || path.join(repo, '..', 'shared'));
if (!fs.existsSync(path.join(shared, 'models', 'stories260K.gguf'))) {
  throw new Error(`shared test data not found at ${shared} (set LOOM_SHARED or put ../shared beside the repository)`);
}
export const model = (name) => path.join(shared, 'models', name);
export const golden = (name) => JSON.parse(fs.readFileSync(path.join(shared, 'golden', name), 'utf8'));
export const goldenF32 = (name) => {
  const b = fs.readFileSync(path.join(shared, 'golden', name));
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
};
export const stories = model('stories260K.gguf');
export const tmpFile = (name) => path.join(fs.mkdtempSync(path.join(process.env.TMPDIR || '/tmp', 'loom-node-')), name);
export const greedy = { temperature: 0 };

// gemma3n's synthetic model (23 MB, not committed): made on first use by the make_arch_variant
// beside the addon of this build ($LOOM_NODE_ADDON, else the checkout's build/bin), as the server's
// and the C++ tests make it.
export const gemma3n = () =>
  gemma3nModel(process.env.LOOM_NODE_ADDON ? path.dirname(process.env.LOOM_NODE_ADDON) : path.join(repo, 'build', 'bin'));
