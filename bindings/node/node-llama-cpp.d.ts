// Types of loom-node/node-llama-cpp: node-llama-cpp 3.x's public API as loom-node implements it
// (see README.md, "Migrating from node-llama-cpp"). Names and shapes follow node-llama-cpp's
// declarations, so that an app typed against node-llama-cpp compiles against these.
export type Token = number & { __token?: never };
export declare enum LlamaLogLevel { disabled = "disabled", fatal = "fatal", error = "error", warn = "warn", info = "info", log = "log", debug = "debug" }
export declare enum LlamaVocabularyType { none = "none", spm = "spm", bpe = "bpe", wpm = "wpm", ugm = "ugm", rwkv = "rwkv" }
export declare function LlamaLogLevelGreaterThan(a: LlamaLogLevel, b: LlamaLogLevel): boolean;
export declare function LlamaLogLevelGreaterThanOrEqual(a: LlamaLogLevel, b: LlamaLogLevel): boolean;
export type LlamaGpuType = "metal" | "cuda" | "vulkan" | false;
export type LlamaOptions = {
    gpu?: "auto" | LlamaGpuType | { type: "auto"; exclude?: LlamaGpuType[] };
    logLevel?: LlamaLogLevel;
    logger?: (level: LlamaLogLevel, message: string) => void;
    build?: "auto" | "never" | "forceRebuild" | "try";
    cmakeOptions?: Record<string, string>;
    existingPrebuiltBinaryMustMatchBuildOptions?: boolean;
    usePrebuiltBinaries?: boolean;
    progressLogs?: boolean;
    skipDownload?: boolean;
    maxThreads?: number;
    vramPadding?: number | ((totalVram: number) => number);
    ramPadding?: number | ((totalRam: number) => number);
    debug?: boolean;
    numa?: false | "distribute" | "isolate" | "numactl" | "mirror";
    dryRun?: boolean;
};
export declare function getLlama(options?: LlamaOptions): Promise<Llama>;
export declare function getLlama(type: "lastBuild", lastBuildOptions?: LlamaOptions): Promise<Llama>;
type EventRelay<T> = { createListener(cb: (data: T) => void): { dispose(): void }; dispatchEvent(data: T): void; clearListeners(): void; readonly listenerCount: number };

