// tests/reference/llama/generate.mjs: the real llama.cpp (node-llama-cpp 3.21.1's prebuilt linux-x64
// CPU binaries) as the reference a luatune GGUF export is checked against. README.md beside it.
//
//   node generate.mjs MODEL.gguf                  JSON lines on stdin -> one JSON line each on stdout
//   node generate.mjs MODEL.gguf --info [--tokenize TEXT] [--special]
//   node generate.mjs MODEL.gguf --tokenize TEXT [--special]
//   node generate.mjs MODEL.gguf --tokenize-lines [--special]   JSON strings on stdin -> id arrays
//   node generate.mjs MODEL.gguf --bench N [--prompt-tokens P] [--reps R]
//
// A request is {"prompt_ids":[...]} or {"prompt":"text", "chat":false|true, "system":"..."} with
// optional "max_new_tokens" (16), "add_bos" (false; prepends the model's BOS id), "ignore_eos"
// (false: generation stops at an end-of-generation token, which is not put in ids),
// "chat_renderer" ("llama.cpp": the model's tokenizer.chat_template rendered by llama.cpp's own
// Jinja engine, then tokenized with special tokens parsed, as llama-server does; "node-llama-cpp":
// its JinjaTemplateChatWrapper), "id" (echoed). The answer is {"ids":[generated ids], "text":
// detokenized ids, "prompt_ids":[...], "finish_reason":"eos"|"length", "seconds":...}; a bad request
// answers {"error":"..."} and the next line is read. Decoding is greedy (temperature 0: llama.cpp's
// greedy sampler, an argmax; no repetition penalty, no top-k/top-p), every request from an empty
// KV cache. Environment: LLAMA_THREADS (1), LLAMA_CTX (the model's context length, capped at 4096),
// LLAMA_BATCH (512 or the context size), LLAMA_KV_TYPE (F32; F16 under --bench, llama.cpp's
// default), LLAMA_LOG=1 to see llama.cpp's log on stderr.
//
// Nothing is built or downloaded: getLlama is told build "never", gpu false, skipDownload, and
// NODE_LLAMA_CPP_SKIP_DOWNLOAD is set; a missing prebuilt binary is an error, not a compile.
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import { readFileSync } from "node:fs";

process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = "true";
process.stdout.on("error", (e) => { if (e.code === "EPIPE") process.exit(0); throw e; });
const { getLlama, LlamaLogLevel, JinjaTemplateChatWrapper } = await import("node-llama-cpp");

function usage(msg) {
  if (msg) process.stderr.write(`generate.mjs: ${msg}\n`);
  process.stderr.write("usage: node generate.mjs MODEL.gguf [--info] [--tokenize TEXT [--special]] [--bench N [--prompt-tokens P] [--reps R]]\n");
  process.exit(2);
}

const argv = process.argv.slice(2);
let modelPath = null, info = false, tokenizeText = null, tokenizeLines = false, special = false, bench = 0,
  promptTokens = 128, reps = 3;
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const next = () => { if (i + 1 >= argv.length) usage(`${a} needs a value`); return argv[++i]; };
  if (a === "--info") info = true;
  else if (a === "--tokenize") tokenizeText = next();
  else if (a === "--tokenize-lines") tokenizeLines = true;
  else if (a === "--special") special = true;
  else if (a === "--bench") bench = parseInt(next(), 10);
  else if (a === "--prompt-tokens") promptTokens = parseInt(next(), 10);
  else if (a === "--reps") reps = parseInt(next(), 10);
  else if (a.startsWith("--")) usage(`unknown option ${a}`);
  else if (modelPath == null) modelPath = a;
  else usage(`unexpected argument ${a}`);
}
if (modelPath == null) usage();

const threads = parseInt(process.env.LLAMA_THREADS ?? "1", 10);
if (!(threads >= 1)) usage("LLAMA_THREADS must be a positive integer");

