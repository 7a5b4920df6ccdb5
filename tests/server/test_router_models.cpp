// Router mode's model list (tools/server/router.cpp, load_router_models): --models-dir scanning and
// llama-server's preset INI (grammar, [*] defaults, precedence, errors with their line), with a
// stand-in for the command line's flag table.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "router.h"

using namespace loom::server;
namespace fs = std::filesystem;

namespace {

class RouterModels : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom-router-models-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models");
    // Flags: "ctx-size"/"c"/LLAMA_ARG_CTX_SIZE take a value; "jinja" / "no-jinja" are booleans;
    // "model"/"m" is the file; "port" is the router's; anything else is unknown.
    setup_.preset_option = [](const std::string& k, const std::string& v, std::string* canonical,
                              std::vector<std::string>* args) {
      args->clear();
      if (k == "ctx-size" || k == "c" || k == "LLAMA_ARG_CTX_SIZE") {
        *canonical = "--ctx-size";
        *args = {"--ctx-size", v};
      } else if (k == "jinja" || k == "no-jinja") {
        *canonical = "--jinja";
        const bool on = (v == "true") != (k == "no-jinja");
        *args = {on ? "--jinja" : "--no-jinja"};
      } else if (k == "model" || k == "m") {
        *canonical = "--model";
        *args = {"--model", v};
      } else if (k == "port") {
        *canonical = "--port";
        *args = {"--port", v};
      } else {
        return std::string("not a llama-server flag");
      }
      return std::string();
    };
  }
  void TearDown() override { fs::remove_all(dir_); }
  void touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
  }
  std::string ini(const std::string& text) {
    const fs::path p = dir_ / "p.ini";
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  fs::path dir_;
  RouterSetup setup_;
};

}  // namespace

TEST_F(RouterModels, DirectoryScan) {
  touch(dir_ / "models/a.gguf");
  touch(dir_ / "models/b-Q4_K_M.gguf");
  touch(dir_ / "models/mmproj-a.gguf");  // a companion, not a model
  touch(dir_ / "models/mtp-a.gguf");     // a draft sidecar
  touch(dir_ / "models/readme.txt");
  touch(dir_ / "models/multi/multi-00002-of-00002.gguf");
  touch(dir_ / "models/multi/multi-00001-of-00002.gguf");
  touch(dir_ / "models/vision/vision-Q8_0.gguf");
  touch(dir_ / "models/vision/mmproj-F16.gguf");
  touch(dir_ / "models/empty/notes.txt");
  ServeOptions o;
  o.models_dir = (dir_ / "models").string();
  std::vector<RouterModel> m;
  ASSERT_EQ(load_router_models(o, setup_, &m), "");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].id, "a");
  EXPECT_EQ(m[1].id, "b-Q4_K_M");
  EXPECT_EQ(m[2].id, "multi");
  EXPECT_EQ(fs::path(m[2].path).filename(), "multi-00001-of-00002.gguf");
  EXPECT_EQ(m[3].id, "vision");
  EXPECT_EQ(fs::path(m[3].path).filename(), "vision-Q8_0.gguf");
  for (const auto& x : m) EXPECT_EQ(x.source, "models_dir");

  o.models_dir = (dir_ / "nope").string();
  EXPECT_NE(load_router_models(o, setup_, &m).find("not a readable directory"), std::string::npos);
}

TEST_F(RouterModels, PresetsCascadeAndPrecedence) {
  touch(dir_ / "models/a.gguf");
  ServeOptions o;
  o.models_dir = (dir_ / "models").string();
  o.models_preset =
      ini("version = 1\r\n"
          "; comment\r\n"
          "# another\r\n"
          "[*]\r\n"
          "c = 8192\r\n"
          "stop-timeout = 3\r\n"
          "\r\n"
          "[a]\r\n"
          "ctx-size = 4096   ; inline comment\r\n"
          "no-jinja = true\r\n"
          "port = 9999\r\n"
          "[ custom ]\r\n"
          "model = /m/custom.gguf\r\n"
          "load-on-startup = true\r\n"
          "LLAMA_ARG_CTX_SIZE = 100\r\n"
          "[custom]\r\n"
          "jinja = true\r\n");
  std::vector<RouterModel> m;
  ASSERT_EQ(load_router_models(o, setup_, &m), "");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].id, "a");
  EXPECT_EQ(m[0].source, "models_dir");
  // [*] first, then the section (the child's parser takes the last): port is the router's, dropped.
  EXPECT_EQ(m[0].args, (std::vector<std::string>{"--ctx-size", "8192", "--ctx-size", "4096", "--no-jinja"}));
  EXPECT_EQ(m[0].stop_timeout_s, 3);
  EXPECT_FALSE(m[0].load_on_startup);
  EXPECT_EQ(m[1].id, "custom");
  EXPECT_EQ(m[1].source, "preset");
  EXPECT_EQ(m[1].path, "/m/custom.gguf");
  EXPECT_TRUE(m[1].load_on_startup);
  // The two [custom] headers are one section.
  EXPECT_EQ(m[1].args, (std::vector<std::string>{"--ctx-size", "8192", "--ctx-size", "100", "--jinja"}));
}

TEST_F(RouterModels, PresetErrorsNameTheLine) {
  ServeOptions o;
  auto err = [&](const std::string& text) {
    o.models_preset = ini(text);
    std::vector<RouterModel> m;
    return load_router_models(o, setup_, &m);
  };
  EXPECT_NE(err("[a]\nmodel = x\n  garbage\n").find("p.ini:3:"), std::string::npos);
  EXPECT_NE(err("[a\nmodel = x\n").find("p.ini:1:"), std::string::npos);
  EXPECT_NE(err("[a] x\nmodel = x\n").find("p.ini:1:"), std::string::npos);
  EXPECT_NE(err("[a]\nmodel x\n").find("p.ini:2: expected '='"), std::string::npos);
  EXPECT_NE(err("[a]\nmodel = x\n\n9key = 1\n").find("p.ini:4:"), std::string::npos);
  EXPECT_NE(err("[a]\nmodel = x\nwhat = 1\n").find("p.ini:3: option 'what'"), std::string::npos);
  EXPECT_NE(err("[a]\nc = 1\n").find("p.ini:1: preset 'a' names no model"), std::string::npos);
  EXPECT_NE(err("[a]\nmodel = x\nstop-timeout = soon\n").find("p.ini:3:"), std::string::npos);
  EXPECT_EQ(err("; nothing but a comment\n"), "");
  o.models_preset = (dir_ / "missing.ini").string();
  std::vector<RouterModel> m;
  EXPECT_NE(load_router_models(o, setup_, &m).find("cannot open"), std::string::npos);
}
