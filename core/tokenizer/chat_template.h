// Chat templates: the Jinja `chat_template` of a Hugging Face tokenizer_config.json
// (or GGUF `tokenizer.chat_template`), rendered the way transformers'
// apply_chat_template renders it.
//
// No maintained C++ Jinja library is packaged in Debian, so this is a Jinja subset
// written for chat templates (core/tokenizer/chat_template_*.cc):
//   statements  {% for x in xs [if cond] %}..{% else %}..{% endfor %}, {% if %}/{% elif %}/
//               {% else %}, {% set x = e %}, {% set ns.attr = e %}, {% break %}, {% continue %},
//               {# comments #}, whitespace control {%- -%} {{- -}} {%+ +%}
//   expressions literals (strings, ints, floats, lists, dicts, true/none/...), names,
//               x.attr, x[i], x[a:b:c], calls, + - * / // % ** ~, comparisons, in / not in,
//               and / or / not, `a if c else b`, `x is [not] test`, `x | filter(args)`
//   filters     trim length count tojson upper lower capitalize title default d first last
//               join string int float list items replace reverse safe abs
//   tests       defined undefined none string number integer float boolean mapping iterable
//               sequence true false odd even divisibleby eq equalto
//   globals     raise_exception namespace range strftime_now dict
//   methods     str: strip lstrip rstrip startswith endswith split upper lower replace title
//               capitalize; dict: items keys values get
// The environment is transformers': trim_blocks and lstrip_blocks on, one trailing
// newline of the template dropped, undefined values print as "" and fail in arithmetic,
// `tojson` is json.dumps(ensure_ascii=False). Not supported (a parse error naming the
// tag): macros, call blocks, filter blocks, {% raw %}, set blocks, includes, extends.
// upper/lower/capitalize use Unicode case mapping (ICU); title changes ASCII letters only.
// Not Python: '%' string formatting, dict views and tuples (items() gives lists),
// methods as values (`'a'.index` is undefined), reverse gives a list.
//
// A parsed ChatTemplate is immutable; Render is const and safe to call from many
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace treespec {

namespace chat_template_internal {
struct Program;
}

// Bounds that keep a hostile or buggy template from exhausting the server.
struct ChatTemplateLimits {
  int max_nesting = 64;                    // nested expressions / blocks while parsing
  // Levels of one expression's tree: operator chains (`a + b + ...`, `x.a.b`,
  // `x | f | g`) add a level per operator without nesting, and rendering
  // recurses once per level.
  int max_expression_height = 128;
  int64_t max_output_bytes = 8 << 20;      // rendered text, including intermediate strings
  int64_t max_loop_iterations = 1 << 20;   // all loop bodies of one render, together
  // A value stored by `set` (namespace attributes carry values from one loop
  // iteration to the next, so `{% set ns.x = [ns.x] %}` or `ns.x + ns.x`
  // would grow one without bound): its nesting levels and its elements
  // (strings, numbers, list items and dict entries, counted recursively).
  int max_value_depth = 256;
  int64_t max_value_elements = 1 << 20;
  absl::Status Validate() const;
};

class ChatTemplate {
 public:
  // INVALID_ARGUMENT naming line, column and what was expected on a syntax error or
  // an unsupported tag.
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view source,
                                            ChatTemplateLimits limits = {});

  // Renders with `context` as the template's variables (an object). Errors
  // (raise_exception, undefined arithmetic, type errors, limits) are
  // INVALID_ARGUMENT naming the template line and column.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const chat_template_internal::Program> program)
      : program_(std::move(program)) {}
  std::shared_ptr<const chat_template_internal::Program> program_;
};

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplateVars {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
};

// transformers' apply_chat_template(messages, add_generation_prompt=...,
// tokenize=False): messages as [{"role", "content"}], tools and documents as none,
// bos_token / eos_token as given.
absl::StatusOr<std::string> ApplyChatTemplate(const ChatTemplate& chat_template,
                                              absl::Span<const ChatMessage> messages,
                                              const ChatTemplateVars& vars);

}  // namespace treespec

namespace treespec {

// The chat template of a Hugging Face model directory: chat_template.jinja if
// present, else tokenizer_config.json's "chat_template" (a string, or a list of
// {"name", "template"} from which "default" is taken). nullopt when the model
// has none; INVALID_ARGUMENT naming the file and field when it is malformed.
absl::StatusOr<std::optional<std::string>> ReadChatTemplate(const std::string& dir);

// The "chat_template" field of tokenizer_config.json `text` as ReadChatTemplate
// takes it; `path` names the file in errors.
absl::StatusOr<std::optional<std::string>> ChatTemplateFromTokenizerConfig(
    const std::string& text, const std::string& path);

}  // namespace treespec
