// make_vocab: a model directory for the tokenizer benchmark with a production-sized vocabulary:
// the base ranks of one of the npm tiktoken package's encodings (o200k_base: 199998 tokens,
// close to Kimi's 163584) written as tiktoken.model, plus tiny-k25's config.json and special
// tokens renumbered to follow the base vocabulary (Kimi's regex is used either way).
//   node make_vocab.cjs ENCODING TINY_MODEL_DIR OUT_DIR
"use strict";
const fs = require("fs");
const path = require("path");

const [encoding, tinyDir, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node make_vocab.cjs ENCODING TINY_MODEL_DIR OUT_DIR");
  process.exit(2);
}
const ranks = require(`tiktoken/encoders/${encoding}.json`).bpe_ranks;
const lines = [];
for (const line of ranks.split("\n")) {
  const parts = line.split(" ");
  const first = Number(parts[1]);
  for (let i = 2; i < parts.length; i++) lines.push(`${parts[i]} ${first + i - 2}`);
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "tiktoken.model"), lines.join("\n") + "\n");
const nBase = lines.length;
const tok = JSON.parse(fs.readFileSync(path.join(tinyDir, "tokenizer_config.json"), "utf8"));
const ids = Object.keys(tok.added_tokens_decoder).map(Number);
const firstSpecial = Math.min(...ids);
const added = {};
for (const [id, t] of Object.entries(tok.added_tokens_decoder)) added[String(Number(id) - firstSpecial + nBase)] = t;
tok.added_tokens_decoder = added;
fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(tok, null, 1));
const cfg = JSON.parse(fs.readFileSync(path.join(tinyDir, "config.json"), "utf8"));
const moved = (id) => (Number.isInteger(id) && id >= firstSpecial ? id - firstSpecial + nBase : id);
for (const section of [cfg, cfg.text_config || {}]) {
  for (const key of ["bos_token_id", "eos_token_id", "pad_token_id", "media_placeholder_token_id"])
    if (key in section) section[key] = moved(section[key]);
  if ("vocab_size" in section) section.vocab_size = nBase + ids.length;
}
fs.writeFileSync(path.join(outDir, "config.json"), JSON.stringify(cfg, null, 1));
