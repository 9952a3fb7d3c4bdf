#!/usr/bin/env python3
"""Builds tests/golden/data/chat_templates/goldens.json for tests/unit/chat_template_test.cc.

References are rendered with Python jinja2 exactly as transformers'
apply_chat_template renders (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols),
`tojson` = json.dumps(ensure_ascii=False, ...), `raise_exception` raising
TemplateError, and render(messages=..., tools=None, documents=None,
add_generation_prompt=..., bos_token=..., eos_token=...).

Templates:
  smollm2  read from the GGUF metadata `tokenizer.chat_template` of
           ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
           (needs `pip install gguf`); if the file is absent the copy already in the
           golden file is kept.
  llama3   Meta-Llama-3-8B-Instruct's template, WRITTEN FROM KNOWLEDGE (not copied
           from the model repository).
  qwen2_5  Qwen2.5-Instruct's template, WRITTEN FROM KNOWLEDGE, tool branches included.
  features a template written here that uses the rest of the supported subset.
Plus "fuzz" cases: random templates drawn from a grammar over the supported subset
(seeded), each with jinja2's output or the fact that jinja2 raised.

Usage (from the repository root): `make goldens` (tools/goldens/make_goldens.sh runs
it in the .venv with tools/goldens/requirements.txt), or in any venv with jinja2 and
gguf:  python tools/goldens/make_chat_template_goldens.py
A wider differential sweep, not committed: CT_SEED=1 CT_N=3000 (same command), then
build/tests/chat_template_test --gtest_filter='*Grammar*', then regenerate with the defaults.
Seeds 1, 4 and 5 at 3000 cases each matched byte for byte when this was written.
"""
import json
import os
import random
import sys
import warnings

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/golden/data/chat_templates/goldens.json")
GGUF = os.path.join(ROOT, "../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
FORMAT_VERSION = 1
COMMAND = "python3 tools/goldens/make_chat_template_goldens.py  (jinja2 %s)" % jinja2.__version__

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

QWEN2_5 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Uses namespace(), slicing, raise_exception, tojson(indent), `is defined`, filters,
# loop variables, methods, `in`, inline if, break/continue and plain-text blocks.
FEATURES = """{#- A template exercising the supported subset. -#}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] | trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system = 'Default system.' %}
    {%- set rest = messages %}
{%- endif %}
{%- set ns = namespace(turns=0, last_user='') %}
{{ bos_token }}[SYS] {{ system }} ({{ system | length }} chars)
{% for m in rest %}
    {%- if m.role not in ['user', 'assistant'] %}
        {{- raise_exception('role must be user or assistant, got ' ~ m.role) }}
    {%- endif %}
    {%- if (m.role == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if m.role == 'user' %}
        {%- set ns.turns = ns.turns + 1 %}
        {%- set ns.last_user = m.content %}
    {%- endif %}
  {{ loop.index }}/{{ loop.length }} {{ m.role | upper }}{{ ' (first)' if loop.first }}{{ ' (last)' if loop.last else '' }}: {{ m['content'].strip() }}
{% endfor %}
turns={{ ns.turns }} last_user={{ ns.last_user | tojson }} words={{ ns.last_user.split() | length }}
meta={{ {'n': rest | length, 'roles': 'x' if false else rest | length, 'ok': true, 'none': none} | tojson }}
{{ {'a': [1, 2.5, 'é"\\n'], 'b': {}} | tojson(indent=2) }}
{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{{ ',' if not loop.last }}{% endfor %}

{{ 'eos' if eos_token is defined else 'no eos' }} {{ undefined_var is defined }} {{ (messages | last).role }} {{ messages[-1]['content'][:5] }}|{{ 'abc'[::-1] }}|{{ 7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 5 }}
{%- if add_generation_prompt %}
[ASSISTANT]
{%- endif %}
"""

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "  Be kind.  \n"},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke about 'quotes' and \"double quotes\"."},
    ],
    "whitespace_unicode": [
        {"role": "user", "content": "  \u00e9t\u00e9 \u2014 na\u00efve \U0001F600  \n\t"},
        {"role": "assistant", "content": "\n\nok\n"},
        {"role": "user", "content": "{{ not a template }} {% if %} <|im_end|>"},
    ],
    "empty_content": [{"role": "user", "content": ""}],
    "bad_alternation": [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ],
}

