// Byte-level BPE as llama.cpp's llm_tokenizer_bpe does it.
//
// Pre-tokenization: the fragment is decoded to code points (leniently, see unicode.h) and split by
// each regex of the preset in turn; every regex splits each piece the previous ones produced,
// and both its matches and the text between them become pieces (a regex never sees past its
// piece). llama.cpp runs some regexes through hand-written matchers and the rest through
// std::regex over a "collapsed" text in which every non-ASCII code point stands for its category;
// both amount to these regexes with \p{..} meaning the major general category and \s the
// White_Space property, which is what PCRE2 in UTF+UCP mode gives once \s is spelled out (PCRE2's
// own \s also matches U+180E, which is not White_Space since Unicode 6.3).
//
// Merging: each byte-encoded piece starts as one symbol per character; the adjacent pair with the
// lowest merge rank (ties: leftmost) is merged until no pair has a rank. A final symbol that is
// not a token is emitted byte by byte through single-character tokens when they exist.
#include "vocab/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "vocab/unicode.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::detail {

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

// The GPT-2 regex and the Llama-3 one. llama.cpp matches these two with hand-written code that
// differs from the regexes in one way: an unassigned code point (Cn) is never part of a
// punctuation/symbol run (" ?[^\s\p{L}\p{N}]+"), it stands alone instead (it can still prefix
// a letter run in Llama-3's "[^\r\n\p{L}\p{N}]?\p{L}+"). The \p{Cn} parts below reproduce that.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}\p{Cn}]+|\s+(?!\S)|\s+|\p{Cn})";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}\p{Cn}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+|\p{Cn})";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: Qwen2's with combining marks (\p{M}) kept inside words (Devanagari, Thai, ...).
constexpr const char* kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|)"
    R"( ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
constexpr const char* kPoro = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|)"
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)"
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+";

constexpr const char* kBailingMoe =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kSeedCoder =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}|)"
    R"( ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDeepseekV3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)"
    R"( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PresetDef {
  std::vector<std::string_view> names;
  std::vector<const char*> regexes;
  BpePreset flags;
};

// llama.cpp's pre-tokenizer names, their regexes and flags. The ones with vocab files in
// shared/golden/vocab (llama-bpe, gpt-2, qwen2, deepseek-coder, falcon) are tested against
// llama.cpp's output; the others follow llama.cpp's published regexes and flags without a golden.
// Not supported: kimi-k2 and afmoe (llama.cpp splits those with hand-written code, not regexes).
const std::vector<PresetDef>& presets() {
  static constexpr BpePreset kPlain{};
  static constexpr BpePreset kNoClean{.clean_spaces = false};
  static const std::vector<PresetDef> defs = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, kPlain},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3},
       {.ignore_merges = true, .clean_spaces = true, .force_add_bos = true}},
      {{"dbrx", "smaug-bpe"}, {kLlama3}, kPlain},
      {{"chatglm-bpe", "glm4"}, {kLlama3}, {.no_bos = true}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
        R"(\s+$)", kCjk, R"(\p{N}+)"},
       kNoClean},
      {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}, kNoClean},
      {{"deepseek-v3", "hunyuan-dense"},
       {R"(\p{N}{1,3})", "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+", kDeepseekV3},
       kNoClean},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, kPlain},
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", kGpt2}, kPlain},
      {{"command-r", "smollm"}, {R"(\p{N})", kGpt2}, kNoClean},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
        "mellum", "exaone4", "mpt", "olmo", "jais"},
       {kGpt2},
       kPlain},
      {{"jina-v1-en", "jina-v2-code", "roberta-bpe"}, {kGpt2}, {.add_sep = true}},
      {{"trillion", "granite-docling"}, {kGpt2}, kNoClean},
      {{"stablelm2", "megrez"}, {kQwen2}, kPlain},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "hunyuan", "grok-2"}, {kQwen2}, kNoClean},
      {{"qwen35"}, {kQwen35}, kNoClean},
      {{"bloom", "gpt3-finnish"}, {kPoro}, kPlain},
      {{"poro-chat"}, {kPoro}, kNoClean},
      {{"viking"}, {kPoro, R"(\p{N})"}, kNoClean},
      {{"tekken"}, {kTekken}, {.ignore_merges = true, .clean_spaces = false, .force_add_bos = true}},
      {{"gpt-4o", "llama4", "minimax-m2"}, {kGpt4o}, kNoClean},
      // (llama.cpp's std::regex \d is ASCII-only; PCRE2's would be every Nd.)
      {{"superbpe"}, {R"(\p{N}+)", "(?=([0-9]{3})+(?![0-9]))"}, kNoClean},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailingMoe}, kNoClean},
      {{"seed-coder"}, {kSeedCoder}, kNoClean},
      {{"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"(([\t\n]|    |  ))", R"(\p{N})",
        R"([\p{P}!-/:-@\[-`{-~])", kGpt2},
       {.clean_spaces = false, .force_add_bos = true}},
  };
  return defs;
}

}  // namespace

