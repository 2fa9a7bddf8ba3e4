// tiktoken_ref: the npm tiktoken package (tiktoken's Rust core compiled to WASM) set up with a
// checkpoint's tiktoken.model, its special tokens and Kimi's pre-tokenizer regex; an
// independent encoder to compare ids and speed with ours.
//   node tiktoken_ref.cjs MODEL_DIR encode        stdin JSONL {"text"} -> stdout JSONL {"ids"}
//   node tiktoken_ref.cjs MODEL_DIR ids FILE      ids of FILE's text, one per line, to stdout
//   node tiktoken_ref.cjs MODEL_DIR bench FILE N  encode FILE N times, print one JSON object
"use strict";
const fs = require("fs");
const path = require("path");
const { Tiktoken } = require("tiktoken/lite");

// docs/CHAT_FORMAT.md, as tokenization_kimi.py joins it
const KIMI_PATTERN = [
  "[\\p{Han}]+",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "\\p{N}{1,3}",
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
  "\\s*[\\r\\n]+",
  "\\s+(?!\\S)",
  "\\s+",
].join("|");

function load(modelDir) {
  const lines = fs.readFileSync(path.join(modelDir, "tiktoken.model"), "utf8").split("\n").filter((l) => l);
  const byRank = new Array(lines.length);
  for (const line of lines) {
    const [b64, rank] = line.split(" ");
    byRank[Number(rank)] = b64;
  }
  // the package's rank format: "<ignored> <first rank> <base64> <base64> ..." per line
  const bfe = "! 0 " + byRank.join(" ");
  const config = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
  const specials = {};
  for (const [id, tok] of Object.entries(config.added_tokens_decoder || {})) specials[tok.content] = Number(id);
  return new Tiktoken(bfe, specials, KIMI_PATTERN);
}

const [modelDir, mode, file, repeats] = process.argv.slice(2);
const enc = load(modelDir);
if (mode === "encode") {
  const input = fs.readFileSync(0, "utf8").split("\n").filter((l) => l);
  const out = input.map((l) => JSON.stringify({ ids: Array.from(enc.encode(JSON.parse(l).text, "all")) }));
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
} else if (mode === "ids") {
  const ids = enc.encode(fs.readFileSync(file, "utf8"), "all");
  process.stdout.write(Array.from(ids).join("\n") + "\n");
} else if (mode === "bench") {
  const text = fs.readFileSync(file, "utf8");
  const bytes = Buffer.byteLength(text, "utf8");
  let best = Infinity, n = 0;
  for (let r = 0; r < Number(repeats || 3); r++) {
    const t0 = process.hrtime.bigint();
    n = enc.encode(text, "all").length;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    best = Math.min(best, s);
  }
  console.log(JSON.stringify({ encoder: "npm tiktoken " + JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve("tiktoken/lite")), "..", "package.json"), "utf8")).version + " (wasm)",
                               bytes, tokens: n, best_s: best, mb_s: bytes / 1e6 / best }));
} else {
  console.error("usage: node tiktoken_ref.cjs MODEL_DIR encode|ids FILE|bench FILE N");
  process.exit(2);
}
enc.free();
