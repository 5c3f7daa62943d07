#!/usr/bin/env python3
"""Writes specula's own chat conversations for the template differential test
(tests/fixtures/templates/contexts/*.json): tool calls and results, reasoning, system
prompts, multi-turn, content parts, unicode, documents, generation prompt both ways,
enable_thinking off. Each file is a JSON object of template variables, as
apply_chat_template receives them.

usage: make_contexts.py OUT_DIR
"""
import json
import os
import sys

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}
CALC = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}, "precision": {"type": "number"}},
            "required": ["expression"],
        },
    },
}
NOARGS = {"type": "function", "function": {"name": "now", "description": "Current time.",
                                           "parameters": {"type": "object", "properties": {}}}}


def call(i, name, args, as_string):
    return {"id": f"call_{i:03d}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}


def tool_conversation(as_string):
    return [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "What's the weather in Paris and what is 2**10?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call(1, "get_weather", {"city": "Paris", "unit": "celsius", "days": 2}, as_string),
                        call(2, "calculate", {"expression": "2**10", "precision": 0.5}, as_string)]},
        {"role": "tool", "tool_call_id": "call_001", "name": "get_weather",
         "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
        {"role": "tool", "tool_call_id": "call_002", "name": "calculate", "content": "1024"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris; 2**10 = 1024."},
        {"role": "user", "content": "Thanks! And tomorrow?"},
    ]


def contexts():
    bos = {"bos_token": "<s>", "eos_token": "</s>"}
    multi = [
        {"role": "system", "content": "Be concise."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one, larger."},
    ]
    yield "multi_turn", {"messages": multi, "add_generation_prompt": True, **bos}
    yield "multi_turn_no_gen", {"messages": multi[:5], "add_generation_prompt": False, **bos}
    yield "no_system", {"messages": multi[1:], "add_generation_prompt": True, **bos}
    yield "tools_string_args", {"messages": tool_conversation(True), "tools": [WEATHER, CALC],
                                "add_generation_prompt": True, **bos}
    yield "tools_object_args", {"messages": tool_conversation(False), "tools": [WEATHER, CALC, NOARGS],
                                "add_generation_prompt": True, **bos}
    yield "tools_offered_unused", {"messages": [{"role": "user", "content": "Tell me a joke."}],
                                   "tools": [WEATHER], "add_generation_prompt": True, **bos}
    reasoning = [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.",
         "content": "<think>\n91 = 7 * 13.\n</think>\n\nNo: 91 = 7 × 13."},
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "thinking": "Check 2,3,5,7: none divide 97.", "content": "Yes."},
        {"role": "user", "content": "And 1?"},
    ]
    yield "reasoning", {"messages": reasoning, "add_generation_prompt": True, **bos}
    yield "reasoning_thinking_off", {"messages": reasoning, "add_generation_prompt": True,
                                     "enable_thinking": False, **bos}
    yield "reasoning_effort_high", {"messages": reasoning, "add_generation_prompt": True,
                                    "reasoning_effort": "high", **bos}
    parts = [
        {"role": "system", "content": [{"type": "text", "text": "You describe things."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."},
                                     {"type": "text", "text": "Part two."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Both parts received."}]},
        {"role": "user", "content": [{"type": "text", "text": "Good."}]},
    ]
    yield "content_parts", {"messages": parts, "add_generation_prompt": True, **bos}
    uni = [
        {"role": "system", "content": "  Réponds en français, 日本語も可。  "},
        {"role": "user", "content": "Emoji: 👩‍👩‍👧‍👦 🇫🇷 e\u0301 \u202eRTL\u202c tab\tnewline\nquote\" back\\slash"},
        {"role": "assistant", "content": "Ça va 😀 — «ok» <b>&amp;</b> {{ not a tag }} {% raw %}"},
        {"role": "user", "content": "NUL here:\u0000 and \u2028 line sep"},
    ]
    yield "unicode", {"messages": uni, "add_generation_prompt": True, **bos}
    yield "single_user_no_gen", {"messages": [{"role": "user", "content": "Hello"}],
                                 "add_generation_prompt": False, **bos}
    yield "assistant_prefill", {"messages": [{"role": "user", "content": "Count to 3."},
                                             {"role": "assistant", "content": "1, 2,"}],
                                "add_generation_prompt": False, **bos}
    yield "empty_contents", {"messages": [{"role": "system", "content": ""},
                                          {"role": "user", "content": ""},
                                          {"role": "assistant", "content": ""},
                                          {"role": "user", "content": "?"}],
                             "add_generation_prompt": True, **bos}
    docs = [{"title": "Paris", "text": "Paris is the capital of France."},
            {"title": "Berlin", "text": "Berlin is the capital of Germany.", "id": 7}]
    yield "documents", {"messages": [{"role": "user", "content": "Capitals?"}], "documents": docs,
                        "add_generation_prompt": True, **bos}
    yield "llama_tools_in_user", {"messages": tool_conversation(False), "tools": [WEATHER],
                                  "tools_in_user_message": True, "date_string": "26 Nov 2026",
                                  "add_generation_prompt": True, **bos}
    yield "developer_role", {"messages": [{"role": "developer", "content": "Answer in JSON."},
                                          {"role": "user", "content": "List two colors."}],
                             "add_generation_prompt": True, **bos}
    numbers = {"ints": [0, -1, 2**40], "floats": [1.0, -0.5, 1e-07, 1e+22, 3.14159],
               "flags": [True, False, None], "nested": {"a": {"b": [1, {"c": "d"}]}}, "empty": {}}
    yield "tool_args_values", {"messages": [
        {"role": "user", "content": "Store these."},
        {"role": "assistant", "content": None, "tool_calls": [call(9, "store", numbers, False)]},
        {"role": "tool", "tool_call_id": "call_009", "name": "store", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "store", "description": "Store values.",
                                                    "parameters": {"type": "object", "properties": {}}}}],
        "add_generation_prompt": True, **bos}
    long = [{"role": "system", "content": "You are a patient tutor."}]
    for i in range(19):
        long.append({"role": "user" if i % 2 == 0 else "assistant",
                     "content": f"Turn {i}: " + "lorem ipsum dolor sit amet " * (1 + i % 4)})
    yield "twenty_messages", {"messages": long, "add_generation_prompt": True, **bos}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, ctx in contexts():
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(ctx, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
