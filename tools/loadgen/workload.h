// The requests a load generator sends: prompts from a JSONL file or a
// built-in set, each with its own sampling and speculation settings.
//
// JSONL: one object per line (blank lines and lines starting with '#' are
// skipped). Fields: "prompt" (text) or "token_ids" (array of ints) — one is
// required; optional "max_tokens", "temperature", "top_p", "top_k", "seed",
// "drafter", "tree", "verification" ("greedy" | "multiround" |
// "target_sampling"), "stop" (string or array), "ignore_eos". Fields a line
// leaves out take the defaults given on the command line. Pure functions
// (LoadPromptsJsonl also reads the file).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "treespec/v1/generation.pb.h"

namespace treespec::loadgen {

struct RequestDefaults {
  int32_t max_tokens = 128;
  double temperature = 0.0;
  std::string drafter;  // empty: the server's default
  std::string tree;     // empty: the server's default
  bool ignore_eos = false;
  uint64_t seed = 0;    // request i gets seed + i when the line gives none
};

// Parses JSONL text; errors name the line.
absl::StatusOr<std::vector<v1::GenerateRequest>> ParsePromptsJsonl(const std::string& text,
                                                                   const RequestDefaults& defaults);
absl::StatusOr<std::vector<v1::GenerateRequest>> LoadPromptsJsonl(const std::string& path,
                                                                  const RequestDefaults& defaults);
// A small built-in set of short English text prompts (the server needs a
// tokenizer for them).
std::vector<v1::GenerateRequest> BuiltinPrompts(const RequestDefaults& defaults);

}  // namespace treespec::loadgen
