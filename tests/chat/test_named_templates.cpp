// llama.cpp's built-in chat template names (src/chat/named_templates.h) against llama.cpp's own
// outputs: tests/chat/data/llama_cpp_chat_builtins.json holds the expected strings of llama.cpp's
// tests/test-chat-template.cpp (its 36 automated cases, each with the built-in template llama.cpp
// detects for it) and llama_chat_apply_template's renderings of every built-in name over more
// conversations; tools/dev/llama-ref/gen_chat_builtins.sh regenerates it from llama.cpp v0.5.0.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_request.h"
#include "chat/named_templates.h"
#include "jinja/template.h"
#include "test_util.h"

namespace loom::test {
namespace {

using json = nlohmann::ordered_json;

const json& data() {
  static const json d =
      json::parse(read_text_file(std::string(LOOM_SOURCE_DIR) + "/tests/chat/data/llama_cpp_chat_builtins.json"));
  return d;
}

json to_messages(const json& pairs) {
  json out = json::array();
  for (const auto& p : pairs) out.push_back(json{{"role", p[0]}, {"content", p[1]}});
  return out;
}

// Through the whole chat path: ChatTemplate (message checks, caps, adaptations) as a request's
// "chat_template" name is rendered.
std::string render_chat_path(const std::string& name, const json& pairs, bool add_generation_prompt) {
  auto src = chat::resolve_chat_template(name);
  EXPECT_TRUE(src.has_value()) << name << ": " << src.status().message();
  if (!src.has_value()) return {};
  auto t = chat::ChatTemplate::parse(*src, "<s>", "</s>");
  EXPECT_TRUE(t.has_value()) << name << ": " << t.status().message();
  if (!t.has_value()) return {};
  chat::ChatInputs in;
  in.messages = to_messages(pairs);
  in.add_generation_prompt = add_generation_prompt;
  auto out = t->render(in);
  EXPECT_TRUE(out.has_value()) << name << ": " << out.status().message();
  return out.has_value() ? *out : std::string();
}

TEST(NamedTemplates, EveryLlamaCppNameIsKnown) {
  std::vector<std::string> expect;
  for (const auto& n : data()["names"]) expect.push_back(n.get<std::string>());
  std::vector<std::string> got = chat::named_template_names();
  std::sort(expect.begin(), expect.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expect);
  for (const std::string& n : got) {
    const std::string* src = chat::named_template_source(n);
    ASSERT_NE(src, nullptr) << n;
    EXPECT_TRUE(chat::looks_like_jinja(*src)) << n;
    EXPECT_TRUE(jinja::Template::parse(*src).has_value()) << n;
  }
}

// The expected_output strings of llama.cpp's tests/test-chat-template.cpp, rendered by name.
TEST(NamedTemplates, LlamaCppTestChatTemplateCases) {
  const json& cases = data()["llama_cpp_tests"];
  ASSERT_EQ(cases.size(), 36u);
  for (const auto& c : cases) {
    const std::string name = c["builtin"];
    SCOPED_TRACE(c["case"].get<std::string>() + " -> " + name);
    EXPECT_EQ(render_chat_path(name, c["messages"], true), c["expected"].get<std::string>());
  }
}

bool has_role(const json& pairs, const char* role) {
  for (const auto& p : pairs)
    if (p[0] == role) return true;
  return false;
}

// Every name over every recorded conversation: the Jinja source alone (Template with the plain
// messages) and, where the conversation has only system / user / assistant messages, through
// ChatTemplate as requests render.
TEST(NamedTemplates, EveryNameMatchesLlamaCppsFormatting) {
  const json& convs = data()["conversations"];
  for (const auto& [name, outs] : data()["renderings"].items()) {
    const std::string* src = chat::named_template_source(name);
    ASSERT_NE(src, nullptr) << name;
    auto t = jinja::Template::parse(*src);
    ASSERT_TRUE(t.has_value()) << name << ": " << t.status().message();
    for (size_t i = 0; i < convs.size(); ++i) {
      SCOPED_TRACE(name + ", conversation " + std::to_string(i));
      const json& pairs = convs[i]["messages"];
      const bool agp = convs[i]["add_generation_prompt"];
      // loom's ChatML writes tool results as Qwen 2.5 does (<tool_response> in a user turn), not
      // as a "tool" turn: the one intended difference.
      if (name == "chatml" && has_role(pairs, "tool")) continue;
      json ctx = json::object();
      ctx["messages"] = to_messages(pairs);
      ctx["add_generation_prompt"] = agp;
      ctx["bos_token"] = "<s>";
      ctx["eos_token"] = "</s>";
      auto got = t->render(ctx);
      ASSERT_TRUE(got.has_value()) << got.status().message();
      EXPECT_EQ(*got, outs[i].get<std::string>());
      if (!has_role(pairs, "tool")) {
        EXPECT_EQ(render_chat_path(name, pairs, agp), outs[i].get<std::string>());
      }
    }
  }
}

TEST(NamedTemplates, ResolveKeepsJinjaAndTrimsNames) {
  EXPECT_EQ(*chat::resolve_chat_template("{{ messages[0].content }}"), "{{ messages[0].content }}");
  EXPECT_EQ(*chat::resolve_chat_template("{% if true %}x{% endif %}"), "{% if true %}x{% endif %}");
  EXPECT_EQ(*chat::resolve_chat_template("  llama3\n"), *chat::named_template_source("llama3"));
  EXPECT_EQ(*chat::resolve_chat_template("chatml"), chat::chatml_template_source());
  EXPECT_EQ(chat::named_template_source("LLAMA3"), nullptr);  // names are exact, as llama.cpp's
}

TEST(NamedTemplates, UnknownNamesAreErrorsNamingTheKnownOnes) {
  for (const std::string bad : {"llama-3", "", "   ", "Hello there", "{# only a comment #}"}) {
    auto r = chat::resolve_chat_template(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("built-in template name"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("chatml, llama2"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("gpt-oss"), std::string::npos);
  }
  // A huge string is shortened in the message (cut on a UTF-8 boundary).
  std::string huge(1 << 20, 'x');
  huge.replace(63, 2, "\xc3\xa9");  // é straddling the cut
  auto r = chat::resolve_chat_template(huge);
  ASSERT_FALSE(r.has_value());
  EXPECT_LT(r.status().message().size(), 2000u);
  EXPECT_NE(r.status().message().find("(1048576 bytes)"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find("\xc3'"), std::string::npos);
}

TEST(NamedTemplates, FormatsAndThinking) {
  // Named templates have no tool syntax of their own except loom's ChatML.
  EXPECT_EQ(chat::detect_tool_call_format(*chat::named_template_source("chatml")), chat::ToolCallFormat::kHermes);
  for (const char* n : {"llama3", "mistral-v7", "gemma", "gpt-oss", "deepseek3", "granite-4.0"})
    EXPECT_EQ(chat::detect_tool_call_format(*chat::named_template_source(n)), chat::ToolCallFormat::kGeneric) << n;
  // bailing-think's generation prompt opens a reasoning block.
  auto t = *chat::ChatTemplate::parse(*chat::named_template_source("bailing-think"), "", "");
  chat::ChatInputs in;
  in.messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  chat::ChatRequestOptions o;
  auto p = chat::prepare_chat(t, in, o);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->thinking_forced_open);
}

}  // namespace
}  // namespace loom::test
