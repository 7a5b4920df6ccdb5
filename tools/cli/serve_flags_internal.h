// Private to `loom serve`'s flag files: the flag table's types (serve_flags.cpp holds the table),
// the value parsers and handler builders its rows use (serve_flag_values.cpp), and what the
// parser (serve_flags_parse.cpp) and the help / Markdown renderings share.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "server.h"

namespace loom::cli::serve_internal {

using server::ServeOptions;

// What loom does with a flag.
enum class Kind {
  kImpl,     // implemented: the same meaning as llama-server's
  kAlways,   // accepted: what it asks for is always so in loom (silent)
  kCpu,      // accepted: no effect on a CPU server (said once)
  kNoop,     // accepted: no effect in loom, for the reason in the note (said once)
  kNotYet,   // accepted: not yet done by loom serve (said once)
  kRefused,  // refused: one line naming it, exit 2 (its negation, if any, is accepted silently)
  kInfo,     // prints something and exits (--help, --version, --list-devices)
};

enum Group { kCommon, kSampling, kServer, kLoom, kHidden };

struct Ctx;
struct Use {
  std::string name;  // as the user spelled it ("LLAMA_ARG_X (--x)" from the environment)
  bool pos = true;   // false for a --no-x spelling (or a falsey environment value)
  std::vector<std::string> v;
};
// Returns an error ("" when fine). May set ctx.quiet to skip the entry's note for this value.
using Handler = std::function<std::string(Ctx&, const Use&)>;

struct Flag {
  Group group;
  std::vector<std::string> pos, neg;
  std::string hint;  // value placeholder; "" = no value
  int nargs;         // 0, 1, 2, or -1: one optional value (older llama-servers' bare -fa)
  std::string env;
  Kind kind;
  std::string note;
  Handler h;
};

struct Ctx {
  ServeOptions* o;
  bool quiet = false;
  bool help = false, version = false, list_devices = false, markdown = false;
  bool ctx_set = false, pooling_set = false;
  int kv_per_slot = 0;
  bool effort_set = false;
  bool lora_unapplied = false;
  bool said_no_jinja = false;
  std::string effort;
  std::set<const Flag*> noted;
};

// ---- the table (serve_flags.cpp) ----

const std::vector<Flag>& table();
// "-a, --b, --no-b HINT": a row's spellings.
std::string names_of(const Flag& f);
// What loom does with a flag, in words.
std::string status_of(const Flag& f);
// `loom serve --help`.
void print_help();

// ---- values (serve_flag_values.cpp) ----

// Items of a comma list, trimmed, empty ones dropped.
std::vector<std::string> split_csv(const std::string& s, char sep = ',');
std::string lower(std::string s);
// llama.cpp's is_truthy / is_falsey / is_autoy.
bool truthy(const std::string& v);
bool falsey(const std::string& v);
bool autoy(const std::string& v);
// Whole-string numbers (false on anything else).
bool to_int(const std::string& s, long long* out);
bool to_float(const std::string& s, double* out);
std::string int_error(const std::string& v, long long lo, long long hi);

// Handlers the rows use.
Handler int_to(int ServeOptions::*field, long long lo, long long hi);
Handler int_or_default(int ServeOptions::*field, long long hi);
Handler str_to(std::string ServeOptions::*field);
Handler bool_to(bool ServeOptions::*field);
enum class DefaultKind { kNumber, kInt, kString, kTrue, kAppend, kFile };
Handler request_default(std::string key, DefaultKind kind);
Handler logit_bias_default();
Handler number();
Handler one_of(std::vector<std::string> allowed);
Handler on_off_auto(bool with_auto);
Handler quiet_if(std::string quiet_value);
Handler quiet_if_negative();
Handler quiet_if_positive();
// A --cache-type-k/v value; "" or the error.
std::string cache_type(const std::string& v, int32_t* out);
// One --lora / --lora-scaled item into c.o->loras; *err on a malformed --lora-scaled.
void add_lora(Ctx& c, const std::string& item, bool scaled_form, std::string* err);

}  // namespace loom::cli::serve_internal
