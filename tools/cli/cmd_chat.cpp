// loom chat -m MODEL [-c CTX] [-t THREADS] [--temp T] [--seed S] [--system TEXT] [-n MAX_REPLY_TOKENS]
//
// Interactive chat in the terminal. Each stdin line is a user message; the reply streams to
// stdout, followed by a newline. The prompt "> " goes to stderr, and only when stdin is a
// terminal, so the command can be scripted (`printf 'Hi\nMore\n' | loom chat -m m.gguf`).
//
// Every turn renders the whole conversation with the model's chat template (ChatML when it has
// none), and decodes only the tokens after the longest prefix already in the KV cache. When the
// conversation no longer fits the context, the oldest turns are dropped (the system message is
// kept) and the conversation is rendered again.
//
// Commands: /reset, /save FILE (KV state with its tokens in FILE, the messages in FILE.json),
// /load FILE, /help, /quit; EOF ends the chat. Ctrl-C stops the reply being generated (or a long
// prompt decode); a second Ctrl-C at the prompt exits.
//
// Exit status: 0, or 1 when the model could not be loaded or a turn failed; 2 for bad flags.
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"

namespace loom::cli {
namespace {

struct ChatMessage {
  std::string role, content;
};

// SIGINTs not yet handled. Set by the signal handler (a lock-free atomic is async-signal-safe).
std::atomic<int> g_sigint{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_sigint(int) { g_sigint.fetch_add(1, std::memory_order_relaxed); }

bool interrupted() { return g_sigint.load(std::memory_order_relaxed) != 0; }

// Installs the SIGINT handler for the lifetime of the object, without SA_RESTART so that a
// Ctrl-C also interrupts a read() waiting for the next line.
class SigintGuard {
 public:
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    installed_ = sigaction(SIGINT, &sa, &old_) == 0;
  }
  ~SigintGuard() {
    if (installed_) sigaction(SIGINT, &old_, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction old_ {};
  bool installed_ = false;
};

// Lines from stdin, read with read(2) so that a Ctrl-C ends the wait.
class LineReader {
 public:
  enum class Result { kLine, kEof, kInterrupted, kError };

  Result next(std::string* line) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line->assign(buf_, 0, nl);
        buf_.erase(0, nl + 1);
        if (!line->empty() && line->back() == '\r') line->pop_back();
        return Result::kLine;
      }
      if (eof_) {
        if (buf_.empty()) return Result::kEof;
        *line = std::move(buf_);
        buf_.clear();
        return Result::kLine;
      }
      if (interrupted()) {  // a Ctrl-C that came just before the wait
        buf_.clear();
        return Result::kInterrupted;
      }
      char tmp[4096];
      const ssize_t n = ::read(STDIN_FILENO, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, size_t(n));
      } else if (n == 0) {
        eof_ = true;
      } else if (errno == EINTR) {
        if (interrupted()) {
          buf_.clear();  // the terminal dropped the half-typed line too
          return Result::kInterrupted;
        }
      } else {
        return Result::kError;
      }
    }
  }

 private:
  std::string buf_;
  bool eof_ = false;
};

