// Byte-level BPE as llama.cpp's llm_tokenizer_bpe does it.
//
// Pre-tokenization: the fragment is decoded to code points (leniently, see unicode.h) and split by
// each step of the preset in turn; every step splits each piece the previous ones produced, and
// both its matches and the text between them become pieces (a step never sees past its piece).
// The presets hold llama.cpp's own regex strings (llama-vocab.cpp), and each string is run the
// way llama.cpp runs it:
//   - four strings (GPT-2's, Llama-3's, Qwen2's, Qwen3.5's) go to hand-written matchers there,
//     which do what the regexes say (\p{..} is the major general category, \s the White_Space
//     property; an unassigned code point has a flag there, so it is part of a punctuation/symbol
//     run like any other non-letter, non-number, non-space); here they are those regexes;
//   - "\p{Han}+" (Kimi-K2), "\p{AFMoE_digits}" and Tiny Aya's digit-group regex (both the AFMoE
//     digit grouper there), and "[^\n]+|[\n]+" are hand-written there and here
//     (bpe_split.cpp);
//   - every other string goes to std::regex there, over a text in which every non-ASCII
//     whitespace is U+000B, and, where the regex names a category, every other non-ASCII code
//     point stands for its category (so \p{Lu}, \p{Ll}, ... all mean \p{L}), and \d is ASCII.
//     Here PCRE2 (UTF + UCP) runs a translation: \s spelled out as White_Space, \p{Lx} as
//     \p{L}, \d as [0-9], over the text with non-ASCII whitespace replaced by U+000B as there.
//
// Merging: each piece (GPT-2 byte-encoded, or raw UTF-8 for the SentencePiece-style presets of
// Gemma 4 and Sarvam) starts as one symbol per character; the adjacent pair with the lowest merge
// rank (ties: leftmost) is merged until no pair has a rank. A final symbol that is not a token is
// emitted byte by byte: through single-character tokens (byte-encoded) or <0xXX> tokens (raw).
#include "vocab/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "vocab/bpe_split.h"
#include "vocab/unicode.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::vocab::detail {