export declare class Llama {
    private constructor();
    readonly onDispose: EventRelay<void>;
    get disposed(): boolean;
    get gpu(): LlamaGpuType;
    get supportsGpuOffloading(): boolean;
    get supportsMmap(): boolean;
    get gpuSupportsMmap(): boolean;
    get supportsMlock(): boolean;
    get cpuMathCores(): number;
    get maxThreads(): number;
    set maxThreads(value: number);
    get logLevel(): LlamaLogLevel;
    set logLevel(value: LlamaLogLevel);
    get logger(): (level: LlamaLogLevel, message: string) => void;
    set logger(value: (level: LlamaLogLevel, message: string) => void);
    get buildType(): "localBuild" | "prebuilt";
    get systemInfo(): string;
    get vramPaddingSize(): number;
    getVramState(): Promise<{ total: number; used: number; free: number; unifiedSize: number }>;
    getSwapState(): Promise<{ maxSize: number; allocated: number; used: number }>;
    getGpuDeviceNames(): Promise<string[]>;
    loadModel(options: LlamaModelOptions): Promise<LlamaModel>;
    createGrammarForJsonSchema<const T extends GbnfJsonSchema>(schema: Readonly<T>): Promise<LlamaJsonSchemaGrammar<T>>;
    createGrammar(options: LlamaGrammarOptions): Promise<LlamaGrammar>;
    dispose(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
}

export type LlamaModelOptions = {
    modelPath: string;
    gpuLayers?: "auto" | "max" | number | { min?: number; max?: number; fitContext?: { contextSize?: number; embeddingContext?: boolean } };
    vocabOnly?: boolean;
    useMmap?: boolean;
    useDirectIo?: boolean;
    useMlock?: boolean;
    checkTensors?: boolean;
    defaultContextFlashAttention?: boolean;
    defaultContextSwaFullCache?: boolean;
    onLoadProgress?(loadProgress: number): void;
    loadSignal?: AbortSignal;
    ignoreMemorySafetyChecks?: boolean;
    metadataOverrides?: Record<string, unknown>;
    lora?: string | { adapters: Array<{ filePath: string; scale?: number }> };
};
export type Tokenizer = {
    tokenize(text: string, specialTokens?: boolean, options?: "trimLeadingSpace"): Token[];
    tokenize(text: BuiltinSpecialTokenValue, specialTokens: "builtin"): Token[];
    detokenize(tokens: readonly Token[], specialTokens?: boolean, lastTokens?: readonly Token[]): string;
} & ((text: string, specialTokens?: boolean, options?: "trimLeadingSpace") => Token[]);
export type BuiltinSpecialTokenValue = "BOS" | "EOS" | "NL" | "EOT" | "SEP";
export type GgufFileInfo = {
    readonly version: number;
    readonly tensorCount: number | bigint;
    readonly metadata: Record<string, any> & { general: { architecture: string; name?: string; [k: string]: any } };
    readonly architectureMetadata: Record<string, any>;
    readonly metadataSize: number;
    readonly splicedParts: number;
    readonly tensorInfo?: any[];
};
export declare function readGgufFileInfo(pathOrUrl: string, options?: Record<string, unknown>): Promise<GgufFileInfo>;

export declare class LlamaModel {
    private constructor();
    readonly tokenizer: Tokenizer;
    readonly onDispose: EventRelay<void>;
    dispose(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
    get disposed(): boolean;
    get llama(): Llama;
    get tokens(): LlamaModelTokens;
    get filename(): string | undefined;
    get fileInfo(): GgufFileInfo;
    get architecture(): string;
    get gpuLayers(): number;
    get useMmap(): boolean;
    get size(): number;
    get flashAttentionSupported(): boolean;
    get defaultContextFlashAttention(): boolean;
    get trainContextSize(): number;
    get embeddingVectorSize(): number;
    get vocabularyType(): LlamaVocabularyType;
    get typeDescription(): string;
    getWarnings(): string[];
    tokenize(text: string, specialTokens?: boolean, options?: "trimLeadingSpace"): Token[];
    tokenize(text: BuiltinSpecialTokenValue, specialTokens: "builtin"): Token[];
    detokenize(tokens: readonly Token[], specialTokens?: boolean, lastTokens?: readonly Token[]): string;
    isSpecialToken(token: Token | undefined): boolean;
    isEogToken(token: Token | undefined): boolean;
    iterateAllTokens(): Generator<Token, void, unknown>;
    createContext(options?: LlamaContextOptions): Promise<LlamaContext>;
    createEmbeddingContext(options?: LlamaEmbeddingContextOptions): Promise<LlamaEmbeddingContext>;
    createRankingContext(options?: LlamaRankingContextOptions): Promise<LlamaRankingContext>;
}
export declare class LlamaModelTokens {
    private constructor();
    get infill(): LlamaModelInfillTokens;
    get bos(): Token | null;
    get eos(): Token | null;
    get eot(): Token | null;
    get sep(): Token | null;
    get nl(): Token | null;
    get bosString(): string | null;
    get eosString(): string | null;
    get eotString(): string | null;
    get sepString(): string | null;
    get nlString(): string | null;
    get shouldPrependBosToken(): boolean;
    get shouldAppendEosToken(): boolean;
}
export declare class LlamaModelInfillTokens {
    private constructor();
    get prefix(): Token | null;
    get middle(): Token | null;
    get suffix(): Token | null;
    get prefixString(): string | null;
    get middleString(): string | null;
    get suffixString(): string | null;
}

export type LlamaContextOptions = {
    sequences?: number;
    contextSize?: "auto" | number | { min?: number; max?: number };
    batchSize?: number;
    flashAttention?: boolean;
    threads?: number | { ideal?: number; min?: number };
    batching?: Record<string, unknown>;
    lora?: string | { adapters: Array<{ filePath: string; scale?: number }> };
    createSignal?: AbortSignal;
    ignoreMemorySafetyChecks?: boolean;
    failedCreationRemedy?: false | { retries?: number; autoContextSizeShrink?: number | ((contextSize: number) => number) };
    performanceTracking?: boolean;
    swaFullCache?: boolean;
};
export declare class LlamaContext {
    private constructor();
    readonly onDispose: EventRelay<void>;
    dispose(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
    get disposed(): boolean;
    get model(): LlamaModel;
    get contextSize(): number;
    get batchSize(): number;
    get flashAttention(): boolean;
    get stateSize(): number;
    get currentThreads(): number;
    get idealThreads(): number;
    get totalSequences(): number;
    get sequencesLeft(): number;
    getSequence(options?: { contextShift?: { size?: number | ((sequence: LlamaContextSequence) => number) } }): LlamaContextSequence;
}
export type ContextTokensDeleteRange = { start: number; end: number };
export declare class LlamaContextSequence {
    private constructor();
    readonly onDispose: EventRelay<void>;
    dispose(): void;
    [Symbol.dispose](): void;
    get disposed(): boolean;
    get context(): LlamaContext;
    get model(): LlamaModel;
    get sequenceId(): number;
    get contextSize(): number;
    get nextTokenIndex(): number;
    get contextTokens(): Token[];
    get tokenMeter(): TokenMeter;
    get isLoadedToMemory(): boolean;
    clearHistory(): Promise<void>;
    eraseContextTokenRanges(ranges: ContextTokensDeleteRange[]): Promise<void>;
    /** The sequence's tokens and their state as a file (loom's session format, not llama.cpp's). */
    saveStateToFile(filePath: string): Promise<{ fileSize: number }>;
    /** Loads a file of saveStateToFile (of the same model): a prompt starting with its tokens reuses their state. */
    loadStateFromFile(filePath: string, acceptRisk: { acceptRisk: true }): Promise<void>;
}
export type TokenMeterState = { usedInputTokens: number; usedOutputTokens: number };
export declare class TokenMeter {
    get usedInputTokens(): number;
    get usedOutputTokens(): number;
    getState(): TokenMeterState;
    useTokens(tokens: number, type: "input" | "output"): void;
    diff(meter: TokenMeter | TokenMeterState): TokenMeterState;
    static useTokens(meters: null | undefined | TokenMeter | readonly TokenMeter[] | ReadonlySet<TokenMeter>, tokens: number, type: "input" | "output"): void;
}

// ---- JSON schemas (node-llama-cpp's GbnfJsonSchema, simplified: parameters type as `any`) ----
export type GbnfJsonSchemaImmutableType = "string" | "number" | "integer" | "boolean" | "null";
export type GbnfJsonSchema = {
    type?: GbnfJsonSchemaImmutableType | "object" | "array" | readonly (GbnfJsonSchemaImmutableType | "object" | "array")[];
    properties?: { readonly [key: string]: GbnfJsonSchema };
    required?: readonly string[];
    additionalProperties?: boolean | GbnfJsonSchema;
    items?: GbnfJsonSchema;
    prefixItems?: readonly GbnfJsonSchema[];
    minItems?: number;
    maxItems?: number;
    enum?: readonly (string | number | boolean | null)[];
    const?: string | number | boolean | null;
    oneOf?: readonly GbnfJsonSchema[];
    anyOf?: readonly GbnfJsonSchema[];
    description?: string;
    format?: string;
    minLength?: number;
    maxLength?: number;
    $ref?: string;
    $defs?: { readonly [key: string]: GbnfJsonSchema };
    [key: string]: unknown;
};
export type GbnfJsonSchemaToType<T> = any;

export type LlamaGrammarOptions = { grammar: string; stopGenerationTriggers?: readonly string[]; trimWhitespaceSuffix?: boolean; rootRuleName?: string };
export declare class LlamaGrammar {
    constructor(llama: Llama, options: LlamaGrammarOptions);
    get grammar(): string;
    get rootRuleName(): string;
    get stopGenerationTriggers(): readonly string[];
    get trimWhitespaceSuffix(): boolean;
    static getFor(llama: Llama, type: "json" | "json_arr" | "english" | "list" | "c" | "arithmetic" | "japanese" | "chess"): Promise<LlamaGrammar>;
}
export declare class LlamaJsonSchemaGrammar<const T extends GbnfJsonSchema = GbnfJsonSchema> extends LlamaGrammar {
    constructor(llama: Llama, schema: Readonly<T>);
    get schema(): Readonly<T>;
    parse(json: string): GbnfJsonSchemaToType<T>;
}
export declare class LlamaJsonSchemaValidationError extends Error {
    readonly object: any;
    readonly schema: GbnfJsonSchema;
    constructor(message: string, object: any, schema: GbnfJsonSchema);
}

// ---- chat ----
export type ChatSystemMessage = { type: "system"; text: string | any };
export type ChatUserMessage = { type: "user"; text: string };
export type ChatModelFunctionCall = { type: "functionCall"; name: string; description?: string; params: any; result: any; rawCall?: any; startsNewChunk?: boolean };
export type ChatModelSegment = { type: "segment"; segmentType: "thought" | "comment"; text: string; ended: boolean; raw?: any; startTime?: string; endTime?: string };
export type ChatModelResponse = { type: "model"; response: Array<string | ChatModelFunctionCall | ChatModelSegment> };
export type ChatHistoryItem = ChatSystemMessage | ChatUserMessage | ChatModelResponse;
export type ChatSessionModelFunction<Params extends GbnfJsonSchema | undefined = GbnfJsonSchema | undefined> = {
    readonly description?: string;
    readonly params?: Params;
    readonly handler: (params: any) => any;
};
export type ChatSessionModelFunctions = { readonly [name: string]: ChatSessionModelFunction<any> };
export declare function defineChatSessionFunction<const Params extends GbnfJsonSchema>({ description, params, handler }: {
    description?: string;
    params?: Readonly<Params>;
    handler: (params: GbnfJsonSchemaToType<Params>) => Promise<any> | any;
}): ChatSessionModelFunction<Params>;
export declare function isChatModelResponseFunctionCall(item: ChatModelResponse["response"][number] | undefined): item is ChatModelFunctionCall;
export declare function isChatModelResponseSegment(item: ChatModelResponse["response"][number] | undefined): item is ChatModelSegment;

export type LLamaContextualRepeatPenalty = { lastTokens?: number; punishTokensFilter?: (tokens: Token[]) => Token[]; penalizeNewLine?: boolean; penalty?: number; frequencyPenalty?: number; presencePenalty?: number };
export type LlamaChatSessionRepeatPenalty = LLamaContextualRepeatPenalty;
export type LLamaContextualDryRepeatPenalty = { strength: number; base?: number; allowedLength?: number; lastTokens?: number; sequenceBreakers?: string[] };
export declare class TokenBias {
    constructor(tokenizer: Tokenizer);
    set(input: Token | string, bias: "never" | number | { logit: number } | { probability: number }): this;
    static for(modelOrTokenizer: LlamaModel | Tokenizer): TokenBias;
}
export type LlamaChatResponseChunk = { type: undefined | "segment"; text: string; tokens: Token[]; segmentType?: string };
export type LLamaChatPromptOptions<Functions extends ChatSessionModelFunctions | undefined = ChatSessionModelFunctions | undefined> = {
    onTextChunk?: (text: string) => void;
    onToken?: (tokens: Token[]) => void;
    onResponseChunk?: (chunk: LlamaChatResponseChunk) => void;
    signal?: AbortSignal;
    stopOnAbortSignal?: boolean;
    maxTokens?: number;
    temperature?: number;
    minP?: number;
    topK?: number;
    topP?: number;
    seed?: number;
    xtc?: { temperature?: number; probability: number; threshold: number };
    trimWhitespaceSuffix?: boolean;
    responsePrefix?: string;
    evaluationPriority?: number;
    repeatPenalty?: false | LlamaChatSessionRepeatPenalty;
    dryRepeatPenalty?: LLamaContextualDryRepeatPenalty;
    tokenBias?: TokenBias | (() => TokenBias);
    customStopTriggers?: readonly string[];
    budgets?: { includeCurrentResponse?: boolean; thoughtTokens?: number; commentTokens?: number };
} & ({ grammar?: LlamaGrammar; functions?: never; documentFunctionParams?: never; maxParallelFunctionCalls?: never; onFunctionCallParamsChunk?: never }
    | { grammar?: never; functions?: Functions | ChatSessionModelFunctions; documentFunctionParams?: boolean; maxParallelFunctionCalls?: number; onFunctionCallParamsChunk?: (chunk: LlamaChatResponseFunctionCallParamsChunk) => void });
export type LlamaChatResponseFunctionCallParamsChunk = { callIndex: number; functionName: string; paramsChunk: string; done: boolean };
export type LLamaChatContextShiftOptions = {
    size?: number | ((sequence: LlamaContextSequence) => number | Promise<number>);
    strategy?: "eraseFirstResponseAndKeepFirstSystem" | ((options: {
        chatHistory: readonly ChatHistoryItem[];
        maxTokensCount: number;
        tokenizer: Tokenizer;
        chatWrapper: ChatWrapper;
        lastShiftMetadata?: object | null;
    }) => { chatHistory: ChatHistoryItem[]; metadata?: object | null } | Promise<{ chatHistory: ChatHistoryItem[]; metadata?: object | null }>);
    lastEvaluationMetadata?: object | undefined | null;
};
export type LlamaChatSessionContextShiftOptions = {
    size?: LLamaChatContextShiftOptions["size"];
    strategy?: LLamaChatContextShiftOptions["strategy"];
};
export type LlamaChatSessionOptions = {
    contextSequence: LlamaContextSequence;
    chatWrapper?: "auto" | ChatWrapper;
    systemPrompt?: string;
    forceAddSystemPrompt?: boolean;
    autoDisposeSequence?: boolean;
    contextShift?: LlamaChatSessionContextShiftOptions;
};
export type LlamaChatSessionPromptResult = {
    response: Array<string | ChatModelFunctionCall | ChatModelSegment>;
    responseText: string;
    stopReason: "abort" | "eogToken" | "stopGenerationTrigger" | "functionCalls" | "maxTokens" | "customStopTrigger";
    customStopTrigger?: (string | Token)[];
    remainingGenerationAfterStop?: string | Token[];
};
export declare class LlamaChatSession {
    constructor(options: LlamaChatSessionOptions);
    readonly onDispose: EventRelay<void>;
    dispose({ disposeSequence }?: { disposeSequence?: boolean }): void;
    [Symbol.dispose](): void;
    get disposed(): boolean;
    get chatWrapper(): ChatWrapper;
    get sequence(): LlamaContextSequence;
    get context(): LlamaContext;
    get model(): LlamaModel;
    prompt<const Functions extends ChatSessionModelFunctions | undefined = undefined>(prompt: string, options?: LLamaChatPromptOptions<Functions>): Promise<string>;
    promptWithMeta<const Functions extends ChatSessionModelFunctions | undefined = undefined>(prompt: string, options?: LLamaChatPromptOptions<Functions>): Promise<LlamaChatSessionPromptResult>;
    preloadPrompt(prompt: string, options?: Record<string, unknown>): Promise<void>;
    getChatHistory(): ChatHistoryItem[];
    getLastEvaluationContextWindow(): ChatHistoryItem[] | null;
    setChatHistory(chatHistory: ChatHistoryItem[]): void;
    resetChatHistory(): void;
}

export type LlamaChatOptions = { contextSequence: LlamaContextSequence; chatWrapper?: "auto" | ChatWrapper; autoDisposeSequence?: boolean };
export type LLamaChatGenerateResponseOptions<Functions extends ChatModelFunctions | undefined = undefined> = {
    onTextChunk?: (text: string) => void;
    onToken?: (tokens: Token[]) => void;
    onResponseChunk?: (chunk: LlamaChatResponseChunk) => void;
    onFunctionCallParamsChunk?: (chunk: LlamaChatResponseFunctionCallParamsChunk) => void;
    signal?: AbortSignal;
    stopOnAbortSignal?: boolean;
    maxTokens?: number;
    temperature?: number;
    minP?: number;
    topK?: number;
    topP?: number;
    seed?: number;
    xtc?: { probability: number; threshold: number };
    trimWhitespaceSuffix?: boolean;
    repeatPenalty?: false | LLamaContextualRepeatPenalty;
    dryRepeatPenalty?: LLamaContextualDryRepeatPenalty;
    tokenBias?: TokenBias | (() => TokenBias);
    evaluationPriority?: number;
    contextShift?: LLamaChatContextShiftOptions;
    customStopTriggers?: readonly (LlamaText | string | readonly (string | Token)[])[];
    grammar?: LlamaGrammar;
    functions?: Functions;
    documentFunctionParams?: boolean;
    maxParallelFunctionCalls?: number;
    budgets?: { includeCurrentResponse?: boolean; thoughtTokens?: number; commentTokens?: number };
};
export type LlamaChatResponseFunctionCall<Functions extends ChatModelFunctions = ChatModelFunctions> = { functionName: string & keyof Functions; params: any; raw: LlamaTextJSON };
export type LlamaChatResponse<Functions extends ChatModelFunctions | undefined = undefined> = {
    response: string;
    fullResponse: Array<string | ChatModelSegment>;
    functionCalls?: Functions extends ChatModelFunctions ? LlamaChatResponseFunctionCall<Functions>[] : never;
    lastEvaluation: { cleanHistory: ChatHistoryItem[]; contextWindow: ChatHistoryItem[]; contextShiftMetadata: any };
    metadata: { remainingGenerationAfterStop?: string | Token[]; stopReason: "eogToken" | "stopGenerationTrigger" | "functionCalls" | "maxTokens" | "abort" }
        | { remainingGenerationAfterStop?: string | Token[]; stopReason: "customStopTrigger"; customStopTrigger: (string | Token)[] };
};
/** node-llama-cpp's lower-level chat: one response per call, function calls returned, not run. */
export declare class LlamaChat {
    readonly onDispose: EventRelay<void>;
    constructor(options: LlamaChatOptions);
    dispose({ disposeSequence }?: { disposeSequence?: boolean }): void;
    [Symbol.dispose](): void;
    get disposed(): boolean;
    get chatWrapper(): ChatWrapper;
    get sequence(): LlamaContextSequence;
    get context(): LlamaContext;
    get model(): LlamaModel;
    generateResponse<const Functions extends ChatModelFunctions | undefined = undefined>(history: ChatHistoryItem[], options?: LLamaChatGenerateResponseOptions<Functions>): Promise<LlamaChatResponse<Functions>>;
}

// ---- LlamaText and chat wrappers ----
export type LlamaTextValue = string | SpecialTokensText | SpecialToken;
export type LlamaTextInputValue = LlamaTextValue | LlamaText | number | boolean | readonly LlamaTextInputValue[];
export type LlamaTextSpecialTokensTextJSON = { type: "specialTokensText"; value: string };
export type LlamaTextSpecialTokenJSON = { type: "specialToken"; value: string };
export type LlamaTextJSONValue = string | LlamaTextSpecialTokensTextJSON | LlamaTextSpecialTokenJSON;
export type LlamaTextJSON = string | LlamaTextJSONValue[];
declare class _LlamaText {
    readonly values: readonly LlamaTextValue[];
    constructor(...values: readonly LlamaTextInputValue[]);
    concat(value: LlamaTextInputValue): _LlamaText;
    mapValues(mapper: (this: readonly LlamaTextValue[], value: LlamaTextValue, index: number, values: readonly LlamaTextValue[]) => LlamaTextInputValue): _LlamaText;
    joinValues(separator: _LlamaText | LlamaTextValue): _LlamaText;
    toString(): string;
    toJSON(): LlamaTextJSON;
    tokenize(tokenizer: Tokenizer, options?: "trimLeadingSpace"): Token[];
    compare(other: _LlamaText): boolean;
    trim(): _LlamaText;
    trimStart(): _LlamaText;
    trimEnd(): _LlamaText;
    includes(value: _LlamaText): boolean;
    static fromJSON(json: LlamaTextJSON): _LlamaText;
    static compare(a: _LlamaText, b: _LlamaText): boolean;
    static fromTokens(tokenizer: Tokenizer, tokens: Token[]): _LlamaText;
    static joinValues(separator: _LlamaText | string, values: readonly LlamaTextInputValue[]): _LlamaText;
    static isLlamaText(value: unknown): value is _LlamaText;
}
type LlamaTextConstructor = Omit<typeof _LlamaText, "prototype"> & {
    new (...values: readonly LlamaTextInputValue[]): _LlamaText;
    (...values: readonly LlamaTextInputValue[]): _LlamaText;
    readonly prototype: typeof _LlamaText.prototype;
};
/** Callable with or without `new`, as node-llama-cpp's. */
export declare const LlamaText: LlamaTextConstructor;
export type LlamaText = _LlamaText;
export declare class SpecialTokensText {
    readonly value: string;
    constructor(value: string);
    toString(): string;
    tokenize(tokenizer: Tokenizer, trimLeadingSpace?: boolean): Token[];
    tokenizeSpecialTokensOnly(tokenizer: Tokenizer): (string | Token)[];
    toJSON(): LlamaTextSpecialTokensTextJSON;
    static fromJSON(json: LlamaTextSpecialTokensTextJSON): SpecialTokensText;
    static isSpecialTokensTextJSON(value: LlamaTextJSONValue): value is LlamaTextSpecialTokensTextJSON;
    static wrapIf(shouldWrap: boolean, value: string): SpecialTokensText | string;
}
export declare class SpecialToken {
    readonly value: BuiltinSpecialTokenValue;
    constructor(value: BuiltinSpecialTokenValue);
    toString(): BuiltinSpecialTokenValue;
    tokenize(tokenizer: Tokenizer): Token[];
    toJSON(): LlamaTextSpecialTokenJSON;
    static fromJSON(json: LlamaTextSpecialTokenJSON): SpecialToken;
    static isSpecialTokenJSON(value: LlamaTextJSONValue): value is LlamaTextSpecialTokenJSON;
    static getTokenToValueMap(tokenizer: Tokenizer): ReadonlyMap<Token | undefined, BuiltinSpecialTokenValue>;
}
export declare function isLlamaText(value: unknown): value is LlamaText;
export declare function tokenizeText(text: string | LlamaText, tokenizer: Tokenizer): Token[];

export type ChatModelFunctions = { readonly [name: string]: { readonly description?: string; readonly params?: GbnfJsonSchema | undefined | null } };
export type ChatWrapperSettings = {
    readonly supportsSystemMessages: boolean;
    readonly functions: {
        readonly call: { readonly optionalPrefixSpace: boolean; readonly prefix: string | LlamaText; readonly paramsPrefix: string | LlamaText; readonly suffix: string | LlamaText; readonly emptyCallParamsPlaceholder?: object | string | number | boolean | null };
        readonly result: { readonly prefix: string | LlamaText; readonly suffix: string | LlamaText };
        readonly parallelism?: any;
    };
    readonly segments?: any;
};
export type ChatWrapperGenerateContextStateOptions = { chatHistory: readonly ChatHistoryItem[]; availableFunctions?: ChatModelFunctions; documentFunctionParams?: boolean };
export type ChatWrapperGeneratedContextState = {
    contextText: LlamaText;
    stopGenerationTriggers: LlamaText[];
    ignoreStartText?: LlamaText[];
    functionCall?: { initiallyEngaged: boolean; disengageInitiallyEngaged: LlamaText[] };
};
export type ChatWrapperGenerateInitialHistoryOptions = { systemPrompt?: string };
export declare abstract class ChatWrapper {
    static defaultSettings: ChatWrapperSettings;
    abstract readonly wrapperName: string;
    readonly settings: ChatWrapperSettings;
    generateContextState({ chatHistory, availableFunctions, documentFunctionParams }: ChatWrapperGenerateContextStateOptions): ChatWrapperGeneratedContextState;
    generateFunctionCallsAndResults(functionCalls: ChatModelFunctionCall[], useRawCall?: boolean): LlamaText;
    generateFunctionCall(name: string, params: any): LlamaText;
    generateFunctionCallResult(functionName: string, functionParams: any, result: any): LlamaText;
    generateModelResponseText(modelResponse: ChatModelResponse["response"], useRawValues?: boolean): LlamaText;
    generateAvailableFunctionsSystemText(availableFunctions: ChatModelFunctions, { documentParams }: { documentParams?: boolean }): LlamaText;
    addAvailableFunctionsSystemMessageToHistory(history: readonly ChatHistoryItem[], availableFunctions?: ChatModelFunctions, { documentParams }?: { documentParams?: boolean }): readonly ChatHistoryItem[];
    generateInitialChatHistory({ systemPrompt }?: ChatWrapperGenerateInitialHistoryOptions): ChatHistoryItem[];
}
export declare class GeneralChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    constructor(options?: { userMessageTitle?: string; modelResponseTitle?: string; middleSystemMessageTitle?: string; allowSpecialTokensInTitles?: boolean });
    get userMessageTitle(): string;
    get modelResponseTitle(): string;
    get middleSystemMessageTitle(): string;
}
export declare class AlpacaChatWrapper extends GeneralChatWrapper {
    readonly wrapperName: string;
    constructor(options?: { userMessageTitle?: string; modelResponseTitle?: string; middleSystemMessageTitle?: string; allowSpecialTokensInTitles?: boolean });
}
export declare class FalconChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    constructor(options?: { userMessageTitle?: string; modelResponseTitle?: string; middleSystemMessageTitle?: string; allowSpecialTokensInTitles?: boolean });
    get userMessageTitle(): string;
    get modelResponseTitle(): string;
    get middleSystemMessageTitle(): string;
}
export declare class GemmaChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    readonly settings: ChatWrapperSettings;
}
export declare class MistralChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    constructor(options?: { addSpaceBeforeEos?: boolean });
}
export declare class ChatMLChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
}
export declare class Llama2ChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    constructor(options?: { addSpaceBeforeEos?: boolean });
}
export declare class Llama3ChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    constructor(options?: { parallelFunctionCalling?: boolean });
}
export declare class Llama3_1ChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    readonly cuttingKnowledgeDate?: Date | (() => Date) | null;
    readonly todayDate: Date | (() => Date) | null;
    readonly noToolInstructions: boolean;
    constructor(options?: { cuttingKnowledgeDate?: Date | (() => Date) | number | string | null; todayDate?: Date | (() => Date) | number | string | null; noToolInstructions?: boolean });
    prependPreambleToChatHistory(chatHistory: readonly ChatHistoryItem[]): readonly ChatHistoryItem[];
}
export type JinjaTemplateChatWrapperOptions = {
    template: string;
    reasoning?: boolean | null;
    modelRoleName?: string;
    userRoleName?: string;
    systemRoleName?: string;
    joinAdjacentMessagesOfTheSameType?: boolean;
    trimLeadingWhitespaceInResponses?: boolean;
    additionalRenderParameters?: Record<string, any>;
    keepOnlyLastThought?: boolean;
    tokenizer?: Tokenizer;
    [option: string]: unknown;
};
/** Renders with loom's Jinja engine: needs a loaded model (the session's, else any). */
export declare class JinjaTemplateChatWrapper extends ChatWrapper {
    readonly wrapperName: string;
    readonly template: string;
    readonly reasoning: boolean | null;
    readonly modelRoleName: string;
    readonly userRoleName: string;
    readonly systemRoleName: string;
    readonly joinAdjacentMessagesOfTheSameType: boolean;
    readonly trimLeadingWhitespaceInResponses: boolean;
    readonly keepOnlyLastThought: boolean;
    readonly additionalRenderParameters?: Record<string, any>;
    constructor(options: JinjaTemplateChatWrapperOptions);
    get usingJinjaFunctionCallTemplate(): boolean;
}
export type SpecializedChatWrapperTypeName = "general" | "llama3.1" | "llama3" | "llama2Chat" | "alpacaChat" | "chatML" | "falconChat" | "gemma" | "mistral";
export type ResolveChatWrapperWithModelOptions = {
    type?: "auto" | SpecializedChatWrapperTypeName | "template" | "jinjaTemplate";
    customWrapperSettings?: { [name: string]: any };
    warningLogs?: boolean;
    fallbackToOtherWrappersOnJinjaError?: boolean;
    noJinja?: boolean;
};
export type ResolveChatWrapperOptions = ResolveChatWrapperWithModelOptions & {
    bosString?: string | null;
    architecture?: string;
    filename?: string;
    fileInfo?: GgufFileInfo;
    tokenizer?: Tokenizer;
    llama?: Llama;
};
export type BuiltInChatWrapperType = GeneralChatWrapper | AlpacaChatWrapper | FalconChatWrapper | GemmaChatWrapper | MistralChatWrapper | ChatMLChatWrapper | Llama2ChatWrapper | Llama3ChatWrapper | Llama3_1ChatWrapper | JinjaTemplateChatWrapper;
export declare function resolveChatWrapper(model: LlamaModel, options?: ResolveChatWrapperWithModelOptions): BuiltInChatWrapperType;
export declare function resolveChatWrapper(options: ResolveChatWrapperOptions): BuiltInChatWrapperType | null;