void emit(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void note(const std::string& msg) { std::fprintf(stderr, "loom: %s\n", msg.c_str()); }

struct Opts {
  std::string model, system;
  int n_ctx = 0, threads = 0, n_predict = -1;
  nlohmann::json sampling = nlohmann::json::object();  // the sampler flags given (add_sampler_flags)
  int64_t seed = -1;
  bool verbose = false;
};

class ChatSession {
 public:
  ChatSession(const Opts& o, api::Model model, api::Context ctx, api::Sampler sampler)
      : o_(o), model_(std::move(model)), ctx_(std::move(ctx)), sampler_(std::move(sampler)) {
    reset();
  }

  // Forgets the conversation (keeping the system message) and the KV cache.
  void reset() {
    messages_.clear();
    if (!o_.system.empty()) messages_.push_back({"system", o_.system});
    ctx_.kv_clear();
    cached_.clear();
  }

  enum class TurnEnd { kDone, kInterrupted };
  // One user message and the reply. On error (or a Ctrl-C during the prompt decode) the
  // conversation is left as it was; the KV cache need not be, cached_ says what it holds.
  api::Expected<TurnEnd> turn(const std::string& user) {
    std::vector<ChatMessage> before = messages_;
    messages_.push_back({"user", user});
    auto end = run_turn();
    if (!end) messages_ = std::move(before);
    return end;
  }

  api::Status save(const std::string& path) const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    j["messages"] = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages_) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
    if (api::Status st = ctx_.save_state(path, cached_); !st) return st;
    const std::string json_path = path + ".json";
    std::ofstream f(json_path, std::ios::binary | std::ios::trunc);
    if (!f) return io_error("cannot write " + json_path);
    f << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    f.close();
    if (!f) return io_error("cannot write " + json_path);
    return api::Status::ok();
  }

  // All or nothing: on error the conversation and the cache are as before.
  api::Status load(const std::string& path) {
    const std::string json_path = path + ".json";
    std::ifstream f(json_path, std::ios::binary);
    if (!f) return not_found("cannot open " + json_path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::vector<ChatMessage> msgs;
    try {
      const auto j = nlohmann::json::parse(ss.str());
      const auto& arr = j.at("messages");
      if (!arr.is_array()) return corrupt(json_path + ": \"messages\" is not an array");
      for (const auto& m : arr) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
            !m["content"].is_string())
          return corrupt(json_path + ": each message needs string \"role\" and \"content\"");
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
    } catch (const nlohmann::json::exception& e) {
      return corrupt(json_path + ": " + e.what());
    }
    auto tokens = ctx_.load_state(path);
    if (!tokens) return tokens.status();
    messages_ = std::move(msgs);
    cached_ = std::move(*tokens);
    return api::Status::ok();
  }

  size_t n_messages() const { return messages_.size(); }

 private:
  bool has_system() const { return !messages_.empty() && messages_.front().role == "system"; }

  // Drops the oldest exchange: the first user message after the system message and the replies
  // up to the next user message. False when only the current user message is left.
  bool drop_oldest_turn() {
    const size_t first = has_system() ? 1 : 0;
    size_t next_user = first + 1;
    while (next_user < messages_.size() && messages_[next_user].role != "user") ++next_user;
    if (next_user >= messages_.size()) return false;
    messages_.erase(messages_.begin() + std::ptrdiff_t(first), messages_.begin() + std::ptrdiff_t(next_user));
    return true;
  }

  // The rendered conversation as tokens, dropping old turns until it fits with room to reply.
  api::Expected<std::vector<int32_t>> fit_prompt() {
    const int n_ctx = ctx_.n_ctx();
    const int room = std::max(1, o_.n_predict > 0 ? std::min(o_.n_predict, n_ctx / 2) : n_ctx / 4);
    int dropped = 0;
    for (;;) {
      nlohmann::json msgs = nlohmann::json::array();
      for (const ChatMessage& m : messages_) msgs.push_back({{"role", m.role}, {"content", m.content}});
      auto text = model_.apply_chat_template(msgs.dump(), true);
      if (!text) return text.status();
      auto tokens = model_.tokenize_chat(*text);
      if (!tokens) return tokens.status();
      std::vector<int32_t> prompt = std::move(*tokens);
      if (prompt.empty()) return api::Status(LOOM_ERR_INVALID_ARGUMENT, "the chat template rendered no tokens");
      const bool fits = int(prompt.size()) + room <= n_ctx;
      if (!fits && drop_oldest_turn()) {
        ++dropped;
        continue;
      }
      if (int(prompt.size()) >= n_ctx) {
        return api::Status(LOOM_ERR_RESOURCE_EXHAUSTED, "the message needs " + std::to_string(prompt.size()) +
                                                            " tokens, which does not fit the context of " +
                                                            std::to_string(n_ctx) + " (use -c)");
      }
      if (dropped > 0) note("context full: dropped the " + std::to_string(dropped) + " oldest turn(s)");
      return prompt;
    }
  }

  // Decodes the part of the prompt the cache lacks; returns how many tokens were reused.
  api::Expected<size_t> decode_prompt(const std::vector<int32_t>& prompt) {
    // Reuse the cached prefix; the last prompt token is always decoded again for its logits.
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) ++common;
    if (common == prompt.size()) --common;
    // A recurrent state cannot forget its last tokens: it is reused only when the prompt extends it.
    if (model_.is_recurrent() && common < cached_.size()) common = 0;
    const size_t reused = common;
    if (api::Status st = ctx_.seq_rm(0, int(common), -1); !st) return st;
    cached_.resize(common);
    const size_t step = size_t(std::max(1, ctx_.n_batch()));
    api::Batch batch{int32_t(step)};
    for (size_t i = common; i < prompt.size(); i += step) {
      const size_t n = std::min(prompt.size() - i, step);
      batch.clear();
      batch.add_tokens(prompt.data() + i, n, int32_t(i));
      batch.set_logits_last();
      api::Status st = ctx_.decode(batch);
      if (st.code() == LOOM_ERR_ABORTED) return api::Status(LOOM_ERR_ABORTED, "interrupted");
      if (!st) return st;
      cached_.insert(cached_.end(), prompt.begin() + std::ptrdiff_t(i), prompt.begin() + std::ptrdiff_t(i + n));
    }
    return reused;
  }

  api::Expected<TurnEnd> run_turn() {
    auto fitted = fit_prompt();
    if (!fitted) return fitted.status();
    const std::vector<int32_t> prompt = std::move(*fitted);
    auto reused_or = decode_prompt(prompt);
    if (!reused_or) return reused_or.status();
    const size_t reused = *reused_or;

    sampler_.reset();
    sampler_.accept_history(prompt);
    // The reply is shown and kept in whole UTF-8 characters, with the vocabulary's spacing rules.
    auto detok_or = api::Detokenizer::create(model_);
    if (!detok_or) return detok_or.status();
    api::Detokenizer& detok = *detok_or;
    std::string reply;
    auto show = [&](const std::string& chunk) {
      reply += chunk;
      emit(chunk);
    };
    TurnEnd end = TurnEnd::kDone;
    api::Status error;
    bool cut = false;  // the context filled up
    int n_gen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    api::Batch one(1);  // each reply token, decoded in turn
    while (o_.n_predict < 0 || n_gen < o_.n_predict) {
      if (interrupted()) {
        end = TurnEnd::kInterrupted;
        break;
      }
      const float* logits = ctx_.logits(-1);
      if (!logits) {
        error = api::Status(LOOM_ERR_INTERNAL, last_error());
        break;
      }
      const int32_t tok = sampler_.pick(logits, ctx_.n_vocab());
      if (tok < 0 || model_.is_eog(tok)) break;
      sampler_.accept(tok);
      auto chunk = detok.push(tok);
      if (!chunk) {
        error = chunk.status();
        break;
      }
      show(*chunk);
      if (++n_gen == o_.n_predict) break;  // the last token need not be decoded
      if (int(cached_.size()) >= ctx_.n_ctx()) {
        cut = true;
        break;
      }
      one.clear();
      one.add(tok, int32_t(cached_.size()), 0, true);
      api::Status st = ctx_.decode(one);
      if (st.code() == LOOM_ERR_ABORTED) {
        end = TurnEnd::kInterrupted;
        break;
      }
      if (!st) {
        error = st;
        break;
      }
      cached_.push_back(tok);
    }
    show(detok.flush());
    emit("\n");
    if (cut) note("the context is full: reply cut (use -c; the next turn drops the oldest turns)");
    if (o_.verbose) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "loom: prompt %zu tokens (%zu reused from the cache), reply %d tokens, %.1f tok/s\n",
                   prompt.size(), reused, n_gen, s > 0 ? n_gen / s : 0.0);
    }
    // An interrupted or failed reply is kept as far as it got, as llama.cpp does.
    messages_.push_back({"assistant", reply});
    if (!error.is_ok()) return error;
    return end;
  }

  static api::Status io_error(const std::string& msg) { return api::Status(LOOM_ERR_IO, msg); }
  static api::Status not_found(const std::string& msg) { return api::Status(LOOM_ERR_NOT_FOUND, msg); }
  static api::Status corrupt(const std::string& msg) { return api::Status(LOOM_ERR_CORRUPT, msg); }

  const Opts& o_;
  api::Model model_;
  api::Context ctx_;
  api::Sampler sampler_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> cached_;  // the tokens in the KV cache, at positions 0.. of sequence 0
};

