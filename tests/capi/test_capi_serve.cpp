// The C API's scheduler (include/loom/loom_serve.h) against the golden story, and its JSON
// requests, events, session files, chat formatting and benchmark: what the Node binding and other
// language bindings build on.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/loom_serve.h"
#include "loom/loom_serve.hpp"
#include "../model/model_test_util.h"
#include "test_util.h"

namespace {

using loom::test::shared_path;
using nlohmann::json;

struct Model {
  loom_model* m = nullptr;
  explicit Model(const std::string& path) {
    loom_model_params p = loom_model_default_params();
    m = loom_model_load_from_file(path.c_str(), &p);
  }
  ~Model() { loom_model_free(m); }
};

struct Sched {
  loom_scheduler* s = nullptr;
  Sched(const loom_model* m, int slots = 2, int n_ctx = 1024) {
    loom_scheduler_params p = loom_scheduler_default_params();
    p.context.n_ctx = n_ctx;
    p.context.n_threads = 1;
    p.context.n_threads_batch = 1;
    p.n_slots = slots;
    s = loom_scheduler_new(m, &p);
  }
  ~Sched() { loom_scheduler_free(s, 1000); }
};

// Everything one request delivered.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;
  std::vector<int32_t> tokens;
  std::string text;
  json finish, done, error;
  std::vector<json> token_details;

  static void on_event(const loom_event* e, void* user) {
    auto* c = static_cast<Collected*>(user);
    std::lock_guard<std::mutex> l(c->mu);
    switch (e->kind) {
      case LOOM_EVENT_TOKEN:
        c->tokens.push_back(e->token);
        c->text.append(e->text, e->text_len);
        if (e->json) c->token_details.push_back(json::parse(e->json));
        break;
      case LOOM_EVENT_FINISH:
        c->text.append(e->text, e->text_len);
        c->finish = json::parse(e->json);
        break;
      case LOOM_EVENT_DONE:
        c->done = json::parse(e->json);
        c->ended = true;
        break;
      case LOOM_EVENT_ERROR:
        c->error = json::parse(e->json);
        c->ended = true;
        break;
    }
    c->cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    // A bound, not a timing check: a tool-call grammar takes about a minute under QEMU (ARM).
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(600), [&] { return ended; }));
  }
};

std::unique_ptr<Collected> run(loom_scheduler* s, const json& req) {
  auto c = std::make_unique<Collected>();
  uint64_t id = 0;
  const int32_t st = loom_scheduler_submit(s, req.dump().c_str(), &Collected::on_event, c.get(), &id);
  EXPECT_EQ(st, LOOM_OK) << loom_last_error();
  if (st != LOOM_OK) return c;
  c->wait();
  return c;
}

std::string stories_path() { return shared_path("models/stories260K.gguf"); }

TEST(CapiScheduler, GreedyPromptGivesTheGoldenStory) {
  Model m(stories_path());
  ASSERT_TRUE(m.m) << loom_last_error();
  Sched s(m.m);
  ASSERT_TRUE(s.s) << loom_last_error();
  const json g = loom::test::load_json(shared_path("golden/stories260K.json"));
  for (const auto& r : g["runs"]) {
    const auto want = r["greedy_ids"].get<std::vector<int32_t>>();
    auto c = run(s.s, {{"prompt", r["prompt_ids"]}, {"n_predict", want.size()}, {"temperature", 0}});
    EXPECT_EQ(c->tokens, want) << r["prompt"];
    EXPECT_EQ(c->finish["tokens"].get<std::vector<int32_t>>(), want);
    EXPECT_EQ(c->finish["text"].get<std::string>(), c->text);
    EXPECT_EQ(c->done["prompt_tokens"].get<int>(), int(r["prompt_ids"].size()));
    EXPECT_EQ(c->done["usage"]["completion_tokens"].get<int>(), int(want.size()));
    EXPECT_TRUE(c->done["timings"].contains("predicted_per_second"));
  }
  // A text prompt tokenizes as the golden prompt ids and streams the golden text.
  const auto& r0 = g["runs"][0];
  auto c = run(s.s, {{"prompt", r0["prompt"]}, {"n_predict", 64}, {"temperature", 0}});
  EXPECT_EQ(c->text, r0["greedy_text"].get<std::string>());
}

