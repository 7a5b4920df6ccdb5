// `loom chat`, scripted through stdin on stories260K (greedy): replies per turn, /reset, /save and
// /load across processes, dropping old turns when the context is full, Ctrl-C, bad flags.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace loom::test {
namespace {

std::string temp_path(const char* tag) {
  std::string path = std::string("/tmp/loom_chat_") + tag + "_XXXXXX";
  int fd = mkstemp(path.data());
  if (fd >= 0) close(fd);
  return path;
}

std::string chat_args(const std::string& extra = "") {
  return "chat -m " + quote(shared_path("models/stories260K.gguf")) + " --temp 0 -t 2 " + extra;
}

TEST(ChatCli, TwoTurnsProduceReplies) {
  auto one = run_loom(chat_args("-n 24"), "Hello there\n");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.err, "");  // nothing on stderr when stdin is not a terminal
  ASSERT_GT(one.out.size(), 1u);
  EXPECT_EQ(one.out.back(), '\n');

  auto two = run_loom(chat_args("-n 24"), "Hello there\nTell me a story\n");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  // The first reply does not depend on what comes later; the second one is not empty.
  ASSERT_EQ(two.out.substr(0, one.out.size()), one.out);
  const std::string second = two.out.substr(one.out.size());
  EXPECT_GT(second.size(), 1u) << two.out;
  EXPECT_EQ(second.back(), '\n');

  // Blank lines are skipped; /quit ends the chat.
  auto quit = run_loom(chat_args("-n 24"), "\nHello there\n\n/quit\nTell me a story\n");
  ASSERT_EQ(quit.exit_code, 0) << quit.err;
  EXPECT_EQ(quit.out, one.out);
}

TEST(ChatCli, ResetStartsANewConversation) {
  auto one = run_loom(chat_args("-n 24"), "Hello there\n");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto r = run_loom(chat_args("-n 24"), "Hello there\n/reset\nHello there\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, one.out + one.out);
}

TEST(ChatCli, SaveAndLoadContinueTheConversation) {
  const std::string state = temp_path("state");
  auto full = run_loom(chat_args("-n 24"), "Hello there\nTell me a story\n");
  ASSERT_EQ(full.exit_code, 0) << full.err;

  auto saved = run_loom(chat_args("-n 24"), "Hello there\n/save " + state + "\n");
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_EQ(saved.err, "");
  const std::string messages = read_text_file(state + ".json");
  EXPECT_NE(messages.find("\"Hello there\""), std::string::npos) << messages;
  EXPECT_NE(messages.find("\"assistant\""), std::string::npos) << messages;

  // A new process: the reply after /load is the one the uninterrupted chat gave, and the loaded
  // cache is reused.
  auto loaded = run_loom(chat_args("-n 24 -v"), "/load " + state + "\nTell me a story\n");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_EQ(saved.out + loaded.out, full.out);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(loaded.err, m, std::regex(R"(\((\d+) reused from the cache\))"))) << loaded.err;
  EXPECT_GT(std::stoi(m[1].str()), 0) << loaded.err;

  // The same within one process, after /reset.
  auto same =
      run_loom(chat_args("-n 24"), "Hello there\n/save " + state + "\n/reset\n/load " + state + "\nTell me a story\n");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(same.out, full.out);
  std::remove(state.c_str());
  std::remove((state + ".json").c_str());
}

