// Tokenizer throughput: tokenizes a ~1 MB deterministic text with every vocab-only GGUF of
// shared/golden/vocab (SentencePiece, byte-level BPE with five pre-tokenizers, WordPiece) and
// prints tokens/s and MB/s per vocabulary, the median of --reps runs after one warm-up.
// bench/tokenizer-peer.mjs builds the same text and measures llama.cpp (node-llama-cpp) on the
// same files; compare the two in one run (see bench/README.md).
//
// usage: loom_bench_tokenizer [--shared DIR] [--reps 3] [--bytes 1000000] [--only NAME]
//                             [--json] [--dump-text FILE]
//
// Each run tokenizes with a freshly loaded Vocab (loading is not timed), because loom's BPE keeps
// a word cache that llama.cpp does not have: that is the figure to compare ("tokens_per_s"). A
// second tokenize() on the same Vocab is reported as "warm" (what a long-lived process sees for
// text whose words it has met before). tokenize(text, add_special=false, parse_special=false),
// as node-llama-cpp's model.tokenize(text). The JSON carries the text's size and FNV-1a hash so
// that the two sides can be checked to have tokenized the same bytes.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace {

struct Options {
  std::string shared;
  int reps = 3;
  size_t bytes = 1000000;
  std::string only;
  bool json = false;
  std::string dump_text;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: loom_bench_tokenizer [--shared DIR] [--reps 3] [--bytes 1000000] [--only NAME]\n"
               "                            [--json] [--dump-text FILE]\n"
               "  --shared DIR  the shared folder (default $LOOM_SHARED, else ../shared)\n");
  std::exit(code);
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// Deterministic pseudo-random numbers (an LCG; tokenizer-peer.mjs has the same one).
struct Lcg {
  uint32_t state = 12345;
  uint32_t next() {
    state = state * 1103515245u + 12345u;
    return state >> 8;
  }
};

// Syllables of the generated words: Latin, Cyrillic, Greek, and CJK characters (one per syllable).
const char* const kLatin[] = {"ka", "lo", "mi", "ne", "ru",  "sa",  "to", "vi", "el",  "an",  "or",
                              "is", "qu", "th", "ch", "str", "ing", "ed", "er", "pre", "con", "ly"};
const char* const kCyrillic[] = {"ма", "ро", "ви", "ка", "не", "ст", "до", "ль"};
const char* const kGreek[] = {"λο", "γο", "κα", "θε", "μα"};
const char* const kCjk[] = {"的", "一", "是", "不", "了", "人", "我", "在", "有", "他", "这",
                            "中", "大", "来", "上", "国", "个", "到", "说", "们", "为", "子"};
template <size_t N>
const char* pick(const char* const (&list)[N], Lcg& rng) {
  return list[rng.next() % N];
}

