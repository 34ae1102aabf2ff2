#!/usr/bin/env python3
"""Renders the chat-template fixtures with Python's jinja2, configured as Hugging Face's
apply_chat_template configures it, into tests/fixtures/chat_templates/NAME.expected.json.
tests/unit/chat_template_test.cpp renders the same conversations with moeflow's
interpreter and compares byte for byte.

Hugging Face's environment (transformers' chat-template utilities): an
ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True and the
loopcontrols extension; globals raise_exception (raises TemplateError with the message)
and strftime_now (datetime.now().strftime; fixed here so the output is reproducible);
tojson replaced by json.dumps(ensure_ascii=False, indent, separators, sort_keys); render
variables messages, tools (None unless the case has tools), documents=None,
add_generation_prompt, the special tokens, and the case's extra variables (HF's
apply_chat_template keyword arguments, e.g. enable_thinking).

Usage: tools/chat_template/render_expected.py [FIXTURE_DIR]   (Debian: python3-jinja2)
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# strftime_now's clock for the fixtures: 2024-07-26 00:00:00 UTC.
NOW_UNIX_SECONDS = 1721952000

# Per template: (bos_token, eos_token) as the model's tokenizer defines them.
TEMPLATES = {
    "chatml": ("", "<|im_end|>"),
    "deepseek-v2": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3.1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "glm-4.5": ("", "<|endoftext|>"),
    "gpt-oss": ("<|startoftext|>", "<|return|>"),
    "kimi-k2": ("[BOS]", "[EOS]"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.3": ("<|begin_of_text|>", "<|eot_id|>"),
    "mixtral": ("<s>", "</s>"),
    "moeflow-default": ("", "<|endoftext|>"),
    "olmoe": ("<|endoftext|>", "<|endoftext|>"),
    "qwen2": ("", "<|im_end|>"),
    "qwen3": ("", "<|im_end|>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

# An OpenAI-style tools array, as a request carries it: exercises the templates' tool
# sections (gpt-oss renders each schema as TypeScript through recursive macros).
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer", "default": 1},
        }, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "queries": {"type": "array", "items": {"type": "string"}, "description": "Queries to run"},
            "filters": {"type": "array", "items": {"type": "object", "properties": {
                "key": {"type": "string"}, "weight": {"type": "number"}}}},
            "limit": {"type": ["integer", "null"]},
            "mode": {"oneOf": [{"type": "string", "description": "a named mode"}, {"type": "integer"}]},
            "safe": {"type": "boolean", "nullable": True, "default": True},
            "ratio": {"type": "number", "default": 0.25},
        }, "required": ["queries"]}}},
]

CONVERSATIONS = [
    ("system_user", [SYSTEM, {"role": "user", "content": "What is 2+2?"}], True),
    ("system_user_no_generation_prompt", [SYSTEM, {"role": "user", "content": "What is 2+2?"}], False),
    ("user_only", [{"role": "user", "content": "Hello"}], True),
    ("multi_turn", [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "Tell me a joke."},
    ], True),
    ("multi_turn_ends_with_assistant", [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
    ], False),
    ("system_multi_turn", [
        SYSTEM,
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another?"},
    ], True),
    ("unicode", [
        {"role": "system", "content": "Réponds en français — s'il te plaît."},
        {"role": "user", "content": "Grüße aus Köln! 你好，世界 🚀 \"quotes\" and \\backslash\\ and <tags>"},
    ], True),
    ("whitespace_and_newlines", [
        {"role": "user", "content": "  padded question  \n\n"},
        {"role": "assistant", "content": "\nline one\nline two\n"},
        {"role": "user", "content": "\tand a tab"},
    ], True),
    ("thinking_in_history", [
        {"role": "user", "content": "Think first."},
        {"role": "assistant", "content": "<think>\nsome reasoning\n</think>\n\nThe answer."},
        {"role": "user", "content": "Again."},
    ], True),
    ("roles_not_alternating", [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ], True),
    ("enable_thinking_false", [
        {"role": "user", "content": "Quick answer: 3*3?"},
        {"role": "assistant", "content": "<think>\n3 times 3\n</think>\n\n9"},
        {"role": "user", "content": "And 4*4?"},
    ], True, None, {"enable_thinking": False}),
    ("template_kwargs", [SYSTEM, {"role": "user", "content": "Search for it."}], True, None,
     {"reasoning_effort": "high", "builtin_tools": ["browser", "python", "code_interpreter"],
      "model_identity": "You are a test model.", "date_string": "01 Jan 2025"}),
    ("tools_system_user", [SYSTEM, {"role": "user", "content": "Weather in Paris?"}], True, TOOLS),
    ("tools_multi_turn", [
        {"role": "user", "content": "Find news."},
        {"role": "assistant", "content": "Which topic?"},
        {"role": "user", "content": "Science."},
    ], True, TOOLS),
]


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    fixture_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "chat_templates")
    env = make_environment(datetime.datetime.fromtimestamp(NOW_UNIX_SECONDS, tz=datetime.timezone.utc))
    for name, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(fixture_dir, name + ".jinja"), encoding="utf-8") as f:
            template = env.from_string(f.read())
        cases = []
        for case_name, messages, add_generation_prompt, *rest in CONVERSATIONS:
            tools = rest[0] if rest else None
            variables = rest[1] if len(rest) > 1 else {}
            case = {"name": case_name, "messages": messages, "add_generation_prompt": add_generation_prompt}
            if tools is not None:
                case["tools"] = tools
            if variables:
                case["variables"] = variables
            try:
                case["expected"] = template.render(messages=messages, tools=tools, documents=None,
                                                   add_generation_prompt=add_generation_prompt,
                                                   bos_token=bos, eos_token=eos, **variables)
            except jinja2.exceptions.TemplateError as e:
                case["error"] = str(e)
            cases.append(case)
        out = {
            "template": name + ".jinja",
            "generator": "tools/chat_template/render_expected.py (jinja2 %s)" % jinja2.__version__,
            "bos_token": bos,
            "eos_token": eos,
            "now_unix_seconds": NOW_UNIX_SECONDS,
            "cases": cases,
        }
        with open(os.path.join(fixture_dir, name + ".expected.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum(1 for c in cases if "error" in c)
        print("%-16s %d conversations (%d refused by the template)" % (name, len(cases), errors))


if __name__ == "__main__":
    main()