// llama.cpp's log: kept (for --info, which reports what llama.cpp printed while loading) and shown
// on stderr only with LLAMA_LOG=1.
const logLines = [];
const showLog = process.env.LLAMA_LOG === "1";
const llama = await getLlama({
  gpu: false,                 // CPU only: the linux-x64 package's libggml-cpu-*.so
  build: "never",             // never compile llama.cpp: a missing prebuilt binary throws
  usePrebuiltBinaries: true,
  skipDownload: true,         // never fetch llama.cpp's source
  progressLogs: false,
  maxThreads: threads,        // with threads {ideal, min} below: exactly this many threads
  logLevel: LlamaLogLevel.info,
  logger: (level, message) => {
    // One entry per line: when the JS thread is busy the addon hands over several llama.cpp lines
    // in one message, which made --info's log depend on timing.
    for (const line of message.replace(/\n$/, "").split("\n")) logLines.push(line);
    if (showLog || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) process.stderr.write(message.endsWith("\n") ? message : message + "\n");
  },
});

let model;
try {
  model = await llama.loadModel({ modelPath, gpuLayers: 0, defaultContextFlashAttention: false });
} catch (e) {
  // llama.cpp's own reason is in its log ("llama_model_load: error loading model: ...").
  const why = logLines.filter((l) => /error loading model/.test(l)).pop();
  process.stderr.write(`generate.mjs: llama.cpp cannot load ${modelPath}: ${why ?? String(e?.message ?? e)}\n`);
  process.exit(1);
}
// The addon delivers log lines through the event loop: wait until they stop arriving (at most 3 s)
// so --info reports everything llama.cpp printed while loading.
for (let seen = -1, t0 = Date.now(); seen !== logLines.length && Date.now() - t0 < 3000;) {
  seen = logLines.length;
  await new Promise((r) => setTimeout(r, 50));
}
const md = model.fileInfo.metadata;
const arch = md?.general?.architecture;

const chatTemplate = md?.tokenizer?.chat_template ?? null;
// Which of the package's CPU builds ggml loaded (it picks the best for this CPU at run time:
// libggml-cpu-zen4.so, -icelake, -haswell, ..., -x64).
function cpuBackend() {
  try {
    return [...new Set(readFileSync("/proc/self/maps", "utf8").split("\n")
      .filter((l) => /libggml-cpu[^/]*\.so/.test(l)).map((l) => l.split("/").pop()))].join(",") || null;
  } catch { return null; }
}

let nVocab = 0;
for (const _ of model.iterateAllTokens()) nVocab++;
const tokenString = (id) => (id == null ? null : model.detokenize([id], true));

function tokenize(text, specialTokens) {
  return Array.from(model.tokenize(text, specialTokens));
}

if (tokenizeLines) {  // one JSON string a line in, one JSON array of ids a line out
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() === "") continue;
    process.stdout.write(JSON.stringify(tokenize(JSON.parse(line), special)) + "\n");
  }
  await llama.dispose();
  process.exit(0);
}

