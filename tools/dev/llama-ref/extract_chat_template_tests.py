#!/usr/bin/env python3
"""Reads llama.cpp's tests/test-chat-template.cpp and prints its automated test cases as JSON:
[{"case": name, "template_str": ..., "expected_output": ..., "extra_conversation": [[role, content], ...]}]
plus the base conversation. The strings are the C++ literals decoded (adjacent literals joined,
U8C(...) unwrapped, escapes resolved). Used by gen_chat_builtins.sh; reads facts, copies no code.

    extract_chat_template_tests.py LLAMA_SRC/tests/test-chat-template.cpp > cases.json
"""
import json
import re
import sys

ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0", "v": "\v", "f": "\f"}


def c_string(src, i):
    """Decodes the C string literal starting at src[i] == '"'; returns (text, index after it)."""
    assert src[i] == '"', src[i:i + 40]
    out = []
    i += 1
    while src[i] != '"':
        if src[i] == "\\":
            out.append(ESC[src[i + 1]])
            i += 2
        else:
            out.append(src[i])
            i += 1
    return "".join(out), i + 1


def skip_ws(src, i):
    while src[i] in " \t\r\n":
        i += 1
    return i


def literal(src, i):
    """A string value: "..." "..." (joined) or U8C("..."); returns (text, index after it)."""
    i = skip_ws(src, i)
    wrapped = src.startswith("U8C(", i)
    if wrapped:
        i += 4
    parts = []
    while True:
        i = skip_ws(src, i)
        if i < len(src) and src[i] == '"':
            s, i = c_string(src, i)
            parts.append(s)
        else:
            break
    if wrapped:
        i = skip_ws(src, i)
        assert src[i] == ")"
        i += 1
    return "".join(parts), i


def main():
    src = open(sys.argv[1], encoding="utf-8").read()
    start = src.index("std::vector<TestCase> test_cases")
    end = src.index("std::vector<char> formatted_chat", start)
    body = src[start:end]
    conv_start = src.index("std::vector<llama_chat_message> conversation")
    conv_block = src[conv_start:src.index("};", conv_start)]
    conversation = [list(p) for p in re.findall(r'\{"(\w+)",\s*"((?:[^"\\]|\\.)*)"\}', conv_block)]
    conversation = [[r, c.encode().decode("unicode_escape") if "\\" in c else c] for r, c in conversation]
    cases = []
    cur = None
    for m in re.finditer(r"/\* \.(\w+)=? \*/", body):
        field = m.group(1)
        i = m.end()
        if field == "name":
            cur = {}
            cases.append(cur)
        if field in ("name", "template_str", "expected_output", "expected_output_jinja", "bos_token", "eos_token"):
            cur[field], _ = literal(body, i)
        elif field == "extra_conversation":
            j = skip_ws(body, i)
            depth, k = 0, j
            while True:
                if body[k] == "{":
                    depth += 1
                elif body[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif body[k] == '"':
                    _, k = c_string(body, k)
                    continue
                k += 1
            group = body[j:k + 1]
            strings = []
            p = 0
            while p < len(group):
                if group[p] == '"':
                    s, p = c_string(group, p)
                    strings.append(s)
                else:
                    p += 1
            cur["extra_conversation"] = [strings[n:n + 2] for n in range(0, len(strings), 2)]
    out = {"conversation": conversation,
           "cases": [{"case": c["name"], "template_str": c["template_str"], "expected_output": c["expected_output"],
                      "extra_conversation": c.get("extra_conversation", [])} for c in cases]}
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