// ---- completion ----
export type LlamaCompletionGenerationOptions = {
    onTextChunk?: (text: string) => void;
    onToken?: (tokens: Token[]) => void;
    signal?: AbortSignal;
    stopOnAbortSignal?: boolean;
    maxTokens?: number;
    temperature?: number;
    minP?: number;
    topK?: number;
    topP?: number;
    seed?: number;
    xtc?: { temperature?: number; probability: number; threshold: number };
    trimWhitespaceSuffix?: boolean;
    repeatPenalty?: false | LLamaContextualRepeatPenalty;
    dryRepeatPenalty?: LLamaContextualDryRepeatPenalty;
    tokenBias?: TokenBias | (() => TokenBias);
    evaluationPriority?: number;
    grammar?: LlamaGrammar;
    customStopTriggers?: readonly string[];
};
export type LlamaInfillGenerationOptions = LlamaCompletionGenerationOptions & { minPrefixKeepTokens?: number | ((model: LlamaModel) => number) };
export type LlamaCompletionResponse = {
    response: string;
    metadata: { remainingGenerationAfterStop?: string | Token[]; stopReason: "eogToken" | "stopGenerationTrigger" | "maxTokens" | "abort" } | { remainingGenerationAfterStop?: string | Token[]; stopReason: "customStopTrigger"; customStopTrigger: (string | Token)[] };
};
export declare class LlamaCompletion {
    constructor(options: { contextSequence: LlamaContextSequence; autoDisposeSequence?: boolean });
    readonly onDispose: EventRelay<void>;
    dispose({ disposeSequence }?: { disposeSequence?: boolean }): void;
    [Symbol.dispose](): void;
    get disposed(): boolean;
    get infillSupported(): boolean;
    generateCompletion(input: Token[] | string, options?: LlamaCompletionGenerationOptions): Promise<string>;
    generateCompletionWithMeta(input: Token[] | string, options?: LlamaCompletionGenerationOptions): Promise<LlamaCompletionResponse>;
    generateInfillCompletion(prefixInput: Token[] | string, suffixInput: Token[] | string, options?: LlamaInfillGenerationOptions): Promise<string>;
    generateInfillCompletionWithMeta(prefixInput: Token[] | string, suffixInput: Token[] | string, options?: LlamaInfillGenerationOptions): Promise<LlamaCompletionResponse>;
}

