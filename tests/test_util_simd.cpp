// test_util.h's Highway helper, apart from test_util.cpp so that targets built without
// loom_base (the ASan fuzz build of the GGUF reader) can still compile test_util.cpp alone.
#include "base/simd.h"
#include "test_util.h"

namespace loom::test {

void for_each_simd_target(const std::function<void()>& body) {
  for_each_hwy_target([&](const std::string& target) {
    SCOPED_TRACE("Highway target " + target);
    body();
  });
}

}  // namespace loom::test
