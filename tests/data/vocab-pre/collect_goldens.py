#!/usr/bin/env python3
# Gathers loom-ref-dump tokenize outputs (OUT_DIR/{bpe,spm,model}.NAME.json) into goldens.json:
# names with identical results share a group; ids are space-separated strings, one per case
# (for all but the first group of a base vocabulary, only where they differ from that group's).
# add_special and parse_special ids are kept only where they differ from the plain ids, the
# detokenized text (hex) only where it differs from the case's text.
import json, os, sys
cases_path, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
bases = {'bpe': ('ggml-vocab-llama-bpe.gguf', 'gpt2'), 'spm': ('ggml-vocab-gemma-4.gguf', 'gpt2'),
         'model': ('ggml-vocab-gemma-4.gguf', 'gemma4'), 'ws': ('ggml-vocab-gemma-4.gguf', 'whitespace')}
entries = []
for kind in ('bpe', 'spm', 'model', 'ws'):
    for n in {'model': ['gemma4'], 'ws': ['whitespace']}.get(kind, names):
        path = os.path.join(out_dir, '%s.%s.json' % (kind, n))
        if not os.path.exists(path):
            continue
        cases = json.load(open(path))['tokenize']
        ids = lambda l: ' '.join(map(str, l))
        r = {'base': bases[kind][0], 'model': bases[kind][1], 'plain': [], 'add_special': {}, 'parse_special': {},
             'detokenized_hex': {}}
        for i, c in enumerate(cases):
            p = ids(c['ids_plain'])
            r['plain'].append(p)
            if ids(c['ids_add_special']) != p:
                r['add_special'][str(i)] = ids(c['ids_add_special'])
            if ids(c['ids_parse_special']) != ids(c['ids_add_special']):
                r['parse_special'][str(i)] = ids(c['ids_parse_special'])
            if c['detokenized_hex'] != c['text_hex']:
                r['detokenized_hex'][str(i)] = c['detokenized_hex']
        entries.append((n, r))
groups = []
for n, r in entries:
    for g in groups:
        if all(g[k] == r[k] for k in r):
            g['names'].append(n)
            break
    else:
        groups.append(dict(names=[n], **r))
# The first group of each base vocabulary keeps every case's plain ids; the others keep only the
# cases where theirs differ ("plain_like": the index of that first group).
first = {}
for i, g in enumerate(groups):
    k = (g['base'], g['model'])
    if k not in first:
        first[k] = i
        continue
    ref = groups[first[k]]['plain']
    g['plain_like'] = first[k]
    g['plain'] = {str(j): p for j, (p, q) in enumerate(zip(g['plain'], ref)) if p != q}
n_cases = len(entries[0][1]['plain'])
doc = {
    'reference': 'llama.cpp (node-llama-cpp\'s bundled source, ~/.cache/loom-llama-cpp) via loom-ref-dump tokenize; '
                 'tests/data/vocab-pre/make_goldens.sh',
    'cases': 'cases.txt', 'n_cases': n_cases,
    'note': 'plain: ids per case, or with plain_like (a group index) only the cases where they differ from that '
            'group\'s; add_special: ids where they differ from plain; parse_special: ids (with add_special) where they '
            'differ from add_special; detokenized_hex: llama_detokenize of the plain ids where it differs from the text',
    'groups': groups,
}
s = json.dumps(doc, ensure_ascii=False, indent=None, separators=(',', ':'))
# one group per line
s = s.replace(',{"names"', ',\n{"names"')
print(s)
