// ESM entry point: the same module as lib/index.js.
import loom from './index.js';

export const {
  loadModel,
  loadModule,
  loadLlamaModelInfo,
  toggleNativeLog,
  isNativeLogEnabled,
  addNativeLogListener,
  LlamaContext,
  LlamaParallelAPI,
  BuildInfo,
  initLlama,
  loomVersion,
  getBackendDevicesInfo,
  isLibVariantAvailable,
} = loom;
export default loom;