TEST(ChatCli, CommandErrorsAreReportedAndTheChatGoesOn) {
  auto one = run_loom(chat_args("-n 24"), "Hello there\n");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto r = run_loom(chat_args("-n 24"), "/load /nonexistent/loom-chat-state\n/save\n/frobnicate\nHello there\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, one.out);
  EXPECT_NE(r.err.find("loom: cannot open /nonexistent/loom-chat-state.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loom: /save needs a file name"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loom: unknown command /frobnicate"), std::string::npos) << r.err;
}

TEST(ChatCli, FullContextDropsTheOldestTurns) {
  const std::string input = "Hello there\nTell me a story\nWhat happened next?\nAnd then?\nThe end.\n";
  auto r = run_loom(chat_args("-n 16 -c 128 -v --system 'Be nice.'"), input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("dropped the"), std::string::npos) << r.err;
  size_t turns = 0;
  for (size_t at = 0; (at = r.err.find("reused from the cache", at)) != std::string::npos; ++at) ++turns;
  EXPECT_EQ(turns, 5u) << r.err;

  // A message longer than the whole context is refused; the chat goes on with exit status 1.
  auto big = run_loom(chat_args("-n 8 -c 64"), std::string(200, 'a') + "\nHi\n");
  EXPECT_EQ(big.exit_code, 1);
  EXPECT_NE(big.err.find("does not fit the context"), std::string::npos) << big.err;
  EXPECT_GT(big.out.size(), 1u);  // the reply to "Hi"
}

TEST(ChatCli, CtrlCStopsTheReplyAndASecondOneAtThePromptExits) {
  const std::string pid_path = temp_path("pid"), out_path = temp_path("out"), err_path = temp_path("err");
  // Long replies: no -n and a large context, so that the reply is still streaming when Ctrl-C comes.
  const std::string cmd = "echo $$ >" + pid_path + "; exec " + loom_command() + " " + chat_args("-c 4096 -v") + " >" +
                          out_path + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "w");
  ASSERT_NE(p, nullptr);
  fputs("Hello there\n", p);
  fflush(p);
  auto wait_for = [](const std::function<bool()>& cond) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!cond()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  };
  auto file_text = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  pid_t pid = 0;
  ASSERT_TRUE(wait_for([&] {
    pid = pid_t(std::atoi(file_text(pid_path).c_str()));
    return pid > 0;
  }));
  // The reply has started streaming: interrupt it.
  ASSERT_TRUE(wait_for([&] { return !file_text(out_path).empty(); }));
  kill(pid, SIGINT);
  const bool stopped = wait_for([&] { return file_text(err_path).find("(interrupted)") != std::string::npos; });
  bool exited = false;
  if (stopped) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // back at the prompt
    kill(pid, SIGINT);
    // It exits by itself, with stdin still open (a zombie until pclose reaps it).
    exited = wait_for([&] {
      const std::string stat = file_text("/proc/" + std::to_string(pid) + "/stat");
      const size_t paren = stat.rfind(')');
      return paren == std::string::npos || stat.compare(paren, 3, ") Z") == 0;
    });
  }
  const int status = pclose(p);
  EXPECT_TRUE(exited);
  const std::string err = file_text(err_path);
  EXPECT_TRUE(stopped) << err;
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(reply (\d+) tokens)"))) << err;
  EXPECT_LT(std::stoi(m[1].str()), 4000) << err;
  for (const auto& path : {pid_path, out_path, err_path}) std::remove(path.c_str());
}

TEST(ChatCli, UsesTheModelsChatTemplate) {
  // stories260K with Gemma 2's template, which prints bos_token itself and refuses system
  // messages (they are folded into the first user message).
  auto src = gguf::GgufFile::open(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(src.has_value()) << src.status().message();
  auto w = gguf::GgufWriter::from_file(*src);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  Status st = w->set_string("tokenizer.chat_template",
                            read_text_file(shared_path("golden/chat-templates/google-gemma-2-2b-it.jinja")));
  ASSERT_TRUE(st.is_ok()) << st.message();
  const std::string path = temp_path("model");
  st = w->write_file(path);
  ASSERT_TRUE(st.is_ok()) << st.message();

  const std::string args = "chat -m " + quote(path) + " --temp 0 -t 2 -n 16 -v --system 'Be nice.'";
  auto one = run_loom(args, "Hello there\n");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = run_loom(args, "Hello there\nTell me a story\n");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  ASSERT_EQ(two.out.substr(0, one.out.size()), one.out);
  EXPECT_GT(one.out.size(), 1u);
  EXPECT_GT(two.out.size() - one.out.size(), 1u) << two.out;
  // The second turn extends the first: the first prompt at least is reused from the cache.
  const std::regex turn(R"(prompt (\d+) tokens \((\d+) reused)");
  auto it = std::sregex_iterator(two.err.begin(), two.err.end(), turn);
  std::vector<std::pair<int, int>> turns;
  for (; it != std::sregex_iterator(); ++it) turns.emplace_back(std::stoi((*it)[1].str()), std::stoi((*it)[2].str()));
  ASSERT_EQ(turns.size(), 2u) << two.err;
  EXPECT_EQ(turns[0].second, 0);
  EXPECT_GE(turns[1].second, turns[0].first) << two.err;
  std::remove(path.c_str());
}

TEST(ChatCli, BadFlagsExit2) {
  const std::string model = quote(shared_path("models/stories260K.gguf"));
  for (const std::string& args :
       std::vector<std::string>{"chat", "chat -m " + model + " --bogus", "chat -m " + model + " --temp -1",
                                "chat -m " + model + " -n -5", "chat -m " + model + " -c x"}) {
    auto r = run_loom(args, "Hello\n");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("loom: ", 0), 0u) << args << "\n" << r.err;
  }
  auto missing = run_loom("chat -m /nonexistent/model.gguf", "Hello\n");
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_EQ(missing.err.rfind("loom: ", 0), 0u) << missing.err;
}

}  // namespace
}  // namespace loom::test