// ---- embeddings and ranking ----
export type LlamaEmbeddingContextOptions = { contextSize?: "auto" | number | { min?: number; max?: number }; batchSize?: number; threads?: number; createSignal?: AbortSignal; ignoreMemorySafetyChecks?: boolean };
export type LlamaRankingContextOptions = LlamaEmbeddingContextOptions & { template?: string };
export type LlamaEmbeddingJSON = { type: "embedding"; vector: readonly number[] };
export declare class LlamaEmbedding {
    readonly vector: readonly number[];
    constructor(options: { vector: readonly number[] });
    toJSON(): LlamaEmbeddingJSON;
    calculateCosineSimilarity(other: LlamaEmbedding | LlamaEmbeddingJSON["vector"]): number;
    static fromJSON(json: LlamaEmbeddingJSON): LlamaEmbedding;
}
export declare class LlamaEmbeddingContext {
    private constructor();
    readonly onDispose: EventRelay<void>;
    getEmbeddingFor(input: Token[] | string): Promise<LlamaEmbedding>;
    dispose(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
    get disposed(): boolean;
}
export declare class LlamaRankingContext {
    private constructor();
    readonly onDispose: EventRelay<void>;
    rank(query: Token[] | string, document: Token[] | string): Promise<number>;
    rankAll(query: Token[] | string, documents: Array<Token[] | string>): Promise<number[]>;
    rankAndSort<const T extends string>(query: Token[] | string, documents: T[]): Promise<Array<{ document: T; score: number }>>;
    dispose(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
    get disposed(): boolean;
}

// ---- errors ----
export declare class DisposedError extends Error { constructor(); }
export declare class UnsupportedError extends Error { constructor(message?: string); }
export declare class InsufficientMemoryError extends Error { constructor(message?: string); }
export declare class NoBinaryFoundError extends Error { constructor(message?: string); }