namespace {

// --- GPT-2 byte mapping ---

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  std::array<std::string, 256> encoded;  // UTF-8 of to_cp
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? uint32_t(b) : next++;
      to_byte[to_cp[b]] = uint8_t(b);
      unicode::append_utf8(encoded[b], to_cp[b]);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// --- Presets ---

// llama.cpp's regex lists (llm_tokenizer_bpe's constructor), verbatim.
// clang-format off
const std::vector<std::string_view> kLlama3 = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kJais2 = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
};
const std::vector<std::string_view> kDeepseekLlm = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
const std::vector<std::string_view> kDeepseek3 = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kSpark25 = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
    "\\p{N}",
};
const std::vector<std::string_view> kYoutu = {
    "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kDeepseekCoder = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}",
};
const std::vector<std::string_view> kFalcon = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};
const std::vector<std::string_view> kStarcoder = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
const std::vector<std::string_view> kGpt2 = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
const std::vector<std::string_view> kQwen2 = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kQwen35 = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kPoro = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
};
const std::vector<std::string_view> kChatGlm4 = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kViking = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
    "\\p{N}",
};
const std::vector<std::string_view> kTekken = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kChameleon = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
const std::vector<std::string_view> kGpt4o = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kGraniteEmbMulti = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kTinyAya = {
    "\\d{1,3}(?=(?:\\d{3})*\\b)",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kKimiK2 = {
    "\\p{Han}+",
};
const std::vector<std::string_view> kSuperBpe = {
    "\\p{N}+",
    "(?=(\\d{3})+(?!\\d))",
};
const std::vector<std::string_view> kBailingMoe = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kSeedCoder = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kUfakzeka = {
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kGrok2 = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kAfmoe = {
    "\\p{AFMoE_digits}",
    "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kLaguna = {
    "[^\\n]+|[\\n]+",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kExaoneMoe = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kGemma4 = {
    "[^\\n]+|[\\n]+",
};
const std::vector<std::string_view> kSarvamMoe = {
    "[^\\n]+|[\\n]+",
};
const std::vector<std::string_view> kMiniCpm5 = {
    "\\p{N}{1,3}",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string_view> kWhitespace = {
    "\\S+",
};
const std::vector<std::string_view> kDefault = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

// clang-format on

// The strings llama.cpp matches with hand-written code, and what loom runs for them.
constexpr std::string_view kLlama3CaseInsensitive =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kTinyAyaDigits = "\\d{1,3}(?=(?:\\d{3})*\\b)";

// GPT-2's string with the "\s+" that llama.cpp's matcher has as its last rule (whitespace not
// followed by whitespace; the std::regex form would leave it as an unmatched gap, which also
// becomes a piece).
constexpr const char* kGpt2Matcher = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PresetDef {
  std::vector<std::string_view> names;
  const std::vector<std::string_view>* regexes;
  BpePreset flags;
};

// llama.cpp's pre-tokenizer names (llama_vocab::impl::load), with their regex lists and flags.
// Every name is tested against llama.cpp (tests/vocab/test_pre_type.cpp).
const std::vector<PresetDef>& presets() {
  static constexpr BpePreset kPlain{};
  static constexpr BpePreset kNoClean{.clean_spaces = false};
  static constexpr BpePreset kLlama3Flags{.ignore_merges = true, .clean_spaces = true, .force_add_bos = true};
  static const std::vector<PresetDef> defs = {
      {{"default"}, &kDefault, kPlain},
      {{"minicpm5"}, &kMiniCpm5, {.ignore_merges = true}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       &kLlama3,
       kLlama3Flags},
      {{"deepseek-llm"}, &kDeepseekLlm, kNoClean},
      {{"deepseek-coder"}, &kDeepseekCoder, kNoClean},
      {{"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"}, &kDeepseek3, kNoClean},
      {{"spark2_5"}, &kSpark25, kNoClean},
      {{"youtu"}, &kYoutu, {.ignore_merges = true, .clean_spaces = false}},
      {{"falcon"}, &kFalcon, kPlain},
      {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
        "mellum", "modern-bert", "exaone4"},
       &kGpt2,
       kPlain},
      {{"jais-2"}, &kJais2, kPlain},
      {{"gemma4", "granite-embed-multi-311m"},
       &kGemma4,
       {.escape_whitespaces = true, .byte_encode = false, .whole_newline_words = true, .always_add_bos = true}},
      {{"sarvam-moe"}, &kSarvamMoe, {.clean_spaces = false, .escape_whitespaces = true, .byte_encode = false}},
      {{"jina-v1-en", "jina-v2-code", "roberta-bpe"}, &kGpt2, {.add_sep = true}},
      {{"whitespace"}, &kWhitespace, {.byte_encode = false}},
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, &kStarcoder, kPlain},
      {{"command-r", "smollm"}, &kStarcoder, kNoClean},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"}, &kQwen2, kNoClean},
      {{"grok-2"}, &kGrok2, kNoClean},
      {{"qwen35"}, &kQwen35, kNoClean},
      {{"stablelm2", "megrez"}, &kQwen2, kPlain},
      {{"dbrx", "smaug-bpe"}, &kLlama3, kPlain},
      {{"poro-chat"}, &kPoro, kNoClean},
      {{"bloom", "gpt3-finnish"}, &kPoro, kPlain},
      {{"glm4", "chatglm-bpe"}, &kChatGlm4, {.no_bos = true}},
      {{"viking"}, &kViking, kNoClean},
      {{"tekken"}, &kTekken, {.ignore_merges = true, .clean_spaces = false, .force_add_bos = true}},
      {{"chameleon"}, &kChameleon, {.clean_spaces = false, .force_add_bos = true}},
      {{"exaone-moe"}, &kExaoneMoe, kPlain},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, &kGpt4o, kNoClean},
      {{"granite-embed-multi-97m"}, &kGraniteEmbMulti, {.ignore_merges = true, .clean_spaces = false}},
      {{"tiny_aya", "cohere2moe"}, &kTinyAya, kNoClean},
      {{"superbpe"}, &kSuperBpe, kNoClean},
      {{"trillion", "granite-docling"}, &kGpt2, kNoClean},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, &kBailingMoe, kNoClean},
      {{"seed-coder"}, &kSeedCoder, kNoClean},
      {{"kimi-k2"}, &kKimiK2, kNoClean},
      {{"ufakzeka"}, &kUfakzeka, kNoClean},
      {{"afmoe"}, &kAfmoe, kNoClean},
      {{"laguna"}, &kLaguna, kNoClean},
  };
  return defs;
}

}  // namespace

std::vector<std::string_view> bpe_preset_names() {
  std::vector<std::string_view> names;
  for (const PresetDef& d : presets()) names.push_back(d.names.front());
  return names;
}

std::vector<std::string_view> bpe_pre_tokenizer_names() {
  std::vector<std::string_view> names;
  for (const PresetDef& d : presets()) names.insert(names.end(), d.names.begin(), d.names.end());
  return names;
}

