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

// A copy of a GGUF file with tokenizer.chat_template set: the test models have no template, and
// llama.node's Jinja paths (getFormattedChat's 'jinja' result, isJinjaSupported) need the model's own.
export function withChatTemplate(src, template) {
  const b = fs.readFileSync(src);
  let p = 0;
  const u32 = () => ((p += 4), b.readUInt32LE(p - 4));
  const u64 = () => ((p += 8), Number(b.readBigUInt64LE(p - 8)));
  const str = () => {
    const n = u64();
    p += n;
    return b.toString('utf8', p - n, p);
  };
  const SIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) str();
    else if (type === 9) {
      const t = u32();
      const n = u64();
      for (let i = 0; i < n; i++) skip(t);
    } else p += SIZE[type];
  };
  if (b.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${src} is not a GGUF file`);
  p = 8;
  const nTensors = u64();
  const nKv = u64();
  const kvStart = p;
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const type = u32();
    if (key === 'general.alignment') alignment = b.readUInt32LE(p);
    skip(type);
  }
  const kvEnd = p;
  for (let i = 0; i < nTensors; i++) {
    str();
    const dims = u32();
    p += 8 * dims + 4 + 8;
  }
  const infoEnd = p;
  const dataStart = Math.ceil(infoEnd / alignment) * alignment;
  const key = Buffer.from('tokenizer.chat_template');
  const val = Buffer.from(template);
  const kv = Buffer.alloc(8 + key.length + 4 + 8 + val.length);
  kv.writeBigUInt64LE(BigInt(key.length), 0);
  key.copy(kv, 8);
  kv.writeUInt32LE(8, 8 + key.length);
  kv.writeBigUInt64LE(BigInt(val.length), 12 + key.length);
  val.copy(kv, 20 + key.length);
  const head = Buffer.concat([b.subarray(0, 16), Buffer.alloc(8), b.subarray(kvStart, kvEnd), kv, b.subarray(kvEnd, infoEnd)]);
  head.writeBigUInt64LE(BigInt(nKv + 1), 16);
  const pad = Buffer.alloc((alignment - (head.length % alignment)) % alignment);
  const out = tmpFile(`templated-${path.basename(src)}`);
  fs.writeFileSync(out, Buffer.concat([head, pad, b.subarray(dataStart)]));
  return out;
}