TEST(CapiScheduler, DraftModelGivesTheGoldenStoryAndIsChecked) {
  Model m(stories_path());
  ASSERT_TRUE(m.m) << loom_last_error();
  loom_scheduler_params p = loom_scheduler_default_params();
  p.context.n_ctx = 1024;
  p.context.n_threads = 1;
  p.n_slots = 2;
  loom_scheduler* s = loom_scheduler_new_with_draft(m.m, &p, m.m, R"({"draft_max": 4, "p_min": 0})");
  ASSERT_TRUE(s) << loom_last_error();
  const json g = loom::test::load_json(shared_path("golden/stories260K.json"));
  for (const auto& r : g["runs"]) {
    const auto want = r["greedy_ids"].get<std::vector<int32_t>>();
    auto c = run(s, {{"prompt", r["prompt_ids"]}, {"n_predict", want.size()}, {"temperature", 0}});
    EXPECT_EQ(c->tokens, want) << r["prompt"];
  }
  static char buf[1 << 16];
  ASSERT_GT(loom_scheduler_stats(s, buf, sizeof buf), 0);
  const json st = json::parse(buf);
  EXPECT_GT(st["draft_accepted"].get<int64_t>(), 0) << st.dump();
  // The metrics object: counters and histograms, as /metrics exports them.
  const json& mt = st["metrics"];
  EXPECT_EQ(mt["requests_length"].get<int64_t>() + mt["requests_stop"].get<int64_t>(), int64_t(g["runs"].size()));
  EXPECT_EQ(mt["draft_accepted"], st["draft_accepted"]);
  for (const char* h : {"ttft_seconds", "inter_token_seconds", "queue_seconds", "e2e_seconds"}) {
    const json& x = mt[h];
    ASSERT_EQ(x["counts"].size(), x["bounds"].size() + 1) << h;
    int64_t n = 0;
    for (const auto& c : x["counts"]) n += c.get<int64_t>();
    EXPECT_EQ(n, x["count"].get<int64_t>()) << h;
  }
  EXPECT_EQ(mt["e2e_seconds"]["count"].get<int64_t>(), int64_t(g["runs"].size()));
  loom_scheduler_free(s, 1000);
  // Refusals: another vocabulary, bad options, a NULL draft.
  Model bert(shared_path("models/synth-bert-tiny-f32.gguf"));
  ASSERT_TRUE(bert.m);
  EXPECT_EQ(loom_scheduler_new_with_draft(m.m, &p, bert.m, nullptr), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("differs"), std::string::npos) << loom_last_error();
  for (const char* o : {R"({"draft_max": 0})", R"({"draft_max": 99})", R"({"p_min": 2})", R"({"colour": 1})", "[",
                        R"({"draft_max": "x"})"}) {
    EXPECT_EQ(loom_scheduler_new_with_draft(m.m, &p, m.m, o), nullptr) << o;
  }
  EXPECT_EQ(loom_scheduler_new_with_draft(m.m, &p, nullptr, nullptr), nullptr);
}