if (info || tokenizeText != null) {
  if (info) {
    const archMd = md?.[arch] ?? {};
    const tok = md?.tokenizer?.ggml ?? {};
    const pick = (re) => logLines.filter((l) => re.test(l));
    const out = {
      file: modelPath,
      // from llama.cpp, about the loaded model
      llama_cpp: {
        release: llama.llamaCppRelease?.release ?? null,
        build_type: llama.buildType,
        gpu: llama.gpu,
        cpu_math_cores: llama.cpuMathCores,
        cpu_backend: cpuBackend(),
        system_info: llama.systemInfo,
        model_description: model.typeDescription,
        n_ctx_train: model.trainContextSize,
        n_embd: model.embeddingVectorSize,
        n_vocab: nVocab,
        vocab_type: model.vocabularyType,
        bos: model.tokens.bos, eos: model.tokens.eos, eot: model.tokens.eot, nl: model.tokens.nl,
        bos_string: model.tokens.bosString, eos_string: model.tokens.eosString,
        add_bos: model.tokens.shouldPrependBosToken, add_eos: model.tokens.shouldAppendEosToken,
        size_bytes: model.size,
        warnings: model.getWarnings(),
        // llama.cpp's own print-out of what it read (print_info: / load: / llama_model_loader:)
        log: pick(/^(print_info|load|llama_model_loader|load_tensors|llama_context|load_backend|system_info)\b/),
      },
      // the GGUF header as node-llama-cpp's parser reads it (the same file llama.cpp loaded)
      gguf: {
        version: model.fileInfo.version,
        tensor_count: Number(model.fileInfo.totalTensorCount ?? model.fileInfo.tensorInfo?.length ?? 0),
        architecture: arch,
        n_layer: archMd.block_count,
        context_length: archMd.context_length,
        embedding_length: archMd.embedding_length,
        feed_forward_length: archMd.feed_forward_length,
        head_count: archMd.attention?.head_count,
        head_count_kv: archMd.attention?.head_count_kv,
        rope_dimension_count: archMd.rope?.dimension_count,
        rope_freq_base: archMd.rope?.freq_base,
        rms_eps: archMd.attention?.layer_norm_rms_epsilon,
        vocab_size: Array.isArray(tok.tokens) ? tok.tokens.length : archMd.vocab_size,
        tokenizer_model: tok.model,
        tokenizer_pre: tok.pre,
        bos_token_id: tok.bos_token_id, eos_token_id: tok.eos_token_id,
        add_bos_token: tok.add_bos_token,
        has_chat_template: chatTemplate != null,
        file_type: md?.general?.file_type,
        tensors: (model.fileInfo.fullTensorInfo ?? model.fileInfo.tensorInfo ?? []).slice(0, 64).map((t) =>
          `${t.name} [${t.dimensions.map(Number).join(", ")}] ${t.ggmlType}`),
      },
    };
    if (tokenizeText != null) out.tokenize = { text: tokenizeText, special, ids: tokenize(tokenizeText, special) };
    process.stdout.write(JSON.stringify(out, (k, v) => (typeof v === "bigint" ? Number(v) : v), 2) + "\n");
  } else {
    const ids = tokenize(tokenizeText, special);
    process.stdout.write(JSON.stringify({ ids, pieces: ids.map(tokenString) }) + "\n");
  }
  await llama.dispose();
  process.exit(0);
}

// The KV cache: F32 for comparisons (llama.cpp's default F16 rounds K and V, which can flip a
// near-tie against luatune's f32), llama.cpp's default F16 for --bench; LLAMA_KV_TYPE overrides.
const kvType = (process.env.LLAMA_KV_TYPE ?? (bench > 0 ? "F16" : "F32")).toUpperCase();
const ctxSize = parseInt(process.env.LLAMA_CTX ?? String(Math.min(model.trainContextSize || 4096, 4096)), 10);
const context = await model.createContext({
  contextSize: ctxSize,
  batchSize: parseInt(process.env.LLAMA_BATCH ?? String(Math.min(512, ctxSize)), 10),
  sequences: 1,
  threads: { ideal: threads, min: threads },
  flashAttention: false,
  experimentalKvCacheKeyType: kvType,
  experimentalKvCacheValueType: kvType,
});
const sequence = context.getSequence({ contextShift: { size: 0 } });
const GREEDY = { temperature: 0 };  // llama.cpp's greedy sampler; nothing else in the chain

let nativeRenderer = null;
function renderChat(req) {
  if (chatTemplate == null) throw new Error("the model has no tokenizer.chat_template");
  const messages = [];
  if (req.system != null) messages.push({ role: "system", content: req.system });
  if (Array.isArray(req.messages)) messages.push(...req.messages);
  else messages.push({ role: "user", content: String(req.prompt) });
  if ((req.chat_renderer ?? "llama.cpp") === "llama.cpp") {
    nativeRenderer ??= new llama._bindings.AddonJinjaRenderer(chatTemplate);
    const text = nativeRenderer.render({
      messages, add_generation_prompt: true,
      bos_token: model.tokens.bosString ?? "", eos_token: model.tokens.eosString ?? "",
    });
    return { text, ids: tokenize(text, true) };
  }
  const wrapper = new JinjaTemplateChatWrapper({ template: chatTemplate, tokenizer: model.tokenizer });
  const history = messages.map((m) => (m.role === "system" ? { type: "system", text: m.content }
    : m.role === "user" ? { type: "user", text: m.content } : { type: "model", response: [m.content] }));
  history.push({ type: "model", response: [] });
  const { contextText } = wrapper.generateContextState({ chatHistory: history });
  const ids = Array.from(contextText.tokenize(model.tokenizer));
  return { text: model.detokenize(ids, true), ids };
}

