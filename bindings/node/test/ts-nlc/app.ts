// A TypeScript app typed against node-llama-cpp 3.x's API. test/nlc-typescript.test.mjs compiles
// it with `tsc --strict` against loom-node/node-llama-cpp's types (tsconfig.json) and, when
// node-llama-cpp is installed, against node-llama-cpp's own (tsconfig.peer.json).
import {
    getLlama, LlamaLogLevel, LlamaChatSession, LlamaCompletion, LlamaJsonSchemaGrammar, LlamaGrammar,
    defineChatSessionFunction, DisposedError, LlamaEmbedding,
    LlamaText, SpecialToken, SpecialTokensText, isLlamaText, ChatMLChatWrapper, GeneralChatWrapper, Llama3ChatWrapper,
    Llama3_1ChatWrapper, JinjaTemplateChatWrapper, resolveChatWrapper, LlamaChat, AlpacaChatWrapper, FalconChatWrapper, GemmaChatWrapper, MistralChatWrapper,
    type ChatWrapper, type LlamaTextJSON, type LlamaChatResponseFunctionCallParamsChunk,
    type Llama, type LlamaModel, type LlamaContext, type LlamaContextSequence, type ChatHistoryItem, type Token,
} from "node-llama-cpp";

async function main(modelPath: string): Promise<void> {
    const llama: Llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.warn, logger: (level, message) => console.log(level, message) });
    const model: LlamaModel = await llama.loadModel({ modelPath, onLoadProgress: (p: number) => void p });
    const train: number = model.trainContextSize;
    const bos: Token | null = model.tokens.bos;
    const eosString: string | null = model.tokens.eosString;
    const tokens: Token[] = model.tokenize("Hello");
    const text: string = model.detokenize(tokens);
    const arch: string = model.fileInfo.metadata.general.architecture;
    const context: LlamaContext = await model.createContext({ contextSize: 512, sequences: 2 });
    const sequence: LlamaContextSequence = context.getSequence();
    const session = new LlamaChatSession({ contextSequence: sequence, systemPrompt: "You are terse." });
    const controller = new AbortController();
    const answer: string = await session.prompt("Hi", {
        maxTokens: 16, temperature: 0.7, topK: 40, topP: 0.9, seed: 1, signal: controller.signal, stopOnAbortSignal: true,
        onTextChunk(chunk: string) { process.stdout.write(chunk); },
        onToken(t: Token[]) { void t; },
    });
    const history: ChatHistoryItem[] = session.getChatHistory();
    session.setChatHistory(history);
    const grammar = await llama.createGrammarForJsonSchema({
        type: "object",
        properties: { name: { type: "string" }, age: { type: "integer" } },
        required: ["name", "age"],
    } as const);
    const json = await session.prompt("A person", { grammar, maxTokens: 64 });
    const parsed = grammar.parse(json);
    console.log(parsed.name, parsed.age);
    const g2 = new LlamaGrammar(llama, { grammar: 'root ::= "yes" | "no"' });
    const g3 = new LlamaJsonSchemaGrammar(llama, { type: "array", items: { type: "string" } } as const);
    void g2; void g3;
    const functions = {
        getWeather: defineChatSessionFunction({
            description: "Weather of a city",
            params: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
            handler({ city }) { return { city, temperature: 21 }; },
        }),
    };
    const meta = await session.promptWithMeta("Weather in Paris?", { functions, maxTokens: 32 });
    const stop: string = meta.stopReason;
    const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
    const c: string = await completion.generateCompletion("Once upon a time", { maxTokens: 8 });
    if (completion.infillSupported) await completion.generateInfillCompletion("a", "b");
    const emb = await model.createEmbeddingContext({ contextSize: 128 });
    const e1: LlamaEmbedding = await emb.getEmbeddingFor("cat");
    const sim: number = e1.calculateCosineSimilarity(await emb.getEmbeddingFor("dog"));
    const rank = await model.createRankingContext();
    const ranked = await rank.rankAndSort("q", ["a", "b"]);
    const top: string = ranked[0]!.document;
    try {
        await session.prompt("again");
    } catch (err) {
        if (err instanceof DisposedError) console.log("disposed");
    }
    // LlamaText, chat wrappers, context shift, state files, streamed function calls
    const lt = LlamaText(["Hello ", new SpecialToken("BOS"), new SpecialTokensText("<|im_start|>"), "world"]);
    const lt2 = new LlamaText("a", lt);
    const ltJson: LlamaTextJSON = lt.toJSON();
    const back = LlamaText.fromJSON(ltJson);
    const ltTokens: Token[] = back.tokenize(model.tokenizer);
    const same: boolean = LlamaText.compare(lt, back) && isLlamaText(lt2);
    const wrappers: ChatWrapper[] = [new ChatMLChatWrapper(), new GeneralChatWrapper(), new Llama3ChatWrapper(), new Llama3_1ChatWrapper({ todayDate: new Date() }),
        new JinjaTemplateChatWrapper({ template: "{% for m in messages %}{{ m.content }}{% endfor %}" }), resolveChatWrapper(model),
        new AlpacaChatWrapper({ userMessageTitle: "Q" }), new FalconChatWrapper({ allowSpecialTokensInTitles: true }), new GemmaChatWrapper(),
        resolveChatWrapper(model, { type: "gemma" }), new MistralChatWrapper({ addSpaceBeforeEos: true })];
    const state = wrappers[0]!.generateContextState({ chatHistory: history });
    const promptText: string = state.contextText.toString();
    const shifting = new LlamaChatSession({
        contextSequence: context.getSequence(),
        chatWrapper: new ChatMLChatWrapper(),
        contextShift: {
            size: (s: LlamaContextSequence) => Math.floor(s.contextSize / 8),
            strategy: ({ chatHistory, maxTokensCount }) => ({ chatHistory: chatHistory.slice(-2), metadata: { maxTokensCount } }),
        },
    });
    const paramsChunks: LlamaChatResponseFunctionCallParamsChunk[] = [];
    await shifting.prompt("Weather?", { functions, onFunctionCallParamsChunk: (chunk) => { paramsChunks.push(chunk); } });
    const window: ChatHistoryItem[] | null = shifting.getLastEvaluationContextWindow();
    const { fileSize } = await shifting.sequence.saveStateToFile("state.bin");
    await shifting.sequence.loadStateFromFile("state.bin", { acceptRisk: true });
    const chat = new LlamaChat({ contextSequence: context.getSequence(), chatWrapper: resolveChatWrapper(model) });
    const res = await chat.generateResponse(history, { maxTokens: 8, onTextChunk: (t: string) => void t, functions });
    const resText: string = res.response;
    const cleanHistory: ChatHistoryItem[] = res.lastEvaluation.cleanHistory;
    const calledName: string | undefined = res.functionCalls?.[0]?.functionName;
    chat.dispose();
    console.log(ltTokens, same, promptText, window, fileSize, paramsChunks.length, resText, cleanHistory, calledName, res.metadata.stopReason);
    console.log(train, bos, eosString, text, arch, answer, stop, c, sim, top);
    await emb.dispose();
    await rank.dispose();
    session.dispose();
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}
void main(process.argv[2] ?? "model.gguf");