BOS, EOS = "<s>", "</s>"


def make_env():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render(env, source, messages, add_generation_prompt):
    try:
        text = env.from_string(source).render(
            messages=messages, tools=None, documents=None,
            add_generation_prompt=add_generation_prompt, bos_token=BOS, eos_token=EOS)
        return {"expected": text}
    except Exception as e:  # TemplateError, UndefinedError, TypeError, ...
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ---- Grammar fuzz: random templates over the supported subset ----
NAMES = ["messages", "m", "x", "ns", "loop", "bos_token", "add_generation_prompt", "nope"]


def rand_expr(r, depth=0):
    if depth > 3 or r.random() < 0.3:
        return r.choice([
            "'a'", '"b\\n"', "1", "2", "0", "-3", "2.5", "true", "false", "none", "[]", "[1, 'x']",
            "{'k': 'v'}", "messages", "messages[0]", "messages[-1]['content']", "m", "x",
            "messages[1:]", "messages[0].role", "loop.index0", "nope", "bos_token", "ns.v",
            "add_generation_prompt", "'  pad  '", "'é'", "(loop.index0 % 2)", "(7 % -3)",
        ])
    k = r.randrange(12)
    a = rand_expr(r, depth + 1)
    b = rand_expr(r, depth + 1)
    if k == 0:
        # No '%': on a string it is Python's printf formatting, not in the subset.
        return "(%s %s %s)" % (a, r.choice(["+", "-", "*", "~", "//", "/"]), b)
    if k == 1:
        return "(%s %s %s)" % (a, r.choice(["==", "!=", "<", ">=", "in", "not in"]), b)
    if k == 2:
        return "(%s %s %s)" % (a, r.choice(["and", "or"]), b)
    if k == 3:
        return "(not %s)" % a
    if k == 4:
        return "(%s | %s)" % (a, r.choice(["trim", "length", "tojson", "upper", "lower", "string",
                                           "first", "last", "list", "default('d')", "join('-')",
                                           "tojson(indent=1)", "capitalize", "reverse | list"]))
    if k == 5:
        return "(%s is %s)" % (a, r.choice(["defined", "not defined", "none", "string", "number",
                                            "mapping", "sequence", "odd", "even"]))
    if k == 6:
        return "(%s if %s else %s)" % (a, b, rand_expr(r, depth + 1))
    if k == 7:
        # jinja2 folds a slice of a literal it cannot slice to "" (an optimizer quirk),
        # while the same slice of a variable raises; slice variables only.
        sub = r.choice(["0", "-1", "1:", ":2", "::-1", "'role'", "'content'"])
        if ":" in sub:
            a = r.choice(["messages", "messages[0].role", "x", "bos_token", "m", "ns.v", "nope"])
        return "%s[%s]" % (a, sub)
    if k == 8:
        return "%s.%s" % (a, r.choice(["role", "content", "length", "first", "v"]))
    if k == 9:
        return "[%s, %s]" % (a, b)
    if k == 10:
        return "(%s ~ %s)" % (a, b)
    # No items()/keys(): Python prints dict views and tuples, which the subset has not.
    return "%s.%s()" % (a, r.choice(["strip", "upper", "split", "lower"]))