TEST(CapiScheduler, BadRequestsFailWithTheFieldNamed) {
  Model m(stories_path());
  Sched s(m.m);
  ASSERT_TRUE(s.s);
  Collected c;
  uint64_t id = 0;
  auto submit = [&](const char* body) { return loom_scheduler_submit(s.s, body, &Collected::on_event, &c, &id); };
  EXPECT_EQ(submit("{"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(loom_last_error()).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(submit("[1,2]"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(submit(R"({"prompt": [1, 99999]})"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(loom_last_error()).find("prompt[1]"), std::string::npos);
  EXPECT_EQ(submit(R"({"prompt": "x", "temperature": "hot"})"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(loom_last_error()).find("temperature"), std::string::npos);
  EXPECT_EQ(submit(R"({"prompt": "x", "grammar": "root ::= ("})"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(submit(R"({"nothing": 1})"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(submit(std::string(100, '[').c_str()), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(loom_last_error()).find("nested"), std::string::npos);
  EXPECT_EQ(loom_scheduler_submit(s.s, nullptr, &Collected::on_event, &c, &id), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(loom_scheduler_submit(s.s, "{\"prompt\": \"x\"}", nullptr, &c, &id), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(loom_scheduler_submit(nullptr, "{}", &Collected::on_event, &c, &id), LOOM_ERR_INVALID_ARGUMENT);
  // None of it disturbed the scheduler.
  auto ok = run(s.s, {{"prompt", "Once"}, {"n_predict", 4}, {"temperature", 0}});
  EXPECT_EQ(ok->tokens.size(), 4u);
}

TEST(CapiScheduler, ProbabilitiesAndStopsComeWithTheEvents) {
  Model m(stories_path());
  Sched s(m.m);
  auto c = run(s.s, {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"temperature", 0}, {"n_probs", 3}});
  ASSERT_EQ(c->token_details.size(), c->tokens.size());
  for (const auto& d : c->token_details) {
    ASSERT_EQ(d["top"].size(), 3u);
    EXPECT_LE(d["logprob"].get<double>(), 0.0);
    EXPECT_GE(d["top"][0]["logprob"].get<double>(), d["top"][1]["logprob"].get<double>());
  }
  // Greedy: the chosen token is the most likely one.
  EXPECT_EQ(c->token_details[0]["top"][0]["id"].get<int32_t>(), c->tokens[0]);
  EXPECT_TRUE(c->finish["stopped_limit"].get<bool>());
  // A stop string taken from the greedy text ends it there, unseen.
  const std::string full = c->text;
  const std::string stop = full.substr(full.size() / 2, 3);
  auto d = run(s.s, {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"temperature", 0}, {"stop", {stop}}});
  EXPECT_TRUE(d->finish["stopped_word"].get<bool>());
  EXPECT_EQ(d->finish["stop_word"].get<std::string>(), stop);
  EXPECT_EQ(d->text, full.substr(0, full.find(stop)));
}

TEST(CapiScheduler, SessionFilesRoundTripThroughThePrefixCache) {
  Model m(stories_path());
  Sched s(m.m);
  const json req = {
      {"prompt", "Once upon a time, there was a little girl named Lily."}, {"n_predict", 24}, {"temperature", 0}};
  auto first = run(s.s, req);
  ASSERT_EQ(first->tokens.size(), 24u);
  // The prompt + the output, as a binding keeps them.
  const std::string path = testing::TempDir() + "/capi_session.bin";
  std::vector<int32_t> prompt_ids(256);
  const int32_t n = loom_tokenize(m.m, req["prompt"].get<std::string>().c_str(), -1, prompt_ids.data(), 256, true, true);
  ASSERT_GT(n, 0);
  prompt_ids.resize(size_t(n));
  std::vector<int32_t> toks = prompt_ids;
  toks.insert(toks.end(), first->tokens.begin(), first->tokens.end());
  int32_t saved = 0;
  ASSERT_EQ(loom_scheduler_save_session(s.s, path.c_str(), toks.data(), int32_t(toks.size()), &saved), LOOM_OK)
      << loom_last_error();
  EXPECT_GE(saved, n);
  ASSERT_EQ(loom_scheduler_clear_cache(s.s), LOOM_OK);
  // A fresh scheduler (as after a restart) loads it and reuses it.
  Sched s2(m.m);
  std::vector<int32_t> loaded(4096);
  int32_t n_loaded = 0;
  ASSERT_EQ(loom_scheduler_load_session(s2.s, path.c_str(), loaded.data(), 4096, &n_loaded), LOOM_OK) << loom_last_error();
  EXPECT_EQ(n_loaded, saved);
  loaded.resize(size_t(n_loaded));
  EXPECT_TRUE(std::equal(loaded.begin(), loaded.end(), toks.begin()));
  auto again = run(s2.s, req);
  EXPECT_EQ(again->tokens, first->tokens);
  EXPECT_GE(again->done["usage"]["cached_tokens"].get<int>(), n - 1);
  // A corrupt file and a missing one are refused; the cache still works.
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "not a state file at all";
  }
  EXPECT_LT(loom_scheduler_load_session(s2.s, path.c_str(), nullptr, 0, &n_loaded), 0);
  EXPECT_LT(loom_scheduler_load_session(s2.s, (path + ".missing").c_str(), nullptr, 0, &n_loaded), 0);
  auto after = run(s2.s, req);
  EXPECT_EQ(after->tokens, first->tokens);
  std::remove(path.c_str());
}

TEST(CapiScheduler, ChatRequestsParseToolCalls) {
  Model m(stories_path());
  Sched s(m.m);
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  const json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                    {"tools", tools},
                    {"tool_choice", "required"},
                    {"n_predict", 400},
                    {"temperature", 0}};
  auto c = run(s.s, req);
  ASSERT_TRUE(c->error.is_null()) << c->error.dump();
  ASSERT_EQ(c->finish["tool_calls"].size(), 1u) << c->text;
  EXPECT_EQ(c->finish["tool_calls"][0]["function"]["name"], "get_weather");
  // The formatted prompt and grammar, as getFormattedChat shows them.
  std::vector<char> buf(1 << 16);
  const int32_t n = loom_chat_format(m.m, req.dump().c_str(), buf.data(), buf.size());
  ASSERT_GT(n, 0) << loom_last_error();
  const json f = json::parse(std::string(buf.data(), size_t(n)));
  EXPECT_NE(f["prompt"].get<std::string>().find("Weather in Paris?"), std::string::npos);
  EXPECT_FALSE(f["grammar"].get<std::string>().empty());
  // Too small a buffer says how much is needed.
  EXPECT_EQ(loom_chat_format(m.m, req.dump().c_str(), buf.data(), 4), -(n + 1));
  EXPECT_EQ(loom_chat_format(m.m, R"({"messages": 3})", buf.data(), buf.size()), LOOM_SIZE_ERROR);
}

// --- streamed parse, reasoning_format, template names ---------------------------------------

// A chat request whose output a grammar fixes (stories260K has no template: loom's ChatML, the
// Hermes tool-call syntax).
json forced_chat(const std::string& output) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "ping", "description": "Ping.",
      "parameters": {"type": "object", "properties": {}}}}])");
  return {{"messages", {{{"role", "user"}, {"content", "Ping it."}}}},
          {"tools", tools},
          {"grammar", "root ::= " + json(output).dump()},
          {"n_predict", 400},
          {"temperature", 0}};
}

const std::string kForced =
    "<think>Check the tool.</think>\nSure, calling it.\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";

TEST(CapiScheduler, StreamParseGivesTheParsedMessageSoFar) {
  Model m(stories_path());
  Sched s(m.m);
  json req = forced_chat(kForced);
  req["stream_parse"] = true;
  auto c = run(s.s, req);
  ASSERT_TRUE(c->error.is_null()) << c->error.dump();
  ASSERT_EQ(c->text, kForced);
  ASSERT_EQ(c->token_details.size(), c->tokens.size());
  // Every token event: the accumulated parse, each field only growing.
  std::string content, reasoning;
  size_t calls = 0;
  bool saw_reasoning_alone = false;
  for (const json& d : c->token_details) {
    ASSERT_TRUE(d["content"].is_string() && d["reasoning_content"].is_string() && d["tool_calls"].is_array()) << d.dump();
    const std::string ct = d["content"], rs = d["reasoning_content"];
    ASSERT_TRUE(ct.starts_with(content)) << "'" << content << "' -> '" << ct << "'";
    ASSERT_TRUE(rs.starts_with(reasoning)) << "'" << reasoning << "' -> '" << rs << "'";
    ASSERT_GE(d["tool_calls"].size(), calls);
    EXPECT_EQ(ct.find("<tool"), std::string::npos) << "raw tool-call text streamed as content: " << ct;
    EXPECT_EQ(ct.find("<think"), std::string::npos) << ct;
    saw_reasoning_alone = saw_reasoning_alone || (!rs.empty() && ct.empty());
    content = ct;
    reasoning = rs;
    calls = d["tool_calls"].size();
  }
  EXPECT_TRUE(saw_reasoning_alone);
  // The finish event's message is the full parse and extends the last token event's.
  const json& f = c->finish;
  EXPECT_EQ(f["reasoning_content"], "Check the tool.");
  EXPECT_EQ(f["content"], "Sure, calling it.");
  ASSERT_EQ(f["tool_calls"].size(), 1u);
  EXPECT_EQ(f["tool_calls"][0]["function"]["name"], "ping");
  EXPECT_TRUE(f["content"].get<std::string>().starts_with(content));
  if (calls == 1) {
    EXPECT_EQ(c->token_details.back()["tool_calls"][0], f["tool_calls"][0]);  // same id
  }

  // Without stream_parse, token events carry no JSON (unless logprobs are asked for); with both,
  // both are there.
  auto plain = run(s.s, forced_chat(kForced));
  EXPECT_TRUE(plain->token_details.empty());
  EXPECT_EQ(plain->finish["content"], "Sure, calling it.");
  req["n_probs"] = 2;
  auto both = run(s.s, req);
  ASSERT_EQ(both->token_details.size(), both->tokens.size());
  EXPECT_EQ(both->token_details.back()["top"].size(), 2u);
  EXPECT_TRUE(both->token_details.back().contains("content"));
  // A completion request ignores it.
  auto completion = run(s.s, {{"prompt", "Once"}, {"n_predict", 3}, {"stream_parse", true}});
  EXPECT_TRUE(completion->token_details.empty());
}

TEST(CapiScheduler, ReasoningFormatAppliesToStreamAndFinish) {
  Model m(stories_path());
  Sched s(m.m);
  struct Case {
    const char* format;  // nullptr: not given
    bool stream;
    const char* content;
    const char* reasoning;
  };
  const Case cases[] = {
      {nullptr, false, "Sure, calling it.", "Check the tool."},
      {"auto", true, "Sure, calling it.", "Check the tool."},
      {"deepseek", true, "Sure, calling it.", "Check the tool."},
      {"deepseek-legacy", false, "Sure, calling it.", "Check the tool."},
      {"deepseek-legacy", true, "<think>Check the tool.</think>Sure, calling it.", ""},
      {"none", false, "<think>Check the tool.</think>\nSure, calling it.", ""},
      {"none", true, "<think>Check the tool.</think>\nSure, calling it.", ""},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.format ? k.format : "(default)") + (k.stream ? " streamed" : ""));
    json req = forced_chat(kForced);
    if (k.format) req["reasoning_format"] = k.format;
    if (k.stream) req["stream_parse"] = true;
    auto c = run(s.s, req);
    ASSERT_TRUE(c->error.is_null()) << c->error.dump();
    EXPECT_EQ(c->finish["content"], k.content);
    EXPECT_EQ(c->finish["reasoning_content"], k.reasoning);
    EXPECT_EQ(c->finish["tool_calls"].size(), 1u);
    std::string prev;
    for (const json& d : c->token_details) {
      const std::string ct = d["content"];
      ASSERT_TRUE(ct.starts_with(prev)) << "'" << prev << "' -> '" << ct << "'";
      prev = ct;
    }
    EXPECT_TRUE(std::string(k.content).starts_with(prev)) << prev;
  }
}

TEST(CapiScheduler, StreamParseReasoningFormatAndTemplateNamesAreChecked) {
  Model m(stories_path());
  Sched s(m.m);
  Collected c;
  uint64_t id = 0;
  const auto submit = [&](json req) {
    return loom_scheduler_submit(s.s, req.dump().c_str(), &Collected::on_event, &c, &id);
  };
  const json msgs = {{{"role", "user"}, {"content", "Hi"}}};
  const auto error_has = [](const char* what) { return std::string(loom_last_error()).find(what) != std::string::npos; };
  EXPECT_EQ(submit({{"messages", msgs}, {"stream_parse", "yes"}}), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("stream_parse: expected a boolean")) << loom_last_error();
  EXPECT_EQ(submit({{"prompt", "x"}, {"stream_parse", 1}}), LOOM_ERR_INVALID_ARGUMENT);  // checked everywhere
  EXPECT_EQ(submit({{"messages", msgs}, {"reasoning_format", 3}}), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("reasoning_format: expected a string")) << loom_last_error();
  EXPECT_EQ(submit({{"messages", msgs}, {"reasoning_format", "deepthink"}}), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("\"none\", \"auto\", \"deepseek\" or \"deepseek-legacy\"")) << loom_last_error();
  EXPECT_EQ(submit({{"messages", msgs}, {"chat_template", "llama-3"}}), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("built-in template name (known: chatml, llama2")) << loom_last_error();
  EXPECT_EQ(submit({{"messages", msgs}, {"chat_template", std::string(1 << 20, 'q')}}), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_LT(std::string(loom_last_error()).size(), 4096u);
  EXPECT_EQ(submit({{"messages", msgs}, {"chat_template", 7}}), LOOM_ERR_INVALID_ARGUMENT);
  // None of it was queued; a named template runs.
  auto ok = run(s.s, {{"messages", msgs}, {"chat_template", "zephyr"}, {"n_predict", 2}, {"stream_parse", true}});
  EXPECT_TRUE(ok->error.is_null()) << ok->error.dump();
  EXPECT_FALSE(c.ended);
}

TEST(CapiScheduler, TemplateNamesWorkWhereverATemplateIsGiven) {
  Model m(stories_path());
  std::vector<char> buf(1 << 16);
  const auto format = [&](const json& req) {
    const int32_t n = loom_chat_format(m.m, req.dump().c_str(), buf.data(), buf.size());
    EXPECT_GT(n, 0) << loom_last_error();
    return n > 0 ? json::parse(std::string(buf.data(), size_t(n))) : json();
  };
  const json msgs = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(format({{"messages", msgs}, {"chat_template", "llama3"}})["prompt"],
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(format({{"messages", msgs}, {"chat_template", "gemma"}})["prompt"],
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(format({{"messages", msgs}, {"chat_template", "mistral-v7"}})["prompt"],
            "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST]");
  EXPECT_EQ(loom_chat_format(m.m, R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template": "nope"})",
                             buf.data(), buf.size()),
            LOOM_SIZE_ERROR);
  EXPECT_NE(std::string(loom_last_error()).find("built-in template name"), std::string::npos);
  // loom_chat_template_info shows the source a name stands for.
  int32_t n = loom_chat_template_info(m.m, "phi3", buf.data(), buf.size());
  ASSERT_GT(n, 0) << loom_last_error();
  const json info = json::parse(std::string(buf.data(), size_t(n)));
  EXPECT_NE(info["template"].get<std::string>().find("<|end|>"), std::string::npos);
  EXPECT_EQ(info["tool_call_format"], "generic");
  EXPECT_EQ(loom_chat_template_info(m.m, "phi-3", buf.data(), buf.size()), LOOM_SIZE_ERROR);
  // The scheduler's chat_template: a name too.
  loom_scheduler_params p = loom_scheduler_default_params();
  p.context.n_ctx = 512;
  p.context.n_threads = 1;
  p.n_slots = 1;
  p.chat_template = "chatml";
  loom_scheduler* s = loom_scheduler_new(m.m, &p);
  ASSERT_TRUE(s) << loom_last_error();
  auto c = run(s, {{"messages", msgs}, {"n_predict", 2}});
  EXPECT_TRUE(c->error.is_null()) << c->error.dump();
  loom_scheduler_free(s, 1000);
}

// A long output streamed with stream_parse: 4,000 tokens, each event carrying the accumulated
// parse; the callback only counts. (The cost per token is measured in test_tool_calls'
// PartialParse.LongOutputCost.)
struct Counting {
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;
  size_t tokens = 0, json_bytes = 0;
  std::string last_json, finish_json;
  static void on_event(const loom_event* e, void* user) {
    auto* c = static_cast<Counting*>(user);
    std::lock_guard<std::mutex> l(c->mu);
    if (e->kind == LOOM_EVENT_TOKEN) {
      ++c->tokens;
      if (e->json) {
        c->json_bytes += std::strlen(e->json);
        c->last_json = e->json;
      }
    } else if (e->kind == LOOM_EVENT_FINISH) {
      c->finish_json = e->json;
    } else {
      c->ended = true;
    }
    c->cv.notify_all();
  }
};

TEST(CapiScheduler, StreamParseOnALongOutput) {
  Model m(stories_path());
  Sched s(m.m, 1, 4608);
  const json tools =
      json::parse(R"([{"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}])");
  const json req = {{"messages", {{{"role", "user"}, {"content", "Tell me a long story."}}}},
                    {"tools", tools},
                    {"n_predict", 4000},
                    {"ignore_eos", true},
                    {"temperature", 0},
                    {"stream_parse", true}};
  Counting c;
  uint64_t id = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(loom_scheduler_submit(s.s, req.dump().c_str(), &Counting::on_event, &c, &id), LOOM_OK) << loom_last_error();
  {
    std::unique_lock<std::mutex> l(c.mu);
    ASSERT_TRUE(c.cv.wait_for(l, std::chrono::seconds(600), [&] { return c.ended; }));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(c.tokens, 4000u);
  const json last = json::parse(c.last_json), fin = json::parse(c.finish_json);
  EXPECT_TRUE(fin["content"].get<std::string>().starts_with(last["content"].get<std::string>()));
  EXPECT_EQ(fin["content"], fin["text"]);  // a story: no call, no reasoning
  std::printf("4000 tokens with stream_parse, %zu bytes of text: %.0f ms (stories260K, 1 thread), %.1f MB of event JSON\n",
              fin["text"].get<std::string>().size(), ms, double(c.json_bytes) / 1e6);
}

// loom_scheduler_submit_ext: per-frontend defaults and endpoint, the description of what a request
// became (written before anything is queued), and loom_scheduler_shutdown before the free.
// The in-process C++ API (loom_serve.hpp) that `loom serve` submits through: for the same request,
// its typed events carry exactly what the C API's events carry as JSON, its info what info_buf
// gets, and its refusals the same messages without a function name.
TEST(CppServeApi, TypedEventsCarryWhatTheCEventsCarry) {
  Model m(stories_path());
  Sched s(m.m);
  ASSERT_TRUE(s.s);
  json req = forced_chat(kForced);
  req["stream_parse"] = true;
  req["n_probs"] = 2;
  const auto c = run(s.s, req);
  ASSERT_TRUE(c->error.is_null()) << c->error.dump();

  struct Typed {
    std::mutex mu;
    std::condition_variable cv;
    bool ended = false;
    std::vector<loom::api::GenerationEvent> events;
  };
  auto t = std::make_shared<Typed>();
  loom::api::GenerationInfo info;
  loom::api::GenerationOptions opts;
  opts.endpoint = loom::api::GenerationOptions::Endpoint::kChat;
  auto id = loom::api::submit_generation(
      s.s, nlohmann::ordered_json(req), opts,
      [t](const loom::api::GenerationEvent& e) {
        std::lock_guard<std::mutex> l(t->mu);
        t->events.push_back(e);
        if (e.kind == LOOM_EVENT_DONE || e.kind == LOOM_EVENT_ERROR) t->ended = true;
        t->cv.notify_all();
      },
      &info);
  ASSERT_TRUE(id) << id.status().message();
  {
    std::unique_lock<std::mutex> l(t->mu);
    ASSERT_TRUE(t->cv.wait_for(l, std::chrono::seconds(600), [&] { return t->ended; }));
  }
  // info: as submit_ext's JSON would say.
  EXPECT_TRUE(info.chat);
  EXPECT_TRUE(info.stream_parse);
  EXPECT_EQ(info.tool_call_format, "hermes");
  EXPECT_TRUE(info.logprobs);
  EXPECT_GT(info.prompt_tokens, 0);
  EXPECT_FALSE(info.grammar_triggers.empty());

  std::vector<const loom::api::GenerationEvent*> tokens;
  const loom::api::GenerationEvent *finish = nullptr, *done = nullptr;
  for (const auto& e : t->events) {
    if (e.kind == LOOM_EVENT_TOKEN) tokens.push_back(&e);
    if (e.kind == LOOM_EVENT_FINISH) finish = &e;
    if (e.kind == LOOM_EVENT_DONE) done = &e;
  }
  ASSERT_EQ(tokens.size(), c->tokens.size());
  ASSERT_EQ(c->token_details.size(), c->tokens.size());
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& e = *tokens[i];
    const json& d = c->token_details[i];
    EXPECT_EQ(e.token, c->tokens[i]) << i;
    text += e.text;
    ASSERT_TRUE(e.has_logprob) << i;
    EXPECT_EQ(e.chosen.id, e.token);
    EXPECT_EQ(e.chosen.piece, d["piece"]) << i;
    EXPECT_DOUBLE_EQ(e.chosen.logprob, d["logprob"].get<double>()) << i;
    ASSERT_EQ(e.top.size(), d["top"].size()) << i;
    for (size_t k = 0; k < e.top.size(); ++k) {
      EXPECT_EQ(e.top[k].id, d["top"][k]["id"]);
      EXPECT_EQ(e.top[k].piece, d["top"][k]["piece"]);
      EXPECT_DOUBLE_EQ(e.top[k].logprob, d["top"][k]["logprob"].get<double>());
    }
    ASSERT_TRUE(e.has_message) << i;
    EXPECT_EQ(e.content, d["content"]) << i;
    EXPECT_EQ(e.reasoning_content, d["reasoning_content"]) << i;
    EXPECT_EQ(json::parse(e.tool_calls.dump()).size(), d["tool_calls"].size()) << i;
    ASSERT_EQ(e.deltas.size(), d["deltas"].size()) << i;
    for (size_t k = 0; k < e.deltas.size(); ++k) {
      // Tool-call ids are drawn per request; everything else must agree.
      json a = json::parse(e.deltas[k].dump()), b = d["deltas"][k];
      if (a.contains("tool_calls")) {
        for (auto& tc : a["tool_calls"]) tc.erase("id");
        for (auto& tc : b["tool_calls"]) tc.erase("id");
      }
      EXPECT_EQ(a, b) << i;
    }
  }
  ASSERT_TRUE(finish && done);
  text += finish->text;
  EXPECT_EQ(text, c->text);
  EXPECT_EQ(finish->all_text, c->finish["text"]);
  EXPECT_EQ(finish->reason, c->finish["reason"]);
  EXPECT_EQ(finish->stop_word, c->finish["stop_word"]);
  EXPECT_EQ(finish->tokens, c->finish["tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(finish->content, c->finish["content"]);
  EXPECT_EQ(finish->reasoning_content, c->finish["reasoning_content"]);
  ASSERT_EQ(finish->tool_calls.size(), 1u);
  EXPECT_EQ(finish->tool_calls[0]["function"]["name"], "ping");
  EXPECT_EQ(done->prompt_tokens, c->done["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(done->completion_tokens, c->done["usage"]["completion_tokens"].get<int64_t>());
  EXPECT_EQ(done->predicted_n, c->done["timings"]["predicted_n"].get<int64_t>());
  EXPECT_EQ(done->prompt_ids, c->done["prompt_ids"].get<std::vector<int32_t>>());

  // Refusals: the field named, no function name, nothing queued, no callback.
  bool called = false;
  auto bad = loom::api::submit_generation(s.s, nlohmann::ordered_json::parse(R"({"prompt": "x", "temperature": "hot"})"), {},
                                          [&](const loom::api::GenerationEvent&) { called = true; });
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad.status().message().rfind("temperature", 0), 0u) << bad.status().message();
  auto not_object =
      loom::api::submit_generation(s.s, nlohmann::ordered_json::array(), {}, [](const loom::api::GenerationEvent&) {});
  EXPECT_FALSE(not_object);
  auto no_callback = loom::api::submit_generation(s.s, nlohmann::ordered_json::parse(R"({"prompt": "x"})"), {}, {});
  EXPECT_FALSE(no_callback);
  auto no_sched = loom::api::submit_generation(nullptr, nlohmann::ordered_json::parse(R"({"prompt": "x"})"), {},
                                               [](const loom::api::GenerationEvent&) {});
  EXPECT_FALSE(no_sched);
  EXPECT_FALSE(called);
  // reasoning_end on a request that has ended, or on nothing (the server test runs a live one).
  EXPECT_EQ(loom_scheduler_end_reasoning(s.s, *id), LOOM_ERR_NOT_FOUND);
  EXPECT_EQ(loom_scheduler_end_reasoning(s.s, 999999), LOOM_ERR_NOT_FOUND);
  EXPECT_EQ(loom_scheduler_end_reasoning(nullptr, 1), LOOM_ERR_INVALID_ARGUMENT);
}

// llama-server's slots through the C API: a slot remembers the last request that ran in it; save
// writes its cached tokens, restore reads them back (another slot may take them), erase forgets.
TEST(CapiScheduler, SlotsSaveRestoreErase) {
  Model m(stories_path());
  Sched s(m.m, 2);
  ASSERT_TRUE(s.s);
  std::vector<char> buf(4096);
  ASSERT_GT(loom_scheduler_slots(s.s, buf.data(), buf.size()), 0);
  json slots = json::parse(buf.data());
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0]["n_cached"], 0);
  const std::string path = ::testing::TempDir() + "/loom_slot_test.bin";
  int32_t n = -1;
  EXPECT_EQ(loom_scheduler_slot_save(s.s, 0, path.c_str(), &n), LOOM_ERR_NOT_FOUND) << "an empty slot";
  EXPECT_EQ(loom_scheduler_slot_save(s.s, 2, path.c_str(), &n), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(loom_scheduler_slot_erase(s.s, -1, &n), LOOM_ERR_INVALID_ARGUMENT);
  auto c = run(s.s, {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"temperature", 0}, {"id_slot", 1}});
  ASSERT_TRUE(c->error.is_null()) << c->error.dump();
  ASSERT_GT(loom_scheduler_slots(s.s, buf.data(), buf.size()), 0);
  slots = json::parse(buf.data());
  const int cached = slots[1]["n_cached"];
  EXPECT_GT(cached, 8);
  EXPECT_EQ(slots[1]["n_decoded"], 8);
  EXPECT_NE(slots[1]["request_id"], 0);
  EXPECT_EQ(slots[0]["n_cached"], 0) << "id_slot 1 ran in slot 1";
  ASSERT_EQ(loom_scheduler_slot_save(s.s, 1, path.c_str(), &n), LOOM_OK) << loom_last_error();
  EXPECT_EQ(n, cached);
  ASSERT_EQ(loom_scheduler_slot_erase(s.s, 1, &n), LOOM_OK);
  EXPECT_EQ(n, cached);
  ASSERT_GT(loom_scheduler_slots(s.s, buf.data(), buf.size()), 0);
  EXPECT_EQ(json::parse(buf.data())[1]["n_cached"], 0);
  ASSERT_EQ(loom_scheduler_slot_restore(s.s, 0, path.c_str(), &n), LOOM_OK) << loom_last_error();
  EXPECT_EQ(n, cached);
  ASSERT_GT(loom_scheduler_slots(s.s, buf.data(), buf.size()), 0);
  EXPECT_EQ(json::parse(buf.data())[0]["n_cached"], cached);
  std::remove(path.c_str());
  EXPECT_NE(loom_scheduler_slot_restore(s.s, 0, path.c_str(), &n), LOOM_OK) << "a missing file";
}

TEST(CapiScheduler, SubmitExtDescribesTheRequestAndShutdownRefusesNewOnes) {
  Model m(stories_path());
  Sched s(m.m);
  ASSERT_TRUE(s.s);
  Collected c;
  uint64_t id = 0;
  std::vector<char> info(4096);
  // The default max_tokens applies where the request gives none, and the seed drawn is reported.
  ASSERT_EQ(loom_scheduler_submit_ext(s.s, R"({"prompt": "Once", "n": 2, "logprobs": 3})",
                                      R"({"n_predict": 5, "endpoint": "completion"})", &Collected::on_event, &c, &id,
                                      info.data(), info.size()),
            LOOM_OK)
      << loom_last_error();
  c.wait();
  const json d = json::parse(info.data());
  EXPECT_EQ(d["max_tokens"], 5);
  EXPECT_EQ(d["n"], 2);
  EXPECT_EQ(d["logprobs"], true);
  EXPECT_EQ(d["top_logprobs"], 3);
  EXPECT_EQ(d["chat"], false);
  EXPECT_EQ(d["tool_call_format"], "none");
  EXPECT_TRUE(d["grammar_triggers"].empty());
  EXPECT_TRUE(d["seed"].is_number_unsigned());
  EXPECT_EQ(c.done["usage"]["completion_tokens"], 10);  // two choices of five
  // A request's own length wins over the default.
  Collected c2;
  ASSERT_EQ(loom_scheduler_submit_ext(s.s, R"({"prompt": "Once", "max_tokens": 3, "seed": 7})", R"({"n_predict": 5})",
                                      &Collected::on_event, &c2, &id, info.data(), info.size()),
            LOOM_OK);
  c2.wait();
  EXPECT_EQ(json::parse(info.data())["seed"], 7);
  EXPECT_EQ(c2.done["usage"]["completion_tokens"], 3);
  // Endpoints: "chat" needs messages (a prompt is not enough), "completion" needs a prompt.
  Collected unused;
  EXPECT_EQ(loom_scheduler_submit_ext(s.s, R"({"prompt": "Once"})", R"({"endpoint": "chat"})", &Collected::on_event, &unused,
                                      &id, nullptr, 0),
            LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(loom_last_error()).find("messages"), std::string::npos) << loom_last_error();
  EXPECT_EQ(loom_scheduler_submit_ext(s.s, R"({"messages": [{"role": "user", "content": "Hi"}]})",
                                      R"({"endpoint": "completion"})", &Collected::on_event, &unused, &id, nullptr, 0),
            LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(loom_last_error()).find("prompt: required"), std::string::npos) << loom_last_error();
  // Bad options, and a description that does not fit: refused, nothing queued.
  for (const char* o : {"[", R"({"endpoint": "edit"})", R"({"n_predict": -2})", R"({"colour": 1})"}) {
    EXPECT_EQ(loom_scheduler_submit_ext(s.s, R"({"prompt": "Once"})", o, &Collected::on_event, &unused, &id, nullptr, 0),
              LOOM_ERR_INVALID_ARGUMENT)
        << o;
  }
  EXPECT_EQ(
      loom_scheduler_submit_ext(s.s, R"({"prompt": "Once"})", nullptr, &Collected::on_event, &unused, &id, info.data(), 8),
      LOOM_ERR_RESOURCE_EXHAUSTED);
  EXPECT_EQ(loom_scheduler_submit_ext(s.s, R"({"prompt": "Once"})", nullptr, &Collected::on_event, &unused, &id, nullptr, 8),
            LOOM_ERR_INVALID_ARGUMENT);
  // A chat request with tools reports its format's triggers.
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  Collected c3;
  ASSERT_EQ(
      loom_scheduler_submit_ext(
          s.s,
          json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"tools", tools}, {"max_tokens", 2}}.dump().c_str(),
          R"({"endpoint": "chat"})", &Collected::on_event, &c3, &id, info.data(), info.size()),
      LOOM_OK)
      << loom_last_error();
  c3.wait();
  const json d3 = json::parse(info.data());
  EXPECT_EQ(d3["chat"], true);
  EXPECT_NE(d3["tool_call_format"], "none");
  EXPECT_FALSE(d3["grammar_triggers"].empty()) << d3.dump();
  ASSERT_FALSE(unused.ended);  // nothing refused was ever queued
  // Shutdown: new requests are refused as unavailable, the handle still answers.
  loom_scheduler_shutdown(s.s, 1000);
  EXPECT_EQ(loom_scheduler_submit(s.s, R"({"prompt": "Once"})", &Collected::on_event, &unused, &id), LOOM_ERR_UNAVAILABLE);
  EXPECT_GT(loom_scheduler_stats(s.s, info.data(), info.size()), 0);
  loom_scheduler_shutdown(s.s, 0);  // again: nothing happens
  loom_scheduler_shutdown(nullptr, 0);
}

TEST(CapiScheduler, DraftContextSizeIsAnOption) {
  Model m(stories_path());
  loom_scheduler_params p = loom_scheduler_default_params();
  p.context.n_ctx = 512;
  p.context.n_threads = 1;
  loom_scheduler* s = loom_scheduler_new_with_draft(m.m, &p, m.m, R"({"n_ctx": 256})");
  ASSERT_TRUE(s) << loom_last_error();
  auto c = run(s, {{"prompt", "Once"}, {"n_predict", 8}, {"temperature", 0}});
  EXPECT_EQ(c->tokens.size(), 8u);
  loom_scheduler_free(s, 1000);
  for (const char* o : {R"({"n_ctx": -1})", R"({"n_ctx": "big"})"}) {
    EXPECT_EQ(loom_scheduler_new_with_draft(m.m, &p, m.m, o), nullptr) << o;
  }
}

TEST(CapiScheduler, BenchAndStats) {
  Model m(stories_path());
  Sched s(m.m, 4, 1024);
  std::vector<char> buf(4096);
  const int32_t n = loom_scheduler_bench(s.s, 32, 8, 2, 1, buf.data(), buf.size());
  ASSERT_GT(n, 0) << loom_last_error();
  const json b = json::parse(std::string(buf.data(), size_t(n)));
  EXPECT_GT(b["speed_pp"].get<double>(), 0.0);
  EXPECT_GT(b["speed_tg"].get<double>(), 0.0);
  EXPECT_EQ(b["n_kv"].get<int>(), 80);
  EXPECT_EQ(loom_scheduler_bench(s.s, 1000, 1000, 2, 1, buf.data(), buf.size()), LOOM_SIZE_ERROR);
  const int32_t k = loom_scheduler_stats(s.s, buf.data(), buf.size());
  ASSERT_GT(k, 0);
  const json st = json::parse(std::string(buf.data(), size_t(k)));
  EXPECT_EQ(st["slots"].get<int>(), 4);
  EXPECT_EQ(st["kv_used"].get<int>(), 0);
}

}  // namespace

namespace {

TEST(CapiSampler, GreedySamplerGivesTheGoldenIdsAndAGrammarConstrains) {
  Model m(stories_path());
  ASSERT_TRUE(m.m);
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = 512;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  loom_context* ctx = loom_context_new(m.m, &cp);
  ASSERT_TRUE(ctx) << loom_last_error();
  const json g = loom::test::load_json(shared_path("golden/stories260K.json"));
  const auto& r = g["runs"][0];
  auto run = [&](const char* params, int n) {
    loom_kv_clear(ctx);
    loom_sampler* s = loom_sampler_new(m.m, params);
    EXPECT_TRUE(s) << loom_last_error();
    std::vector<int32_t> ids = r["prompt_ids"].get<std::vector<int32_t>>();
    const size_t n_prompt = ids.size();
    loom_batch b = loom_batch_get_one(ids.data(), int32_t(ids.size()));
    std::vector<int32_t> out;
    for (int i = 0; i < n && s; ++i) {
      EXPECT_EQ(loom_decode(ctx, &b), LOOM_DECODE_OK) << loom_last_error();
      const int32_t t = loom_sampler_sample(s, ctx, -1);
      if (t == LOOM_TOKEN_NULL) break;
      EXPECT_EQ(loom_sampler_accept(s, t), LOOM_OK);
      out.push_back(t);
      if (loom_sampler_grammar_done(s)) break;
      ids.push_back(t);
      b = loom_batch_get_one(&ids.back(), 1);
    }
    (void)n_prompt;
    loom_sampler_free(s);
    return out;
  };
  EXPECT_EQ(run(R"({"temperature": 0})", 64), r["greedy_ids"].get<std::vector<int32_t>>());
  // A grammar: the text is one of the alternatives, then the grammar is done.
  const std::vector<int32_t> yes = run(R"({"temperature": 0, "grammar": "root ::= \"yes\" | \"no\""})", 16);
  std::string text;
  for (int32_t t : yes) {
    char buf[64];
    const int32_t k = loom_token_to_piece(m.m, t, buf, sizeof buf, 0, false);
    text.append(buf, size_t(std::max(0, k)));
  }
  EXPECT_TRUE(text == "yes" || text == "no" || text == " yes" || text == " no") << text;
  // Bad parameters are refused, naming the field.
  EXPECT_EQ(loom_sampler_new(m.m, R"({"top_k": "many"})"), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("top_k"), std::string::npos);
  EXPECT_EQ(loom_sampler_new(m.m, "{"), nullptr);
  EXPECT_EQ(loom_sampler_new(nullptr, "{}"), nullptr);
  loom_sampler* s = loom_sampler_new(m.m, nullptr);
  ASSERT_TRUE(s);
  EXPECT_EQ(loom_sampler_accept(s, 1 << 20), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(loom_sampler_sample(s, nullptr, 0), LOOM_TOKEN_NULL);
  loom_sampler_free(s);
  loom_context_free(ctx);
}

}  // namespace
