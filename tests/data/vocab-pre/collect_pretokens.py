#!/usr/bin/env python3
# Groups loom-ref-dump split's output ({"NAME": [lengths per case]}) into pretokens.json: presets
# whose regex lists split every case the same way share a group.
import json, sys
split = json.load(open(sys.argv[1]))
groups = []
for name, lengths in split.items():
    for g in groups:
        if g['lengths'] == lengths:
            g['names'].append(name)
            break
    else:
        groups.append({'names': [name], 'lengths': lengths})
doc = {
    'reference': 'llama.cpp\'s unicode_regex_split (raw UTF-8) via loom-ref-dump split, with the regex lists of '
                 'tools/dev/make_vocab_pre --regexes; tests/data/vocab-pre/make_goldens.sh',
    'cases': 'cases.txt',
    'note': 'per group, per case: the byte lengths of the pre-tokens, space-separated',
    'groups': groups,
}
s = json.dumps(doc, ensure_ascii=False, separators=(',', ':'))
print(s.replace(',{"names"', ',\n{"names"'))
