// ESM entry point: the same module as lib/index.js.
import loom from './index.js';

export const {
  loadModel,
  loadLlamaModelInfo,
  toggleNativeLog,
  addNativeLogListener,
  LlamaContext,
  LlamaParallelAPI,
  initLlama,
  loomVersion,
  getBackendDevicesInfo,
  isLibVariantAvailable,
} = loom;
export default loom;
