#!/usr/bin/env python3
"""Write tests/unit/data/tokenizer_extra_cases.jsonl: edge cases of Kimi's pre-tokenizer regex beyond
the golden reference, with ids from an independent encoder, the npm tiktoken package (tiktoken's
Rust core and fancy-regex, compiled to WASM) loaded with the tiny-k25 vocabulary and the
exact pattern of docs/CHAT_FORMAT.md. Needs `npm install tiktoken` in tests/bench/tokenizer.

usage: tests/unit/tokenizer_extra_cases.py  (from the repository root)"""
import json
import random
import subprocess

MODEL = "tests/golden/fixtures/tiny-k25"

cases = [
    # contractions, case-insensitive, including U+017F (long s folds to s)
    "I'ſ it", "DON'T", "we'RE here", "x'LL", "'s", "''s", "a's's", "it'sx", "ſ", "'Ve 'vE 'M 'D 'ẞ",
    "HTTP'S", "iPhone's", "ABC'll", "\u0301'd", "'",
    # marks, Lm, Lo, Lt between upper/lower runs (the && intersections and the backtracking)
    "a\u0301\u0301b", "\u0301abc", "\u0301\u0301", "Ab\u0301C", " \u0301x", "\u0301A", "A\u0301", "AB\u0301",
    "AB\u0301C", "A\u0301\u0301", "ʰello", "Aʰ", "ABʰ", "ʰʰ", "ʰA", "ǅungla", "ǅ", "Ǆǅ", "AǅB", "ABCǅ",
    "Ab\u0301ʰ", "\u0301", "!\u0301", "!\u0301a", "\u0301!", "ꜰ", "ﬁne", "Ⅻx", "xⅫ", "Ωmega", "ΩMEGA",
    "Straße", "STRASSE", "über", "ÜBER", "ÜBer", "ق", "مرحبا بالعالم", "שָׁלוֹם", "नमस्ते दुनिया",
    "ภาษาไทย", "ᄀᄀ가", "한국어ABC", "カタカナABC", "ひらがなabc",
    # Han script, including non-letter Han (radicals So, iteration mark Lm, Nl numerals, Mc marks)
    "⺀abc", "a⺀b", "a々b", "々々", "〇123", "〡〢x", "𠀀𠀁 x", "\U00016FF0a", "a\U00016FF0", "\U00016FE2x",
    "中\u0301文", "中A文b", "漢字かな交じり文", "x中", " 中", "!中", "中!", "⼀⼁", "豈更",
    # whitespace: White_Space set, \s+(?!\S), \s*[\r\n]+
    "a  \u00a0\u2003b", "x\u3000\u3000", "  \n  \n  x", "\r\r\n\n", "\t\t", " \t", "a \n", "a  ", "a ",
    "\u0085x", "\u2028\u2029", "\u200bx", "a\u200bb", "\ufeffx", " \u1680x", "\u202f\u205fz", "\n",
    "\n ", " \n", "  ", "   x", "x   ", "\t\tx", "\n\t x", "\r", "\r\nx", "\v\fx", "\x1c\x1dx",
    # numbers
    "١٢٣٤٥", "ⅫⅫⅫⅫ", "½¾¼", "12a34", "x1234567y", "①②③④", "𝟙𝟚𝟛𝟜", "1\u0301", "0.5e10", "٣a",
    # punctuation and symbols
    " !!!\n\n", "...\r\n", " ?", "?\n\nx", "a!b", " -- ", " 'quoted'", "$$$", "<<>>", "\u00ad", "x\u00ady",
    " \n!", "! \n", "!!\r\r\r", "🙂🙂\n", " 🙂", "©®™", "→←", "​", "\x00\x01", "a\x00b",
    # special tokens
    "<|im_end|", "<|im_end|><|im_end|>", "[EOS][BOS]", "<<|im_end|>>", "<|reserved_token_2053|>",
    "<|im_end|>x", "x<|im_end|>", "<|im_middle|> <|im_end|>\n", "[EOS", "<think></think>", "<think><think>",
    "<|tool_call_end|><|tool_calls_section_end|>", "<|start_header_id|>system<|end_header_id|>",
    # long single pieces
    "supercalifragilisticexpialidocious" * 20, "ABCDEFGHIJ" * 50, "漢字" * 400, "!?" * 300, " " * 500,
    "\n" * 300, "7" * 100,
]

rng = random.Random(20260129)
alphabet = (list("abcxyzABCXYZ'ſ ") + ["\u0301", "\u0308", "ʰ", "ǅ", "ß", "é", "É", "中", "文", "々", "⺀", "〇",
            "か", "カ", "한", "ا", "\u00a0", "\u3000", "\u2003", "\t", "\r", "\n", "1", "٣", "Ⅻ", "½", "!", ".",
            "-", "🙂", "🇫", "\u200d", "<|im_end|>", "[EOS]", "\U00016FF0", "\u0085"])
for _ in range(300):
    cases.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))

text = "".join(json.dumps({"text": c}) + "\n" for c in cases)
out = subprocess.run(["node", "tests/bench/tokenizer/tiktoken_ref.cjs", MODEL, "encode"], input=text.encode(),
                     capture_output=True, check=True).stdout.decode().splitlines()
assert len(out) == len(cases)
with open("tests/unit/data/tokenizer_extra_cases.jsonl", "w", encoding="utf-8") as f:
    for c, line in zip(cases, out):
        f.write(json.dumps({"text": c, "ids": json.loads(line)["ids"]}, ensure_ascii=False) + "\n")
print(f"{len(cases)} cases")

# A second vocabulary that makes every pre-tokenizer boundary visible: the 256 single bytes, then
# every distinct run of 2..4 characters of every case text (reference cases, then the ones
# above), ordered by (byte length, bytes); the special tokens follow with the tiny-k25 names.
# Any piece of up to 4 characters is then one token, so a split in the wrong place changes the
# ids. test_tokenizer.c rebuilds the same vocabulary by the same rule.
import base64
import os
import tempfile

ref_texts = [json.loads(l)["text"] for l in open("tests/golden/reference/tiny-k25/tokenizer_cases.jsonl", encoding="utf-8")]
all_texts = ref_texts + cases
runs = set()
for t in all_texts:
    for i in range(len(t)):
        for n in range(2, 5):
            if i + n <= len(t):
                runs.add(t[i:i + n].encode("utf-8"))
vocab = [bytes([b]) for b in range(256)] + sorted(runs, key=lambda b: (len(b), b))
tiny_config = json.load(open(f"{MODEL}/tokenizer_config.json", encoding="utf-8"))
first_tiny_special = min(int(k) for k in tiny_config["added_tokens_decoder"])
with tempfile.TemporaryDirectory() as d:
    with open(f"{d}/tiktoken.model", "w") as f:
        for rank, tok in enumerate(vocab):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")
    added = {str(int(k) - first_tiny_special + len(vocab)): v for k, v in tiny_config["added_tokens_decoder"].items()}
    json.dump({"added_tokens_decoder": added}, open(f"{d}/tokenizer_config.json", "w"))
    text = "".join(json.dumps({"text": c}) + "\n" for c in all_texts)
    out = subprocess.run(["node", "tests/bench/tokenizer/tiktoken_ref.cjs", d, "encode"], input=text.encode(),
                         capture_output=True, check=True).stdout.decode().splitlines()
assert len(out) == len(all_texts)
with open("tests/unit/data/tokenizer_run_vocab_ids.jsonl", "w") as f:
    f.write("".join(line + "\n" for line in out))
print(f"run vocabulary: {len(vocab)} tokens, {len(out)} cases")