// "/save FILE" -> ("save", "FILE"); the argument is the rest of the line, trimmed.
std::pair<std::string, std::string> split_command(const std::string& line) {
  const size_t sp = line.find_first_of(" \t");
  std::string cmd = line.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
  std::string arg;
  if (sp != std::string::npos) {
    const size_t b = line.find_first_not_of(" \t", sp);
    const size_t e = line.find_last_not_of(" \t");
    if (b != std::string::npos) arg = line.substr(b, e - b + 1);
  }
  return {cmd, arg};
}

constexpr const char* kHelp =
    "commands: /reset (new conversation), /save FILE, /load FILE, /help, /quit; Ctrl-C stops a reply";

bool has_chat_template(const api::Model& model) {
  auto info =
      api::Model::detail_json([&](char* b, size_t n) { return loom_chat_template_info(model.handle(), nullptr, b, n); });
  if (!info) return false;
  const nlohmann::json j = nlohmann::json::parse(*info, nullptr, false);
  return j.is_object() && j.value("has_template", false);
}

// The model, its context and sampler as the flags say; nothing after reporting the error.
std::unique_ptr<ChatSession> open_session(const Opts& o, bool* has_template) {
  auto model = load_model_or_report(o.model);
  if (!model) return nullptr;
  if (model->has_encoder()) {
    fail("chat is not supported for encoder-decoder or encoder models (" + model->arch() + "); use loom generate");
    return nullptr;
  }
  api::ContextParams cp;
  cp.p.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_n_ctx(*model);
  cp.p.n_threads = o.threads;
  cp.p.n_batch = std::min(cp.p.n_ctx, 512);
  cp.p.abort_callback = [](void*) { return interrupted(); };
  auto ctx_or = api::Context::create(*model, cp);
  if (!ctx_or) {
    fail(ctx_or.status());
    return nullptr;
  }
  nlohmann::json sp = o.sampling;
  sp["seed"] = o.seed >= 0 ? o.seed : int64_t(std::random_device{}());
  sp["n_ctx"] = ctx_or->n_ctx();
  auto sampler = api::Sampler::create(*model, sp.dump());
  if (!sampler) {
    fail(sampler.status());
    return nullptr;
  }
  *has_template = has_chat_template(*model);
  return std::make_unique<ChatSession>(o, *model, std::move(*ctx_or), std::move(*sampler));
}

