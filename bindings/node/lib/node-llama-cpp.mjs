// ESM entry point of loom-node/node-llama-cpp: the same module as lib/node-llama-cpp.js.
import m from './node-llama-cpp.js';

export const {
  getLlama, Llama, LlamaLogLevel, LlamaLogLevelGreaterThan, LlamaLogLevelGreaterThanOrEqual, LlamaVocabularyType,
  LlamaModel, LlamaModelTokens, LlamaModelInfillTokens, LlamaContext, LlamaContextSequence, LlamaChatSession, LlamaChat,
  LlamaCompletion, LlamaGrammar, LlamaJsonSchemaGrammar, LlamaJsonSchemaValidationError, LlamaEmbeddingContext,
  LlamaEmbedding, LlamaRankingContext, TokenBias, TokenMeter, defineChatSessionFunction, isChatModelResponseFunctionCall,
  isChatModelResponseSegment, readGgufFileInfo, LlamaText, SpecialToken, SpecialTokensText, isLlamaText, tokenizeText, ChatWrapper,
  GeneralChatWrapper, AlpacaChatWrapper, FalconChatWrapper, GemmaChatWrapper, MistralChatWrapper, ChatMLChatWrapper, Llama2ChatWrapper, Llama3ChatWrapper, Llama3_1ChatWrapper, JinjaTemplateChatWrapper,
  resolveChatWrapper, DisposedError, UnsupportedError, InsufficientMemoryError, NoBinaryFoundError,
} = m;
export default m;
