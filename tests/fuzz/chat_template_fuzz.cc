// libFuzzer target: a Jinja chat template and the messages it renders. The
// input is the template text, a NUL byte, then a JSON array of
// {"role", "content"} messages (other values are skipped); without a NUL the
// whole input is the template and a fixed conversation is rendered. Render
// runs with small limits so that a template that loops or grows its output
// hits the limit (an error) quickly instead of timing the fuzzer out.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_input.h"

namespace {

std::vector<treespec::ChatMessage> Messages(const std::string& text) {
  std::vector<treespec::ChatMessage> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return {{"system", "Be brief."}, {"user", text}, {"assistant", "Hello."}};
  }
  if (!j.is_array()) return out;
  for (const nlohmann::json& m : j) {
    if (!m.is_object()) continue;
    auto role = m.find("role");
    auto content = m.find("content");
    if (role == m.end() || !role->is_string() || content == m.end() || !content->is_string()) {
      continue;
    }
    out.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, rest] = treespec::fuzz::SplitOnce(treespec::fuzz::Bytes(data, size), '\0');
  treespec::ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 1 << 14;
  auto tmpl = treespec::ChatTemplate::Parse(source, limits);
  if (!tmpl.ok()) return 0;
  const std::vector<treespec::ChatMessage> messages = Messages(rest);
  for (bool add_generation_prompt : {false, true}) {
    auto out = treespec::ApplyChatTemplate(*tmpl, messages,
                                           {add_generation_prompt, "<s>", "</s>"});
    if (out.ok()) treespec::fuzz::Consume(out->size());
  }
  return 0;
}
