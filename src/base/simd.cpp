#include "base/simd.h"

#include <hwy/highway.h>
#include <hwy/targets.h>

#include "base/cpu.h"

namespace loom {

bool simd_enabled() { return cpu_features().simd; }

std::string hwy_target_name() {
  (void)cpu_features();  // apply the environment switches first
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  // The best target is the lowest set bit (Highway orders targets best first).
  return supported ? hwy::TargetName(supported & -supported) : "none";
}

void for_each_hwy_target(const std::function<void(const std::string& target)>& fn) {
  (void)cpu_features();
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace loom