// What the loop does after reading: handle the line, read again, or end the chat.
enum class Next { kLine, kAgain, kStop };

// Prompts (on a terminal) and reads a line. A Ctrl-C at the prompt asks for another line, a
// second one in a row ends the chat; a read error ends it with *exit_code 1.
Next read_line(LineReader& reader, bool tty, bool& last_was_interrupt, std::string& line, int* exit_code) {
  if (tty) {
    std::fputs("> ", stderr);
    std::fflush(stderr);
  }
  const LineReader::Result r = reader.next(&line);
  if (r == LineReader::Result::kInterrupted) {
    g_sigint.store(0);
    if (last_was_interrupt) {
      std::fputs("\n", stderr);
      return Next::kStop;
    }
    last_was_interrupt = true;
    std::fputs("\n(Ctrl-C again or /quit to exit)\n", stderr);
    return Next::kAgain;
  }
  if (r == LineReader::Result::kEof) return Next::kStop;
  if (r == LineReader::Result::kError) {
    note(std::string("cannot read stdin: ") + std::strerror(errno));
    *exit_code = 1;
    return Next::kStop;
  }
  last_was_interrupt = false;
  return line.empty() ? Next::kAgain : Next::kLine;
}

// A "/command" line; false for /quit (or /exit).
bool run_command(ChatSession& session, const std::string& line, bool tty) {
  auto [cmd, arg] = split_command(line);
  if (cmd == "quit" || cmd == "exit") return false;
  if (cmd == "help") {
    std::fprintf(stderr, "%s\n", kHelp);
  } else if (cmd == "reset") {
    session.reset();
    if (tty) std::fputs("(new conversation)\n", stderr);
  } else if (cmd == "save" || cmd == "load") {
    if (arg.empty()) {
      note("/" + cmd + " needs a file name");
      return true;
    }
    api::Status st = cmd == "save" ? session.save(arg) : session.load(arg);
    if (!st) {
      fail(st);
    } else if (tty) {
      std::fprintf(stderr, "(%s %s: %zu messages)\n", cmd == "save" ? "saved to" : "loaded from", arg.c_str(),
                   session.n_messages());
    }
  } else {
    note("unknown command " + line.substr(0, line.find_first_of(" \t")) + "; " + kHelp);
  }
  return true;
}

