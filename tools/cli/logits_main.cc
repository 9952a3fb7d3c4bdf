// treespec-logits: writes a model's float32 logits [num_tokens, vocab] for a
// prompt (text or ids) as a .npy file.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/util/cli_args.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/npy.h"
#include "tools/cli/local_model.h"

ABSL_FLAG(std::string, model, "", "Hugging Face model directory");
ABSL_FLAG(std::string, prompt, "", "Prompt text (tokenized with the model's tokenizer)");
ABSL_FLAG(std::string, ids, "", "Prompt as comma-separated token ids (instead of --prompt)");
ABSL_FLAG(std::string, out, "", "Output .npy file");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");

namespace treespec {
namespace {

int Fail(const absl::Status& st) {
  std::cerr << "treespec-logits: " << st << std::endl;
  return 1;
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_model), out = absl::GetFlag(FLAGS_out);
  if (dir.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  if (out.empty()) return Fail(absl::InvalidArgumentError("--out is required"));
  std::vector<int32_t> ids;
  // --ids given, even empty, means ids: the tokenizer is not needed (nor looked for).
  if (FlagGiven("ids")) {
    const std::string text = absl::GetFlag(FLAGS_ids);
    for (absl::string_view p : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
      int32_t v;
      if (!absl::SimpleAtoi(p, &v)) {
        return Fail(absl::InvalidArgumentError(absl::StrCat("--ids: '", p, "' is not an integer")));
      }
      ids.push_back(v);
    }
    if (ids.empty()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--ids: no token ids in '", text, "'")));
    }
  } else {
    auto tok = LoadTokenizer(dir);
    if (!tok.ok()) return Fail(tok.status());
    auto enc = (*tok)->Encode(absl::GetFlag(FLAGS_prompt), true);
    if (!enc.ok()) return Fail(enc.status());
    ids = std::move(*enc);
  }
  if (ids.empty()) return Fail(absl::InvalidArgumentError("no tokens: give --prompt or --ids"));
  auto model = LocalModel::Load(dir, absl::GetFlag(FLAGS_device), 1,
                                static_cast<int64_t>(ids.size()) + 1);
  if (!model.ok()) return Fail(model.status());
  std::vector<float> logits;
  if (absl::Status st = (*model)->AllLogits(ids, &logits); !st.ok()) return Fail(st);
  absl::Status st = WriteNpyF32(out, logits.data(),
                                {static_cast<int64_t>(ids.size()), (*model)->vocab_size()});
  if (!st.ok()) return Fail(st);
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes float32 logits [num_tokens, vocab] as .npy.\n"
      "Usage: treespec-logits --model DIR (--prompt TEXT | --ids 1,2,3) --out FILE.npy");
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
