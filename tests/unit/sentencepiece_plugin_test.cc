// The SentencePiece plugin in a process that also links libprotobuf, as every
// service binary does. libsentencepiece exports its bundled protobuf-lite
// under libprotobuf's names, so the plugin only works when it is opened so
// that libprotobuf does not interpose it (core/tokenizer/spm_plugin/spm_plugin.h);
// the sanitizer builds open it another way (sentencepiece_wrapper.cc), and this
// is the test that shows both ways work: a tokenizer.model committed to the
// tree (so it never skips), used before and after protobuf messages are.
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {
namespace {

TEST(SentencePiecePluginTest, LoadsAndRoundTripsNextToLibprotobuf) {
  v1::GenerateRequest request;
  request.set_text("Once upon a time");
  request.set_max_tokens(7);
  const std::string wire = request.SerializeAsString();

  // models/demo/target has only a tokenizer.model: a SentencePiece tokenizer.
  auto tok = LoadTokenizer(std::string(TREESPEC_SOURCE_DIR) + "/models/demo/target");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  auto ids = (*tok)->Encode(text, /*add_special_tokens=*/false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_GT(ids->size(), 3u);
  EXPECT_LT(ids->size(), text.size());
  EXPECT_EQ((*tok)->Decode(*ids), text);

  v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_EQ(parsed.text(), "Once upon a time");
  EXPECT_EQ(parsed.max_tokens(), 7);
}

}  // namespace
}  // namespace treespec
