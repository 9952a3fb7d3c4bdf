// JsonFields and JsonExcerpt (core/util/json_fields.h): typed fields with
// errors naming the field, and bounded excerpts of hostile values.
#include "core/util/json_fields.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonExcerptTest, SmallValuesAreTheirCompactJson) {
  EXPECT_EQ(JsonExcerpt(nlohmann::json::parse(R"({"a": [1, 2.5, "x"], "b": null})")),
            R"({"a":[1,2.5,"x"],"b":null})");
  EXPECT_EQ(JsonExcerpt(nlohmann::json("caf\xc3\xa9")), "\"caf\xc3\xa9\"");
}

TEST(JsonExcerptTest, LongAndDeepValuesAreCut) {
  EXPECT_EQ(JsonExcerpt(nlohmann::json(std::string(200, 'a')), 20), "\"aaaaaaaaaaaaaaaa...");
  EXPECT_EQ(JsonExcerpt(nlohmann::json::parse(Nested(6))), "[[[[[...]]]]]");
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_EQ(JsonExcerpt(wide, 10), "[0,1,2,...");
}

// Found by tests/fuzz (openai_request, tokenizer_config): error messages
// showed the offending value with dump(), which recurses once per level, so a
// 1000000-deep document overflowed the stack instead of giving an error.
TEST(JsonExcerptTest, HostileDepthDoesNotOverflowTheStack) {
  const nlohmann::json deep = nlohmann::json::parse(Nested(1000000));
  ASSERT_TRUE(deep.is_array());
  EXPECT_EQ(JsonExcerpt(deep), "[[[[[...]]]]]");
  // Parsed, not built from `deep`: copying a value recurses once per level.
  const nlohmann::json obj = nlohmann::json::parse("{\"hidden_size\": " + Nested(1000000) + "}");
  absl::StatusOr<int64_t> v = JsonFields(obj, "config.json").Int("hidden_size");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("config.json: field 'hidden_size' must be an integer, got [[[[[...]]]]]"));
}

// Found by tests/fuzz/model_config_fuzz (UBSan): a float outside int64's
// range was cast to int64 (undefined behaviour) before being compared.
TEST(JsonFieldsTest, IntegerValuedFloatsOnlyInsideInt64) {
  const nlohmann::json obj = nlohmann::json::parse(
      R"({"a": 1e5, "b": 1e300, "c": -9.3e18, "d": 2.5, "e": 9223372036854775808.0})");
  JsonFields f(obj, "config.json");
  EXPECT_EQ(f.Int("a").value_or(-1), 100000);
  for (const char* key : {"b", "c", "d", "e"}) {
    absl::StatusOr<int64_t> v = f.Int(key);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(std::string(v.status().message()),
                HasSubstr(std::string("field '") + key + "' must be an integer"))
        << key;
  }
}

}  // namespace
}  // namespace treespec
