#!/usr/bin/env python3
"""Write a deterministic benchmark text of about SIZE bytes (default 10 MB): paragraphs of
English prose, source code (C and Python) and CJK prose (Chinese with some Japanese), about
45% / 38% / 17% of the bytes, all from a fixed seed (the same file on every machine).

usage: gen_text.py OUT [SIZE_BYTES]"""
import random
import sys

out_path = sys.argv[1]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
rng = random.Random(1234)

english = """the of and to in is was that for on are with as I his they be at one have this from or had
by not word but what some we can out other were all there when up use your how said an each she which
do their time if will way about many then them write would like so these her long make thing see him two
has look more day could go come did number sound no most people my over know water than call first who
may down side been now find any new work part take get place made live where after back little only
round man year came show every good me give our under name very through just form sentence great think
say help low line differ turn cause much mean before move right boy old too same tell does set three
want air well also play small end put home read hand port large spell add even land here must big high
such follow act why ask men change went light kind off need house picture try us again animal point
mother world near build self earth father model kernel memory tensor attention token cache latency
throughput bandwidth gradient inference weights quantized expert router layer""".split()
names = ["Alice", "Bob", "Kimi", "Moonshot", "London", "Paris", "GitHub", "Linux", "NVIDIA", "HTTPServer",
         "iPhone", "JSON", "API", "Dr. Smith", "O'Brien", "McDonald's"]


def english_paragraph():
    sentences = []
    for _ in range(rng.randint(3, 8)):
        words = [rng.choice(english) for _ in range(rng.randint(6, 22))]
        if rng.random() < 0.4:
            words.insert(rng.randrange(len(words)), rng.choice(names))
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 100000)))
        if rng.random() < 0.15:
            words[rng.randrange(len(words))] += rng.choice(["'s", "'re", "'ll", "n't", "'ve"])
        s = " ".join(words)
        if rng.random() < 0.3:
            k = rng.randrange(1, len(words))
            s = " ".join(words[:k]) + ", " + " ".join(words[k:])
        sentences.append(s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!", ":"]))
    return " ".join(sentences) + "\n\n"


idents = ["buf", "len", "count", "tokenizer", "result", "index", "value", "node", "next", "prev", "data",
          "config", "model_dir", "n_ids", "offset", "getUserName", "parseHTTPHeader", "kv_cache", "rank"]
types = ["int", "size_t", "const char *", "float", "double", "uint32_t", "int64_t"]


def c_function():
    name = "_".join(rng.choice(idents) for _ in range(2))
    args = ", ".join(f"{rng.choice(types)} {rng.choice(idents)}" for _ in range(rng.randint(1, 4)))
    lines = [f"static {rng.choice(types)} {name}({args})", "{"]
    for _ in range(rng.randint(3, 12)):
        a, b = rng.choice(idents), rng.choice(idents)
        lines.append(rng.choice([
            f"    {rng.choice(types)} {a} = {b} + {rng.randint(0, 4096)};",
            f"    for (size_t i = 0; i < {a}; i++)\n        {b}[i] = {a}[i] * 0x{rng.randint(0, 65535):04X};",
            f"    if ({a} == NULL || {b} <= 0)\n        return -1; /* {rng.choice(english)} {rng.choice(english)} */",
            f"    memcpy({a} + {rng.randint(1, 64)}, {b}, sizeof *{a});",
            f"    printf(\"%s: %d\\n\", \"{rng.choice(english)}\", {a}->{b});",
        ]))
    lines.append(f"    return {rng.choice(idents)};")
    lines.append("}\n\n")
    return "\n".join(lines)


def python_function():
    name = "_".join(rng.choice(idents) for _ in range(2))
    lines = [f"def {name}({', '.join(rng.sample(idents, rng.randint(1, 3)))}):",
             f'    """{rng.choice(english).capitalize()} the {rng.choice(english)} {rng.choice(english)}."""']
    for _ in range(rng.randint(2, 8)):
        a, b = rng.choice(idents), rng.choice(idents)
        lines.append(rng.choice([
            f"    {a} = [{b} ** 2 for {b} in range({rng.randint(1, 100)})]",
            f"    if {a} is None:\n        raise ValueError(f\"bad {{{b}!r}}\")",
            f"    {a}.append({{'{b}': {rng.random():.4f}, \"k\": None}})",
            f"    with open('{a}.txt') as f:\n        {b} = f.read().splitlines()",
        ]))
    lines.append(f"    return {rng.choice(idents)}\n\n")
    return "\n".join(lines)


hanzi = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么"
         "心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将"
         "外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走"
         "电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑"
         "性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至"
         "模型推理缓存注意力专家路由量化权重")
kana = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコサシスセソ"
cjk_punct = "，。、！？：；「」（）"


def cjk_paragraph():
    parts = []
    for _ in range(rng.randint(3, 10)):
        if rng.random() < 0.8:
            s = "".join(rng.choice(hanzi) for _ in range(rng.randint(5, 30)))
        else:
            s = "".join(rng.choice(kana + hanzi) for _ in range(rng.randint(5, 25)))
        if rng.random() < 0.2:
            s += rng.choice(["GPU", "Kimi", " AI ", str(rng.randint(1, 2026)), "K2.5"])
        parts.append(s + rng.choice(cjk_punct))
    return "".join(parts) + "\n\n"


chunks, total = [], 0
while total < size:
    r = rng.random()
    chunk = english_paragraph() if r < 0.45 else (c_function() if r < 0.62 else python_function()) if r < 0.80 else cjk_paragraph()
    chunks.append(chunk)
    total += len(chunk.encode("utf-8"))
with open(out_path, "w", encoding="utf-8") as f:
    f.write("".join(chunks))
