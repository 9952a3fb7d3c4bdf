#include "tools/loadgen/workload.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace treespec::loadgen {
namespace {

using nlohmann::json;

constexpr const char* kBuiltin[] = {
    "Once upon a time, there was a little dog named",
    "The little girl looked at the sky and said",
    "Tom and his mom went to the park. They saw",
    "One day, a big red ball rolled into the garden and",
    "There was a small bird who wanted to fly high. Every day",
    "Lily had a new toy. She was very happy because",
    "The sun was shining and the children were playing. Suddenly",
    "In a small house near the forest lived an old cat who",
};

v1::GenerateRequest Base(const RequestDefaults& d, size_t index) {
  v1::GenerateRequest r;
  r.set_max_tokens(d.max_tokens);
  r.mutable_sampling()->set_temperature(static_cast<float>(d.temperature));
  r.mutable_sampling()->set_seed(d.seed + index);
  r.set_ignore_eos(d.ignore_eos);
  r.mutable_speculation()->set_drafter(d.drafter);
  r.mutable_speculation()->set_tree(d.tree);
  return r;
}

absl::Status LineError(size_t line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("--prompts line ", line, ": ", what));
}

absl::StatusOr<v1::GenerateRequest> FromJson(const json& j, const RequestDefaults& d, size_t index,
                                             size_t line) {
  if (!j.is_object()) return LineError(line, "not a JSON object");
  v1::GenerateRequest r = Base(d, index);
  try {
    if (j.contains("prompt")) {
      r.set_text(j.at("prompt").get<std::string>());
    } else if (j.contains("token_ids")) {
      for (const json& t : j.at("token_ids")) r.mutable_token_ids()->add_ids(t.get<int32_t>());
    } else {
      return LineError(line, "needs \"prompt\" or \"token_ids\"");
    }
    if (j.contains("max_tokens")) r.set_max_tokens(j.at("max_tokens").get<int32_t>());
    if (j.contains("temperature")) {
      r.mutable_sampling()->set_temperature(j.at("temperature").get<float>());
    }
    if (j.contains("top_p")) r.mutable_sampling()->set_top_p(j.at("top_p").get<float>());
    if (j.contains("top_k")) r.mutable_sampling()->set_top_k(j.at("top_k").get<int32_t>());
    if (j.contains("seed")) r.mutable_sampling()->set_seed(j.at("seed").get<uint64_t>());
    if (j.contains("drafter")) r.mutable_speculation()->set_drafter(j.at("drafter").get<std::string>());
    if (j.contains("tree")) r.mutable_speculation()->set_tree(j.at("tree").get<std::string>());
    if (j.contains("ignore_eos")) r.set_ignore_eos(j.at("ignore_eos").get<bool>());
    if (j.contains("stop")) {
      const json& s = j.at("stop");
      if (s.is_string()) {
        r.add_stop(s.get<std::string>());
      } else {
        for (const json& x : s) r.add_stop(x.get<std::string>());
      }
    }
    if (j.contains("verification")) {
      const std::string v = j.at("verification").get<std::string>();
      if (v == "greedy") {
        r.mutable_speculation()->set_verification(v1::VERIFICATION_MODE_GREEDY);
      } else if (v == "multiround") {
        r.mutable_speculation()->set_verification(v1::VERIFICATION_MODE_MULTIROUND);
      } else if (v == "target_sampling") {
        r.mutable_speculation()->set_verification(v1::VERIFICATION_MODE_TARGET_SAMPLING);
      } else {
        return LineError(line, absl::StrCat("\"verification\": '", v,
                                            "' is not greedy, multiround or target_sampling"));
      }
    }
  } catch (const json::exception& e) {
    return LineError(line, e.what());
  }
  return r;
}

}  // namespace

absl::StatusOr<std::vector<v1::GenerateRequest>> ParsePromptsJsonl(const std::string& text,
                                                                   const RequestDefaults& d) {
  std::vector<v1::GenerateRequest> out;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return LineError(line_no, "not valid JSON");
    absl::StatusOr<v1::GenerateRequest> r = FromJson(j, d, out.size(), line_no);
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  if (out.empty()) return absl::InvalidArgumentError("--prompts: the file holds no prompts");
  return out;
}

absl::StatusOr<std::vector<v1::GenerateRequest>> LoadPromptsJsonl(const std::string& path,
                                                                  const RequestDefaults& d) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--prompts: cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePromptsJsonl(ss.str(), d);
}

std::vector<v1::GenerateRequest> BuiltinPrompts(const RequestDefaults& d) {
  std::vector<v1::GenerateRequest> out;
  for (const char* p : kBuiltin) {
    v1::GenerateRequest r = Base(d, out.size());
    r.set_text(p);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace treespec::loadgen