// One user message and its reply; false when the turn failed (not for a Ctrl-C).
bool run_user_turn(ChatSession& session, const std::string& line, bool& last_was_interrupt) {
  bool ok = true;
  g_sigint.store(0);
  auto end = session.turn(line);
  if (!end) {
    if (end.status().code() == LOOM_ERR_ABORTED) {
      std::fputs("\n(interrupted)\n", stderr);
      last_was_interrupt = true;
    } else {
      fail(end.status());
      ok = false;
    }
  } else if (*end == ChatSession::TurnEnd::kInterrupted) {
    std::fputs("(interrupted)\n", stderr);
    last_was_interrupt = true;
  }
  g_sigint.store(0);
  return ok;
}

// Lines until /quit, EOF, a read error or a double Ctrl-C; 1 when a turn or a read failed.
int chat_loop(ChatSession& session, bool tty) {
  LineReader reader;
  int exit_code = 0;
  bool last_was_interrupt = false;  // the previous event was a Ctrl-C (nothing typed since)
  for (;;) {
    std::string line;
    const Next next = read_line(reader, tty, last_was_interrupt, line, &exit_code);
    if (next == Next::kStop) break;
    if (next == Next::kAgain) continue;
    if (line[0] == '/') {
      if (!run_command(session, line, tty)) break;
      continue;
    }
    if (!run_user_turn(session, line, last_was_interrupt)) exit_code = 1;
  }
  return exit_code;
}

// `loom chat`: 0, or 1 when the model could not be loaded or a turn failed.
int run_chat(const Opts& o) {
  bool has_template = false;
  std::unique_ptr<ChatSession> session = open_session(o, &has_template);
  if (!session) return 1;
  SigintGuard sigint_guard;
  g_sigint.store(0);
  const bool tty = isatty(STDIN_FILENO) == 1;
  if (tty) {
    std::fprintf(stderr, "loom chat: %s%s\n", o.model.c_str(),
                 has_template ? "" : " (no chat template in the model: using ChatML)");
    std::fprintf(stderr, "%s\n", kHelp);
  }
  return chat_loop(*session, tty);
}

}  // namespace

void register_chat(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("chat", "Interactive chat using the model's chat template");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (default: training context, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_option("-n,--n-predict", o->n_predict, "most tokens per reply; -1 = until the end of the turn (default -1)")
      ->check(CLI::Range(-1, 1 << 30));
  add_sampler_flags(sub, o->sampling, SamplerFlagSet::kChat);
  sub->add_option("--seed", o->seed, "random seed (default: random)");
  sub->add_option("--system", o->system, "system message that starts the conversation");
  sub->add_flag("-v,--verbose", o->verbose, "after each reply, print token counts and speed on stderr");
  sub->callback([o, &exit_code] { exit_code = run_chat(*o); });
}

}  // namespace loom::cli
