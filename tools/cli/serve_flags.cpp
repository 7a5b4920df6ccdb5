// llama-server's command line for `loom serve` (serve_flags.h). One table: each entry is one
// llama-server option (all its spellings, its negations, its environment variable), what loom
// does with it, and the text of docs/serving.md's row, which is generated from this table. This
// file holds the table and its renderings (--help, the Markdown of docs/serving.md); the parser is
// in serve_flags_parse.cpp, the value handlers in serve_flag_values.cpp.
#include "serve_flags.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "serve_flags_internal.h"

namespace loom::cli::serve_internal {

const std::vector<Flag>& table() {
  static const std::vector<Flag> t = [] {
    std::vector<Flag> f;
    auto add = [&f](Group g, std::string names, std::string negs, std::string hint, std::string env, Kind k,
                    std::string note, Handler h = nullptr) {
      Flag x{g, split_csv(names), split_csv(negs), hint, hint.empty() ? 0 : 1, env, k, note, std::move(h)};
      f.push_back(std::move(x));
      return &f.back();
    };
    const std::string kThreads = "loom places and schedules its own threads";
    const std::string kDownload = "loom downloads nothing: give the GGUF file with -m";
    const std::string kSamplingNote = "a server-wide default under each request's own field";
    const std::string kRope = "RoPE / YaRN overrides: not yet in loom serve";
    const std::string kNoMM = "loom serve has no multimodal projector";
    const std::string kNoUI = "loom serves no web UI";
    const std::string kAgent = "the web UI's agent tools (built-in tools, MCP, CORS proxy) are not part of loom serve";
    const std::string kNgram = "loom drafts n-grams per request (the request's lookup field), not by server flags";

    // ---- llama-server's common params ----
    add(kCommon, "-h,--help,--usage", "", "", "", Kind::kInfo, "prints this list and exits", [](Ctx& c, const Use&) {
      c.help = true;
      return std::string();
    });
    add(kCommon, "--version", "", "", "", Kind::kInfo, "prints loom's version and exits", [](Ctx& c, const Use&) {
      c.version = true;
      return std::string();
    });
    add(kCommon, "-cl,--cache-list", "", "", "", Kind::kRefused, "loom keeps no cache of downloaded models");
    add(kCommon, "--completion-bash", "", "", "", Kind::kRefused, "no bash completion script");
    add(kCommon, "-t,--threads", "", "N", "LLAMA_ARG_THREADS", Kind::kImpl, "generation threads (-1: all cores)",
        int_or_default(&ServeOptions::threads, 4096));
    add(kCommon, "-tb,--threads-batch", "", "N", "", Kind::kImpl, "prompt threads (-1: as --threads)",
        int_or_default(&ServeOptions::threads_batch, 4096));
    add(kCommon, "-C,--cpu-mask", "", "M", "", Kind::kNoop, kThreads);
    add(kCommon, "-Cr,--cpu-range", "", "lo-hi", "", Kind::kNoop, kThreads);
    add(kCommon, "--cpu-strict", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kCommon, "--prio", "", "N", "", Kind::kNoop, kThreads, quiet_if("0"));
    add(kCommon, "--poll", "", "<0...100>", "", Kind::kNoop, kThreads);
    add(kCommon, "-Cb,--cpu-mask-batch", "", "M", "", Kind::kNoop, kThreads);
    add(kCommon, "-Crb,--cpu-range-batch", "", "lo-hi", "", Kind::kNoop, kThreads);
    add(kCommon, "--cpu-strict-batch", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kCommon, "--prio-batch", "", "N", "", Kind::kNoop, kThreads, quiet_if("0"));
    add(kCommon, "--poll-batch", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kCommon, "-c,--ctx-size", "", "N", "LLAMA_ARG_CTX_SIZE", Kind::kImpl,
        "KV cells in total, shared by every slot (0: the model's training context, at most 4096)", [](Ctx& c, const Use& u) {
          long long x;
          if (!to_int(u.v[0], &x) || x < 0 || x > (1LL << 30)) return int_error(u.v[0], 0, 1LL << 30);
          c.o->n_ctx = int(x);
          c.ctx_set = x > 0;
          return std::string();
        });
    add(kCommon, "-n,--predict,--n-predict", "", "N", "LLAMA_ARG_N_PREDICT", Kind::kImpl,
        "default max_tokens of requests that give none (-1: as many as fit)", int_to(&ServeOptions::n_predict, -1, 1 << 30));
    add(kCommon, "-b,--batch-size", "", "N", "LLAMA_ARG_BATCH", Kind::kImpl, "most tokens per decode call",
        int_to(&ServeOptions::n_batch, 1, 1 << 20));
    add(kCommon, "-ub,--ubatch-size", "", "N", "LLAMA_ARG_UBATCH", Kind::kImpl, "most tokens per forward pass",
        int_to(&ServeOptions::n_ubatch, 1, 1 << 20));
    add(kCommon, "--keep", "", "N", "", Kind::kImpl, "n_keep of requests that give none",
        request_default("n_keep", DefaultKind::kInt));
    add(kCommon, "--swa-full", "", "", "LLAMA_ARG_SWA_FULL", Kind::kImpl, "full-size caches for sliding-window layers",
        bool_to(&ServeOptions::swa_full));
    {
      Flag* fa = add(kCommon, "-fa,--flash-attn", "", "[on|off|auto]", "LLAMA_ARG_FLASH_ATTN", Kind::kCpu,
                     "loom's attention kernels are its own (a bare -fa, as older llama-servers took it, is accepted too)",
                     on_off_auto(true));
      fa->nargs = -1;
    }
    add(kCommon, "--perf", "--no-perf", "", "LLAMA_ARG_PERF", Kind::kNoop, "timings are always in the responses");
    add(kCommon, "-e,--escape", "--no-escape", "", "", Kind::kNoop, "the server reads no prompt from its command line");
    add(kCommon, "--rope-scaling", "", "{none,linear,yarn}", "LLAMA_ARG_ROPE_SCALING_TYPE", Kind::kRefused, kRope);
    add(kCommon, "--rope-scale", "", "N", "LLAMA_ARG_ROPE_SCALE", Kind::kRefused, kRope);
    add(kCommon, "--rope-freq-base", "", "N", "LLAMA_ARG_ROPE_FREQ_BASE", Kind::kRefused, kRope);
    add(kCommon, "--rope-freq-scale", "", "N", "LLAMA_ARG_ROPE_FREQ_SCALE", Kind::kRefused, kRope);
    add(kCommon, "--yarn-orig-ctx", "", "N", "LLAMA_ARG_YARN_ORIG_CTX", Kind::kRefused, kRope);
    add(kCommon, "--yarn-ext-factor", "", "N", "LLAMA_ARG_YARN_EXT_FACTOR", Kind::kRefused, kRope);
    add(kCommon, "--yarn-attn-factor", "", "N", "LLAMA_ARG_YARN_ATTN_FACTOR", Kind::kRefused, kRope);
    add(kCommon, "--yarn-beta-slow", "", "N", "LLAMA_ARG_YARN_BETA_SLOW", Kind::kRefused, kRope);
    add(kCommon, "--yarn-beta-fast", "", "N", "LLAMA_ARG_YARN_BETA_FAST", Kind::kRefused, kRope);
    add(kCommon, "-kvo,--kv-offload", "-nkvo,--no-kv-offload", "", "LLAMA_ARG_KV_OFFLOAD", Kind::kCpu, "");
    add(kCommon, "--repack", "-nr,--no-repack", "", "LLAMA_ARG_REPACK", Kind::kNoop, "loom lays out weights its own way");
    add(kCommon, "--no-host", "", "", "LLAMA_ARG_NO_HOST", Kind::kCpu, "");
    add(kCommon, "-ctk,--cache-type-k", "", "TYPE", "LLAMA_ARG_CACHE_TYPE_K", Kind::kImpl,
        "f32, f16, bf16, q8_0, q4_0 (q4_1, iq4_nl, q5_0, q5_1 are refused)",
        [](Ctx& c, const Use& u) { return cache_type(u.v[0], &c.o->type_k); });
    add(kCommon, "-ctv,--cache-type-v", "", "TYPE", "LLAMA_ARG_CACHE_TYPE_V", Kind::kImpl, "as -ctk",
        [](Ctx& c, const Use& u) { return cache_type(u.v[0], &c.o->type_v); });
    add(kCommon, "-dt,--defrag-thold", "", "N", "LLAMA_ARG_DEFRAG_THOLD", Kind::kNoop,
        "deprecated in llama.cpp; loom's cache needs no defragmentation", number());
    add(kCommon, "--rpc", "", "SERVERS", "LLAMA_ARG_RPC", Kind::kRefused, "remote (RPC) backends");
    add(kCommon, "-lm,--load-mode", "", "MODE", "LLAMA_ARG_LOAD_MODE", Kind::kNoop, "loom memory-maps the model file",
        one_of({"auto", "none", "mmap", "mlock", "mmap+mlock", "dio"}));
    add(kCommon, "-lzm,--lazy-mode", "", "MODE", "LLAMA_ARG_LAZY_MODE", Kind::kNoop, "loom reads tensors as it loads them",
        one_of({"on", "auto", "off"}));
    add(kCommon, "--numa", "", "TYPE", "LLAMA_ARG_NUMA", Kind::kNoop, "loom does not place threads by NUMA node",
        one_of({"distribute", "isolate", "numactl"}));
    add(kCommon, "-dev,--device", "", "<dev1,dev2,..>", "LLAMA_ARG_DEVICE", Kind::kCpu, "", [](Ctx& c, const Use& u) {
      const std::string l = lower(u.v[0]);
      if (l == "none" || l == "cpu") c.quiet = true;
      return std::string();
    });
    add(kCommon, "--list-devices", "", "", "", Kind::kInfo, "prints no offload device (loom runs on the CPU) and exits",
        [](Ctx& c, const Use&) {
          c.list_devices = true;
          return std::string();
        });
    add(kCommon, "-ot,--override-tensor", "", "<tensor name pattern>=<buffer type>,...", "LLAMA_ARG_OVERRIDE_TENSOR",
        Kind::kCpu, "");
    add(kCommon, "-cmoe,--cpu-moe", "", "", "LLAMA_ARG_CPU_MOE", Kind::kCpu, "every weight is on the CPU already");
    add(kCommon, "-ncmoe,--n-cpu-moe", "", "N", "LLAMA_ARG_N_CPU_MOE", Kind::kCpu, "", number());
    add(kCommon, "-ncffn,--n-cpu-ffn", "", "N", "LLAMA_ARG_N_CPU_FFN", Kind::kCpu, "", number());
    add(kCommon, "-ngl,--gpu-layers,--n-gpu-layers", "", "N", "LLAMA_ARG_N_GPU_LAYERS", Kind::kCpu, "",
        [](Ctx& c, const Use& u) {
          double x;
          if (u.v[0] == "0") c.quiet = true;
          if (u.v[0] == "auto" || u.v[0] == "all" || to_float(u.v[0], &x)) return std::string();
          return "expected a number, auto or all, not '" + u.v[0] + "'";
        });
    add(kCommon, "-sm,--split-mode", "", "{none,layer,row,tensor}", "LLAMA_ARG_SPLIT_MODE", Kind::kCpu, "",
        one_of({"none", "layer", "row", "tensor"}));
    add(kCommon, "-ts,--tensor-split", "", "N0,N1,N2,...", "LLAMA_ARG_TENSOR_SPLIT", Kind::kCpu, "");
    add(kCommon, "-mg,--main-gpu", "", "INDEX", "LLAMA_ARG_MAIN_GPU", Kind::kCpu, "", number());
    add(kCommon, "-fit,--fit", "", "[on|off]", "LLAMA_ARG_FIT", Kind::kCpu, "", on_off_auto(false));
    add(kCommon, "-fitt,--fit-target", "", "MiB0,MiB1,MiB2,...", "LLAMA_ARG_FIT_TARGET", Kind::kCpu, "");
    add(kCommon, "-fitc,--fit-ctx", "", "N", "LLAMA_ARG_FIT_CTX", Kind::kCpu, "", number());
    add(kCommon, "--check-tensors", "", "", "", Kind::kNoop, "loom checks tensor types and sizes at load, not their values");
    add(kCommon, "--override-kv", "", "KEY=TYPE:VALUE,...", "", Kind::kRefused, "metadata overrides: not yet in loom");
    add(kCommon, "--op-offload", "--no-op-offload", "", "", Kind::kCpu, "");
    add(kCommon, "--lora", "", "FNAME", "", Kind::kImpl,
        "LoRA adapters, comma-separated, scale 1 (loom also reads FNAME:SCALE)", [](Ctx& c, const Use& u) {
          std::string err;
          for (const auto& item : split_csv(u.v[0])) add_lora(c, item, false, &err);
          return err;
        });
    add(kCommon, "--lora-scaled", "", "FNAME:SCALE,...", "", Kind::kImpl, "LoRA adapters with scales, comma-separated",
        [](Ctx& c, const Use& u) {
          std::string err;
          for (const auto& item : split_csv(u.v[0])) {
            if (err.empty()) add_lora(c, item, true, &err);
          }
          return err;
        });
    add(kCommon, "--control-vector", "", "FNAME", "", Kind::kRefused, "control vectors: not yet in loom");
    add(kCommon, "--control-vector-scaled", "", "FNAME:SCALE,...", "", Kind::kRefused, "control vectors: not yet in loom");
    add(kCommon, "--control-vector-layer-range", "", "START END", "", Kind::kRefused, "control vectors: not yet in loom")
        ->nargs = 2;
    add(kCommon, "-m,--model", "", "FNAME", "LLAMA_ARG_MODEL", Kind::kImpl,
        "the GGUF model (without it: router mode with --models-dir / --models-preset)", str_to(&ServeOptions::model));
    add(kCommon, "-mu,--model-url", "", "MODEL_URL", "LLAMA_ARG_MODEL_URL", Kind::kRefused, kDownload);
    add(kCommon, "-dr,--docker-repo", "", "[<repo>/]<model>[:quant]", "LLAMA_ARG_DOCKER_REPO", Kind::kRefused, kDownload);
    add(kCommon, "-hf,-hfr,--hf-repo", "", "<user>/<model>[:quant]", "LLAMA_ARG_HF_REPO", Kind::kRefused, kDownload);
    add(kCommon, "-hff,--hf-file", "", "FILE", "LLAMA_ARG_HF_FILE", Kind::kRefused, kDownload);
    // HF_TOKEN is often set for other programs: loom does not read it.
    add(kCommon, "-hft,--hf-token", "", "TOKEN", "", Kind::kNoop, "loom downloads nothing (HF_TOKEN is not read)");
    add(kCommon, "--log-disable", "", "", "", Kind::kNotYet, "loom's log always goes to stderr");
    add(kCommon, "--log-file", "", "FNAME", "LLAMA_ARG_LOG_FILE", Kind::kNotYet, "loom's log always goes to stderr");
    add(kCommon, "--log-jsonl", "--no-log-jsonl", "", "LLAMA_ARG_LOG_JSONL", Kind::kNotYet, "loom's log is plain lines",
        quiet_if_negative());
    add(kCommon, "--log-colors", "", "[on|off|auto]", "LLAMA_ARG_LOG_COLORS", Kind::kNoop,
        "loom's log has no colors (a bare --log-colors, as older llama-servers took it, is accepted too)", on_off_auto(true))
        ->nargs = -1;
    // Sets ServeOptions::verbose; kNotYet until the server logs more with it.
    add(kCommon, "-v,--verbose,--log-verbose", "", "", "", Kind::kImpl,
        "logs each request as it arrives: method, target, connection, body size and its first 2 KiB",
        [](Ctx& c, const Use&) {
          c.o->verbose = true;
          return std::string();
        });
    add(kCommon, "--offline", "", "", "LLAMA_ARG_OFFLINE", Kind::kNoop, "loom never uses the network for models");
    add(kCommon, "-lv,--verbosity,--log-verbosity", "", "N", "LLAMA_ARG_LOG_VERBOSITY", Kind::kNotYet,
        "N >= 4 is --verbose; thresholds below 3 do not filter loom's log yet", [](Ctx& c, const Use& u) {
          long long x;
          if (!to_int(u.v[0], &x)) return int_error(u.v[0], 0, 5);
          if (x >= 4) c.o->verbose = true;
          if (x >= 3) c.quiet = true;
          return std::string();
        });
    add(kCommon, "--log-prefix", "--no-log-prefix", "", "LLAMA_ARG_LOG_PREFIX", Kind::kNoop,
        "loom's log lines start with 'loom: '");
    add(kCommon, "--log-timestamps", "--no-log-timestamps", "", "LLAMA_ARG_LOG_TIMESTAMPS", Kind::kNoop,
        "loom's log lines have no timestamps");
    add(kCommon, "--spec-draft-type-k,-ctkd,--cache-type-k-draft", "", "TYPE", "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K",
        Kind::kNotYet, "the draft model's cache is f16", quiet_if("f16"));
    add(kCommon, "--spec-draft-type-v,-ctvd,--cache-type-v-draft", "", "TYPE", "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V",
        Kind::kNotYet, "the draft model's cache is f16", quiet_if("f16"));

    // ---- sampling params: server-wide defaults ----
    add(kSampling, "--samplers", "", "SAMPLERS", "", Kind::kImpl, kSamplingNote,
        request_default("samplers", DefaultKind::kString));
    add(kSampling, "-s,--seed", "", "SEED", "", Kind::kImpl, kSamplingNote, request_default("seed", DefaultKind::kInt));
    add(kSampling, "--sampler-seq,--sampling-seq", "", "SEQUENCE", "", Kind::kImpl, kSamplingNote,
        request_default("samplers", DefaultKind::kString));
    add(kSampling, "--ignore-eos", "", "", "", Kind::kImpl, kSamplingNote,
        request_default("ignore_eos", DefaultKind::kTrue));
    add(kSampling, "--temp,--temperature", "", "N", "LLAMA_ARG_TEMPERATURE", Kind::kImpl, kSamplingNote,
        request_default("temperature", DefaultKind::kNumber));
    add(kSampling, "--top-k", "", "N", "LLAMA_ARG_TOP_K", Kind::kImpl, kSamplingNote,
        request_default("top_k", DefaultKind::kInt));
    add(kSampling, "--top-p", "", "N", "LLAMA_ARG_TOP_P", Kind::kImpl, kSamplingNote,
        request_default("top_p", DefaultKind::kNumber));
    add(kSampling, "--min-p", "", "N", "LLAMA_ARG_MIN_P", Kind::kImpl, kSamplingNote,
        request_default("min_p", DefaultKind::kNumber));
    add(kSampling, "--top-nsigma,--top-n-sigma", "", "N", "", Kind::kNotYet, kSamplingNote, number());
    add(kSampling, "--xtc-probability", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("xtc_probability", DefaultKind::kNumber));
    add(kSampling, "--xtc-threshold", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("xtc_threshold", DefaultKind::kNumber));
    add(kSampling, "--typical,--typical-p", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("typical_p", DefaultKind::kNumber));
    add(kSampling, "--repeat-last-n", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("repeat_last_n", DefaultKind::kInt));
    add(kSampling, "--repeat-penalty", "", "N", "LLAMA_ARG_REPEAT_PENALTY", Kind::kImpl, kSamplingNote,
        request_default("repeat_penalty", DefaultKind::kNumber));
    add(kSampling, "--presence-penalty", "", "N", "LLAMA_ARG_PRESENCE_PENALTY", Kind::kImpl, kSamplingNote,
        request_default("presence_penalty", DefaultKind::kNumber));
    add(kSampling, "--frequency-penalty", "", "N", "LLAMA_ARG_FREQUENCY_PENALTY", Kind::kImpl, kSamplingNote,
        request_default("frequency_penalty", DefaultKind::kNumber));
    add(kSampling, "--dry-multiplier", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("dry_multiplier", DefaultKind::kNumber));
    add(kSampling, "--dry-base", "", "N", "", Kind::kImpl, kSamplingNote, request_default("dry_base", DefaultKind::kNumber));
    add(kSampling, "--dry-allowed-length", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("dry_allowed_length", DefaultKind::kInt));
    add(kSampling, "--dry-penalty-last-n", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("dry_penalty_last_n", DefaultKind::kInt));
    add(kSampling, "--dry-sequence-breaker", "", "STRING", "", Kind::kImpl, kSamplingNote,
        request_default("dry_sequence_breakers", DefaultKind::kAppend));
    add(kSampling, "--adaptive-target", "", "N", "", Kind::kNotYet, kSamplingNote, number());
    add(kSampling, "--adaptive-decay", "", "N", "", Kind::kNotYet, kSamplingNote, number());
    add(kSampling, "--dynatemp-range", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("dynatemp_range", DefaultKind::kNumber));
    add(kSampling, "--dynatemp-exp", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("dynatemp_exponent", DefaultKind::kNumber));
    add(kSampling, "--mirostat", "", "N", "", Kind::kImpl, kSamplingNote, request_default("mirostat", DefaultKind::kInt));
    add(kSampling, "--mirostat-lr", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("mirostat_eta", DefaultKind::kNumber));
    add(kSampling, "--mirostat-ent", "", "N", "", Kind::kImpl, kSamplingNote,
        request_default("mirostat_tau", DefaultKind::kNumber));
    add(kSampling, "-l,--logit-bias", "", "TOKEN_ID(+/-)BIAS", "", Kind::kImpl, kSamplingNote, logit_bias_default());
    add(kSampling, "--grammar", "", "GRAMMAR", "", Kind::kImpl,
        "the grammar of requests without their own (nor tools, response_format or json_schema)",
        request_default("grammar", DefaultKind::kString));
    add(kSampling, "--grammar-file", "", "FNAME", "", Kind::kImpl,
        "the grammar of requests without their own (nor tools, response_format or json_schema)",
        request_default("grammar", DefaultKind::kFile));
    add(kSampling, "-j,--json-schema", "", "SCHEMA", "", Kind::kImpl,
        "the JSON schema of requests without their own (nor tools, response_format or grammar)",
        request_default("json_schema", DefaultKind::kString));
    add(kSampling, "-jf,--json-schema-file", "", "FILE", "", Kind::kImpl,
        "the JSON schema of requests without their own (nor tools, response_format or grammar)",
        request_default("json_schema", DefaultKind::kFile));
    add(kSampling, "-bs,--backend-sampling", "", "", "LLAMA_ARG_BACKEND_SAMPLING", Kind::kCpu, "");

    // ---- server-specific params ----
    add(kServer, "-lcs,--lookup-cache-static", "", "FNAME", "", Kind::kNotYet, kNgram);
    add(kServer, "-lcd,--lookup-cache-dynamic", "", "FNAME", "", Kind::kNotYet, kNgram);
    add(kServer, "--kv-unified-per-slot", "", "N", "LLAMA_ARG_KV_UNIFIED_PER_SLOT", Kind::kImpl,
        "without -c: the shared pool is -np x N cells (loom lets one request use all of -c)", [](Ctx& c, const Use& u) {
          long long x;
          if (!to_int(u.v[0], &x) || x < 0 || x > (1 << 24)) return int_error(u.v[0], 0, 1 << 24);
          c.kv_per_slot = int(x);
          return std::string();
        });
    add(kServer, "-ctxcp,--ctx-checkpoints,--swa-checkpoints", "", "N", "LLAMA_ARG_CTX_CHECKPOINTS", Kind::kImpl,
        "checkpoints kept per prefix path (recurrent, hybrid, sliding-window models; loom's default 8)",
        int_to(&ServeOptions::ctx_checkpoints, 0, 1 << 20));
    add(kServer, "-cms,--checkpoint-min-step", "", "N", "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", Kind::kNoop,
        "loom checkpoints at prompt, reply and system-prompt ends", number());
    add(kServer, "-cram,--cache-ram", "", "N", "LLAMA_ARG_CACHE_RAM", Kind::kImpl,
        "MiB of checkpoints in all (-1: no limit, 0: none)", [](Ctx& c, const Use& u) {
          long long x;
          const long long hi = 1LL << 30;
          if (!to_int(u.v[0], &x) || x < -1 || x > hi) return int_error(u.v[0], -1, hi);
          c.o->cache_ram_mib = x < 0 ? hi : x;
          return std::string();
        });
    add(kServer, "-kvu,--kv-unified", "-no-kvu,--no-kv-unified", "", "LLAMA_ARG_KV_UNIFIED", Kind::kNoop,
        "loom's KV cache is always one pool shared by every slot", quiet_if_positive());
    add(kServer, "--cache-idle-slots", "--no-cache-idle-slots", "", "LLAMA_ARG_CACHE_IDLE_SLOTS", Kind::kNoop,
        "loom's prefix tree keeps what idle requests left", quiet_if_positive());
    add(kServer, "--context-shift", "--no-context-shift", "", "LLAMA_ARG_CONTEXT_SHIFT", Kind::kImpl,
        "at a sequence's limit, drop the oldest half after n_keep and go on", bool_to(&ServeOptions::context_shift));
    add(kServer, "-r,--reverse-prompt", "", "PROMPT", "", Kind::kNoop, "interactive mode only (requests' stop applies)");
    add(kServer, "-sp,--special", "", "", "", Kind::kNotYet, "special tokens are not written into replies");
    add(kServer, "--warmup", "--no-warmup", "", "", Kind::kNoop, "loom runs no warm-up pass", quiet_if_negative());
    add(kServer, "--spm-infill", "", "", "", Kind::kNotYet, "/infill uses the prefix/suffix/middle order");
    add(kServer, "--pooling", "", "{none,mean,cls,last,rank}", "LLAMA_ARG_POOLING", Kind::kImpl,
        "embedding pooling (default: the model's)", [](Ctx& c, const Use& u) {
          std::string e = one_of({"none", "mean", "cls", "last", "rank"})(c, u);
          if (e.empty()) c.o->pooling = u.v[0];
          return e;
        });
    add(kServer, "-np,--parallel", "", "N", "LLAMA_ARG_N_PARALLEL", Kind::kImpl,
        "slots: sequences generating at once (-1: auto = 4)", [](Ctx& c, const Use& u) {
          long long x;
          if (!to_int(u.v[0], &x) || x == 0 || x < -1 || x > 128)
            return std::string("expected -1 (auto) or 1 to 128, not '") + u.v[0] + "'";
          c.o->slots = x < 0 ? ServeOptions{}.slots : int(x);
          return std::string();
        });
    add(kServer, "-cb,--cont-batching", "-nocb,--no-cont-batching", "", "LLAMA_ARG_CONT_BATCHING", Kind::kNoop,
        "loom always batches continuously", quiet_if_positive());
    add(kServer, "-mm,--mmproj", "", "FILE", "LLAMA_ARG_MMPROJ", Kind::kRefused,
        "multimodal projectors: not supported by loom serve");
    add(kServer, "-mmu,--mmproj-url", "", "URL", "LLAMA_ARG_MMPROJ_URL", Kind::kRefused,
        "multimodal projectors (and downloads)");
    add(kServer, "--mmproj-auto", "--no-mmproj,--no-mmproj-auto", "", "LLAMA_ARG_MMPROJ_AUTO", Kind::kNoop, kNoMM,
        quiet_if_negative());
    add(kServer, "--mmproj-offload", "--no-mmproj-offload", "", "LLAMA_ARG_MMPROJ_OFFLOAD", Kind::kCpu, "");
    add(kServer, "-mmdev,--mmproj-device", "", "DEVICE", "MTMD_BACKEND_DEVICE", Kind::kCpu, "");
    add(kServer, "--image-min-tokens", "", "N", "LLAMA_ARG_IMAGE_MIN_TOKENS", Kind::kNoop, kNoMM, number());
    add(kServer, "--image-max-tokens", "", "N", "LLAMA_ARG_IMAGE_MAX_TOKENS", Kind::kNoop, kNoMM, number());
    add(kServer, "--mtmd-batch-max-tokens", "", "N", "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS", Kind::kNoop, kNoMM, number());
    add(kServer, "--video-fps", "", "N", "LLAMA_ARG_VIDEO_FPS", Kind::kNoop, kNoMM, number());
    add(kServer, "--video-timestamp-interval", "", "N", "LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL", Kind::kNoop, kNoMM, number());
    add(kServer, "--video-ffmpeg-dir", "", "DIR", "LLAMA_ARG_VIDEO_FFMPEG_DIR", Kind::kNoop, kNoMM);
    add(kServer, "-a,--alias", "", "STRING", "LLAMA_ARG_ALIAS", Kind::kImpl,
        "model names, comma-separated: the first is reported, all are accepted", [](Ctx& c, const Use& u) {
          for (const auto& a : split_csv(u.v[0])) {
            if (std::find(c.o->aliases.begin(), c.o->aliases.end(), a) == c.o->aliases.end()) c.o->aliases.push_back(a);
          }
          if (!c.o->aliases.empty()) c.o->alias = c.o->aliases.front();
          return std::string();
        });
    add(kServer, "--tags", "", "STRING", "LLAMA_ARG_TAGS", Kind::kImpl, "model tags, comma-separated (/v1/models)",
        [](Ctx& c, const Use& u) {
          for (const auto& a : split_csv(u.v[0])) {
            if (std::find(c.o->tags.begin(), c.o->tags.end(), a) == c.o->tags.end()) c.o->tags.push_back(a);
          }
          return std::string();
        });
    add(kServer, "--embd-normalize", "", "N", "", Kind::kNotYet,
        "embeddings are normalized as the request asks (default euclidean)", quiet_if("2"));
    add(kServer, "--host", "", "HOST", "LLAMA_ARG_HOST", Kind::kImpl,
        "addresses to listen on, a comma list; one ending in .sock is a UNIX socket file", [](Ctx& c, const Use& u) {
          const std::vector<std::string> hosts = split_csv(u.v[0]);
          if (hosts.empty()) return std::string("requires at least one address");
          std::string joined;
          for (const auto& h : hosts) joined += (joined.empty() ? "" : ",") + h;
          c.o->host = joined;
          return std::string();
        });
    add(kServer, "--port", "", "PORT", "LLAMA_ARG_PORT", Kind::kImpl, "the port (0: any free port, printed)",
        int_to(&ServeOptions::port, 0, 65535));
    add(kServer, "--reuse-port", "", "", "LLAMA_ARG_REUSE_PORT", Kind::kNotYet, "SO_REUSEPORT is not set");
    add(kServer, "--path", "", "PATH", "LLAMA_ARG_STATIC_PATH", Kind::kRefused,
        "serving static files: not supported by loom serve", [](Ctx& c, const Use& u) {
          if (u.v[0].empty()) c.quiet = true;  // llama-server's default: nothing to refuse
          return std::string();
        });
    add(kServer, "--cors-origins", "", "ORIGINS", "LLAMA_ARG_CORS_ORIGINS", Kind::kImpl,
        "allowed origins, comma-separated (*; localhost: reflect localhost origins only)",
        str_to(&ServeOptions::cors_origins));
    add(kServer, "--cors-methods", "", "METHODS", "LLAMA_ARG_CORS_METHODS", Kind::kImpl, "allowed methods",
        str_to(&ServeOptions::cors_methods));
    add(kServer, "--cors-headers", "", "HEADERS", "LLAMA_ARG_CORS_HEADERS", Kind::kImpl, "allowed headers",
        str_to(&ServeOptions::cors_headers));
    add(kServer, "--cors-credentials", "--no-cors-credentials", "", "LLAMA_ARG_CORS_CREDENTIALS", Kind::kImpl,
        "allow credentials (with *: the Origin is echoed)", bool_to(&ServeOptions::cors_credentials));
    add(kServer, "--api-prefix", "", "PREFIX", "LLAMA_ARG_API_PREFIX", Kind::kRefused,
        "a path prefix for every route: not yet supported by loom serve", [](Ctx& c, const Use& u) {
          if (u.v[0].empty()) c.quiet = true;
          return std::string();
        });
    add(kServer, "--ui-config,--webui-config", "", "JSON", "LLAMA_ARG_UI_CONFIG", Kind::kNoop, kNoUI);
    add(kServer, "--ui-config-file,--webui-config-file", "", "PATH", "LLAMA_ARG_UI_CONFIG_FILE", Kind::kNoop, kNoUI);
    add(kServer, "--ui-mcp-proxy,--webui-mcp-proxy", "--no-ui-mcp-proxy,--no-webui-mcp-proxy", "", "LLAMA_ARG_UI_MCP_PROXY",
        Kind::kRefused, kAgent);
    add(kServer, "--tools", "", "TOOL1,TOOL2,...", "LLAMA_ARG_TOOLS", Kind::kRefused, kAgent);
    add(kServer, "--tools-runtime", "", "OPTION", "LLAMA_ARG_TOOLS_RUNTIME", Kind::kRefused, kAgent);
    add(kServer, "--mcp-servers-config", "", "PATH", "LLAMA_ARG_MCP_SERVERS_CONFIG", Kind::kRefused, kAgent);
    add(kServer, "--mcp-servers-json", "", "JSON", "LLAMA_ARG_MCP_SERVERS_JSON", Kind::kRefused, kAgent);
    add(kServer, "-ag,--agent", "-no-ag,--no-agent", "", "LLAMA_ARG_AGENT", Kind::kRefused, kAgent);
    add(kServer, "--ui,--webui", "--no-ui,--no-webui", "", "LLAMA_ARG_UI", Kind::kNoop, kNoUI);
    add(kServer, "--embedding,--embeddings", "", "", "LLAMA_ARG_EMBEDDINGS", Kind::kImpl,
        "serve embeddings (and rerank) instead of generation", [](Ctx& c, const Use&) {
          c.o->embedding = true;
          return std::string();
        });
    add(kServer, "--rerank,--reranking", "", "", "LLAMA_ARG_RERANKING", Kind::kImpl, "--embedding with rank pooling",
        [](Ctx& c, const Use&) {
          c.o->embedding = true;
          c.o->pooling = "rank";
          return std::string();
        });
    add(kServer, "--api-key", "", "KEY", "LLAMA_API_KEY", Kind::kImpl, "required keys, comma-separated",
        [](Ctx& c, const Use& u) {
          for (const auto& k : split_csv(u.v[0])) c.o->api_keys.push_back(k);
          return std::string();
        });
    add(kServer, "--api-key-file", "", "FNAME", "LLAMA_ARG_API_KEY_FILE", Kind::kImpl,
        "keys, one a line (# starts a comment line)", [](Ctx& c, const Use& u) {
          std::ifstream f(u.v[0]);
          if (!f) return "cannot open " + u.v[0];
          std::string line;
          while (std::getline(f, line)) {
            while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
            if (!line.empty() && line[0] != '#') c.o->api_keys.push_back(line);
          }
          return std::string();
        });
    add(kServer, "--ssl-key-file", "", "FNAME", "LLAMA_ARG_SSL_KEY_FILE", Kind::kRefused,
        "TLS: not supported by loom serve (put a TLS proxy in front)");
    add(kServer, "--ssl-cert-file", "", "FNAME", "LLAMA_ARG_SSL_CERT_FILE", Kind::kRefused,
        "TLS: not supported by loom serve (put a TLS proxy in front)");
    add(kServer, "--chat-template-kwargs", "", "STRING", "LLAMA_ARG_CHAT_TEMPLATE_KWARGS", Kind::kImpl,
        "a JSON object merged under each chat request's chat_template_kwargs", [](Ctx& c, const Use& u) {
          nlohmann::json j;
          try {
            j = nlohmann::json::parse(u.v[0]);
          } catch (const std::exception&) {
            return std::string("expected a JSON object, not '") + u.v[0] + "'";
          }
          if (!j.is_object()) return std::string("expected a JSON object, not '") + u.v[0] + "'";
          c.o->chat_template_kwargs = j.dump();
          return std::string();
        });
    add(kServer, "-to,--timeout", "", "N", "LLAMA_ARG_TIMEOUT", Kind::kImpl,
        "HTTP write timeout in s (loom's default 600; headers within min(N, 10) s, bodies min(N, 30) s)",
        int_to(&ServeOptions::timeout_s, 1, 1 << 30));
    add(kServer, "--sse-ping-interval", "", "N", "LLAMA_ARG_SSE_PING_INTERVAL", Kind::kNotYet, "streams send no pings",
        number());
    add(kServer, "--threads-http,--http-threads", "", "N", "LLAMA_ARG_THREADS_HTTP", Kind::kImpl,
        "threads parsing requests (-1: loom's 4; --http-threads is loom's older spelling)", [](Ctx& c, const Use& u) {
          long long x;
          if (!to_int(u.v[0], &x) || x > 64 || x == 0 || x < -1)
            return std::string("expected -1 or 1 to 64, not '") + u.v[0] + "'";
          c.o->http_threads = x < 0 ? ServeOptions{}.http_threads : int(x);
          return std::string();
        });
    add(kServer, "--cache-prompt", "--no-cache-prompt", "", "LLAMA_ARG_CACHE_PROMPT", Kind::kImpl,
        "share cached prompt prefixes (--no-cache-prompt = loom's --no-prefix-cache)", bool_to(&ServeOptions::prefix_cache));
    add(kServer, "--cache-reuse", "", "N", "LLAMA_ARG_CACHE_REUSE", Kind::kNoop,
        "loom's prefix tree reuses cached prefixes without KV shifting", quiet_if("0"));
    add(kServer, "--metrics", "", "", "LLAMA_ARG_ENDPOINT_METRICS", Kind::kAlways, "/metrics is always served");
    add(kServer, "--props", "", "", "LLAMA_ARG_ENDPOINT_PROPS", Kind::kNotYet,
        "GET /props is always served; POST /props not yet");
    add(kServer, "--slots", "--no-slots", "", "LLAMA_ARG_ENDPOINT_SLOTS", Kind::kImpl,
        "GET /slots (on by default; --no-slots: 501)", bool_to(&ServeOptions::slots_endpoint));
    add(kServer, "--slot-save-path", "", "PATH", "", Kind::kImpl,
        "POST /slots/{id}?action=save|restore files live here (checksummed state files)",
        str_to(&ServeOptions::slot_save_path));
    add(kServer, "--media-path", "", "PATH", "", Kind::kNoop, kNoMM);
    add(kServer, "--models-dir", "", "PATH", "LLAMA_ARG_MODELS_DIR", Kind::kImpl,
        "router mode (no -m): every GGUF file here is a model, named by its file stem", str_to(&ServeOptions::models_dir));
    add(kServer, "--models-preset", "", "PATH", "LLAMA_ARG_MODELS_PRESET", Kind::kImpl,
        "router mode: llama-server's INI presets (a [section] per model, its flags as keys)",
        str_to(&ServeOptions::models_preset));
    add(kServer, "--models-max", "", "N", "LLAMA_ARG_MODELS_MAX", Kind::kImpl,
        "router mode: models loaded at once (default 4, 0 = no limit; least recently used unloaded)",
        int_to(&ServeOptions::models_max, 0, 1 << 16));
    add(kServer, "--models-autoload", "--no-models-autoload", "", "LLAMA_ARG_MODELS_AUTOLOAD", Kind::kImpl,
        "router mode: a request naming a model that is not loaded loads it (?autoload= per request)",
        bool_to(&ServeOptions::models_autoload));
    add(kServer, "--jinja", "--no-jinja", "", "LLAMA_ARG_JINJA", Kind::kAlways,
        "loom always renders the Jinja chat template (--no-jinja: said in the log, the template is used anyway)",
        [](Ctx& c, const Use& u) {
          if (!u.pos && !c.said_no_jinja)
            std::fprintf(stderr, "loom: %s: loom renders the model's Jinja chat template anyway\n", u.name.c_str());
          c.said_no_jinja = c.said_no_jinja || !u.pos;
          return std::string();
        });
    add(kServer, "--reasoning-format", "", "FORMAT", "LLAMA_ARG_THINK", Kind::kImpl,
        "default reasoning_format of chat requests: none, deepseek, deepseek-legacy, auto", [](Ctx& c, const Use& u) {
          std::string e = one_of({"none", "deepseek", "deepseek-legacy", "auto"})(c, u);
          if (e.empty()) c.o->reasoning_format = u.v[0];
          return e;
        });
    add(kServer, "-rea,--reasoning", "", "[on|off|auto]", "LLAMA_ARG_REASONING", Kind::kImpl,
        "off: templates get enable_thinking false; on: true; auto: the template's default", [](Ctx& c, const Use& u) {
          if (truthy(u.v[0])) c.o->reasoning = "on";
          else if (falsey(u.v[0])) c.o->reasoning = "off";
          else if (autoy(u.v[0])) c.o->reasoning = "auto";
          else return "expected on, off or auto, not '" + u.v[0] + "'";
          return std::string();
        });
    add(kServer, "--reasoning-effort", "", "LEVEL", "LLAMA_ARG_REASONING_EFFORT", Kind::kImpl,
        "reasoning_effort given to the template (in the default chat_template_kwargs; default: the template's)",
        [](Ctx& c, const Use& u) {
          c.effort_set = true;
          c.effort = u.v[0];
          return std::string();
        });
    add(kServer, "--reasoning-budget", "", "N", "LLAMA_ARG_THINK_BUDGET", Kind::kImpl,
        "thinking tokens before the block is closed (-1: no limit, 0: at once)",
        int_to(&ServeOptions::reasoning_budget, -1, 1 << 30));
    add(kServer, "--reasoning-budget-message", "", "MESSAGE", "LLAMA_ARG_THINK_BUDGET_MESSAGE", Kind::kImpl,
        "written before the closing tag when the reasoning budget closes a block",
        request_default("reasoning_budget_message", DefaultKind::kString));
    add(kServer, "--reasoning-preserve", "--no-reasoning-preserve", "", "LLAMA_ARG_REASONING_PRESERVE", Kind::kNotYet,
        "earlier turns' reasoning is passed as the messages carry it", quiet_if_positive());
    add(kServer, "--chat-template", "", "JINJA_TEMPLATE", "LLAMA_ARG_CHAT_TEMPLATE", Kind::kImpl,
        "a built-in template name (chatml, llama3, ...) or Jinja source", str_to(&ServeOptions::chat_template));
    add(kServer, "--chat-template-file", "", "JINJA_TEMPLATE_FILE", "LLAMA_ARG_CHAT_TEMPLATE_FILE", Kind::kImpl,
        "a Jinja template file (wins over --chat-template)", str_to(&ServeOptions::chat_template_file));
    add(kServer, "--skip-chat-parsing", "--no-skip-chat-parsing", "", "LLAMA_ARG_SKIP_CHAT_PARSING", Kind::kNotYet,
        "replies are always parsed for reasoning and tool calls", quiet_if_negative());
    add(kServer, "--prefill-assistant", "--no-prefill-assistant", "", "LLAMA_ARG_PREFILL_ASSISTANT", Kind::kNotYet,
        "a trailing assistant message is always continued", quiet_if_positive());
    add(kServer, "-sps,--slot-prompt-similarity", "", "SIMILARITY", "", Kind::kNoop,
        "loom finds cached prefixes in one tree, not per slot", number());
    add(kServer, "--lora-init-without-apply", "", "", "", Kind::kImpl,
        "adapters load with scale 0 (POST /lora-adapters sets the scales)", [](Ctx& c, const Use&) {
          c.lora_unapplied = true;
          return std::string();
        });
    add(kServer, "--sleep-idle-seconds", "", "SECONDS", "", Kind::kImpl,
        "after this long without work the model is unloaded; the next request loads it again (-1: never)",
        int_to(&ServeOptions::sleep_idle_seconds, -1, 1 << 30));
    add(kServer, "--log-prompts-dir", "", "PATH", "", Kind::kNotYet, "prompts are not logged to files");
    add(kServer, "--spec-draft-hf,-hfd,-hfrd,--hf-repo-draft", "", "<user>/<model>[:quant]", "LLAMA_ARG_SPEC_DRAFT_HF_REPO",
        Kind::kRefused, kDownload + " (-md for a draft model)");
    add(kServer, "--spec-draft-threads,-td,--threads-draft", "", "N", "", Kind::kNoop,
        "the draft model runs on the server's threads", number());
    add(kServer, "--spec-draft-threads-batch,-tbd,--threads-batch-draft", "", "N", "", Kind::kNoop,
        "the draft model runs on the server's threads", number());
    add(kServer, "--spec-draft-cpu-mask,-Cd,--cpu-mask-draft", "", "M", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-cpu-range,-Crd,--cpu-range-draft", "", "lo-hi", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-cpu-strict,--cpu-strict-draft", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-prio,--prio-draft", "", "N", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-poll,--poll-draft", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-cpu-mask-batch,-Cbd,--cpu-mask-batch-draft", "", "M", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-cpu-strict-batch,--cpu-strict-batch-draft", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-prio-batch,--prio-batch-draft", "", "N", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-poll-batch,--poll-batch-draft", "", "<0|1>", "", Kind::kNoop, kThreads);
    add(kServer, "--spec-draft-override-tensor,-otd,--override-tensor-draft", "", "<tensor name pattern>=<buffer type>,...",
        "", Kind::kCpu, "");
    add(kServer, "--spec-draft-cpu-moe,-cmoed,--cpu-moe-draft", "", "", "LLAMA_ARG_SPEC_DRAFT_CPU_MOE", Kind::kCpu, "");
    add(kServer, "--spec-draft-n-cpu-moe,--spec-draft-ncmoe,-ncmoed,--n-cpu-moe-draft", "", "N",
        "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE", Kind::kCpu, "", number());
    add(kServer, "--spec-draft-n-max", "", "N", "LLAMA_ARG_SPEC_DRAFT_N_MAX", Kind::kImpl,
        "most draft tokens per step, 1 to 32 (loom's default 16)", int_to(&ServeOptions::draft_max, 1, 32));
    add(kServer, "--spec-draft-n-min", "", "N", "LLAMA_ARG_SPEC_DRAFT_N_MIN", Kind::kImpl,
        "shorter drafts are not verified, 0 to 32", int_to(&ServeOptions::draft_min, 0, 32));
    add(kServer, "--spec-synth-len", "", "L", "LLAMA_ARG_SPEC_SYNTH_LEN", Kind::kNoop, "llama.cpp's benchmarking aid",
        number());
    add(kServer, "--spec-synth-rates", "", "P0,P1,...", "LLAMA_ARG_SPEC_SYNTH_RATES", Kind::kNoop,
        "llama.cpp's benchmarking aid");
    add(kServer, "--spec-draft-p-split,--draft-p-split", "", "P", "LLAMA_ARG_SPEC_DRAFT_P_SPLIT", Kind::kNoop,
        "loom drafts one sequence (no tree)", number());
    add(kServer, "--spec-draft-p-min,--draft-p-min", "", "P", "LLAMA_ARG_SPEC_DRAFT_P_MIN", Kind::kImpl,
        "the draft stops below this probability (loom's default 0.75)", [](Ctx& c, const Use& u) {
          double x;
          if (!to_float(u.v[0], &x) || x < 0 || x > 1) return "expected a number from 0 to 1, not '" + u.v[0] + "'";
          c.o->draft_p_min = float(x);
          return std::string();
        });
    add(kServer, "--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling", "",
        "LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING", Kind::kCpu, "");
    add(kServer, "--spec-draft-device,-devd,--device-draft", "", "<dev1,dev2,..>", "", Kind::kCpu, "");
    add(kServer, "--spec-draft-ngl,-ngld,--gpu-layers-draft,--n-gpu-layers-draft", "", "N", "LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        Kind::kCpu, "");
    add(kServer, "--spec-draft-model,-md,--model-draft,--draft-model", "", "FNAME", "LLAMA_ARG_SPEC_DRAFT_MODEL",
        Kind::kImpl, "speculative decoding with this draft model (same vocabulary; --draft-model is loom's older spelling)",
        str_to(&ServeOptions::draft_model));
    add(kServer, "--spec-type", "", "none,draft-simple,...", "LLAMA_ARG_SPEC_TYPE", Kind::kNotYet,
        "none and draft-simple (with -md) are what loom does; " + kNgram, [](Ctx& c, const Use& u) {
          c.quiet = true;
          for (const auto& t : split_csv(u.v[0])) {
            if (t != "none" && t != "draft-simple") c.quiet = false;
          }
          return std::string();
        });
    for (const char* n : {"--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-match",
                          "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--spec-ngram-simple-min-hits",
                          "--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m", "--spec-ngram-map-k-min-hits",
                          "--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m", "--spec-ngram-map-k4v-min-hits"}) {
      add(kServer, n, "", "N", "", Kind::kNotYet, kNgram, number());
    }
    add(kServer, "--draft,--draft-n,--draft-max", "", "N", "LLAMA_ARG_DRAFT_MAX", Kind::kImpl,
        "as --spec-draft-n-max (llama.cpp has removed these spellings; loom keeps them)",
        int_to(&ServeOptions::draft_max, 1, 32));
    add(kServer, "--draft-min,--draft-n-min", "", "N", "LLAMA_ARG_DRAFT_MIN", Kind::kImpl,
        "as --spec-draft-n-min (kept by loom)", int_to(&ServeOptions::draft_min, 0, 32));
    for (const char* n : {"--spec-ngram-size-n", "--spec-ngram-size-m", "--spec-ngram-min-hits"}) {
      add(kServer, n, "", "N", "", Kind::kRefused,
          "removed by llama.cpp: use the --spec-ngram-*-size-n / -size-m / -min-hits spellings");
    }
    for (const char* n :
         {"--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default",
          "--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default", "--gpt-oss-20b-default",
          "--gpt-oss-120b-default", "--vision-gemma-4b-default", "--vision-gemma-12b-default"}) {
      add(kServer, n, "", "", "", Kind::kRefused, "a preset that downloads a model: " + kDownload);
    }
    add(kServer, "--spec-default", "", "", "", Kind::kNotYet, kNgram);

    // ---- older llama-server spellings and loom's own flags ----
    add(kLoom, "--mlock", "", "", "", Kind::kNoop, "older llama-servers' flag: loom memory-maps the model file");
    add(kLoom, "--mmap", "--no-mmap", "", "", Kind::kNoop, "older llama-servers' flags: loom memory-maps the model file");
    add(kLoom, "-cd,--ctx-size-draft", "", "N", "", Kind::kImpl,
        "older llama-servers' flag: cells of each slot's draft context (0: twice a slot's share, at least 2048)",
        int_to(&ServeOptions::draft_n_ctx, 0, 1 << 30));
    add(kLoom, "--step-tokens", "", "N", "", Kind::kImpl, "loom: tokens per scheduler step (0: -ub)",
        int_to(&ServeOptions::step_tokens, 0, 1 << 20));
    add(kLoom, "--max-queue", "", "N", "", Kind::kImpl, "loom: waiting requests beyond which new ones get 503 (default 256)",
        int_to(&ServeOptions::max_queue, 0, 1 << 30));
    add(kLoom, "--cache-dir", "", "DIR", "", Kind::kImpl,
        "loom: keep evicted and idle prefixes in this folder, also across restarts", str_to(&ServeOptions::cache_dir));
    add(kLoom, "--no-prefix-cache", "", "", "", Kind::kImpl,
        "loom: no prefix sharing between requests (= --no-cache-prompt)", [](Ctx& c, const Use&) {
          c.o->prefix_cache = false;
          return std::string();
        });
    add(kLoom, "--max-body", "", "BYTES", "", Kind::kImpl, "loom: larger request bodies get 413 (default 8 MiB)",
        [](Ctx& c, const Use& u) {
          long long x;
          if (!to_int(u.v[0], &x) || x < 1) return int_error(u.v[0], 1, std::numeric_limits<long long>::max());
          c.o->max_body = size_t(x);
          return std::string();
        });
    add(kHidden, "--flag-table-markdown", "", "", "", Kind::kInfo, "", [](Ctx& c, const Use&) {
      c.markdown = true;
      return std::string();
    });
    return f;
  }();
  return t;
}

std::string names_of(const Flag& f) {
  std::string s;
  for (const auto& n : f.pos) s += (s.empty() ? "" : ", ") + n;
  for (const auto& n : f.neg) s += (s.empty() ? "" : ", ") + n;
  if (!f.hint.empty()) s += " " + f.hint;
  return s;
}

std::string status_of(const Flag& f) {
  switch (f.kind) {
    case Kind::kImpl: return "implemented";
    case Kind::kAlways: return "accepted (always so in loom)";
    case Kind::kCpu: return "accepted (no effect on a CPU server)";
    case Kind::kNoop: return "accepted (no effect)";
    case Kind::kNotYet: return "accepted (not yet)";
    case Kind::kRefused: return f.neg.empty() ? "refused" : "refused (" + f.neg.front() + " accepted)";
    case Kind::kInfo: return "implemented";
  }
  return "";
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else out += ch;
  }
  return out;
}

void print_help() {
  std::printf(
      "usage: loom serve -m MODEL [options]   (also: llama-server / loom-llama-server -m MODEL [options])\n\n"
      "llama-server's command line; docs/serving.md, \"llama-server's flags\", says what loom does with each.\n"
      "Environment variables (LLAMA_ARG_*) are read as llama-server reads them; arguments win.\n\n");
  const char* heads[] = {"----- common params -----", "----- sampling params (server-wide defaults) -----",
                         "----- server-specific params -----", "----- older llama-server spellings and loom's own -----"};
  for (int g = kCommon; g <= kLoom; ++g) {
    std::printf("%s\n\n", heads[g]);
    for (const Flag& f : table()) {
      if (f.group != g) continue;
      std::string line = names_of(f);
      if (line.size() < 40) line.resize(40, ' ');
      else line += "\n" + std::string(40, ' ');
      std::printf("%s%s%s%s\n", line.c_str(), status_of(f).c_str(), f.note.empty() ? "" : ": ", f.note.c_str());
      if (!f.env.empty()) std::printf("%s(env: %s)\n", std::string(40, ' ').c_str(), f.env.c_str());
    }
    std::printf("\n");
  }
}

}  // namespace loom::cli::serve_internal

namespace loom::cli {

using namespace serve_internal;  // NOLINT(google-build-using-namespace): this file's own internals

std::string serve_flag_table_markdown() {
  std::string out;
  const char* heads[] = {"Common params", "Sampling params (server-wide defaults)", "Server-specific params",
                         "Older llama-server spellings and loom's own flags"};
  for (int g = kCommon; g <= kLoom; ++g) {
    out += std::string("### ") + heads[g] + "\n\n| flag | env | in loom | notes |\n|---|---|---|---|\n";
    for (const Flag& f : table()) {
      if (f.group != g) continue;
      out += "| `" + md_escape(names_of(f)) + "` | " + (f.env.empty() ? "" : "`" + f.env + "`") + " | " + status_of(f) +
             " | " + md_escape(f.note) + " |\n";
    }
    out += "\n";
  }
  return out;
}

}  // namespace loom::cli
