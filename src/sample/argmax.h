// Greedy picks: the index of the first largest logit.
#pragma once

#include <cstdint>
#include <span>

namespace loom::sample {

// The first index of the largest value. NaN values are never the maximum, except that a NaN at
// index 0 makes the answer 0 (as the candidate chain's greedy stage: it never replaces its first
// pick by a NaN and no value compares greater than a NaN). +0 and -0 tie. Empty input: 0.
// Written as 16 independent lanes so the compiler vectorizes it on every target (no intrinsics);
// argmax_reference is the plain loop it must agree with.
int32_t argmax(std::span<const float> x);
int32_t argmax_reference(std::span<const float> x);

}  // namespace loom::sample
