// A second reference for the chat-template differential test: renders every conversation of
// tests/fixtures/chat_conversations.json through every template of tests/reference/chat_template_manifest.json
// with @huggingface/jinja (new Template(source).render({...})), text only, given the variables
// transformers' apply_chat_template gives: messages, tools, documents, add_generation_prompt, the
// special tokens (bos_token, eos_token, ...) and the conversation's chat_template_kwargs.
//
// Run from anywhere, after scripts/setup.sh (tests/reference/node/node_modules):
//   node tests/reference/chat_template_ref.mjs [transformers.json] > huggingface_jinja.json
// With the output of chat_template_ref.py as argument, each template's source and special tokens are
// the ones transformers used (template_source, special_tokens), which is also the only way to get the
// GGUF's template; without it they are read from the manifest's files and the GGUF is skipped.
//
// Prints {"engine": "@huggingface/jinja X", "results": [{"template", "case", "text"} |
// {..., "error": first line} | {..., "skipped": reason}]}: skipped where the engine cannot parse the
// template or has nothing to read it from, error where rendering throws (raise_exception included).
// A named config without a name picks like transformers: tool_use when tools are given, else default.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(join(root, "tests/reference/node/package.json"));
const { Template } = require("@huggingface/jinja");
const readJson = (path) => JSON.parse(readFileSync(join(root, path), "utf8"));
const version = readJson("tests/reference/node/node_modules/@huggingface/jinja/package.json").version;
const manifest = readJson("tests/reference/chat_template_manifest.json").templates;
const cases = readJson("tests/fixtures/chat_conversations.json").conversations;
const fromPython = new Map();
if (process.argv[2]) {
  for (const t of JSON.parse(readFileSync(process.argv[2], "utf8")).templates) fromPython.set(t.id, t);
}

const SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];
const firstLine = (e) => String(e?.message ?? e).trim().split("\n")[0];

// A chat_template as tokenizer_config.json carries it: a string, or a list of {name, template}.
function named(chatTemplate) {
  return Array.isArray(chatTemplate) ? Object.fromEntries(chatTemplate.map((t) => [t.name, t.template])) : chatTemplate;
}

// {source (a string, or an object of name: source), special} for one manifest entry, or {skipped}.
function describe(t) {
  const py = fromPython.get(t.id);
  if (py) {
    if (py.skipped) return { skipped: py.skipped };
    return { source: py.template_source, special: py.special_tokens };
  }
  let config;
  if (t.gguf) return { skipped: "the GGUF's template is read from chat_template_ref.py's output (pass it as argument)" };
  if (t.fixture) {
    config = { chat_template: readFileSync(join(root, t.fixture), "utf8"), bos_token: t.bos, eos_token: t.eos };
  } else {
    const path = t.package ? `${t.package}/models/tokenizer_config.json` : null;
    try {
      config = path ? require(path) : readJson(t.config);
    } catch (e) {
      return { skipped: `not installed: ${firstLine(e)}` };
    }
  }
  const special = {};
  for (const k of SPECIAL) {
    const v = config[k];
    if (v != null) special[k] = typeof v === "string" ? v : v.content;
  }
  let source = named(config.chat_template);
  if (t.name) source = source[t.name];
  return { source, special };
}

const start = performance.now();
const results = [];
for (const t of manifest) {
  const t0 = performance.now();
  const { source, special, skipped } = describe(t);
  const compiled = new Map(); // source -> Template, or the parse error
  const compile = (src) => {
    if (!compiled.has(src)) {
      try {
        compiled.set(src, new Template(src));
      } catch (e) {
        compiled.set(src, { parseError: firstLine(e) });
      }
    }
    return compiled.get(src);
  };
  const counts = { text: 0, error: 0, skipped: 0 };
  for (const c of cases) {
    const r = { template: t.id, case: c.name };
    let src = source;
    if (!skipped && typeof source === "object") src = c.tools != null && source.tool_use ? source.tool_use : source.default;
    const tpl = skipped ? null : compile(src);
    if (skipped) {
      r.skipped = skipped;
    } else if (tpl.parseError) {
      r.skipped = `@huggingface/jinja cannot parse the template: ${tpl.parseError}`;
    } else {
      try {
        r.text = tpl.render({
          ...special,
          ...(c.chat_template_kwargs ?? {}),
          messages: structuredClone(c.messages),
          tools: c.tools ?? null,
          documents: c.documents ?? null,
          add_generation_prompt: c.add_generation_prompt ?? false,
        });
      } catch (e) {
        r.error = firstLine(e);
      }
    }
    counts["text" in r ? "text" : "error" in r ? "error" : "skipped"]++;
    results.push(r);
  }
  process.stderr.write(
    `chat_template_ref.mjs: ${t.id.padEnd(16)} ${(performance.now() - t0).toFixed(0).padStart(5)} ms, ` +
      `${counts.text} rendered, ${counts.error} raised, ${counts.skipped} skipped\n`,
  );
}
process.stderr.write(
  `chat_template_ref.mjs: ${manifest.length} templates x ${cases.length} cases in ${(performance.now() - start).toFixed(0)} ms\n`,
);
const lines = results.map((r) => " " + JSON.stringify(r));
process.stdout.write(`{"engine": ${JSON.stringify(`@huggingface/jinja ${version}`)}, "results": [\n${lines.join(",\n")}\n]}\n`);
