#!/usr/bin/python3
"""Renders chat templates from llama.cpp's models/templates/ over the shared chat-template cases
and loom's own, with Python Jinja2 configured as Hugging Face transformers configures it, and
writes the expected outputs that tests/jinja/test_template_goldens.cpp compares loom's renderer
with.

    /usr/bin/python3 tools/dev/chat-golden.py [LLAMA_CPP_SRC]

LLAMA_CPP_SRC defaults to $LOOM_LLAMA_CPP_SRC, else ~/.cache/loom-llama-cpp/src
(scripts/fetch-llama-cpp-src.sh). Needs Jinja2 (Debian: apt-get install python3-jinja2).
Writes tests/data/chat-templates/expected.json; reads tests/data/chat-templates/cases.json and
../shared/golden/chat-templates/cases.json ($LOOM_SHARED overrides ../shared).

transformers' setup (src/transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks, the loopcontrols extension and {% generation %}, a tojson that
keeps key order and non-ASCII (json.dumps with ensure_ascii=False, sort_keys=False, and indent /
separators passed through), raise_exception and strftime_now. strftime_now here is fixed at
2025-07-26T12:00:00Z (the shared cases' now_utc).
"""
import datetime
import hashlib
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = [
    # file, bos_token, eos_token (as the models' tokenizer_config.json give them; "" for null)
    ("Qwen3.5-4B.jinja", "", "<|im_end|>"),
    ("LFM2.5-Instruct.jinja", "<|startoftext|>", "<|im_end|>"),
    ("LFM2.5-8B-A1B.jinja", "<|startoftext|>", "<|im_end|>"),
    ("HuggingFaceTB-SmolLM3-3B.jinja", "", "<|im_end|>"),
    ("ibm-granite-granite-4.0.jinja", "<|end_of_text|>", "<|end_of_text|>"),
    ("ibm-granite-granite-4.1.jinja", "<|end_of_text|>", "<|end_of_text|>"),
    ("google-gemma-4-31B-it.jinja", "<bos>", "<eos>"),
    ("google-gemma-4-31B-it-interleaved.jinja", "<bos>", "<eos>"),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>"),
]
NOW = datetime.datetime(2025, 7, 26, 12, 0, 0, tzinfo=datetime.timezone.utc)


class GenerationTracker(Extension):
    """transformers' AssistantTracker without the tracking: {% generation %}...{% endgeneration %}
    renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LOOM_LLAMA_CPP_SRC")
           or os.path.expanduser("~/.cache/loom-llama-cpp/src"))
    shared = os.environ.get("LOOM_SHARED") or os.path.join(os.path.dirname(repo), "shared")
    case_files = [
        ("shared", os.path.join(shared, "golden/chat-templates/cases.json")),
        ("loom", os.path.join(repo, "tests/data/chat-templates/cases.json")),
    ]
    cases = []  # (file tag, name, context)
    for tag, path in case_files:
        with open(path, encoding="utf-8") as f:
            for name, c in json.load(f)["cases"].items():
                cases.append((tag, name, c["context"]))
    env = make_env()
    out = {
        "format_version": 1,
        "generator": f"tools/dev/chat-golden.py, Python Jinja2 {jinja2.__version__} configured as transformers does",
        "now_utc": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": "llama.cpp models/templates/ (scripts/fetch-llama-cpp-src.sh)",
        "case_files": {tag: os.path.relpath(p, repo) if tag == "loom" else "../shared/golden/chat-templates/cases.json"
                       for tag, p in case_files},
        "templates": {},
        "expected": [],
    }
    for file, bos, eos in TEMPLATES:
        with open(os.path.join(src, "models/templates", file), "rb") as f:
            raw = f.read()
        out["templates"][file] = {"sha256": hashlib.sha256(raw).hexdigest(), "bos_token": bos, "eos_token": eos}
        tmpl = env.from_string(raw.decode("utf-8"))
        for tag, name, ctx in cases:
            ctx = dict(ctx)
            ctx["bos_token"] = bos
            ctx["eos_token"] = eos
            e = {"template": file, "cases": tag, "case": name}
            try:
                e["output"] = tmpl.render(**ctx)
            except Exception as ex:  # noqa: BLE001 - any failure is an expected error
                e["expect_error"] = True
                e["error"] = f"{type(ex).__name__}: {ex}"
            out["expected"].append(e)
    path = os.path.join(repo, "tests/data/chat-templates/expected.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    n_err = sum(1 for e in out["expected"] if e.get("expect_error"))
    print(f"{path}: {len(out['expected'])} renderings ({n_err} expected errors)")


if __name__ == "__main__":
    main()
