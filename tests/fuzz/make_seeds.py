#!/usr/bin/env python3
"""make_seeds.py: writes the hand-made seed inputs of tests/fuzz/corpus/NAME/.

The seeds are the shapes a random mutator rarely builds on its own: very deep
nesting, very long chains, huge and odd numbers, invalid UTF-8 in every field,
every construct of each format. Deterministic: running it again rewrites the
same files (named seed-*). Inputs found by fuzzing runs are added next to
them as crash-*/regress-* files by hand, and are never overwritten here.

  python3 tests/fuzz/make_seeds.py        (from the repository root)
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
BAD_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80",
            b"\xc3", b"\xef\xbf\xbe", b"a\x00b"]


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def js(o):
    return json.dumps(o, ensure_ascii=False).encode()


def deep_json(n, kind="list"):
    if kind == "list":
        return b"[" * n + b"1" + b"]" * n
    return b'{"a":' * n + b"1" + b"}" * n


def with_bad(body, field_path_bytes):
    """body: bytes containing the placeholder @BAD@, replaced by each bad sequence."""
    return [body.replace(b"@BAD@", b) for b in BAD_UTF8]


# ---------------------------------------------------------------- server / chat
MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Tell me a story about a cat."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city"]}}}]
CHAT = [
    {"messages": MSGS},
    {"messages": MSGS, "temperature": 0, "max_tokens": 8, "stop": "Onc", "stream": True,
     "stream_options": {"include_usage": True}},
    {"messages": MSGS, "tools": TOOLS, "tool_choice": "auto"},
    {"messages": MSGS + [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": TOOLS},
    {"messages": MSGS + [{"role": "assistant", "content": "x", "tool_calls": [{"type": "function",
      "function": {"name": "get_weather", "arguments": "not json {"}}]}], "tools": TOOLS},
    {"messages": MSGS + [{"role": "assistant", "content": "<think>\nhm\n</think>\n\nok", "reasoning_content": "hm"},
                         {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image_url",
                          "image_url": {"url": "data:"}}]}],
     "chat_template_kwargs": {"enable_thinking": False, "preserve_thinking": True}, "add_generation_prompt": True},
    {"messages": MSGS, "seed": 7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 1.5,
     "frequency_penalty": -2, "repetition_penalty": 1.1, "n": 1, "logprobs": False, "ignore_eos": True,
     "max_completion_tokens": 5, "stop": ["a", "bb", ""]},
    {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": False},
    {"messages": [{"role": "tool", "content": "orphan"}]},
    {"messages": [{"role": "assistant", "content": "only"}]},
    {"messages": [{"role": "user", "content": None}]},
    {"messages": []},
    {},
    {"messages": MSGS, "logprobs": True, "top_logprobs": 20, "logit_bias": {"5": 100, "0007": -100, "1999": 0.5},
     "stream": True},
]
COMPL = [
    {"prompt": "Once upon a time", "max_tokens": 4},
    {"prompt": [1, 2, 3, 4], "max_tokens": 2},
    {"prompt": [[5, 6, 7]]},
    {"prompt": ["text in a list"], "echo": False, "logprobs": 0, "best_of": 1, "suffix": ""},
    {"prompt": [1, 2, 1e300]},
    {"prompt": [-1]},
    {"prompt": [1.5]},
    {"prompt": ""},
    {"prompt": [[1], [2]]},
    {"prompt": "a", "logprobs": 20, "logit_bias": {"1": -100, "2": 100}},
    # echo (max_tokens 0 only with it), several prompts, return_tokens_as_token_ids
    {"prompt": "Once upon a time", "max_tokens": 0, "echo": True, "logprobs": 3},
    {"prompt": ["Once upon", [5, 6, 7], "A cat"], "n": 3, "echo": True, "max_tokens": 2, "seed": 1},
    {"prompt": [[1, 2], [3], []], "max_tokens": 0},
    {"prompt": ["a", "b", "c", "d", "e", "f", "g", "h", "i"], "n": 15, "return_tokens_as_token_ids": True},
]
HOSTILE_BODIES = [
    deep_json(4000), deep_json(1500, "obj"), b'{"messages":' + deep_json(1100) + b"}",
    b'{"messages":[{"role":"user","content":' + deep_json(1100, "obj") + b"}]}",
    b'{"messages":[{"role":"user","content":"hi","x":' + deep_json(900) + b"}]}",
    b'{"prompt":"a","max_tokens":1e400}', b'{"prompt":"a","max_tokens":-0}', b'{"prompt":"a","max_tokens":9007199254740993}',
    b'{"prompt":"a","seed":-1e30}', b'{"prompt":"a","seed":18446744073709551616}', b'{"prompt":"a","top_k":1e300}',
    b'{"prompt":"a","temperature":1e-320}', b'{"prompt":"a","temperature":NaN}', b'{"prompt":"a","temperature":-0.0}',
    b'{"prompt":"a","n":1.0000000000000002}', b'{"prompt":"a","stop":' + js(["x"] * 17) + b"}",
    b'{"prompt":"a","stop":' + js(["x"] * 16) + b"}", b'{"prompt":"a","stop":[1]}', b'{"prompt":"a","stop":{}}',
    b'{"prompt":"a","stream_options":[]}', b'{"prompt":"a"} trailing', b'{"prompt":"a","prompt":[1]}',
    b'{"messages":[{"role":"user","content":"a"}],"messages":[]}', b'{"prompt":"\\u0000\\ud800\\udfff\\ud800"}',
    b'{"messages":[{"role":"user","content":"\\ud83d"}]}', b'{"prompt":' + js([1] * 1000) + b"}",
    b'{"prompt":"' + b"ab " * 1000 + b'"}', b'{"prompt":"' + b"x" * 5000 + b'"}',
    b'{"messages":' + js([{"role": "user", "content": "m"}] * 100) + b"}",
    b"", b"null", b"[]", b'"str"', b"{", b'{"a":1,}', b"\xef\xbb\xbf{}", b'{"prompt":"a","max_tokens":1}\x00{}',
]
for body in [b'{"messages":[{"role":"@BAD@","content":"x"}]}', b'{"messages":[{"role":"user","content":"@BAD@"}]}',
             b'{"prompt":"@BAD@"}', b'{"prompt":"a","stop":"@BAD@"}', b'{"@BAD@":1,"prompt":"a"}',
             b'{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"@BAD@"}}]}',
             b'{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"@BAD@"}}]}]}',
             b'{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"@BAD@"}}']:
    HOSTILE_BODIES += with_bad(body, None)
# logit_bias / logprobs: counts, duplicate ids, odd keys and values
HOSTILE_BODIES += [
    b'{"prompt":"a","logit_bias":' + js({str(i): 1 for i in range(1025)}) + b"}",
    b'{"prompt":"a","logit_bias":' + js({str(i): -100 for i in range(1024)}) + b"}",
    b'{"prompt":"a","logit_bias":{"5":1,"05":1}}', b'{"prompt":"a","logit_bias":{"99999999999999999999999":1}}',
    b'{"prompt":"a","logit_bias":{"5":1e300}}', b'{"prompt":"a","logit_bias":{"5":-0.0,"6":100,"7":-100}}',
    b'{"prompt":"a","logit_bias":{" 5":1}}', b'{"prompt":"a","logit_bias":{"+5":1}}', b'{"prompt":"a","logit_bias":{"5\\u0000":1}}',
    b'{"prompt":"a","logit_bias":[]}', b'{"prompt":"a","logprobs":20.0}', b'{"prompt":"a","logprobs":-0}',
    b'{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20.5}',
    b'{"messages":[{"role":"user","content":"x"}],"top_logprobs":1e300}',
]
HOSTILE_BODIES += with_bad(b'{"prompt":"a","logit_bias":{"@BAD@":1}}', None)

for i, o in enumerate(CHAT):
    put("server", "chat-%02d.json" % i, js(o))
# tool_choice (server_tools.c): forced calls compile a constraint (cached), refusals name the tool
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "$defs": {
        "z": {"enum": ["utc", "cet"]}}, "properties": {"zone": {"$ref": "#/$defs/z"}}, "required": ["zone"]}}}
TOOL_CHOICE = [
    {"messages": MSGS, "tools": TOOLS, "tool_choice": "required"},
    {"messages": MSGS, "tools": TOOLS + [TIME], "tool_choice": "required", "parallel_tool_calls": False},
    {"messages": MSGS, "tools": TOOLS + [TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    {"messages": MSGS, "tools": TOOLS, "tool_choice": "none", "parallel_tool_calls": False},
    {"messages": MSGS, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    {"messages": MSGS, "tool_choice": "required"},
    {"messages": MSGS, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"n": {"type": "integer", "minimum": 1}}}}}], "tool_choice": "required"},
    {"messages": MSGS, "tools": [TOOLS[0], TOOLS[0]], "tool_choice": "required"},
    {"messages": MSGS, "tools": [{"type": "function", "function": {"name": "f%d" % k}} for k in range(17)],
     "tool_choice": "required"},
    {"messages": MSGS, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather", "x": 1}}},
    {"messages": MSGS, "tools": [{"type": "function", "function": {"name": "g", "parameters": {"type": "object",
     "properties": {"a": {"$ref": "#/properties/b"}, "b": {"enum": [1, "$ref"]}, "$ref": {"type": "string"}}}}}],
     "tool_choice": "required"},
]
for i, o in enumerate(TOOL_CHOICE):
    put("server", "toolchoice-%02d.json" % i, js(o))
for i, o in enumerate(COMPL):
    put("server", "compl-%02d.json" % i, js(o))
for i, b in enumerate(HOSTILE_BODIES):
    put("server", "hostile-%03d.json" % i, b)
for t in range(4):
    for i, o in enumerate(CHAT):
        put("chat", "t%d-%02d.json" % (t, i), bytes([t]) + js(o))
for i, b in enumerate(HOSTILE_BODIES):
    put("chat", "hostile-%03d.json" % i, bytes([i % 4]) + b)

# ---------------------------------------------------------------- templates
TPL_DIR = os.path.join(os.path.dirname(ROOT), "..", "fixtures", "chat", "templates")
for fn in sorted(os.listdir(TPL_DIR)):
    if fn.endswith(".jinja"):
        put("template", "shipped-" + fn, open(os.path.join(TPL_DIR, fn), "rb").read())
TEMPLATES = [
    "{{ messages[0]['content'] | trim | upper }}{% for m in messages %}{{ loop.index }}:{{ m.role }}{% endfor %}",
    "{%- set ns = namespace(a=0) -%}{%- for m in messages[::-1] %}{% set ns.a = ns.a + 1 %}{% endfor %}{{ ns.a }}",
    "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ f(y=3, x=4) }}{{ caller is defined }}",
    "{% macro r(n) %}{% if n > 0 %}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(1000) }}",
    "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}{{ messages | map(attribute='role') | join(',') }}",
    "{{ '%s-%d' % ('a', 3) }}{{ 'x' * 100000000 }}", "{{ [1,2] * 100000000 }}", "{{ 9 ** 9 ** 9 }}",
    "{{ range(100000000) | list | length }}", "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
    "{{ x.__class__.__mro__ }}{{ ''.__class__ }}{{ cycler }}{{ lipsum() }}",
    "{% include 'x' %}", "{% import 'x' as y %}", "{% extends 'base' %}", "{% raw %}{{ not }}{% endraw %}",
    "{% filter upper %}x{% endfilter %}{% call f() %}y{% endcall %}", "{{ 1 / 0 }}{{ 1 // 0 }}{{ 1 % 0 }}",
    "{{ raise_exception('no') }}", "{{ messages[9999] }}{{ undefined.attr.deeper }}",
    "{{ 'a' if x else 'b' if y else 'c' }}{{ not not not x }}{{ -(-(-1)) }}",
    "{{ \"\\u00e9\\x41\\n\\t\\\\\" }}{{ 'abc'[1:] }}{{ 'abc'[::-1] }}{{ 'a,b'.split(',') }}",
    "{{ {'a': 1, 'b': [1, 2.0, none, true]} | tojson }}{{ {'a':1}.items() | list }}{{ d.get('k', 'v') }}",
    "{{ 'x'.startswith('x') }}{{ 'X'.lower() }}{{ ' x '.strip() }}{{ 'a'.replace('a', 'b') }}{{ 'ab'.endswith(('b',)) }}",
    "{%- for m in messages if m.role != 'system' %}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{% else %}e{% endfor %}",
    "{% set x %}block{% endset %}{{ x }}{% break %}", "{% for a, b in [[1, 2]] %}{{ a + b }}{% continue %}{% endfor %}",
    "{{ 1 < 2 < 3 == 3 != 4 > 0 >= 0 <= 1 }}{{ 1 in [1] }}{{ 'a' not in 'b' }}{{ x is none }}{{ 3 is divisibleby 2 }}",
    "{{ 1e308 * 10 }}{{ 99999999999999999999999999999 }}{{ -9223372036854775808 - 1 }}{{ 0x10 }}{{ 1_000 }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | last }}{{ [3,1,2] | sort | first }}{{ [1] | reverse | list }}",
    "{{ 'a' | indent(4, first=true) }}{{ 'a' | center(1000000000) }}{{ 'x' | wordwrap(0) }}",
    "{{", "{%", "{#", "{{ }}", "{% if %}", "{% endif %}", "{% for %}", "{{ a.b.c[d](e)|f(g)|h }}", "{{ 'unterminated }}",
    "{% if x %}{% elif y %}{% else %}{% endif %}{%- if true -%} a {%- endif -%}",
    "{{ messages[0].content | string | length }}{{ true | string }}{{ none | string }}{{ 1.0 | string }}{{ 1 | float }}{{ '3' | int }}",
]
DEEP = [
    "{{ " + "(" * 1000 + "1" + ")" * 1000 + " }}",
    "{{ " + "[" * 1000 + "]" * 1000 + " }}",
    "{{ " + "{'a':" * 1000 + "1" + "}" * 1000 + " }}",
    "{{ " + "-" * 2000 + "1 }}", "{{ " + "not " * 1000 + "x }}",
    "{{ x" + "|lower" * 2000 + " }}", "{{ x" + ".a" * 2000 + " }}", "{{ x" + "[0]" * 2000 + " }}",
    "{{ x" + "()" * 2000 + " }}", "{{ 1" + " + 1" * 2000 + " }}", "{{ 1" + " ~ 1" * 2000 + " }}",
    "{{ 1" + " < 1" * 100 + " }}", "{{ 'a'" + " if x else 'b'" * 1000 + " }}",
    "{% if x %}" * 600 + "{% endif %}" * 600, "{% for i in x %}" * 600 + "{% endfor %}" * 600,
    "{% macro m() %}" * 300 + "{% endmacro %}" * 300,
    "{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}",
    "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
    "{% set x = [] %}{% for i in range(1000) %}{% set x = [x] %}{% endfor %}{{ x }}{{ x | tojson }}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "{{ \"" + "\\\\" * 3000 + "\" }}", "x" * 10000, "{{ '" + "a" * 10000 + "' }}",
]
for i, t in enumerate(TEMPLATES + DEEP):
    put("template", "t-%03d.jinja" % i, t)
for i, b in enumerate(BAD_UTF8):
    put("template", "badutf8-%02d.jinja" % i, b"{{ '" + b + b"' }}" + b + b"{% if '" + b + b"' %}" + b + b"{% endif %}")
    put("template", "badvar-%02d.jinja" % i, b"{{ messages[0].content }}{{ x | tojson }}\x00{\"messages\":[{\"content\":\"" + b +
        b"\"}],\"x\":\"" + b + b"\"}")
put("template", "vars-deep.jinja", b"{{ x | tojson }}{{ x }}\x00{\"x\":" + deep_json(600) + b"}")
put("template", "vars-deeper.jinja", b"{{ x }}\x00{\"x\":" + deep_json(1200) + b"}")
put("template", "vars-nums.jinja", b"{{ a }} {{ b }} {{ c }} {{ a + c }} {{ b * b }} {{ a | int }}\x00"
    b"{\"a\":1e308,\"b\":123456789012345678901234567890,\"c\":-0.0,\"d\":1E-400,\"e\":[1.0,1,1e5]}")

# ---------------------------------------------------------------- tokenizer
TEXTS = ["Hello, world! It's 2026.", "caf\u00e9 cafe\u0301 \u4f60\u597d\u4e16\u754c \U0001f600\U0001f468\u200d\U0001f469",
         "<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\n", "  \t\n\r\n\u3000\u00a0\u2028x  ", "I'LL we'Re 'S",
         "a" * 10000, " " * 3000, "9" * 2000, "\n" * 2000, "\u0301" * 1000, "e\u0301" * 1000, "<|im_end|>" * 200,
         "<|im_end<|im_end|>|>", "\ufeff\ufffd\U0010ffff\u0000", "\u1e9b\u0323 \u212b \u00c5 \uac00\u11a8",
         "def f(x):\n    return x ** 2  # comment\n", "".join(chr(c) for c in range(32, 2000))]
for i, t in enumerate(TEXTS):
    put("tokenizer", "text-%02d" % i, b"\x00" + t.encode("utf-8"))
for i, b in enumerate(BAD_UTF8):
    put("tokenizer", "bad-%02d" % i, b"\x00ok " + b + b" tail")
    put("tokenizer", "badend-%02d" % i, b"\x02" + b"x" * 100 + b)
IDS = [list(range(0, 300)), [0x7fffffff, -1, -2147483648, 1999, 2000, 2001, 2025, 2026], [1995, 1996] * 50,
       [195, 169, 195], [240, 159], [226, 130, 172, 226]]
for i, ids in enumerate(IDS):
    put("tokenizer", "ids-%02d" % i, b"\x01" + b"".join(struct.pack("<i", x) for x in ids))

# ---------------------------------------------------------------- tokenizer.json
FIX_TOK = os.path.join(os.path.dirname(ROOT), "..", "fixtures", "server", "tokenizer.json")
full = open(FIX_TOK, "rb").read()
put("tokenizer_json", "server-fixture.json", full)
base_vocab = {c: i for i, c in enumerate(["a", "b", "ab", "\u0120", "\u0120a", "c", "abc"])}
mini = {"model": {"type": "BPE", "vocab": base_vocab, "merges": ["a b", ["ab", "c"], ["\u0120", "a"]]},
        "added_tokens": [{"id": 7, "content": "<|x|>", "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "decoder": {"type": "ByteLevel"}}
put("tokenizer_json", "mini.json", js(mini))


def tok_variant(name, f):
    o = json.loads(json.dumps(mini))
    f(o)
    put("tokenizer_json", name + ".json", js(o))


def nest(kind, key, n, leaf):
    o = leaf
    for _ in range(n):
        o = {"type": "Sequence", key: [o]}
    return o


tok_variant("seq-deep-pretok", lambda o: o.update(pre_tokenizer=nest("p", "pretokenizers", 400, {"type": "ByteLevel"})))
tok_variant("seq-deep-norm", lambda o: o.update(normalizer=nest("n", "normalizers", 400, {"type": "NFC"})))
tok_variant("seq-ok", lambda o: o.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+|\\S+|[\\s\\d]"}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "use_regex": False}]}))
for i, rx in enumerate(["(a+)+$", "(?:a|aa)*b", "[\\S]", "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
                        "(", "[", "\\", "(?<n>a)\\k<n>", "(?i:'s|'t)", "[[:alpha:]]+", "[]a]", "[^]a]", "\\x{110000}",
                        "(?R)", "a{1000000}", "(?C1)a", "\\p{Xx}", ""]):
    tok_variant("regex-%02d" % i, lambda o, rx=rx: o.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": rx},
                                                                          "behavior": "Isolated"}))
for i, b in enumerate(BAD_UTF8):
    put("tokenizer_json", "regex-bad-%02d.json" % i, js(dict(mini, pre_tokenizer={"type": "Split", "pattern": {"Regex": "@@"},
                                                                                    "behavior": "Isolated"})).replace(b"@@", b))
    put("tokenizer_json", "vocab-bad-%02d.json" % i, js(mini).replace(b'"abc"', b'"ab' + b + b'"'))
    put("tokenizer_json", "added-bad-%02d.json" % i, js(mini).replace(b"<|x|>", b"<|" + b + b"|>"))
for i, v in enumerate([16777216, 16777217, -1, 1.5, 1e300, "1", None, 2147483647]):
    tok_variant("id-%02d" % i, lambda o, v=v: o["model"]["vocab"].update({"zz": v}))
    tok_variant("addid-%02d" % i, lambda o, v=v: o["added_tokens"].append({"id": v, "content": "<|y|>"}))
tok_variant("merges-missing", lambda o: o["model"]["merges"].append("zz q"))
tok_variant("merges-bad", lambda o: o["model"].update(merges=["a  b", "ab", ["a"], ["a", "b", "c"], [1, 2], 3]))
tok_variant("merges-many", lambda o: o["model"].update(merges=["a b"] * 1000))
tok_variant("vocab-empty", lambda o: o["model"].update(vocab={}))
tok_variant("vocab-dup-ids", lambda o: o["model"]["vocab"].update({"q": 0, "r": 0}))
tok_variant("unsupported", lambda o: o["model"].update(type="WordPiece", byte_fallback=True))
tok_variant("added-many", lambda o: o.update(added_tokens=[{"id": 7 + i, "content": "<t%d>" % i, "lstrip": True,
                                                            "rstrip": True, "normalized": bool(i % 2)} for i in range(300)]))
put("tokenizer_json", "deep.json", b'{"model":' + deep_json(1100, "obj") + b"}")
put("tokenizer_json", "truncated.json", full[: len(full) // 2])

# ---------------------------------------------------------------- safetensors


def st(header, data=b"", raw_header=None, pad=True):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    if pad and raw_header is None:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


good = {"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}, "e": {"dtype": "I8", "shape": [0], "data_offsets": [22, 22]}}
put("safetensors", "good", st(good, bytes(range(22))))
put("safetensors", "unaligned", st(good, bytes(range(22)), pad=False))
DTYPES = ["F32", "F16", "BF16", "U32", "I32", "I64", "U8", "I8", "F64", "BOOL", "F8_E4M3", "f32", ""]
put("safetensors", "dtypes", st({d or "empty": {"dtype": d, "shape": [1], "data_offsets": [8 * i, 8 * i + 8]}
                                 for i, d in enumerate(DTYPES)}, bytes(8 * len(DTYPES))))
BAD_ST = [
    {"t": {"dtype": "F32", "shape": [1e15, 1e15, 0], "data_offsets": [0, 0]}},
    {"t": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}},
    {"t": {"dtype": "F32", "shape": [0, 1e15, 1e15, 1e15], "data_offsets": [0, 0]}},
    {"t": {"dtype": "F32", "shape": [9007199254740993], "data_offsets": [0, 4]}},
    {"t": {"dtype": "F32", "shape": [1, 1, 1, 1, 1, 1, 1, 1, 1], "data_offsets": [0, 4]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": [0.5, 4.5]}},
    {"t": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 6]}},
    {"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": [1e300, 1e300]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]}},
    {"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 400]}},
    {"t": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}},
    {"t": {"dtype": 1, "shape": [1], "data_offsets": [0, 4]}},
    {"t": {"shape": [1], "data_offsets": [0, 4]}},
    {"t": 5}, {"t": []},
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
    {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "b": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]},
     "c": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
    {"t": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}},
    {"__metadata__": deep_json_obj if False else {"x": [[[[]]]]}},
]
for i, h in enumerate(BAD_ST):
    put("safetensors", "bad-%02d" % i, st(h, bytes(16)))
put("safetensors", "dup-names", st(None, bytes(8), raw_header=b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                                              b'"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'))
put("safetensors", "hlen-huge", struct.pack("<Q", 2 ** 63) + b"{}")
put("safetensors", "hlen-all", struct.pack("<Q", 2 ** 64 - 1) + b"{}")
put("safetensors", "hlen-past", struct.pack("<Q", 100) + b"{}")
put("safetensors", "short", b"\x02\x00\x00")
put("safetensors", "empty", b"")
put("safetensors", "not-object", st(None, raw_header=b"[1,2,3]"))
put("safetensors", "deep", st(None, raw_header=deep_json(1100, "obj")))
put("safetensors", "many", st({"t%d" % i: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(600)},
                              bytes(600)))
for i, b in enumerate(BAD_UTF8):
    put("safetensors", "name-bad-%02d" % i, st(None, bytes(4), raw_header=b'{"' + b + b'":{"dtype":"F32","shape":[1],'
                                                                          b'"data_offsets":[0,4]}}'))

# ---------------------------------------------------------------- config
FIX = os.path.join(os.path.dirname(ROOT), "..", "fixtures")
for d in sorted(os.listdir(FIX)):
    p = os.path.join(FIX, d, "config.json")
    if os.path.exists(p):
        put("config", "fixture-" + d + ".json", open(p, "rb").read())
base_cfg = json.loads(open(os.path.join(FIX, "tiny-dense", "config.json")).read())
moe_cfg = json.loads(open(os.path.join(FIX, "tiny-moe", "config.json")).read())


def cfg_variant(name, base, f, gen=None):
    o = json.loads(json.dumps(base))
    f(o)
    data = js(o)
    if gen is not None:
        data += b"\x00" + gen
    put("config", name + ".json", data)


def tc(o):
    return o["text_config"] if "text_config" in o else o


INT_FIELDS = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim", "max_position_embeddings", "mtp_num_hidden_layers", "intermediate_size",
              "full_attention_interval"]
for k in INT_FIELDS:
    for j, v in enumerate([1e300, 16777217, 2147483648, -1, 0, 1.5, "8", None]):
        cfg_variant("%s-%d" % (k, j), base_cfg, lambda o, k=k, v=v: tc(o).update({k: v}))
for k in ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"]:
    for j, v in enumerate([1e300, 16777216, 0, -5]):
        cfg_variant("moe-%s-%d" % (k, j), moe_cfg, lambda o, k=k, v=v: tc(o).update({k: v}))
cfg_variant("wide-heads", base_cfg, lambda o: tc(o).update(num_attention_heads=16777216, num_key_value_heads=1, head_dim=16777216))
cfg_variant("wide-gdn", base_cfg, lambda o: tc(o).update(linear_num_value_heads=16777216, linear_num_key_heads=1,
                                                        linear_value_head_dim=16777216))
for j, v in enumerate([1e300, -1, 0, 1e-300, "x", 1]):
    cfg_variant("eps-%d" % j, base_cfg, lambda o, v=v: tc(o).update(rms_norm_eps=v))
for j, v in enumerate([[1, [2, [3, [4]]]], 1e300, -1, [1] * 100, 2147483648, [[[[[[[[[[1]]]]]]]]]], 1.5]):
    cfg_variant("eos-%d" % j, base_cfg, lambda o, v=v: o.update(eos_token_id=v))
cfg_variant("eos-deep", base_cfg, lambda o: None)
put("config", "seed-eos-nest-raw.json", js(base_cfg)[:-1] + b',"eos_token_id":' + deep_json(900) + b"}")
for j, q in enumerate([{"bits": 4, "group_size": 64}, {"bits": 4.5, "group_size": 64}, {"bits": 8, "group_size": 1e300},
                       {"bits": 4, "group_size": 7}, {"bits": 1e300, "group_size": 64}, {"bits": 4, "group_size": 64.5}]):
    cfg_variant("quant-%d" % j, base_cfg, lambda o, q=q: o.update(quantization=q))
for j, lt in enumerate([["full_attention"] * 2, ["linear_attention", "x"], "full", [None]]):
    cfg_variant("layers-%d" % j, base_cfg, lambda o, lt=lt: tc(o).update(layer_types=lt))
for j, rp in enumerate([{"rope_theta": -1}, {"partial_rotary_factor": 2}, {"rope_theta": 1e308, "partial_rotary_factor": 1e-300},
                        "x", {"rope_type": "yarn", "factor": 1e300}]):
    cfg_variant("rope-%d" % j, base_cfg, lambda o, rp=rp: tc(o).update(rope_parameters=rp))
cfg_variant("gen", base_cfg, lambda o: None, gen=b'{"eos_token_id":[5,6,[7]],"temperature":0.6}')
cfg_variant("gen-bad", base_cfg, lambda o: None, gen=b'{"eos_token_id":' + deep_json(1100) + b"}")
cfg_variant("model-type", base_cfg, lambda o: o.update(model_type="llama"))
put("config", "seed-deep.json", deep_json(1100, "obj"))
put("config", "seed-text-config-list.json", b'{"model_type":"qwen3_5","text_config":[1]}')
for i, b in enumerate(BAD_UTF8):
    put("config", "badutf8-%02d.json" % i, js(base_cfg).replace(b'"qwen3_5', b'"qwen3_5' + b, 1))

# ---------------------------------------------------------------- reply
REPLIES = [
    "Hello there.", "<think>\nreasoning\n</think>\n\nanswer", "reasoning only\n</think>\n\nanswer",
    "<think></think>", "<think>", "</think>", "<thi", "<tool_ca", "  \n\n  ",
    "ok\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"i\": 1}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 2}\"}\n</tool_call>\n<tool_call>\n{\"name\": \"g\"}\n</tool_call>",
    "<tool_call>\n<function=f>\n<parameter=i>\n42\n</parameter>\n<parameter=n>\n1e999\n</parameter>\n<parameter=b>\nTrue\n"
    "</parameter>\n<parameter=o>\n{\"k\": [1, 2]}\n</parameter>\n<parameter=a>\n[1,\n</parameter>\n<parameter=u>\nnull\n"
    "</parameter>\n<parameter=z>\nnull\n</parameter>\n<parameter=s>\nline1\nline2\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=g>\n<parameter=x>\nnan\n</parameter>\n<parameter=x>\n-inf\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=f>\n<parameter=i>\n1\n</function>\n</tool_call>", "<tool_call>\n<function=>\n</function>\n</tool_call>",
    "<tool_call>\n{\"name\": \"f\"", "<tool_call><tool_call></tool_call></tool_call>", "text <tool_call> not a call",
    "<tool_call>\n{\"name\": 1}\n</tool_call> trailing", "<think>a<think>b</think>c</think>d",
    "<tool_call>\n{\"name\":\"f\",\"arguments\":" + "[" * 1100 + "]" * 1100 + "}\n</tool_call>",
    "<tool_call>\n{\"name\":\"f\",\"parameters\":{\"x\":1e400}}\n</tool_call>",
    "".join("<tool_call>\n<function=f>\n<parameter=i>\n%d\n</parameter>\n</function>\n</tool_call>\n" % i for i in range(100)),
    "<" * 2000, "<think>" + "</" * 1000, "\n" * 2000 + "<tool_call>", "<tool_call>\n<function=f>\n" + "<parameter=p>\n" * 500,
]
for i, r in enumerate(REPLIES):
    for mode in (0, 3, 0x2d):
        m = mode if mode != 2 | 0 else 2
        b = r.encode()
        if (m >> 1) & 3 == 2:
            b = js(TOOLS + [{"name": "f", "parameters": {"properties": {"i": {"type": "integer"}}}}]) + b"\x00" + b
        put("reply", "r%02d-m%02x" % (i, m), bytes([m]) + b)
for i, b in enumerate(BAD_UTF8):
    put("reply", "bad-%02d" % i, b"\x02<think>" + b + b"</think>" + b + b"<tool_call>\n<function=" + b + b">\n<parameter=" + b +
        b">\n" + b + b"\n</parameter>\n</function>\n</tool_call>")
    put("reply", "badjson-%02d" % i, b"\x02<tool_call>\n{\"name\": \"" + b + b"\", \"arguments\": \"" + b + b"\"}\n</tool_call>")
    put("reply", "badtools-%02d" % i, b"\x04" + b'[{"name":"f","parameters":{"properties":{"' + b + b'":{"type":"' + b +
        b'"}}}}]\x00<tool_call>\n<function=f>\n<parameter=' + b + b">\n1\n</parameter>\n</function>\n</tool_call>")
put("reply", "tools-deep", b"\x04" + deep_json(1100) + b"\x00<tool_call>\n<function=f>\n</function>\n</tool_call>")

# ---------------------------------------------------------------- dflash_config
# first byte: the target (0 none, 1 H64/vocab256/8 layers, 2 H2048/vocab248320/24 layers q4 g64,
# 3 H64/vocab256/2 layers q8 g32: see fuzz_dflash_config.c)
DF = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256,
      "rms_norm_eps": 1e-6, "rope_theta": 1000000, "num_target_layers": 8, "block_size": 16,
      "dflash_config": {"mask_token_id": 255, "target_layer_ids": [1, 3, 5]}}
DF_BIG = dict(DF, hidden_size=2048, num_hidden_layers=5, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
              intermediate_size=6144, vocab_size=248320, num_target_layers=24, layer_types=["full_attention"] * 5,
              is_causal=False, quantization={"bits": 4, "group_size": 64},
              dflash_config={"mask_token_id": 248077, "block_size": 16})


def df(name, target, o):
    put("dflash_config", name + ".json", bytes([target]) + (o if isinstance(o, bytes) else js(o)))


def dfc(**kw):
    return dict(DF, **kw)


df("ok-alone", 0, DF)
df("ok-target", 1, DF)
df("ok-big", 2, DF_BIG)
df("ok-default-taps", 1, dfc(dflash_config={"mask_token_id": 3}))
df("ok-one-layer", 1, dfc(num_hidden_layers=1, dflash_config={"mask_token_id": 3}))
df("ok-rope-params", 1, dfc(rope_parameters={"rope_theta": 1e7, "partial_rotary_factor": 0.25}))
df("ok-top-taps", 1, dict({k: v for k, v in DF.items() if k != "dflash_config"}, target_layer_ids=[0, 7],
                          dflash_config={"mask_token_id": 0}))
df("bad-not-dflash", 1, dfc(architectures=["Qwen3ForCausalLM"]))
df("bad-no-dflash-config", 1, {k: v for k, v in DF.items() if k != "dflash_config"})
df("bad-hidden", 1, dfc(hidden_size=128))
df("bad-vocab", 1, dfc(vocab_size=1000))
df("bad-target-layers", 1, dfc(num_target_layers=9))
df("bad-tap-past", 1, dfc(dflash_config={"mask_token_id": 1, "target_layer_ids": [1, 8]}))
df("bad-tap-negative", 1, dfc(dflash_config={"mask_token_id": 1, "target_layer_ids": [-1]}))
df("bad-tap-frac", 1, dfc(dflash_config={"mask_token_id": 1, "target_layer_ids": [1.5]}))
df("bad-taps-many", 0, dfc(num_target_layers=64, dflash_config={"mask_token_id": 1, "target_layer_ids": list(range(17))}))
df("bad-taps-empty", 1, dfc(dflash_config={"mask_token_id": 1, "target_layer_ids": []}))
df("bad-taps-obj", 1, dfc(dflash_config={"mask_token_id": 1, "target_layer_ids": {"a": 1}}))
df("bad-default-taps-short", 3, dfc(num_target_layers=2, dflash_config={"mask_token_id": 1}))
df("bad-default-taps-many", 0, dfc(num_hidden_layers=20, num_target_layers=40, dflash_config={"mask_token_id": 1}))
df("bad-mask", 1, dfc(dflash_config={"mask_token_id": 256}))
df("bad-mask-missing", 1, dfc(dflash_config={}))
df("bad-block-0", 1, dfc(block_size=0))
df("bad-block-huge", 1, dfc(block_size=1e300))
df("bad-heads", 1, dfc(num_key_value_heads=3))
df("bad-heads-zero", 1, dfc(num_attention_heads=0))
df("bad-layers", 0, dfc(num_hidden_layers=65))
df("bad-width", 0, dfc(num_attention_heads=16777216, num_key_value_heads=1, head_dim=16777216))
df("bad-fc-width", 0, dfc(hidden_size=16777216, num_target_layers=100, dflash_config={"mask_token_id": 1, "target_layer_ids": [1, 2, 3]}))
df("bad-prf-huge", 1, dfc(partial_rotary_factor=1e300))
df("bad-prf-neg", 1, dfc(rope_parameters={"partial_rotary_factor": -0.5}))
df("bad-prf-odd", 1, dfc(partial_rotary_factor=0.0625 * 1.5))
df("bad-theta", 1, dfc(rope_theta=-1))
df("bad-eps-huge", 1, dfc(rms_norm_eps=1e300))
df("bad-eps-tiny", 1, dfc(rms_norm_eps=1e-300))
df("bad-quant-bits", 1, dfc(quantization={"bits": 1e300, "group_size": 64}))
df("bad-quant-group", 1, dfc(quantization={"bits": 4, "group_size": -1e300}))
df("bad-quant-group-frac", 1, dfc(quantization={"bits": 4, "group_size": 64.5}))
df("bad-quant-mismatch", 2, dict(DF_BIG, quantization={"bits": 4, "group_size": 32}))
df("bad-layer-type", 1, dfc(layer_types=["sliding_attention", "full_attention"]))
df("bad-causal", 1, dfc(is_causal=True))
df("bad-int-big", 1, dfc(hidden_size=1e20))
df("bad-int-str", 1, dfc(hidden_size="64"))
df("bad-json", 1, js(DF)[:-7])
df("bad-array", 1, b"[1,2]")
df("bad-deep", 1, deep_json(1100, "obj"))
for i, b in enumerate(BAD_UTF8[:4]):
    df("bad-utf8-%d" % i, 1, js(dfc(layer_types=["@BAD@"])).replace(b"@BAD@", b))

# ---------------------------------------------------------------- size
SIZES = ["1", "4096", "64K", "64k", "64KB", "64KiB", "512M", "3G", "2T", "1.5G", "0.5K", "1.25M", "10B",
         "18446744073709551615", "18446744073709551616", "16777215T", "16777216T", "15.999999999999T", "0.0000000001K",
         "0.0004K", "0.0005K", "1.0000000005K", "0", "0K", "0.0G", "-1", "+1", "K", "1X", "1.5", "1.", ".5G", "1 G",
         "1GG", "1Gi", "1GiB", "1gib", "1iB", "1e9", " 1", "1KiBB", "1\x002", "00000000000000000000001K",
         "9" * 40, "1." + "9" * 40 + "K", "1MB ", "1.5\xff", "\xe2\x82\xac"]
for i, s in enumerate(SIZES):
    put("size", "%02d" % i, s.encode("latin-1"))

# ---------------------------------------------------------------- json_fsm
# candidate JSON texts: valid ones of every kind, each construct cJSON and RFC 8259 read differently,
# near the depth cap, UTF-8 edge cases (fuzz_json_fsm.c)
JSON_TEXTS = [b"{}", b"[]", b" \t\n\r{ } ", b"0", b"-0.0e-0", b"1E+5", b"123456789012345678901234567890", b"01", b"1.",
              b".5", b"-.5", b"1.e5", b"true", b"false", b"null", b"tru", b'"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"',
              b'"\\u0041\\uD83D\\uDE00"', b'"\\uD83D"', b'"\\uDE00"', b'"\\u12G4"', b'"a\nb"', b'"\x7f"',
              b'"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"', b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"',
              b'{"a":1,"b":[true,false,null,{"c":"d"}]}', b'{"a":1,}', b"[1,]", b"{a:1}", b"\xef\xbb\xbf{}",
              b"\x0c{}", b"[" * 1024 + b"]" * 1024, b"[" * 1025 + b"]" * 1025, b'{"k":' * 999 + b"1" + b"}" * 999]
for i, s in enumerate(JSON_TEXTS):
    put("json_fsm", "%02d" % i, s)

# ---------------------------------------------------------------- json_schema
# a schema, a NUL, a candidate document (fuzz_json_schema.c): every supported keyword, recursion through
# $ref, alternatives that stay ambiguous for a while, refused keywords, unsatisfiable and cyclic schemas
SCHEMA_DOCS = [
    ({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                                       "age": {"type": "integer"}, "email": {"type": ["string", "null"]},
                                       "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                                                "minItems": 1, "maxItems": 3}},
      "required": ["name", "tags"], "additionalProperties": False},
     b'{"name":"Ann","age":30,"email":null,"tags":["a","\\ud83d\\ude00x"]}'),
    ({"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"},
                                                       "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                      "required": ["v"]}}, "$ref": "#/$defs/n"},
     b'{"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]}'),
    ({"enum": ["red", 1, 12, 2.5, None, True, {"k": [1, "x"]}, []]}, b'{"k":[1,"x"]}'),
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                 "required": ["a", "b"]},
                {"type": "object", "properties": {"a": {"type": "integer"}, "c": {"type": "null"}}, "required": ["a"]},
                {"const": "x"}, {"const": "xy"}]},
     b'{"a":1,"c":null}'),
    ({"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 2}]}, b'"ab"'),
    ({"type": "object", "additionalProperties": {"type": "array", "items": {"type": ["integer", "null"]}}},
     b'{"x":[1,null],"":[]}'),
    ({"definitions": {"c": {"type": "object", "properties": {"h": {"type": "string"},
                                                             "t": {"anyOf": [{"type": "null"}, {"$ref": "#/definitions/c"}]}},
                            "required": ["h", "t"]}}, "allOf": [{"$ref": "#/definitions/c"}]},
     b'{"h":"a","t":{"h":"b","t":null}}'),
    ({}, b'[{"a":[1,{"b":null}]},"x",-1.5e3,true]'),
    (True, b' 12 '),
    ({"type": "string", "pattern": "a+"}, b'"a"'),
    ({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}, b'{}'),
    ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}, b'1'),
    ({"anyOf": [{"$ref": "#"}, {"type": "null"}]}, b'null'),
    ({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 3}, "minItems": 2},
     b'["ab","\\u00e9\\u00e9\\u00e9"]'),
]
for i, (schema, doc) in enumerate(SCHEMA_DOCS):
    put("json_schema", "%02d" % i, js(schema) + b"\x00" + doc)
put("json_schema", "deep", b'{"items":' * 70 + b"{}" + b"}" * 70 + b"\x00[]")
