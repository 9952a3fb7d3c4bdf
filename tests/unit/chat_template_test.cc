// Chat templates against jinja2 goldens (tools/goldens/make_chat_template_goldens.py):
// SmolLM2's GGUF template, Llama-3 and Qwen2.5 templates, a feature template and
// grammar-fuzzed templates must render byte-identically or fail where jinja2 fails.
// Then error positions, limits and a bounded mutation fuzz (never crash, always a
// Status).
#include "core/tokenizer/chat_template.h"

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const Json& Goldens() {
  static const Json* goldens = [] {
    std::ifstream in(std::string(TREESPEC_SOURCE_DIR) + "/tests/golden/data/chat_templates/goldens.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return new Json(Json::parse(ss.str()));
  }();
  return *goldens;
}

std::vector<ChatMessage> Conversation(const std::string& name) {
  std::vector<ChatMessage> out;
  for (const Json& m : Goldens()["conversations"][name]) {
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

Json Context(const std::string& conversation, bool add_generation_prompt) {
  Json messages = Json::array();
  for (const ChatMessage& m : Conversation(conversation)) {
    messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  return Json{{"messages", messages},
              {"tools", nullptr},
              {"documents", nullptr},
              {"add_generation_prompt", add_generation_prompt},
              {"bos_token", Goldens()["bos_token"]},
              {"eos_token", Goldens()["eos_token"]}};
}

TEST(ChatTemplateGoldenTest, FormatVersion) {
  EXPECT_EQ(Goldens()["format_version"], 1);
  EXPECT_THAT(Goldens()["command"].get<std::string>(), HasSubstr("make_chat_template_goldens.py"));
  ASSERT_GE(Goldens()["cases"].size(), 40u);
}

TEST(ChatTemplateGoldenTest, ModelTemplatesMatchJinja2) {
  int num_checked = 0;
  for (const Json& c : Goldens()["cases"]) {
    std::string name = c["template"].get<std::string>();
    std::string conv = c["conversation"].get<std::string>();
    bool agp = c["add_generation_prompt"].get<bool>();
    SCOPED_TRACE(name + " / " + conv + (agp ? " / add_generation_prompt" : ""));
    auto tmpl = ChatTemplate::Parse(Goldens()["templates"][name]["source"].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    ChatTemplateVars vars{agp, Goldens()["bos_token"], Goldens()["eos_token"]};
    auto text = ApplyChatTemplate(*tmpl, Conversation(conv), vars);
    if (c.contains("expected")) {
      ASSERT_TRUE(text.ok()) << text.status();
      EXPECT_EQ(*text, c["expected"].get<std::string>());
    } else {
      ASSERT_FALSE(text.ok()) << "jinja2 failed with " << c["error"] << ", we rendered:\n" << *text;
      EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
      // raise_exception's message reaches the caller.
      std::string error = c["error"].get<std::string>();
      if (error.rfind("TemplateError: ", 0) == 0) {
        EXPECT_THAT(std::string(text.status().message()), HasSubstr(error.substr(15)));
      }
    }
    ++num_checked;
  }
  EXPECT_EQ(num_checked, 48);
}

TEST(ChatTemplateGoldenTest, SmolLM2TemplateExactText) {
  auto tmpl = ChatTemplate::Parse(Goldens()["templates"]["smollm2"]["source"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto text = ApplyChatTemplate(*tmpl, {{"user", "Hi"}}, {true, "", ""});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateGoldenTest, GrammarFuzzMatchesJinja2) {
  int num_rendered = 0, num_failed = 0, index = 0;
  for (const Json& c : Goldens()["fuzz_cases"]) {
    std::string source = c["source"].get<std::string>();
    SCOPED_TRACE("fuzz case " + std::to_string(index++) + ":\n" + source);
    auto tmpl = ChatTemplate::Parse(source);
    absl::StatusOr<std::string> text =
        tmpl.ok() ? tmpl->Render(Context(c["conversation"], c["add_generation_prompt"]))
                  : absl::StatusOr<std::string>(tmpl.status());
    if (c.contains("expected")) {
      EXPECT_TRUE(text.ok()) << text.status();
      if (text.ok()) {
        EXPECT_EQ(*text, c["expected"].get<std::string>());
      }
      ++num_rendered;
    } else {
      EXPECT_FALSE(text.ok()) << "jinja2: " << c["error"] << "\nwe rendered:\n" << *text;
      if (!text.ok()) {
        EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
      }
      ++num_failed;
    }
  }
  EXPECT_GT(num_rendered, 100);
  EXPECT_GT(num_failed, 50);
}

absl::Status RenderStatus(const std::string& source, const Json& context = Json::object(),
                          ChatTemplateLimits limits = {}) {
  auto tmpl = ChatTemplate::Parse(source, limits);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(context).status();
}

TEST(ChatTemplateTest, SyntaxErrorsNamePosition) {
  struct Case {
    std::string source;
    std::string message;
  } cases[] = {
      {"ab\n  {% if x %}y", "line 2 col 14: missing '{% endif %}'"},
      {"{{ x + }}", "line 1 col 8: expected an expression, got '}}'"},
      {"{% macro f() %}{% endmacro %}", "line 1 col 4: unsupported or unknown tag 'macro'"},
      {"{{ 'abc }}", "line 1 col 4: unterminated string literal"},
      {"x {{ a", "line 1 col 3: unclosed expression '{{'"},
      {"{% for %}", "line 1 col 8: expected a loop variable name, got '%}'"},
      {"{% break %}", "'break' outside a loop"},
      {"{# no end", "unclosed comment"},
      {"{{ a ! b }}", "unexpected character '!'"},
  };
  for (const Case& c : cases) {
    absl::Status s = RenderStatus(c.source);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.source;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.source;
  }
}

TEST(ChatTemplateTest, RenderErrorsNamePositionAndCause) {
  absl::Status s = RenderStatus("ok\n{{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("line 2 col 4: raise_exception: Roles must alternate"));
  s = RenderStatus("{{ nope + 'x' }}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("'nope' is undefined"));
  s = RenderStatus("{{ 'a' + 1 }}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("unsupported operand types for +: 'str' and 'int'"));
  s = RenderStatus("{{ x | frobnicate }}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown filter 'frobnicate'"));
  s = RenderStatus("{% for m in 3 %}{% endfor %}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("'int' object is not iterable"));
  EXPECT_TRUE(RenderStatus("{{ undefined_name }}{{ d.missing }}", Json{{"d", Json::object()}}).ok());
}

TEST(ChatTemplateTest, LimitsStopRunawayTemplates) {
  ChatTemplateLimits limits;
  limits.max_loop_iterations = 1000;
  limits.max_output_bytes = 4096;
  absl::Status s = RenderStatus("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                                Json::object(), limits);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than 1000 loop iterations"));
  s = RenderStatus("{{ 'x' * 100000 }}", Json::object(), limits);
  EXPECT_THAT(std::string(s.message()), HasSubstr("longer than 4096 bytes"));
  s = RenderStatus("{% for i in range(900) %}xxxxxxxx{% endfor %}", Json::object(), limits);
  EXPECT_THAT(std::string(s.message()), HasSubstr("output longer than 4096 bytes"));
  s = RenderStatus("{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("nesting deeper than 64"));
  s = RenderStatus([] {
    std::string t;
    for (int i = 0; i < 500; ++i) t += "{% if true %}";
    return t;
  }());
  EXPECT_THAT(std::string(s.message()), HasSubstr("nesting deeper than 64"));
  limits.max_nesting = 0;
  EXPECT_EQ(ChatTemplate::Parse("x", limits).status().code(), absl::StatusCode::kInvalidArgument);
}

// Found by tests/fuzz/chat_template_fuzz: operator, filter and postfix chains
// are parsed by loops, not recursion, so they escaped max_nesting and built
// trees 100000 levels tall, whose rendering overflowed the stack.
TEST(ChatTemplateTest, LongOperatorChainsAreRefusedNotCrashing) {
  const std::pair<std::string, std::string> chains[] = {
      {"1", " + 1"}, {"1", " - 1"},     {"2", " * 1"},      {"2", " ** 1"},   {"'a'", " ~ 'a'"},
      {"1", " < 1"}, {"x", " and x"},   {"x", " or x"},     {"x", ".a"},      {"x", "[0]"},
      {"x", "[0:1]"}, {"x", "|trim"},   {"x", " is defined"}, {"x", "()"},
  };
  for (const auto& [head, link] : chains) {
    std::string source = "{{ " + head;
    for (int i = 0; i < 100000; ++i) source += link;
    source += " }}";
    absl::Status s = RenderStatus(source, Json{{"x", "v"}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << head << link;
    EXPECT_THAT(std::string(s.message()), HasSubstr("expression nested deeper than 128 levels"))
        << head << link;
  }
  // Chains of ordinary length render.
  std::string sum = "{{ 1";
  for (int i = 0; i < 99; ++i) sum += " + 1";
  auto tmpl = ChatTemplate::Parse(sum + " }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->Render(Json::object()).value_or("<error>"), "100");
  ChatTemplateLimits limits;
  limits.max_expression_height = 0;
  EXPECT_EQ(ChatTemplate::Parse("x", limits).status().code(), absl::StatusCode::kInvalidArgument);
}

// Found by tests/fuzz/chat_template_fuzz: a namespace attribute carries a
// value from one loop iteration to the next, so a loop could nest it a level
// per iteration or double it, without bound (memory, and a stack overflow
// when the value was printed).
TEST(ChatTemplateTest, GrowingValuesAreRefusedNotCrashing) {
  const std::string loop =
      "{% set ns = namespace(x=[1]) %}{% for i in range(100000) %}{% set ns.x = STEP %}"
      "{% endfor %}{{ ns.x }}";
  const std::pair<std::string, std::string> cases[] = {
      {"[ns.x]", "value nested deeper than 256 levels"},
      {"{'k': ns.x}", "value nested deeper than 256 levels"},
      {"ns.x + ns.x", "more than 1048576 elements"},
  };
  for (const auto& [step, message] : cases) {
    std::string source = loop;
    source.replace(source.find("STEP"), 4, step);
    absl::Status s = RenderStatus(source);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << step;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message)) << step;
    EXPECT_THAT(std::string(s.message()), HasSubstr("line 1 col")) << step;
  }
  // Within the budget, accumulating in a namespace works as before.
  auto tmpl = ChatTemplate::Parse(
      "{% set ns = namespace(x=[]) %}{% for i in range(5) %}{% set ns.x = ns.x + [i] %}"
      "{% endfor %}{{ ns.x }}{% set y = [[[[1]]]] %}{{ y }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->Render(Json::object()).value_or("<error>"), "[0, 1, 2, 3, 4][[[[1]]]]");
  ChatTemplateLimits limits;
  limits.max_value_depth = 3;
  EXPECT_THAT(std::string(RenderStatus("{% set y = [[[1]]] %}", Json::object(), limits).message()),
              HasSubstr("value nested deeper than 3 levels"));
  EXPECT_TRUE(RenderStatus("{% set y = [[1]] %}", Json::object(), limits).ok());
  // A deep value from the context is refused too.
  Json deep = Json::array();
  for (int i = 0; i < 1000; ++i) deep = Json::array({std::move(deep)});
  EXPECT_THAT(std::string(RenderStatus("{% set y = d %}", Json{{"d", std::move(deep)}}, limits)
                              .message()),
              HasSubstr("value nested deeper than 3 levels"));
  limits.max_value_depth = 0;
  EXPECT_EQ(ChatTemplate::Parse("x", limits).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, WhitespaceControl) {
  auto render = [](const std::string& source) {
    auto t = ChatTemplate::Parse(source);
    return t.ok() ? t->Render(Json::object()).value_or("<error>") : "<parse error>";
  };
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a\n  {%+ if true +%}\nb{% endif %}"), "a\n  \nb");
  EXPECT_EQ(render("x {{- ' y ' -}} z\n"), "x y z");
  EXPECT_EQ(render("line\r\n{# c #}\r\nnext\n"), "line\nnext");
}

// Mutated model templates: whatever the bytes, Parse and Render return a Status
// (checked under the sanitizers' eyes in CI) and never crash or hang.
TEST(ChatTemplateFuzzTest, MutatedTemplatesNeverCrash) {
  std::vector<std::string> seeds;
  for (auto it = Goldens()["templates"].begin(); it != Goldens()["templates"].end(); ++it) {
    seeds.push_back(it.value()["source"].get<std::string>());
  }
  static const char* kPieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[",
                                  "]", "{", "}", "'", "\"", "\\", "|", ".", ":", ",", " if ",
                                  " for ", " endfor ", " endif ", " else ", " in ", " not ",
                                  " is ", "loop", "messages", "ns", "\n", "\xff", "\xc3", "0",
                                  "-1", "**", "~", "*", "%", "//", "raise_exception(", "tojson"};
  std::mt19937_64 rng(12);
  ChatTemplateLimits limits;
  limits.max_loop_iterations = 10000;
  limits.max_output_bytes = 1 << 16;
  Json context = Context("multi_turn", true);
  int num_ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = seeds[rng() % seeds.size()];
    int num_mutations = 1 + rng() % 6;
    for (int k = 0; k < num_mutations && !t.empty(); ++k) {
      size_t pos = rng() % (t.size() + 1);
      switch (rng() % 4) {
        case 0: t.erase(std::min(pos, t.size() - 1), 1 + rng() % 8); break;
        case 1: t.insert(pos, kPieces[rng() % std::size(kPieces)]); break;
        case 2: if (pos < t.size()) t[pos] = static_cast<char>(rng() % 256); break;
        default: {
          const std::string& other = seeds[rng() % seeds.size()];
          size_t from = rng() % other.size();
          t.insert(pos, other.substr(from, rng() % 64));
        }
      }
    }
    auto tmpl = ChatTemplate::Parse(t, limits);
    absl::StatusOr<std::string> text = tmpl.ok() ? tmpl->Render(context) : tmpl.status();
    if (text.ok()) {
      ++num_ok;
      EXPECT_LE(text->size(), size_t{1} << 16);
    } else {
      EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << t;
      EXPECT_THAT(std::string(text.status().message()), HasSubstr("chat template")) << t;
    }
  }
  EXPECT_GT(num_ok, 100);  // the mutations do not only produce syntax errors
}

}  // namespace
}  // namespace treespec

namespace treespec {
namespace {

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ReadChatTemplateTest, TokenizerConfigJinjaFileAndNamedTemplates) {
  testing::TempDir dir;
  auto none = ReadChatTemplate(dir.path());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());  // no files at all
  WriteFile(dir.path() + "/tokenizer_config.json", R"({"bos_token": "<s>"})");
  none = ReadChatTemplate(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  WriteFile(dir.path() + "/tokenizer_config.json", R"({"chat_template": "{{ messages[0].content }}"})");
  auto plain = ReadChatTemplate(dir.path());
  ASSERT_TRUE(plain.ok() && plain->has_value());
  EXPECT_EQ(**plain, "{{ messages[0].content }}");
  WriteFile(dir.path() + "/tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto named = ReadChatTemplate(dir.path());
  ASSERT_TRUE(named.ok() && named->has_value());
  EXPECT_EQ(**named, "D");
  WriteFile(dir.path() + "/tokenizer_config.json", R"({"chat_template": 7})");
  auto bad = ReadChatTemplate(dir.path());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"chat_template\" must be a string"));
  WriteFile(dir.path() + "/chat_template.jinja", "J");  // newer transformers save it apart
  auto jinja = ReadChatTemplate(dir.path());
  ASSERT_TRUE(jinja.ok() && jinja->has_value());
  EXPECT_EQ(**jinja, "J");
}

}  // namespace
}  // namespace treespec