// The benchmark text; tokenizer-peer.mjs builds the same bytes. Blocks of: a numbered heading,
// 800 generated words (mostly unique: they exercise the merges rather than a word cache) with
// punctuation, newlines and numbers between them, and every fourth block the 124 cases of
// tokenize-cases.txt (emoji, code, whitespace runs, special-token look-alikes, many scripts).
std::string build_text(const std::string& cases_file, size_t target_bytes) {
  std::vector<std::string> cases;
  const std::string sep = "\n__case__\n";
  size_t pos = 0;
  for (size_t hit; (hit = cases_file.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    cases.push_back(cases_file.substr(pos, hit - pos));
  }
  cases.push_back(cases_file.substr(pos));
  std::string unit;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i) unit += '\n';
    unit += cases[i];
  }
  Lcg rng;
  std::string text;
  for (unsigned block = 0; text.size() < target_bytes; ++block) {
    text.append("\n\n## Part ").append(std::to_string(block + 1)).append(" (");
    text.append(std::to_string((block * 7919u) % 100000u)).append(" items, ");
    text.append(std::to_string(block / 4)).append(".").append(std::to_string(block % 100)).append("%)\n\n");
    for (int w = 0; w < 800; ++w) {
      const uint32_t script = rng.next() % 10;
      const uint32_t syllables = 1 + rng.next() % 4;
      std::string word;
      for (uint32_t k = 0; k < syllables; ++k) {
        if (script < 6) word += pick(kLatin, rng);
        else if (script < 8) word += pick(kCyrillic, rng);
        else if (script < 9) word += pick(kGreek, rng);
        else word += pick(kCjk, rng);
      }
      if (script < 6 && rng.next() % 7 == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      const uint32_t sep_kind = rng.next() % 20;
      if (sep_kind == 0) text += ", ";
      else if (sep_kind == 1) text += ". ";
      else if (sep_kind == 2) text += "\n";
      else if (sep_kind == 3) text.append(" ").append(std::to_string(rng.next() % 100000)).append(" ");
      else text += " ";
    }
    if (block % 4 == 0) text += unit;
  }
  // Valid UTF-8 on both sides (JavaScript strings cannot hold invalid bytes).
  return loom::vocab::sanitize_utf8(text);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string type_name(loom::VocabType t) {
  switch (t) {
    case loom::VocabType::kSpm: return "spm";
    case loom::VocabType::kBpe: return "bpe";
    case loom::VocabType::kWpm: return "wpm";
    case loom::VocabType::kUgm: return "ugm";
  }
  return "?";
}

struct Result {
  std::string name;
  std::string type;
  size_t n_tokens = 0;
  std::vector<double> runs_s;       // first tokenize() on a fresh Vocab
  std::vector<double> warm_runs_s;  // second tokenize() on the same Vocab (BPE word cache filled)
  double median_s = 0;
  double warm_median_s = 0;
};

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t m = xs.size() / 2;
  return xs.size() % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2;
}

Options parse_options(int argc, char** argv) {
  Options opt;
  if (const char* env = std::getenv("LOOM_SHARED")) opt.shared = env;
  else opt.shared = "../shared";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--shared") opt.shared = next();
    else if (a == "--reps") opt.reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--bytes") opt.bytes = static_cast<size_t>(std::strtoull(next().c_str(), nullptr, 10));
    else if (a == "--only") opt.only = next();
    else if (a == "--json") opt.json = true;
    else if (a == "--dump-text") opt.dump_text = next();
    else if (a == "-h" || a == "--help") usage(0);
    else usage(2);
  }
  return opt;
}

// The benchmark text, built from vocab_dir's tokenize-cases.txt (and written to --dump-text);
// false after printing why not.
bool load_text(const Options& opt, const std::filesystem::path& vocab_dir, std::string& text) {
  std::string cases;
  if (!read_file((vocab_dir / "tokenize-cases.txt").string(), cases)) {
    std::fprintf(stderr, "loom_bench_tokenizer: cannot read %s (set --shared or LOOM_SHARED)\n",
                 (vocab_dir / "tokenize-cases.txt").c_str());
    return false;
  }
  text = build_text(cases, opt.bytes);
  if (!opt.dump_text.empty()) {
    std::ofstream out(opt.dump_text, std::ios::binary);
    out << text;
  }
  return true;
}

