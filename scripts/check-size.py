#!/usr/bin/env python3
"""Lists every C++ function over 80 lines and every C++ source file over 800 lines in src/,
tools/, bindings/node/src and bench/ (tests are not scanned), and fails on any that the size
allowlist in CONTRIBUTING.md does not name.

How functions are found: comments, string and character literals and preprocessor lines are
blanked (newlines kept), then braces are matched. A `{` at namespace or class scope opens a
function body when the text before it (back to the previous `;`, `{` or `}` of that scope) has a
parameter list; lambdas written at namespace scope (`auto f = [](...) {`, or inside a table's
initializer) count as functions of their own. Anything inside a function body — lambdas, local
classes — counts towards that function. A function's length runs from the first line of its
declaration to its closing brace.

  scripts/check-size.py               report and check (exit 1 on anything not allowed)
  scripts/check-size.py --all         also list what the allowlist allows
  scripts/check-size.py --self-test   check the scanner on small snippets
"""
import argparse
import os
import re
import sys

FUNCTION_LIMIT = 80
FILE_LIMIT = 800
ROOTS = ["src", "tools", "bindings/node/src", "bench"]
EXTENSIONS = (".cpp", ".cc", ".c", ".h", ".hpp", ".inl")


def blank_code(text):
    """Returns text with comments, literals and preprocessor lines replaced by spaces (newlines
    kept, so line numbers hold). String literals keep their quotes: `"..."` becomes `""`."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            i += 1
            at_line_start = True
            continue
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^ ()\\\t\n]{0,16})\(', text[i:i + 24])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = text.find(")" + raw.group(1) + '"', i + raw.end())
            end = n if close < 0 else close + len(raw.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
            continue
        if c == "'" and i > 0 and text[i - 1].isdigit():
            out.append(" ")  # digit separator: 1'000'000
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def strip_angle_args(s):
    """`template <class T, int N> struct X` -> `template  struct X` (outer template heads only)."""
    return re.sub(r"\btemplate\s*<[^{};]*?>\s*(?=(class|struct|union|typename|[A-Za-z_]))", " ", s)


def top_level(s):
    """s with every parenthesised, bracketed or angle-free nested text removed (depth > 0)."""
    depth, out = 0, []
    for ch in s:
        if ch in "([":
            depth += 1
            out.append(ch)
        elif ch in ")]":
            depth = max(0, depth - 1)
            out.append(ch)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def function_name(header):
    """The (qualified) name before the parameter list of a function header."""
    h = " ".join(header.split())
    depth = 0
    for k, ch in enumerate(h):
        if ch == "(":
            if depth == 0:
                m = re.search(r"(operator\s*(?:\(\)|[^\s\w(]+|\s+\w[\w:<>*& ]*)|~?[A-Za-z_][\w:<>~]*)\s*$", h[:k])
                if m:
                    return m.group(1).strip()
            depth += 1
        elif ch == ")":
            depth -= 1
    return h[:60]


def classify(header):
    """What a `{` at namespace / class scope opens, from the text before it."""
    h = " ".join(header.split())
    if not h:
        return "block"
    if re.search(r"\bnamespace\b", h) or re.match(r'^extern\s*"\s*"$', h):
        return "scope"
    bare = strip_angle_args(h).strip()
    if re.match(r"^(typedef\s+)?(enum|union)\b", bare):
        return "enum"
    if re.match(r"^((typedef|alignas\s*\([^)]*\)|\[\[[^\]]*\]\])\s+)*(class|struct)\b", bare) and \
            "=" not in top_level(bare):
        return "scope"
    flat = top_level(h)
    eq = re.search(r"(?<![=!<>+\-*/%&|^])=(?!=)", flat)
    if eq and not re.search(r"\boperator\s*$", flat[:eq.start()]):
        after = flat[eq.end():]
        return "function" if re.match(r"^\s*\[\]", after) and "(" in after else "init"
    if re.match(r"^\s*\[\]", flat) and "(" in flat:
        return "function"  # a lambda in an initializer list
    if "(" in flat and ")" in flat:
        return "function"
    return "init"


class Function:
    def __init__(self, name, path, first, last):
        self.name, self.path, self.first, self.last = name, path, first, last

    @property
    def lines(self):
        return self.last - self.first + 1


def scan_functions(code, path="<text>"):
    """Every function body at namespace / class scope (and lambdas in namespace-scope
    initializers) in blanked code, as Function records."""
    found = []
    line_of = []
    line = 1
    for ch in code:
        line_of.append(line)
        if ch == "\n":
            line += 1

    def matching(i):
        depth = 0
        for j in range(i, len(code)):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    return j
        return len(code) - 1

    def first_line(start, end):
        k = start
        while k < end and code[k].isspace():
            k += 1
        return line_of[min(k, len(code) - 1)]

    def scan(start, end, in_initializer):
        """Scans code[start:end] at one scope; separators end a declaration header."""
        seps = ";{}," if in_initializer else ";{}"
        head = start
        i = start
        while i < end:
            ch = code[i]
            if ch == "{":
                header = code[head:i]
                if header.count("(") > header.count(")"):
                    i = matching(i) + 1  # a brace inside a parameter list (`Opts o = {}`): part of the header
                    continue
                kind = classify(header)
                # A constructor's member initializer `x_{a}` or a brace init after a `:`.
                flat = top_level(" ".join(header.split()))
                ctor_init = re.search(r"\)\s*(noexcept\s*)?:(?!:)", flat) and re.search(r"[\w>]\s*$", flat)
                close = matching(i)
                if kind == "function" and ctor_init:
                    i = close + 1
                    continue
                if kind == "function":
                    found.append(Function(function_name(header), path, first_line(head, i), line_of[close]))
                elif kind == "scope":
                    scan(i + 1, close, False)
                elif kind == "init" or (kind == "block" and in_initializer):
                    scan(i + 1, close, True)
                i = close + 1
                head = i
                continue
            if ch in seps or (ch == ":" and not in_initializer and re.search(
                    r"\b(public|private|protected)\s*$", code[head:i])):
                head = i + 1
            i += 1

    scan(0, len(code), False)
    return found


def source_files(repo):
    for root in ROOTS:
        base = os.path.join(repo, root)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in ("node_modules", "build") and not d.startswith("."))
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, f), repo)


def read_allowlist(path):
    """Rows of the table between the size-allowlist markers: (path, function or '', reason)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- size-allowlist:begin -->(.*?)<!-- size-allowlist:end -->", text, re.S)
    if not m:
        sys.exit(f"check-size: no size-allowlist markers in {path}")
    for row in m.group(1).splitlines():
        cells = [c.strip().strip("`") for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= set("-: ") or cells[0].lower() == "file":
            continue
        if not cells[2]:
            sys.exit(f"check-size: allowlist row without a reason: {row.strip()}")
        fn = "" if cells[1] in ("", "(file)", "—", "-") else cells[1]
        rows.append((cells[0], fn, cells[2]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--all", action="store_true", help="also list what the allowlist allows")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    repo = os.path.abspath(args.repo)
    allow = read_allowlist(os.path.join(repo, "CONTRIBUTING.md"))
    used = set()
    bad, allowed = [], []
    for rel in source_files(repo):
        with open(os.path.join(repo, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        n_lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        items = []
        if n_lines > FILE_LIMIT:
            items.append(("", f"{rel}: file of {n_lines} lines (limit {FILE_LIMIT})"))
        for fn in scan_functions(blank_code(text), rel):
            if fn.lines > FUNCTION_LIMIT:
                items.append((fn.name, f"{rel}:{fn.first}: {fn.name}: {fn.lines} lines (limit {FUNCTION_LIMIT})"))
        for name, msg in items:
            hit = [k for k, (p, f, _) in enumerate(allow) if p == rel and f == name]
            used.update(hit)
            (allowed if hit else bad).append(msg)
    if args.all and allowed:
        print(f"allowed by CONTRIBUTING.md ({len(allowed)}):")
        for msg in allowed:
            print("  " + msg)
    for k, (p, f, _) in enumerate(allow):
        if k not in used:
            print(f"check-size: note: allowlist entry no longer needed: {p} {f}".rstrip())
    if bad:
        print(f"over the size limits and not in CONTRIBUTING.md's allowlist ({len(bad)}):")
        for msg in bad:
            print("  " + msg)
        print("Split them into named functions / files, or add a row with the reason to the allowlist.")
        return 1
    print(f"check-size: ok ({len(allowed)} allowed by the allowlist)")
    return 0


def self_test():
    cases = [
        # (source, [(name, first, last)])
        ("namespace a {\nint f(int x) {\n  if (x) { return 1; }\n  return 0;\n}\n}\n", [("f", 2, 5)]),
        ("struct S {\n  int g() const { return 1; }\n  int v{3};\n};\n", [("g", 2, 2)]),
        ("S::S(int a)\n    : x_{a}, y_(a) {\n  run();\n}\n", [("S::S", 1, 4)]),
        ("// void h() {\nconst char* s = \"}{\";\nvoid k() {\n  char c = '{';\n}\n", [("k", 3, 5)]),
        ("static const std::map<int, F> kTable = {\n  {1, [](int x) {\n      return x;\n    }},\n"
         "  {2, [](int) { return 0; }},\n};\n", [("[]", 2, 4), ("[]", 5, 5)]),
        ("auto lam = [](int x) {\n  return x;\n};\nenum class E { a, b };\n", [("[]", 1, 3)]),
        ("template <class T>\nstruct W : Base<T> {\n  T get() { return t; }\n};\n", [("get", 3, 3)]),
        ("bool operator==(const A& a, const A& b) {\n  return a.x == b.x;\n}\n", [("operator==", 1, 3)]),
        ("#define M(x) { x }\nvoid r()\n{\n  auto s = R\"x(}{)x\";\n}\n", [("r", 2, 5)]),
        ("extern \"C\" {\nint c_api(int a,\n          int b) {\n  return 1'000;\n}\n}\n", [("c_api", 2, 5)]),
        ("class C {\n public:\n  C() = default;\n  void m();\n private:\n  int n_ = 0;\n};\n"
         "void C::m() {\n}\n", [("C::m", 8, 9)]),
        ("struct T {\n  int run(Opts o = {}, int k = {}) {\n    return k;\n  }\n};\n", [("run", 2, 4)]),
    ]
    failures = 0
    for src, want in cases:
        got = [(f.name if not f.name.startswith("[") else "[]", f.first, f.last)
               for f in scan_functions(blank_code(src))]
        got = [(("[]" if "[" in g[0] else g[0]), g[1], g[2]) for g in got]
        if got != want:
            failures += 1
            print(f"self-test failed:\n{src}\n  want {want}\n  got  {got}")
    print("check-size self-test: " + ("ok" if not failures else f"{failures} failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
