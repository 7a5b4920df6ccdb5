#!/usr/bin/env python3
"""Regenerates tests/jinja/data/unit_cases.json: small templates, one construct or filter each,
rendered by Python Jinja2 (3.1.x) configured as Hugging Face transformers configures it. The C++
test (test_template.cpp) must reproduce every output byte for byte, and fail where Jinja2 fails.

    python3 tests/jinja/gen_unit_cases.py > tests/jinja/data/unit_cases.json
"""
import json
import sys
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2025, 7, 26, 12, 0, 0, tzinfo=timezone.utc)


def make_env():
    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


CTX = {
    "messages": [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "Héllo wörld 🚀"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": [1.5, True, None]}}}]},
    ],
    "tools": None,
    "n": 7, "f": 2.5, "s": "Hello, World", "e": "", "l": [3, 1, 2], "words": ["b", "A", "c", "a"],
    "d": {"z": 1, "a": 2, "m": {"k": "v"}}, "none": None, "t": True,
    "users": [{"name": "ann", "age": 30, "admin": True}, {"name": "bob", "age": 20, "admin": False},
              {"name": "cy", "age": 25}],
}

# (name, template[, context]) ; the context defaults to CTX.
CASES = [
    # text, output, whitespace control
    ("text", "plain text\nline 2\n"),
    ("output_types", "{{ 1 }} {{ 1.0 }} {{ 'a' }} {{ none }} {{ true }} {{ [1, 'x', none] }} {{ {'a': 1} }} {{ (1,) }} {{ undefined_var }}|"),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 1/3 }} {{ 2.0 ** 70 }} {{ -0.0 }}"),
    ("strip_markers", "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e {#- c -#} f"),
    ("trim_lstrip", "x\n    {% if true %}\n    y\n    {% endif %}\nz\n"),
    ("lstrip_disabled", "x\n    {%+ if true %}y{% endif %}\n"),
    ("trim_after_comment", "a\n  {# comment #}\nb"),
    ("var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n"),
    ("inline_blocks", "a {% if true %}b{% endif %} c\n"),
    ("trailing_newline_dropped", "a\n\n"),
    ("raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!"),
    ("string_escapes", "{{ 'a\\nb\\t\\'q\\' \\\\ \\u00e9 \\x41' }}|{{ \"d\\\"q\" }}"),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}"),
    ("delims_in_strings", "{{ '}}' ~ '{%' ~ \"%}\" }}{% set x = '%}' %}{{ x }}"),
    ("dict_literal_braces", "{{ {'a': {'b': 1}} }}"),
    # expressions
    ("arith", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }}"),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 * 3 ~ 4 }} {{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ undefined_var }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ [0] * 2 }}"),
    ("compare", "{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ none == none }} {{ true == 1 }} {{ undefined_var == none }}"),
    ("in_ops", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 3 not in [1] }} {{ 'x' in undefined_var }}"),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or none }} {{ not '' }}"),
    ("ternary", "{{ 'y' if t else 'n' }} {{ 'y' if none else 'n' }} [{{ 'y' if false }}] {{ 1 if false else 2 if true else 3 }}"),
    ("attr_item", "{{ d.z }} {{ d['a'] }} {{ d.m.k }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} [{{ d.missing }}] [{{ l[10] }}] [{{ none.x }}]"),
    ("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[7:] }} {{ s[::-1] }} {{ 'héllo'[1:3] }} {{ l[5:] }} {{ l[-100:1] }} {{ s[-3::-2] }}"),
    ("unicode_index", "{{ 'héllo'[1] }} {{ 'héllo'|length }} {{ '日本語'[-1] }}"),
    ("tuples", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {{ (1, 2) }} {{ () }} {% set c = 3, %}{{ c }}"),
    ("dict_order", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d|tojson }}"),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('z') }} {{ d.get('q') }} {{ d.get('q', 5) }} {{ d.items()|list }}"),
    ("dict_items_attr_is_method", "{% set x = {'items': [1]} %}{{ x['items'] }} {{ x.items() | list }}"),
    ("call_kwargs", "{% macro m(a, b=2, c=3) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, c=9) }} {{ m(b=5, a=0) }}"),
    # statements
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}"),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
    ("for_prev_next", "{% for x in l %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}{% for x in l %}{{ loop.previtem is defined }}{% endfor %}"),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in undefined_var %}x{% else %}undef{% endfor %}"),
    ("for_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}"),
    ("for_unpack", "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }};{% endfor %}{% for k, v in d|items %}{{ k }};{% endfor %}"),
    ("for_dict", "{% for k in d %}{{ k }}{% endfor %}"),
    ("for_scope", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }}|{% endfor %}{{ x }}"),
    ("loop_controls", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}"),
    ("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
    ("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }}"),
    ("namespace_attr_init", "{% set ns = namespace() %}{% set ns.x = 'set' %}{{ ns.x }}"),
    ("set_block", "{% set body %}Hello {{ 'W' }}!{% endset %}[{{ body }}]{% set up | upper %}abc{% endset %}{{ up }}"),
    ("set_top_level_override", "{% set messages = messages[1:] %}{{ messages|length }}"),
    ("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }}"),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}"),
    ("macro_varargs_kwargs", "{% macro v(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, 3, k=4) }}"),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ n }}{% endmacro %}{{ m() }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ n }}{% endcall %}"),
    ("call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}"),
    ("generation_block", "a{% generation %}b{{ 1 }}{% endgeneration %}c"),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    ("comments", "a{# a comment with {{ braces }} #}b{#- stripped -#} c"),
    ("raise_exception", "{{ raise_exception('custom failure') }}"),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d %d %B %b %A %a %H:%M') }} {{ strftime_now('%-d %B %Y') }}"),
    ("range_forms", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}"),
    ("dict_global", "{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }}"),
    # tests
    ("tests_defined", "{{ n is defined }} {{ nope is defined }} {{ nope is undefined }} {{ none is none }} {{ tools is none }} {{ d.zz is defined }}"),
    ("tests_types", "{{ s is string }} {{ n is number }} {{ f is number }} {{ n is integer }} {{ f is float }} {{ t is boolean }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ n is iterable }} {{ l is sequence }} {{ t is number }} {{ t is integer }}"),
    ("tests_values", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} {{ 'a' is equalto 'a' }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 2 is ne 3 }} {{ 2 is in [1, 2] }} {{ t is true }} {{ t is false }} {{ none is sameas none }}"),
    ("tests_negated", "{{ n is not defined }} {{ nope is not defined }} {{ s is not string }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ range is callable }}"),
    ("test_undefined_iterable", "{{ nope is iterable }} {{ nope is mapping }} {{ none is iterable }}"),
    # filters
    ("f_trim", "[{{ '  a b \\n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ nope|trim }}] [{{ '\u3000wide\u00a0'|trim }}]"),
    ("f_case", "{{ 'hello wORLD-x (y)'|title }} {{ 'hello'|upper }} {{ 'HeLLo'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'ünï'|upper }}"),
    ("f_length", "{{ l|length }} {{ s|count }} {{ d|length }} {{ nope|length }} {{ '🚀é'|length }}"),
    ("f_first_last", "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} [{{ []|first }}]"),
    ("f_join", "{{ l|join(', ') }} {{ l|join }} {{ users|join('/', attribute='name') }} {{ [1, none, 'a']|join('-') }}"),
    ("f_replace", "{{ s|replace('l', 'L') }} {{ s|replace('l', 'L', 2) }} {{ 'abc'|replace('', '-') }}"),
    ("f_default", "{{ nope|default('dflt') }} {{ none|default('dflt') }} {{ e|default('dflt') }} {{ e|default('dflt', true) }} {{ nope|d('x') }} {{ n|default(1) }}"),
    ("f_tojson", "{{ messages|tojson }}\n{{ d|tojson(indent=2) }}\n{{ 'é\"\\\\\\n\\t\\u0001'|tojson }}\n{{ [1, 2]|tojson(separators=(',', ':')) }}\n{{ d|tojson(sort_keys=true) }}\n{{ [[], {}]|tojson(indent=1) }} {{ 1.0|tojson }} {{ none|tojson }}"),
    ("f_tojson_ensure_ascii", "{{ 'é🚀'|tojson(ensure_ascii=true) }}"),
    ("f_string", "{{ d|string }} {{ 1.5|string }} {{ none|string }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"']|string }} {{ 'é\\n\\x01'|pprint }}"),
    ("f_int_float", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '0x1F'|int(0, 16) }} {{ ' 12 '|int }} {{ '2.5'|float }} {{ 3|float }} {{ 'y'|float }} {{ true|int }}"),
    ("f_list_items", "{{ 'abc'|list }} {{ d|list }} {{ d|items|list }} {{ nope|items|list }}"),
    ("f_dictsort", "{{ d|dictsort }} {{ {'b': 1, 'A': 2, 'c': 0}|dictsort }} {{ {'b': 1, 'A': 2}|dictsort(true) }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}"),
    ("f_map", "{{ users|map(attribute='name')|list }} {{ words|map('upper')|list }} {{ users|map(attribute='admin', default='?')|list }} {{ [[1, 2], [3]]|map('length')|list }}"),
    ("f_select_reject", "{{ range(6)|select('odd')|list }} {{ range(6)|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ range(6)|select('divisibleby', 3)|list }}"),
    ("f_selectattr", "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|list }} {{ users|selectattr('age', 'gt', 22)|map(attribute='name')|list }} {{ users|selectattr('admin', 'defined')|list|length }} {{ users|selectattr('name', 'equalto', 'bob')|list }}"),
    ("f_unique", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(true)|list }} {{ users|unique(attribute='admin')|map(attribute='name')|list }}"),
    ("f_reverse_sort", "{{ l|reverse|list }} {{ s|reverse }} {{ l|sort }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ l|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join }}"),
    ("f_safe_escape", "{{ '<a href=\"x\">&\\'</a>'|escape }} {{ '<b>'|safe }} {{ '<i>'|e }}"),
    ("f_indent", "[{{ 'a\\nb\\n\\nc'|indent }}] [{{ 'a\\nb'|indent(2, first=true) }}] [{{ 'a\\n\\nb'|indent(2, blank=true) }}] [{{ 'a\\n'|indent(3) }}] [{{ 'x'|indent('> ', true) }}]"),
    ("f_wordcount", "{{ 'Hello, big world! 42 times_x'|wordcount }}"),
    ("f_numbers", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 7|round }}"),
    ("f_min_max_sum", "{{ l|min }} {{ l|max }} {{ words|min }} {{ words|max }} {{ l|sum }} {{ users|sum(attribute='age') }} {{ [0.5, 1]|sum(start=10) }} {{ users|max(attribute='age') }}"),
    ("f_batch", "{{ range(7)|batch(3)|list }} {{ range(5)|batch(2, 'x')|list }}"),
    ("f_format", "{{ '%s is %d years, %.2f%%'|format('ann', 30, 1.5) }} {{ 'x=%r'|format('a') }} {{ '%5s|%-4d|'|format('ab', 7) }} {{ 'v: %s' % n }} {{ '%s-%s' % (1, 2) }}"),
    ("f_center_attr", "[{{ 'ab'|center(6) }}] {{ users[0]|attr('name') }}"),
    ("filter_on_undefined_string_ops", "[{{ nope|upper }}] [{{ nope|string }}] [{{ nope|join(',') }}] {{ nope|list }}"),
    # string methods
    ("m_strip", "[{{ '  a  '.strip() }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ '\\n\\nx\\n'.lstrip('\\n') }}] [{{ 'xyax'.strip('xy') }}]"),
    ("m_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ 'x'.split('y') }}"),
    ("m_starts_ends", "{{ s.startswith('Hell') }} {{ s.endswith('World') }} {{ s.startswith(('x', 'He')) }} {{ s.endswith('x') }}"),
    ("m_case", "{{ s.upper() }} {{ s.lower() }} {{ 'hello world-x'.title() }} {{ 'hELLO'.capitalize() }}"),
    ("m_replace_find_count", "{{ s.replace('o', '0') }} {{ s.replace('l', 'L', 1) }} {{ s.find('World') }} {{ s.find('zz') }} {{ s.count('l') }} {{ 'héllo'.find('l') }} {{ s.rfind('o') }}"),
    ("m_format", "{{ '{} and {}'.format('a', 'b') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=5) }} {{ '{{lit}}'.format() }}"),
    ("m_join", "{{ ', '.join(['a', 'b']) }} {{ '-'.join('xyz') }}"),
    ("m_is", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ''.isdigit() }}"),
    ("m_splitlines", "{{ 'a\\nb\\r\\nc\\n'.splitlines() }}"),
    ("m_list_index_count", "{{ [1, 2, 2].index(2) }} {{ [1, 2, 2].count(2) }}"),
    # values from the context: undefined vs none
    ("undefined_vs_none", "{{ tools is none }} {{ tools is defined }} {{ absent is defined }} {{ messages[2].content is none }} {{ messages[0].tool_calls is defined }}"),
    ("context_key_order", "{{ messages[2].tool_calls[0].function.arguments|tojson }} {% for k in messages[2].tool_calls[0].function.arguments %}{{ k }}{% endfor %}"),
    ("context_unicode", "{{ messages[1].content }} {{ messages[1].content|length }} {{ messages[1].content[-1] }}"),
    # more whitespace and scoping corner cases
    ("ws_raw_strip", "a  {%- raw -%}  {{ x }}  {%- endraw -%}  b"),
    ("ws_raw_lstrip", "{% raw -%}\n{{ x }} \n  {% endraw %} \n {%+ if true %}\r\n{% endif %}|"),
    ("ws_var_strip_start", "  {{- 'x' -}}  \n"),
    ("ws_tabs_lstrip", "a\n\t \t{% if true %}\n\tb\n\t{% endif %}\n"),
    ("ws_midline_block", "a {% if true %}b{% endif %}\n  c {% for i in [1] %}{{ i }}{% endfor %}  \n"),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws_comment_lstrip", "x\n   {# c #}\ny"),
    ("ws_plus_trim", "{% if true +%}\nkept newline{% endif %}"),
    ("ws_block_at_start", "   {% if true %}x{% endif %}"),
    ("ws_multiple_tags_one_line", "  {% if true %}{% if true %}x{% endif %}{% endif %}\ny"),
    ("macro_default_uses_param", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}"),
    ("macro_nested_call", "{% macro inner(x) %}<{{ x }}>{% endmacro %}{% macro outer(xs) %}{% for x in xs %}{{ inner(x) }}{% endfor %}{% endmacro %}{{ outer([1, 2]) }}"),
    ("macro_local_scope", "{% set v = 'outer' %}{% macro m() %}{% set v = 'inner' %}{{ v }}{% endmacro %}{{ m() }} {{ v }}"),
    ("loop_in_loop_filter_len", "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }} {% endfor %}"),
    ("undefined_chain_error", "{{ d.missing.x }}"),
    ("none_attr_defined", "{{ none.x is defined }} {{ messages[2].content.content is defined }}"),
    ("tojson_indent_indent", "{{ d|tojson(indent=2)|indent(4) }}"),
    ("tojson_floats", "{{ [1.0, 0.1, 1e20, 1e-7, 3, -2.5]|tojson }}"),
    ("tojson_indent_str", "{{ {'a': [1]}|tojson(indent='\\t') }}"),
    ("set_default_self", "{% set n2 = n2|default(1) %}{{ n2 }} {% set n = n|default(1) %}{{ n }}"),
    ("str_mul_var", "{{ '  ' * n }}|{{ n * '-' }}"),
    ("big_int_pow", "{{ 2 ** 62 }} {{ 10 ** 18 }}"),
    ("cond_expr_with_filters", "{{ messages[0]['content']|trim if messages else '' }}"),
    ("not_precedence", "{{ not none is none }} {{ not 'a' in 'abc' }} {{ - 2 | abs }}"),
    ("filter_precedence", "{{ 'a' + 'b'|upper }} {{ 1 + 2|string if false else 'x' }}"),
    ("is_test_args_no_parens", "{{ 10 is divisibleby 5 }} {{ 'a' is in 'abc' }} {{ d is sameas d }}"),
    ("items_dict_literal", "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{{ v }}{% endfor %}"),
    ("list_of_dicts_in", "{{ {'a': 1} in [{'a': 1}] }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }}"),
    ("selectattr_equalto_chain", "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|map(attribute='role')|join(',') }}"),
    ("loop_last_nextitem_attr", "{% for m in messages %}{% if not loop.last %}{{ loop.nextitem.role }};{% endif %}{% endfor %}"),
    ("string_iter_unicode", "{% for ch in 'añ🚀' %}[{{ ch }}]{% endfor %}"),
    ("escape_sequences_unicode", "{{ '\\U0001F680 \\101' }}"),
    ("case_scripts", "{{ 'Ελληνικά Привет Łódź ÀÉÎ'|upper }} {{ 'ΕΛΛΗΝΙΚΆ ПРИВЕТ ŁÓDŹ ÀÉÎ'|lower }} {{ 'привет мир'|title }}"),
    ("repr_undefined_in_list", "{{ [nope, 1] }}"),
    ("nul_bytes", "a\x00b{{ 'c\x00d' }}"),
    # errors (Jinja2 raises; so must we)
    ("err_unknown_filter", "{{ 1|nosuchfilter }}"),
    ("err_unknown_test", "{{ 1 is nosuchtest }}"),
    ("err_none_plus_str", "{{ none + 'a' }}"),
    ("err_str_plus_dict", "{{ 'a' + {} }}"),
    ("err_str_plus_int", "{{ 'a' + 1 }}"),
    ("err_in_none", "{{ 'a' in none }}"),
    ("err_iterate_none", "{% for x in none %}{% endfor %}"),
    ("err_attr_of_undefined", "{{ nope.attr }}"),
    ("err_item_of_undefined", "{{ nope[0] }}"),
    ("err_call_undefined", "{{ nope() }}"),
    ("err_undefined_arith", "{{ nope + 1 }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_mod_zero", "{{ 1 % 0 }}"),
    ("err_compare_types", "{{ 1 < 'a' }}"),
    ("err_len_int", "{{ 5|length }}"),
    ("err_tojson_undefined", "{{ nope|tojson }}"),
    ("err_items_on_list", "{{ [1]|items|list }}"),
    ("err_macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    ("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
    ("err_set_attr_non_namespace", "{% set d2 = {} %}{% set d2.x = 1 %}"),
    ("err_slice_step_zero", "{{ l[::0] }}"),
    ("err_raise_in_macro", "{% macro m() %}{{ raise_exception('from macro') }}{% endmacro %}x{{ m() }}"),
    # syntax errors
    ("syn_unclosed_if", "{% if true %}x"),
    ("syn_unclosed_for", "{% for x in l %}x"),
    ("syn_unclosed_var", "{{ x "),
    ("syn_unclosed_comment", "{# x "),
    ("syn_unclosed_string", "{{ 'abc }}"),
    ("syn_bad_expr", "{{ 1 + }}"),
    ("syn_stray_endif", "{% endif %}"),
    ("syn_stray_else", "{% else %}"),
    ("syn_unknown_tag", "{% frobnicate %}"),
    ("syn_mismatched_end", "{% if x %}{% endfor %}"),
    ("syn_unbalanced_paren", "{{ (1 + 2 }}"),
    ("syn_empty_output", "{{ }}"),
    ("syn_break_outside_loop", "{% break %}"),
    ("syn_bad_char", "{{ 1 ; 2 }}"),
]


def main():
    env = make_env()
    out = []
    for case in CASES:
        name, src = case[0], case[1]
        ctx = case[2] if len(case) > 2 else CTX
        entry = {"name": name, "template": src}
        if len(case) > 2:
            entry["context"] = ctx
        try:
            entry["output"] = env.from_string(src).render(**ctx)
        except Exception as e:  # noqa: BLE001 - any Jinja2 failure is an expected error
            entry["expect_error"] = True
            entry["error"] = f"{type(e).__name__}: {e}"
        out.append(entry)
    json.dump({"generator": f"Python Jinja2 {jinja2.__version__}, transformers settings; strftime_now at {NOW.isoformat()}",
               "default_context": CTX, "cases": out}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