async function generate(promptIds, maxNew, ignoreEos) {
  await sequence.clearHistory();
  if (promptIds.length === 0) throw new Error("empty prompt");
  if (promptIds.length + maxNew > context.contextSize)
    throw new Error(`prompt (${promptIds.length}) + max_new_tokens (${maxNew}) exceeds the context (${context.contextSize}); set LLAMA_CTX`);
  const ids = [];
  let finish = "length";
  if (maxNew > 0) {
    const it = sequence.evaluate(promptIds, { ...GREEDY, yieldEogToken: ignoreEos });
    for (;;) {
      const r = await it.next();
      if (r.done) { finish = "eos"; break; }
      ids.push(r.value);
      if (ids.length >= maxNew) { await it.return(); break; }
    }
  }
  return { ids, finish };
}

if (bench > 0) {
  // A fixed prompt: this text tokenized by the model, repeated up to --prompt-tokens ids.
  const base = tokenize("The quick brown fox jumps over the lazy dog. Three plus four is seven. ", false);
  const prompt = [];
  while (prompt.length < promptTokens) prompt.push(...base);
  prompt.length = promptTokens;
  if (promptTokens + bench > context.contextSize) usage(`--prompt-tokens + --bench exceed the context ${context.contextSize}; set LLAMA_CTX`);
  const runs = [];
  for (let r = 0; r <= reps; r++) {  // run 0 is a warm-up, not reported
    await sequence.clearHistory();
    let t0 = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1));
    const promptS = (performance.now() - t0) / 1000;
    t0 = performance.now();
    const it = sequence.evaluate(prompt.slice(-1), { ...GREEDY, yieldEogToken: true });
    let n = 0;
    for (;;) {  // each step: decode one token (the first is the prompt's last), sample greedily
      const x = await it.next();
      if (x.done) break;
      if (++n >= bench) { await it.return(); break; }
    }
    const genS = (performance.now() - t0) / 1000;
    if (r > 0) runs.push({ prompt_tokens: prompt.length - 1, prompt_s: promptS, prompt_tok_s: (prompt.length - 1) / promptS,
      gen_tokens: n, gen_s: genS, gen_tok_s: n / genS });
  }
  const median = (k) => { const v = runs.map((x) => x[k]).sort((a, b) => a - b); return v[Math.floor(v.length / 2)]; };
  process.stdout.write(JSON.stringify({
    model: modelPath, threads, context: context.contextSize, kv_type: kvType, llama_cpp_release: llama.llamaCppRelease?.release ?? null,
    cpu_backend: cpuBackend(), model_description: model.typeDescription,
    prompt_tok_s: median("prompt_tok_s"), gen_tok_s: median("gen_tok_s"), runs,
  }) + "\n");
  await llama.dispose();
  process.exit(0);
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (line.trim() === "") continue;
  let out;
  try {
    const req = JSON.parse(line);
    let promptIds, promptText = null;
    if (Array.isArray(req.prompt_ids)) promptIds = req.prompt_ids.map((x) => {
      if (!Number.isInteger(x) || x < 0 || x >= nVocab) throw new Error(`bad token id ${x} (the vocabulary has ${nVocab})`);
      return x;
    });
    else if (typeof req.prompt === "string" || Array.isArray(req.messages)) {
      if (req.chat) ({ text: promptText, ids: promptIds } = renderChat(req));
      else { promptText = req.prompt; promptIds = tokenize(req.prompt, req.special === true); }
    } else throw new Error("a request needs prompt_ids or prompt");
    if (req.add_bos) {
      if (model.tokens.bos == null) throw new Error("add_bos: the model has no BOS token");
      promptIds = [model.tokens.bos, ...promptIds];
    }
    const t0 = performance.now();
    const { ids, finish } = await generate(promptIds, req.max_new_tokens ?? 16, req.ignore_eos === true);
    out = { ids, text: model.detokenize(ids, false), prompt_ids: promptIds, finish_reason: finish,
      seconds: (performance.now() - t0) / 1000 };
    if (promptText != null) out.prompt_text = promptText;
    if (req.id !== undefined) out.id = req.id;
  } catch (e) {
    out = { error: String(e?.message ?? e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
await llama.dispose();