// The vocab-only GGUFs of vocab_dir, sorted by name.
std::vector<std::filesystem::path> vocab_files(const std::filesystem::path& vocab_dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(vocab_dir)) {
    if (entry.path().extension() == ".gguf") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Times one vocabulary: a warm-up, then reps runs on fresh Vocabs (cold, then warm). False after
// printing an error (a file that does not load, a token count that changes).
bool bench_vocab(const std::filesystem::path& path, const std::string& text, int reps, Result& r) {
  const std::string name = path.stem().string();
  auto file = loom::gguf::GgufFile::open(path.string());
  if (!file.has_value()) {
    std::fprintf(stderr, "loom_bench_tokenizer: %s: %s\n", path.c_str(), file.status().message().c_str());
    return false;
  }
  auto vocab = loom::Vocab::from_gguf(*file);
  if (!vocab.has_value()) {
    std::fprintf(stderr, "loom_bench_tokenizer: %s: %s\n", path.c_str(), vocab.status().message().c_str());
    return false;
  }
  r.name = name;
  r.type = type_name(vocab->type());
  r.n_tokens = vocab->tokenize(text, false, false).size();  // warm-up (code, allocator)
  for (int rep = 0; rep < reps; ++rep) {
    // A fresh Vocab: its BPE word cache starts empty, as llama.cpp (which has none) always is.
    auto fresh = loom::Vocab::from_gguf(*file);
    if (!fresh.has_value()) return false;
    for (int pass = 0; pass < 2; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<int32_t> ids = fresh->tokenize(text, false, false);
      const auto t1 = std::chrono::steady_clock::now();
      if (ids.size() != r.n_tokens) {
        std::fprintf(stderr, "loom_bench_tokenizer: %s: token count changed between runs\n", name.c_str());
        return false;
      }
      (pass == 0 ? r.runs_s : r.warm_runs_s).push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  r.median_s = median(r.runs_s);
  r.warm_median_s = median(r.warm_runs_s);
  return true;
}

void print_text_row(const Result& x, size_t text_bytes) {
  std::printf("%-26s %-4s %8zu tokens %8.4f s %10.0f tokens/s %7.2f MB/s   warm %10.0f tokens/s\n", x.name.c_str(),
              x.type.c_str(), x.n_tokens, x.median_s, double(x.n_tokens) / x.median_s, double(text_bytes) / 1e6 / x.median_s,
              double(x.n_tokens) / x.warm_median_s);
  std::fflush(stdout);
}

void print_json(const std::vector<Result>& results, const std::string& text, int reps) {
  std::printf("{\"engine\": \"loom\", \"text_bytes\": %zu, \"text_fnv1a\": \"%016" PRIx64 "\", \"reps\": %d, \"vocabs\": [",
              text.size(), fnv1a(text), reps);
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& x = results[i];
    std::printf(
        "%s\n  {\"name\": \"%s\", \"type\": \"%s\", \"n_tokens\": %zu, \"seconds\": %.6f, "
        "\"tokens_per_s\": %.1f, \"mb_per_s\": %.3f, \"runs_s\": [",
        i ? "," : "", x.name.c_str(), x.type.c_str(), x.n_tokens, x.median_s, double(x.n_tokens) / x.median_s,
        double(text.size()) / 1e6 / x.median_s);
    for (size_t k = 0; k < x.runs_s.size(); ++k) std::printf("%s%.6f", k ? ", " : "", x.runs_s[k]);
    std::printf("], \"tokens_per_s_warm\": %.1f, \"runs_warm_s\": [", double(x.n_tokens) / x.warm_median_s);
    for (size_t k = 0; k < x.warm_runs_s.size(); ++k) std::printf("%s%.6f", k ? ", " : "", x.warm_runs_s[k]);
    std::printf("]}");
  }
  std::printf("\n]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  const std::filesystem::path vocab_dir = std::filesystem::path(opt.shared) / "golden" / "vocab";
  std::string text;
  if (!load_text(opt, vocab_dir, text)) return 1;
  std::vector<Result> results;
  for (const std::filesystem::path& path : vocab_files(vocab_dir)) {
    if (!opt.only.empty() && path.stem().string().find(opt.only) == std::string::npos) continue;
    Result r;
    if (!bench_vocab(path, text, opt.reps, r)) return 1;
    results.push_back(std::move(r));
    if (!opt.json) print_text_row(results.back(), text.size());
  }
  if (opt.json) {
    print_json(results, text, opt.reps);
  } else {
    std::printf("text: %zu bytes (fnv1a %016" PRIx64
                "), median of %d runs after a warm-up; tokens/s and MB/s\n"
                "on a freshly loaded vocab, warm = a second run on it (BPE word cache filled)\n",
                text.size(), fnv1a(text), opt.reps);
  }
  return 0;
}
