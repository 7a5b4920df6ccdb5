// Helpers for scheduler tests: run requests and collect their events.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "serve/scheduler.h"

namespace loom::test {

// The events of one request, filled from the scheduler's loop thread.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<serve::Event> events;
  bool done = false;

  serve::EventCallback callback() {
    return [this](const serve::Event& e) {
      std::lock_guard<std::mutex> l(mu);
      events.push_back(e);
      if (e.kind == serve::Event::Kind::kDone || e.kind == serve::Event::Kind::kError) done = true;
      cv.notify_all();
    };
  }
  bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, timeout, [&] { return done; });
  }
  // Tokens / text of one choice, from its token events.
  std::vector<int32_t> tokens(int choice = 0) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<int32_t> t;
    for (const auto& e : events) {
      if (e.kind == serve::Event::Kind::kToken && e.choice == choice) t.push_back(e.token);
    }
    return t;
  }
  std::string text(int choice = 0) {
    std::lock_guard<std::mutex> l(mu);
    std::string s;
    for (const auto& e : events) {
      if ((e.kind == serve::Event::Kind::kToken || e.kind == serve::Event::Kind::kFinish) && e.choice == choice) s += e.text;
    }
    return s;
  }
  // The first event of kind k (for kFinish: of that choice). When there is none the test fails
  // and an empty event is returned, so callers may dereference the result.
  const serve::Event* find(serve::Event::Kind k, int choice = 0) {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& e : events) {
      if (e.kind == k && (k != serve::Event::Kind::kFinish || e.choice == choice)) return &e;
    }
    std::string kinds;
    for (const auto& e : events) {
      kinds += std::to_string(int(e.kind)) + " ";
      if (e.kind == serve::Event::Kind::kError) kinds += "(" + e.error.message() + ") ";
    }
    ADD_FAILURE() << "no event of kind " << int(k) << "; got: " << kinds;
    static const serve::Event empty;
    return &empty;
  }
};

}  // namespace loom::test
