#!/usr/bin/env python3
# (No F5..F7 lead bytes: llama.cpp decodes those to a code point above U+10FFFF and then throws;
# loom makes them U+FFFD.)
# Writes cases.txt: shared/golden/vocab/tokenize-cases.txt's 124 cases, then the extra cases below
# (cases separated by a line "__case__", as loom-ref-dump tokenize reads them; no final newline).
import sys
shared = open(sys.argv[1], 'rb').read()
if shared.endswith(b'\n'):
    shared = shared[:-1]
extra = [
    # CJK, kana, Hangul, Han extension B, CJK punctuation, fullwidth forms
    '日本語の文章と中文混合한국어텍스트です。',
    '「こんにちは」、世界！　カタカナ　ひらがな',
    '𠀀𠀁𪚥 漢字テスト 中文English混合text\'s 龍',
    'ＡＢＣ　１２３　ｆｕｌｌｗｉｄｔｈ！？',
    # Thai, Lao, Khmer, Arabic with Arabic-Indic digits, Hebrew, Devanagari, Bengali
    'สวัสดีครับ ภาษาไทยง่ายนิดเดียว ๑๒๓',
    'ສະບາຍດີ ជំរាបសួរ',
    'مرحبا بالعالم ١٢٣٤٥ كيف حالك؟',
    'שלום עולם, מה שלומך?',
    'नमस्ते दुनिया १२३ क्षत्रिय',
    'আমি বাংলায় গান গাই',
    # emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors
    '👨‍👩‍👧‍👦 family 👍🏽 ok 🏳️‍🌈 🇯🇵🇫🇷 1️⃣ #️⃣ ❤️‍🔥',
    '🧑🏻‍💻🧑🏿‍🚀✨🎉🎉🎉',
    # digit runs of 1..20, alone and inside words
    ' '.join('1234567890123456789012'[:n] for n in range(1, 21)),
    'a1b12c123d1234e12345f123456g1234567h12345678i123456789j12345678901234567890k',
    'x12345678901234567890y 3.14159265358979 1,000,000 2024-12-04 0x1F 1e10',
    '١٢٣٤٥٦٧ ٣.١٤ Ⅻ ½ ² ³ ① ⑳ 𝟙𝟚𝟛',
    # mixed whitespace, newlines, tabs
    ' \t \n\r\n  \u00a0\u3000x  \u2003y\n\n\n z\t\t\v\f end',
    '\n',
    '\n\n',
    'a\n\nb\n\n\nc\r\n\r\nd\r\re',
    '\t\tindented\n    four\n        eight\n\t mixed \t',
    'a' + ' ' * 600 + 'b' + ' ' * 40 + '\n' + ' ' * 9 + 'c',
    # contractions
    "it's IT'S It'S we'll WE'LL We'Ll they're THEY'RE I'd I'D you've YOU'VE I'm I'M don't DON'T",
    "'s 'S 'll 'LL 'Ll 're 've 'm 'd 't 'x ''s rock'n'roll o'clock y'all",
    "l'homme c'est aujourd'hui dell'anno Türkiye'nin İstanbul'da",
    # code
    'def f(x):\n    return x**2  # comment\n\nclass A(B):\n\tpass\n',
    'if (a && b || !c) { arr[i] = ptr->next; } else { x += 0x1F; }\n// done /* block */',
    '<div class="x">&amp;&lt;tag&gt;</div> SELECT * FROM t WHERE id=42; $var @user ~/path/to/file.txt',
    'fn main() -> Result<(), Box<dyn Error>> { println!("{:?}", v.iter().map(|x| x * 2).collect::<Vec<_>>()); }',
    # letters: accents, combining marks, case transitions, Greek, Cyrillic
    'ÀÉÎõü µ ΣΩαβγ Ελληνικά café cafe\u0301 n\u0303 Z\u0351\u0352\u0353algo',
    'camelCaseWord XMLHttpRequest iPhone HTMLParser ABCdef abcDEF ǅemal ǈ',
    'Привет, мир! ПРИВЕТ Ёлка ёлка',
    # special-token texts
    '<|begin_of_text|>hi<|end_of_text|> <s>x</s> <bos>y<eos> <|endoftext|>',
    '<sentinel:12> IMGIMGABCZ <unk> [CLS] [SEP]',
    # unassigned, private use, noncharacters, format characters, SentencePiece's space
    'a \u0378 b !\u0378! \u0378\u0378 x\u0378y \U000E0080 \ue000\uf8ff \uffff \U0010FFFF',
    'zero\u200bwidth\u200cjoin\u200d soft\u00adhyphen \u2060wj \ufeffbom \u180e',
    'a\u2581b \u2581\u2581 ▁lead',
    # punctuation runs
    '...!!!???,,,;;;::: ——–– «»„“”‘’ …… ¿¡ §¶ †‡ •◦ ©®™',
    '$100 +5 <=> ^_^ ~~ || `tick` 50% a&b a|b a\\b',
]
invalid = [
    b'\xff\xfe abc \xc3\x28 \xe2\x82 end',
    b'\xed\xa0\x80 surrogate \xed\xbf\xbf',
    b'\xc0\xaf overlong \xe0\x80\xaf \xf8\x88\x80\x80\x80 \xfc\x84\x80\x80\x80\x80',
    b'trunc \xf0\x9f\x98',
    b'\x80\x81\x82 cont \xbf',
]
parts = [shared] + [e.encode('utf-8') for e in extra] + invalid + ['last case: Hello World 123'.encode()]
open('cases.txt', 'wb').write(b'\n__case__\n'.join(parts))
print(len(parts) - 1 + shared.count(b'\n__case__\n') + 1, 'cases')