std::vector<std::string_view> bpe_preset_names() {
  std::vector<std::string_view> names;
  for (const PresetDef& d : presets()) names.push_back(d.names.front());
  return names;
}

namespace {

// Spells out \s and \S as the White_Space set, inside and outside character classes.
std::string rewrite_whitespace(std::string_view re) {
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
  for (const char* re : def->regexes) {
    const std::string pattern = rewrite_whitespace(re);
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto r = std::make_unique<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_offset, nullptr);
    if (r->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return internal_error("pre-tokenizer regex '" + pattern + "' does not compile: " +
                            reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
    t->regexes_.push_back(std::move(r));
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

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  if (text.empty()) return words;
  const std::vector<uint32_t> cps = unicode::decode_lenient(text);
  // `subject` is valid UTF-8 for PCRE2: surrogates (which lenient decoding lets through) stand in
  // as a private-use character of the same encoded length. `bytes` is what llama.cpp re-encodes.
  std::string subject, bytes;
  subject.reserve(text.size());
  bytes.reserve(text.size());
  for (uint32_t cp : cps) {
    unicode::append_utf8(bytes, cp);
    unicode::append_utf8(subject, (cp >= 0xD800 && cp <= 0xDFFF) ? 0xE000 : cp);
  }

  // Pieces as [begin, end) byte ranges of `subject`.
  std::vector<std::pair<size_t, size_t>> pieces{{0, subject.size()}}, next;
  pcre2_match_context* mctx = thread_match_context();
  for (const auto& regex : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    next.clear();
    for (const auto& [begin, end] : pieces) {
      const auto* piece = reinterpret_cast<PCRE2_SPTR>(subject.data() + begin);
      const size_t len = end - begin;
      size_t pos = 0, last = 0;
      // After an empty match, std::regex_iterator (llama.cpp) first looks for a non-empty match
      // at the same place, then searches on from the next character.
      uint32_t retry = 0;
      while (pos <= len) {
        const int rc = pcre2_match(regex->code, piece, len, pos, PCRE2_NO_UTF_CHECK | retry, md, mctx);
        if (rc < 0) {
          // No further match. A matching error (a resource limit, reachable only with pre-tokens
          // of hundreds of KB; llama.cpp's recursive std::regex would overflow the stack there)
          // leaves the rest of the piece as one pre-token.
          if (retry == 0 || pos >= len) break;
          retry = 0;
          pos += std::min(utf8_seq_len(uint8_t(subject[begin + pos])), len - pos);
          continue;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (ms > last) next.emplace_back(begin + last, begin + ms);
        last = pos = me;
        // An empty match only splits (llama.cpp makes it an empty word, which has no tokens).
        if (me > ms) next.emplace_back(begin + ms, begin + me);
        retry = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
      }
      if (last < len) next.emplace_back(begin + last, end);
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }

  const ByteMap& map = byte_map();
  words.reserve(pieces.size());
  for (const auto& [begin, end] : pieces) {
    std::string w;
    w.reserve((end - begin) * 2);
    for (size_t i = begin; i < end; ++i) w.append(map.encoded[uint8_t(bytes[i])]);
    words.push_back(std::move(w));
  }
  return words;
}

void BpeTokenizer::tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) const {
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  static constexpr size_t kMaxCachedWord = 256;
  for (const std::string& word : pre_tokenize(text)) {
    if (preset_.ignore_merges) {
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
    // Not a token: each byte of the (byte-encoded) text on its own, where that is a token.
    for (char c : piece) {
      if (int32_t id = vocab.text_to_token(std::string_view(&c, 1)); id != Vocab::kNoToken) out.push_back(id);
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

}  // namespace loom::detail