std::vector<std::string_view> bpe_pre_tokenizer_regexes(std::string_view name) {
  for (const PresetDef& d : presets()) {
    if (std::find(d.names.begin(), d.names.end(), name) != d.names.end()) return *d.regexes;
  }
  return {};
}

namespace {

// A std::regex string of llama.cpp as PCRE2 runs it the same way (see the file comment): \s and
// \S spelled out as the White_Space set (inside and outside character classes), \d as ASCII
// digits, \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo} as \p{L}.
std::string translate_std_regex(std::string_view re) {
  static constexpr std::string_view kWs =
      R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char n = re[++i];
      if (n == 's') {
        if (in_class) out.append(kWs);
        else out.append("[").append(kWs).append("]");
      } else if (n == 'S' && !in_class) {
        out.append("[^").append(kWs).append("]");
      } else if (n == 'd') {
        out.append(in_class ? "0-9" : "[0-9]");
      } else if (n == 'p' && re.substr(i + 1, 4).size() == 4 && re[i + 1] == '{' && re[i + 2] == 'L' && re[i + 4] == '}' &&
                 std::string_view("ultmo").find(re[i + 3]) != std::string_view::npos) {
        out.append("\\p{L}");
        i += 4;
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

// A per-thread JIT stack larger than PCRE2's default 32 KiB: regexes with repeated lookahead
// groups (tekken, gpt-4o) need stack per matched character.
struct MatchContext {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 32 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchContext() {
    if (stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchContext() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  MatchContext(const MatchContext&) = delete;
  MatchContext& operator=(const MatchContext&) = delete;
};

pcre2_match_context* thread_match_context() {
  thread_local MatchContext ctx;
  return ctx.context;
}

}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

BpeTokenizer::~BpeTokenizer() = default;

Expected<std::shared_ptr<const BpeTokenizer>> BpeTokenizer::create(std::string_view pre,
                                                                   const std::vector<std::string>& merges) {
  if (pre.empty()) pre = "default";
  const PresetDef* def = nullptr;
  for (const PresetDef& d : presets()) {
    if (std::find(d.names.begin(), d.names.end(), pre) != d.names.end()) def = &d;
  }
  if (def == nullptr) {
    return unsupported("unknown BPE pre-tokenizer type '" + std::string(pre) + "' (tokenizer.ggml.pre)");
  }
  std::shared_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->pre_ = std::string(pre);
  t->preset_ = def->flags;
  for (std::string_view re : *def->regexes) {
    Step step;
    std::string pattern;
    if (re == kGpt2.front()) pattern = kGpt2Matcher;
    // (PCRE2's caseless 's' would also match U+017F; llama.cpp's matcher lowercases.)
    else if (re == kLlama3CaseInsensitive) pattern = kLlama3.front();
    else if (re == "\\p{Han}+") step.kind = Step::kKimiK2;
    else if (re == "\\p{AFMoE_digits}" || re == kTinyAyaDigits) step.kind = Step::kDigitGroups;
    else if (re == "[^\\n]+|[\\n]+") step.kind = Step::kNewlines;
    else pattern = std::string(re);
    if (step.kind == Step::kRegex) {
      pattern = translate_std_regex(pattern);
      int err = 0;
      PCRE2_SIZE err_offset = 0;
      step.regex = std::make_shared<Regex>();
      step.regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_offset, nullptr);
      if (step.regex->code == nullptr) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return internal_error("pre-tokenizer regex '" + pattern +
                              "' does not compile: " + reinterpret_cast<const char*>(msg));
      }
      pcre2_jit_compile(step.regex->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
    }
    t->steps_.push_back(std::move(step));
  }
  t->ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    // llama.cpp splits at the first space after the first byte.
    const size_t pos = m.find(' ', 1);
    // (llama.cpp keeps a malformed entry as an empty pair that never matches.)
    if (pos == std::string::npos) continue;
    t->ranks_.emplace(m, int32_t(std::min<size_t>(i, INT32_MAX)));
  }
  return std::shared_ptr<const BpeTokenizer>(std::move(t));
}

int32_t BpeTokenizer::merge_rank(std::string_view left, std::string_view right) const {
  thread_local std::string key;
  key.assign(left);
  key.push_back(' ');
  key.append(right);
  auto it = ranks_.find(std::string_view(key));
  return it == ranks_.end() ? -1 : it->second;
}

namespace {

// The regexes' subject: valid UTF-8 for PCRE2 (surrogates, which lenient decoding lets through,
// stand in as a private-use character), every non-ASCII whitespace U+000B (as llama.cpp's
// std::regex sees it). `start[i]` is the byte offset of code point i, `index_of` the inverse.
struct RegexSubject {
  std::string text;
  std::vector<size_t> start;
  std::vector<uint32_t> index_of;

  RegexSubject(std::string_view original, const std::vector<uint32_t>& cps) : start(cps.size() + 1) {
    const size_t n = cps.size();
    text.reserve(original.size());
    for (size_t i = 0; i < n; ++i) {
      start[i] = text.size();
      uint32_t cp = cps[i];
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000;
      else if (cp >= 0x80 && unicode::is_whitespace(cp)) cp = 0x0B;
      unicode::append_utf8(text, cp);
    }
    start[n] = text.size();
    index_of.assign(text.size() + 1, 0);
    for (size_t i = 0; i <= n; ++i) index_of[start[i]] = uint32_t(i);
  }
};

// One regex step over the piece [b, e): its matches and the text between them, appended to `next`.
void split_by_regex(pcre2_code* code, const RegexSubject& s, size_t b, size_t e, pcre2_match_data* md,
                    pcre2_match_context* mctx, Pieces& next) {
  const size_t begin = s.start[b], end = s.start[e];
  const auto* piece = reinterpret_cast<PCRE2_SPTR>(s.text.data() + begin);
  const size_t len = end - begin;
  size_t pos = 0, last = 0;
  auto push = [&](size_t from, size_t to) { next.emplace_back(s.index_of[begin + from], s.index_of[begin + to]); };
  // After an empty match, std::regex_iterator (llama.cpp) first looks for a non-empty match
  // at the same place, then searches on from the next character.
  uint32_t retry = 0;
  while (pos <= len) {
    const int rc = pcre2_match(code, piece, len, pos, PCRE2_NO_UTF_CHECK | retry, md, mctx);
    if (rc < 0) {
      // No further match. A matching error (a resource limit, reachable only with pre-tokens
      // of hundreds of KB; llama.cpp's recursive std::regex would overflow the stack there)
      // leaves the rest of the piece as one pre-token.
      if (retry == 0 || pos >= len) break;
      retry = 0;
      pos += std::min(utf8_seq_len(uint8_t(s.text[begin + pos])), len - pos);
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t ms = ov[0], me = ov[1];
    if (ms > last) push(last, ms);
    last = pos = me;
    // An empty match only splits (llama.cpp makes it an empty word, which has no tokens).
    if (me > ms) push(ms, me);
    retry = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
  }
  if (last < len) push(last, len);
}

// The pieces as words: their UTF-8, GPT-2 byte-encoded when `byte_encode`.
std::vector<std::string> pieces_to_words(const std::vector<uint32_t>& cps, const Pieces& pieces, bool byte_encode) {
  std::vector<std::string> words;
  const ByteMap& map = byte_map();
  words.reserve(pieces.size());
  std::string raw;
  for (const auto& [b, e] : pieces) {
    raw.clear();
    for (size_t i = b; i < e; ++i) unicode::append_utf8(raw, cps[i]);
    if (!byte_encode) {
      words.push_back(raw);
      continue;
    }
    std::string w;
    w.reserve(raw.size() * 2);
    for (char c : raw) w.append(map.encoded[uint8_t(c)]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  if (text.empty()) return {};
  const std::vector<uint32_t> cps = unicode::decode_lenient(text);
  const RegexSubject subject(text, cps);
  Pieces pieces{{0, cps.size()}}, next;
  pcre2_match_context* mctx = thread_match_context();
  for (const Step& step : steps_) {
    next.clear();
    if (step.kind != Step::kRegex) {
      for (const auto& [b, e] : pieces) {
        if (step.kind == Step::kKimiK2) split_kimi_k2(cps, b, e, next);
        else if (step.kind == Step::kDigitGroups) split_digit_groups(cps, b, e, next);
        else split_newlines(cps, b, e, next);
      }
      pieces.swap(next);
      continue;
    }
    pcre2_code* code = step.regex->code;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    for (const auto& [b, e] : pieces) split_by_regex(code, subject, b, e, md, mctx, next);
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces_to_words(cps, pieces, preset_.byte_encode);
}

void BpeTokenizer::tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) const {
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  static constexpr size_t kMaxCachedWord = 256;
  std::string escaped;
  if (preset_.escape_whitespaces) {
    // SentencePiece-style BPE (Gemma 4): spaces are U+2581 before pre-tokenization.
    escaped.reserve(text.size() + text.size() / 2);
    for (char c : text) {
      if (c == ' ') escaped.append("\xE2\x96\x81");
      else escaped.push_back(c);
    }
    text = escaped;
  }
  for (const std::string& word : pre_tokenize(text)) {
    if (preset_.ignore_merges || (preset_.whole_newline_words && word.find_first_not_of('\n') == std::string::npos)) {
      if (int32_t id = vocab.text_to_token(word); id != Vocab::kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    const bool cacheable = word.size() <= kMaxCachedWord;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (auto it = cache_.find(std::string_view(word)); it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const size_t start = out.size();
    segment(vocab, word, out);
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      cache_.emplace(word, std::vector<int32_t>(out.begin() + std::ptrdiff_t(start), out.end()));
    }
  }
}

namespace {

struct BpeSymbol {
  int32_t prev;
  int32_t next;
  uint32_t offset;
  uint32_t length;  // 0 once merged into the left neighbour
};

struct BpeBigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t size;  // byte length of the pair when queued
};

// Lowest rank first; ties: leftmost.
struct BpeBigramOrder {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void BpeTokenizer::segment(const Vocab& vocab, const std::string& word, std::vector<int32_t>& out) const {
  std::vector<BpeSymbol> symbols;
  std::vector<BpeBigram> heap;
  const std::string_view w = word;
  for (size_t off = 0; off < w.size();) {
    const size_t len = std::min(utf8_seq_len(uint8_t(w[off])), w.size() - off);
    const int32_t index = int32_t(symbols.size());
    symbols.push_back(BpeSymbol{index - 1, off + len == w.size() ? -1 : index + 1, uint32_t(off), uint32_t(len)});
    off += len;
  }
  auto text_of = [&](const BpeSymbol& s) { return w.substr(s.offset, s.length); };
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t rank = merge_rank(text_of(symbols[size_t(left)]), text_of(symbols[size_t(right)]));
    if (rank < 0) return;
    heap.push_back(BpeBigram{rank, left, right, symbols[size_t(left)].length + symbols[size_t(right)].length});
    std::push_heap(heap.begin(), heap.end(), BpeBigramOrder{});
  };
  for (size_t i = 1; i < symbols.size(); ++i) add_bigram(int32_t(i - 1), int32_t(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BpeBigramOrder{});
    const BpeBigram b = heap.back();
    heap.pop_back();
    BpeSymbol& left = symbols[size_t(b.left)];
    BpeSymbol& right = symbols[size_t(b.right)];
    // Stale: one side was absorbed, or the right side grew (the left one only grows by
    // absorbing its right neighbour).
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.size) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = b.left;
    add_bigram(left.prev, b.left);
    add_bigram(b.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[size_t(i)].next) {
    const std::string_view piece = text_of(symbols[size_t(i)]);
    if (int32_t id = vocab.text_to_token(piece); id != Vocab::kNoToken) {
      out.push_back(id);
      continue;
    }
    // Not a token: each byte of the text on its own, where that is a token: the byte-encoded
    // text's bytes as one-character texts, or raw bytes as <0xXX> tokens.
    for (char c : piece) {
      int32_t id;
      if (preset_.byte_encode) {
        id = vocab.text_to_token(std::string_view(&c, 1));
      } else {
        static constexpr char kHex[] = "0123456789ABCDEF";
        const char name[6] = {'<', '0', 'x', kHex[uint8_t(c) >> 4], kHex[uint8_t(c) & 15], '>'};
        id = vocab.text_to_token(std::string_view(name, 6));
      }
      if (id != Vocab::kNoToken) out.push_back(id);
    }
  }
}

uint32_t byte_to_codepoint(uint8_t byte) { return byte_map().to_cp[byte]; }

std::string byte_level_decode(std::string_view text) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : unicode::decode_lenient(text)) {
    if (auto it = map.to_byte.find(cp); it != map.to_byte.end()) {
      out.push_back(char(it->second));
      continue;
    }
    std::string utf8;
    unicode::append_utf8(utf8, cp);
    static constexpr char kHex[] = "0123456789abcdef";
    out.append("[UNK_BYTE_0x");
    for (char c : utf8) {
      out.push_back(kHex[uint8_t(c) >> 4]);
      out.push_back(kHex[uint8_t(c) & 15]);
    }
    out.append(text);  // (sic: llama.cpp appends the whole token text here)
    out.push_back(']');
  }
  return out;
}

}  // namespace loom::vocab::detail
