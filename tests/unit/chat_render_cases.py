#!/usr/bin/env python3
# Derives tests/unit/data/chat_render_cases.jsonl, the expected renderings test_chat checks on
# cases the golden reference does not cover (schema features, tool arguments given as JSON values,
# thinking off with tool calls, other roles, content parts). It renders the checkpoint's
# chat_template.jinja as Hugging Face does (trim_blocks, lstrip_blocks, loopcontrols, tojson =
# json.dumps(ensure_ascii=False)) with tools_ts_str from the K2.5 tokenizer's own encoder
# (tool_declaration_ts.py, shipped with the Kimi-K2.5 checkpoint; not vendored here) applied to
# deep_sort_dict(tools), as its tokenization_kimi.py does.
#   python3 tests/unit/chat_render_cases.py DIR_WITH_tool_declaration_ts.py OUT.jsonl
# n_structural_specials counts the special tokens the template itself writes (those spelled
# inside message text are not special).
import json, os, sys
sys.path.insert(0, sys.argv[1])
from tool_declaration_ts import encode_tools_to_typescript_style
import jinja2

def deep_sort_dict(obj):
    if isinstance(obj, dict):
        return {k: deep_sort_dict(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [deep_sort_dict(item) for item in obj]
    return obj

SPECIALS = ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
            "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
            "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"]

def count_specials(s):
    return sum(s.count(t) for t in SPECIALS)

def message_text(m):
    parts = [m.get("content") if isinstance(m.get("content"), str) else "",
             m.get("reasoning_content") or "", m.get("name") or "", m.get("tool_call_id") or ""]
    if isinstance(m.get("content"), list):
        parts += [p.get("text", "") for p in m["content"]]
    for call in m.get("tool_calls") or []:
        args = call["function"]["arguments"]
        parts += [call.get("id") or "", args if isinstance(args, str) else json.dumps(args)]
    return "".join(parts)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=['jinja2.ext.loopcontrols'])
env.filters['tojson'] = tojson
here = os.path.dirname(os.path.abspath(__file__))
tmpl = env.from_string(open(os.path.join(here, '../golden/fixtures/tiny-k25/chat_template.jinja')).read())
def render(messages, tools=None, thinking=True, add_generation_prompt=True):
    tools = deep_sort_dict(tools)
    kw = {}
    if tools:
        try:
            ts = encode_tools_to_typescript_style(tools)
        except Exception as e:
            ts = None
        if ts is not None:
            kw['tools_ts_str'] = ts
    return tmpl.render(messages=messages, tools=tools, thinking=thinking, add_generation_prompt=add_generation_prompt, **kw)

U = [{"role": "user", "content": "hi"}]
def fn(name, params=None, desc=None):
    f = {"name": name}
    if desc is not None: f["description"] = desc
    if params is not None: f["parameters"] = params
    return {"type": "function", "function": f}
cases = []
def add(name, messages, tools=None, thinking=True, agp=True):
    text = render(messages, tools, thinking, agp)
    structural = count_specials(text) - sum(count_specials(message_text(m)) for m in messages)
    cases.append({"name": name, "messages": messages, "tools": tools, "thinking": thinking,
                  "add_generation_prompt": agp, "text": text, "n_structural_specials": structural})

add("schema_nested_objects", U, [fn("book", {"type": "object", "required": ["where", "guests"], "properties": {
    "where": {"type": "object", "description": "Place", "required": ["city"], "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Z].*$"},
        "geo": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90.0}, "lon": {"type": "number"}}}}},
    "guests": {"type": "integer", "default": 2, "minimum": 1},
    "ratio": {"type": "number", "default": 0.5},
    "big": {"type": "number", "default": 1e16},
    "tiny": {"type": "number", "default": 1.5e-07},
    "flag": {"type": "boolean", "default": False},
    "tags": {"type": "array", "items": {"type": "string", "description": "One tag\n\nlowercase"}, "minItems": 1, "maxItems": 5, "default": ["a", "é"]},
    "opts": {"type": "object", "default": {"z": 1, "a": [1.0, None, "x\"y"]}, "additionalProperties": False},
    "meta": {"type": "object", "additionalProperties": True, "properties": {"k": {"type": "string"}}},
    "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number", "minimum": 0}}},
    "anything": {},
    "yes": True,
    "no": False,
    "plain_array": {"type": "array"},
}}, "Book a table.\n\nTwo paragraphs.")])
add("schema_unions_enums", U, [fn("pick", {"type": "object", "properties": {
    "mode": {"enum": ["fast", "slow", None], "type": ["string", "null"], "description": "Mode"},
    "level": {"enum": [1, 2, 3.5, True], "default": 1},
    "choice": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "object", "properties": {"x": {"type": "string"}}}, {"type": "array", "items": {"type": "boolean"}}], "description": "Either"},
    "multi": {"type": ["string", "integer", "boolean", "null", "object", "array"]},
    "weird_enum": {"enum": [[1, "a"], {"k": "v'q"}]},
    "ptn": {"type": "string", "pattern": "a'b\"c"},
}, "required": ["mode", "choice"]})])
add("schema_refs", U, [fn("tree", {"type": "object", "$defs": {
    "Node": {"type": "object", "description": "A node", "properties": {"value": {"type": "string"}, "child": {"$ref": "#/$defs/Leaf"}}, "required": ["value"]},
    "Leaf": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "Color": {"enum": ["red", "green"]}},
    "properties": {"root": {"$ref": "#/$defs/Node", "description": "The root"}, "color": {"$ref": "#/$defs/Color"}, "nodes": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
    "required": ["root"]}, "Walk a tree.")])
add("schema_self_ref", U, [fn("linked", {"type": "object", "properties": {"value": {"type": "integer", "description": "Value"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["value"]})])
add("schema_no_params_and_other_tools", U, [{"type": "builtin", "function": {"name": "x"}}, fn("now"), fn("noop", {}), fn("empty_props", {"type": "object", "properties": {}}), {"type": "function", "function": {}}])
add("schema_bad_ref_falls_back_to_json", U, [fn("broken", {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}, "Überall ✓")])
add("schema_only_non_functions_json", U, [{"type": "retrieval", "name": "search", "k": 2.5}])
add("tool_args_as_objects", [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [1.5, 1e-05, 1e22, True, None], "s": "é\n\t\u0001\"\\", "n": {"b": {}, "a": []}}}},
    {"id": "functions.g:1", "type": "function", "function": {"name": "g", "arguments": "{\"raw\":  1}"}}]},
    {"role": "tool", "tool_call_id": "functions.f:0", "content": "<|im_end|> out"},
    {"role": "tool", "tool_call_id": "functions.g:1", "content": None}], None, True, True)
add("thinking_off_tool_history", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r1"},
    {"role": "user", "content": "q2"}, {"role": "assistant", "content": "", "reasoning_content": "r2", "tool_calls": [{"id": "functions.h:0", "type": "function", "function": {"name": "h", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "functions.h:0", "name": "h", "content": "ok"}], None, False, True)
add("reasoning_kept_after_last_answer", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "reasoning_content": "plan", "tool_calls": [{"id": "functions.h:0", "type": "function", "function": {"name": "h", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "functions.h:0", "content": "ok"}, {"role": "assistant", "content": "done", "reasoning_content": "final"}], None, True, False)
add("other_roles_and_parts", [{"role": "developer", "content": "dev rules"}, {"role": "user", "name": "", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]},
    {"role": "assistant", "name": "kimi", "content": "ok"}, {"role": "system", "content": None}], None, True, True)
add("empty_conversation", [], None, True, True)
with open(sys.argv[2], 'w') as f:
    for c in cases:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