def rand_block(r, depth=0):
    out = []
    for _ in range(r.randrange(1, 4)):
        k = r.randrange(8 if depth < 2 else 4)
        ws = lambda: r.choice(["", "-", ""])
        text = r.choice(["", "t", " t ", "\n", "  \n  ", "\n    line\n"])
        if k == 0:
            out.append(text)
        elif k == 1:
            out.append("{{%s %s %s}}" % (ws(), rand_expr(r), ws()))
        elif k == 2:
            out.append("{%%%s set x = %s %s%%}%s" % (ws(), rand_expr(r), ws(), text))
        elif k == 3:
            out.append("{%%%s set ns.v = %s %s%%}" % (ws(), rand_expr(r), ws()))
        elif k in (4, 5):
            out.append("%s{%%%s if %s %s%%}%s%s{%%%s else %s%%}%s{%%%s endif %s%%}%s" % (
                r.choice(["", "  ", "\n  "]), ws(), rand_expr(r), ws(), text, rand_block(r, depth + 1),
                ws(), ws(), rand_block(r, depth + 1), ws(), ws(), text))
        else:
            out.append("{%%%s for m in %s %s%%}\n%s{%%%s endfor %s%%}\n" % (
                ws(), r.choice(["messages", "messages[1:]", "[1, 2, 3]", "'ab'", "x", "nope"]), ws(),
                rand_block(r, depth + 1), ws(), ws()))
    return "".join(out)


def main():
    # jinja2's code generator warns about subscripted literals in the fuzz templates.
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    env = make_env()
    old = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            old = json.load(f)
    templates = {}
    if os.path.exists(GGUF):
        from gguf import GGUFReader
        reader = GGUFReader(GGUF)
        smollm2 = reader.fields["tokenizer.chat_template"].contents()
        origin = "GGUF tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf"
    else:
        smollm2 = old["templates"]["smollm2"]["source"]
        origin = old["templates"]["smollm2"]["origin"]
    templates["smollm2"] = {"source": smollm2, "origin": origin}
    templates["llama3"] = {"source": LLAMA3, "origin": "Meta-Llama-3-8B-Instruct, written from knowledge"}
    templates["qwen2_5"] = {"source": QWEN2_5, "origin": "Qwen2.5-Instruct, written from knowledge"}
    templates["features"] = {"source": FEATURES, "origin": "written for this test"}

    cases = []
    for tname, t in templates.items():
        for cname, messages in CONVERSATIONS.items():
            for agp in (True, False):
                case = {"template": tname, "conversation": cname, "add_generation_prompt": agp}
                case.update(render(env, t["source"], messages, agp))
                cases.append(case)

    r = random.Random(int(os.environ.get("CT_SEED", "20261123")))
    fuzz = []
    num_ok = 0
    while len(fuzz) < int(os.environ.get("CT_N", "300")):
        source = rand_block(r)
        conv = r.choice(list(CONVERSATIONS))
        prefix = "{% set ns = namespace(v=1) %}"
        case = {"source": prefix + source, "conversation": conv, "add_generation_prompt": r.random() < 0.5}
        case.update(render(env, case["source"], CONVERSATIONS[conv], case["add_generation_prompt"]))
        # Keep errors to a third: successes are the stronger check.
        if "error" in case and r.random() < 0.6:
            continue
        num_ok += "expected" in case
        fuzz.append(case)

    data = {
        "format_version": FORMAT_VERSION,
        "command": COMMAND,
        "bos_token": BOS,
        "eos_token": EOS,
        "templates": templates,
        "conversations": CONVERSATIONS,
        "cases": cases,
        "fuzz_cases": fuzz,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        # One case per line keeps diffs readable.
        f.write("{\n")
        items = list(data.items())
        for i, (key, value) in enumerate(items):
            f.write(" %s: " % json.dumps(key))
            if isinstance(value, list):
                f.write("[\n" + ",\n".join("  " + json.dumps(v, ensure_ascii=False) for v in value) + "\n ]")
            else:
                f.write(json.dumps(value, ensure_ascii=False))
            f.write(",\n" if i + 1 < len(items) else "\n")
        f.write("}\n")
    print("wrote %s: %d cases, %d fuzz cases (%d render)" % (OUT, len(cases), len(fuzz), num_ok),
          file=sys.stderr)


if __name__ == "__main__":
    main()
