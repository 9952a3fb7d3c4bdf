#include "core/tokenizer/chat_template.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"
#include "core/util/json_fields.h"

namespace treespec {

using chat_template_internal::Program;

absl::Status ChatTemplateLimits::Validate() const {
  if (max_nesting < 1) return absl::InvalidArgumentError(absl::StrCat("max_nesting must be >= 1, got ", max_nesting));
  if (max_expression_height < 1) return absl::InvalidArgumentError(absl::StrCat("max_expression_height must be >= 1, got ", max_expression_height));
  if (max_output_bytes < 1) return absl::InvalidArgumentError(absl::StrCat("max_output_bytes must be >= 1, got ", max_output_bytes));
  if (max_loop_iterations < 0) return absl::InvalidArgumentError(absl::StrCat("max_loop_iterations must be >= 0, got ", max_loop_iterations));
  if (max_value_depth < 1) return absl::InvalidArgumentError(absl::StrCat("max_value_depth must be >= 1, got ", max_value_depth));
  if (max_value_elements < 1) return absl::InvalidArgumentError(absl::StrCat("max_value_elements must be >= 1, got ", max_value_elements));
  return absl::OkStatus();
}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view source, ChatTemplateLimits limits) {
  if (auto s = limits.Validate(); !s.ok()) return s;
  auto program = std::make_shared<Program>();
  program->limits = limits;
  // Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline off).
  std::string& text = program->source.text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text.push_back(source[i]);
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  auto tokens = chat_template_internal::Lex(program->source);
  if (!tokens.ok()) return tokens.status();
  auto body = chat_template_internal::ParseTokens(program->source, *tokens, limits.max_nesting,
                                                       limits.max_expression_height);
  if (!body.ok()) return body.status();
  program->body = std::move(*body);
  return ChatTemplate(std::move(program));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return absl::InvalidArgumentError("chat template context must be an object");
  return chat_template_internal::RenderProgram(*program_, context);
}

absl::StatusOr<std::string> ApplyChatTemplate(const ChatTemplate& chat_template,
                                              absl::Span<const ChatMessage> messages,
                                              const ChatTemplateVars& vars) {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  context["messages"] = std::move(list);
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = vars.add_generation_prompt;
  context["bos_token"] = vars.bos_token;
  context["eos_token"] = vars.eos_token;
  return chat_template.Render(context);
}

}  // namespace treespec

namespace treespec {

absl::StatusOr<std::optional<std::string>> ReadChatTemplate(const std::string& dir) {
  auto read = [](const std::string& path) -> std::optional<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (auto jinja = read(dir + "/chat_template.jinja")) return jinja;
  const std::string path = dir + "/tokenizer_config.json";
  auto text = read(path);
  if (!text) return std::optional<std::string>();
  return ChatTemplateFromTokenizerConfig(*text, path);
}

absl::StatusOr<std::optional<std::string>> ChatTemplateFromTokenizerConfig(
    const std::string& text, const std::string& path) {
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null()) {
    return std::optional<std::string>();
  }
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return std::optional<std::string>(t.get<std::string>());
  if (t.is_array()) {
    for (const nlohmann::json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return std::optional<std::string>(named["template"].get<std::string>());
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": \"chat_template\" must be a string or a list with a {\"name\": \"default\", "
            "\"template\": ...} entry, got ", JsonExcerpt(t)));
}

}  // namespace treespec
