// llama.cpp's sampling defaults (common_params_sampling), written once: SamplerParams and
// DryParams start from them, a request's missing fields take them (serve/request_json.cpp, which
// loom_sampler_new and so the CLI go through), and llama-server's generation_settings echo reports
// them (api/native.cpp). Header only: no library to link.
#pragma once

namespace loom::sample::defaults {

inline constexpr double kTemperature = 0.8;
inline constexpr int kTopK = 40;
inline constexpr double kTopP = 0.95;
inline constexpr double kMinP = 0.05;
inline constexpr double kTypicalP = 1.0;
inline constexpr double kDynatempRange = 0.0;
inline constexpr double kDynatempExponent = 1.0;
inline constexpr double kXtcProbability = 0.0;
inline constexpr double kXtcThreshold = 0.1;
inline constexpr int kMinKeep = 0;
inline constexpr int kPenaltyLastN = 64;
inline constexpr double kPenaltyRepeat = 1.0;
inline constexpr double kPenaltyFreq = 0.0;
inline constexpr double kPenaltyPresent = 0.0;
inline constexpr double kDryMultiplier = 0.0;
inline constexpr double kDryBase = 1.75;
inline constexpr int kDryAllowedLength = 2;
inline constexpr int kDryPenaltyLastN = -1;
inline constexpr int kMirostat = 0;
inline constexpr double kMirostatTau = 5.0;
inline constexpr double kMirostatEta = 0.1;

}  // namespace loom::sample::defaults
