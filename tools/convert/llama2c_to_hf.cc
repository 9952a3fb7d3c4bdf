// treespec-convert-llama2c: converts a llama2.c legacy checkpoint (.bin) and its
// SentencePiece tokenizer.model into a Hugging Face Llama directory:
//   config.json, generation_config.json, model.safetensors (float32),
//   tokenizer.model (copied), tokenizer_config.json.
//
// The legacy format (../shared/models/README.md) is seven little-endian int32
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
// negative vocab_size means an unshared classifier follows the weights) and
// then float32 arrays: token embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1,
// w2, w3, rms_final, freq_cis_real, freq_cis_imag[, wcls].
//
// RoPE layout. llama2.c rotates adjacent pairs (2i, 2i+1) of each head with
// frequency θ^(-2i/Dh); Hugging Face Llama rotates (i, i + Dh/2) with the same
// frequency. Permuting the rows of wq and wk per head so that old row 2i + j
// becomes new row j·Dh/2 + i makes the two identical (q·k is invariant under
// the same permutation of q and k). This is exactly transformers'
// convert_llama_weights_to_hf `permute` (view(h, Dh/2, 2, D).transpose(1, 2)),
// applied to wq with n_heads and to wk with n_kv_heads.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/convert/sentencepiece_info.h"

namespace treespec::convert {
namespace {

constexpr char kUsage[] =
    "usage: treespec-convert-llama2c MODEL.bin TOKENIZER.model OUT_DIR\n"
    "       treespec-convert-llama2c --checkpoint MODEL.bin --tokenizer TOKENIZER.model "
    "--out OUT_DIR\n"
    "\n"
    "Converts a llama2.c legacy (version 0) checkpoint and its SentencePiece\n"
    "tokenizer into a Hugging Face Llama directory (config.json,\n"
    "generation_config.json, model.safetensors in float32, tokenizer.model,\n"
    "tokenizer_config.json). Q and K rows are permuted from llama2.c's\n"
    "interleaved RoPE pairs to Hugging Face's rotate-half layout. OUT_DIR is\n"
    "created if needed; existing files there are overwritten.\n";

// llama2.c's run.c/export.py "version 1+" files start with this magic ("ak42").
constexpr uint32_t kLlama2cMagic = 0x616b3432;

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

struct NamedTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

absl::StatusOr<Header> ParseHeader(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size() < sizeof(Header)) {
    return absl::DataLossError(absl::StrCat(path, ": truncated header: ", file.size(),
                                            " bytes, a llama2.c header needs ", sizeof(Header)));
  }
  uint32_t magic;
  std::memcpy(&magic, file.data(), 4);
  if (magic == kLlama2cMagic) {
    return absl::UnimplementedError(
        absl::StrCat(path,
                     ": llama2.c version-1+ export (magic \"ak42\"); only the legacy (version 0) "
                     "format is supported (export.py --version 0)"));
  }
  Header h;
  std::memcpy(&h, file.data(), sizeof(Header));
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad llama2.c header (dim=", h.dim, " hidden_dim=", h.hidden_dim,
                     " n_layers=", h.n_layers, " n_heads=", h.n_heads, " n_kv_heads=", h.n_kv_heads,
                     " vocab_size=", h.vocab_size, " seq_len=", h.seq_len, "): ", what));
  };
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 ||
      h.vocab_size == 0 || h.seq_len <= 0) {
    return bad("every field must be positive (vocab_size may be negative)");
  }
  if (h.dim % h.n_heads != 0) return bad("n_heads must divide dim");
  if ((h.dim / h.n_heads) % 2 != 0) return bad("the head size dim / n_heads must be even");
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0) {
    return bad("n_kv_heads must divide n_heads");
  }
  constexpr int32_t kSane = 1 << 20;
  if (h.dim > kSane || h.hidden_dim > kSane || h.n_layers > 4096 || h.seq_len > kSane ||
      h.vocab_size > kSane || h.vocab_size < -kSane) {
    return bad("implausibly large; is this a llama2.c checkpoint?");
  }
  return h;
}

// Reads consecutive float32 arrays from the mapped checkpoint.
class Reader {
 public:
  explicit Reader(const MappedFile& file) : file_(file), at_(sizeof(Header)) {}
  NamedTensor Take(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    NamedTensor t{std::move(shape), std::vector<float>(n)};
    std::memcpy(t.data.data(), file_.data() + at_, n * sizeof(float));
    at_ += n * sizeof(float);
    return t;
  }
  void Skip(int64_t n) { at_ += n * sizeof(float); }
  // Layer `l` of a stacked [L, rows, cols] (or [L, rows]) array.
  static NamedTensor Layer(const NamedTensor& all, int64_t l) {
    std::vector<int64_t> shape(all.shape.begin() + 1, all.shape.end());
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return {shape, std::vector<float>(all.data.begin() + l * n, all.data.begin() + (l + 1) * n)};
  }

 private:
  const MappedFile& file_;
  size_t at_;
};

// Rows of w [n_heads·Dh, cols]: new row h·Dh + j·Dh/2 + i = old row h·Dh + 2i + j.
NamedTensor PermuteRotary(const NamedTensor& w, int64_t n_heads) {
  const int64_t rows = w.shape[0], cols = w.shape[1], dh = rows / n_heads, half = dh / 2;
  NamedTensor out{w.shape, std::vector<float>(w.data.size())};
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t dst = h * dh + j * half + i, src = h * dh + 2 * i + j;
        std::memcpy(out.data.data() + dst * cols, w.data.data() + src * cols, cols * sizeof(float));
      }
    }
  }
  return out;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

// safetensors: u64 little-endian header length, JSON header (padded with
// spaces to a multiple of 8, so data stays aligned), then the raw data.
absl::Status WriteSafetensors(const std::string& path,
                              const std::map<std::string, NamedTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t n = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), sizeof(len));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size() * sizeof(float)));
  }
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

absl::Status Convert(const std::string& bin_path, const std::string& tok_path,
                     const std::string& out_dir) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(bin_path));
  TS_ASSIGN_OR_RETURN(Header h, ParseHeader(*file));
  const bool shared = h.vocab_size > 0;
  const int64_t V = shared ? h.vocab_size : -static_cast<int64_t>(h.vocab_size);
  const int64_t D = h.dim, F = h.hidden_dim, L = h.n_layers, S = h.seq_len;
  const int64_t dh = D / h.n_heads, kv = static_cast<int64_t>(h.n_kv_heads) * dh;
  const int64_t num_floats = V * D + L * D + L * D * D + 2 * L * kv * D + L * D * D + L * D +
                             3 * L * F * D + D + S * dh + (shared ? 0 : V * D);
  const uint64_t want = sizeof(Header) + static_cast<uint64_t>(num_floats) * sizeof(float);
  if (file->size() < want) {
    return absl::DataLossError(absl::StrCat(
        bin_path, ": truncated: the header (dim=", D, " n_layers=", L, " vocab_size=", h.vocab_size,
        " seq_len=", S, ") needs ", want, " bytes, the file has ", file->size()));
  }
  if (file->size() > want) {
    return absl::InvalidArgumentError(absl::StrCat(
        bin_path, ": ", file->size() - want, " bytes after the last weight (the header needs ",
        want, "); not a legacy llama2.c checkpoint, or the header is wrong"));
  }

  SentencePieceInfo sp;
  std::string sp_error;
  if (!ReadSentencePieceInfo(tok_path, &sp, &sp_error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(tok_path, ": not a readable SentencePiece model: ", sp_error));
  }
  if (sp.vocab_size != V) {
    return absl::InvalidArgumentError(absl::StrCat(tok_path, ": vocabulary of ", sp.vocab_size,
                                                   " pieces, but ", bin_path, " has vocab_size ",
                                                   V));
  }
  const int64_t bos = sp.bos_id >= 0 ? sp.bos_id : 1, eos = sp.eos_id >= 0 ? sp.eos_id : 2;

  Reader r(*file);
  std::map<std::string, NamedTensor> t;
  t["model.embed_tokens.weight"] = r.Take({V, D});
  NamedTensor rms_att = r.Take({L, D}), wq = r.Take({L, D, D}), wk = r.Take({L, kv, D}),
              wv = r.Take({L, kv, D}), wo = r.Take({L, D, D}), rms_ffn = r.Take({L, D}),
              w1 = r.Take({L, F, D}), w2 = r.Take({L, D, F}), w3 = r.Take({L, F, D});
  t["model.norm.weight"] = r.Take({D});
  r.Skip(S * dh);  // freq_cis_real [S, dh/2] and freq_cis_imag [S, dh/2]: run.c ignores them
  if (!shared) t["lm_head.weight"] = r.Take({V, D});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t[p + "input_layernorm.weight"] = Reader::Layer(rms_att, l);
    t[p + "post_attention_layernorm.weight"] = Reader::Layer(rms_ffn, l);
    t[p + "self_attn.q_proj.weight"] = PermuteRotary(Reader::Layer(wq, l), h.n_heads);
    t[p + "self_attn.k_proj.weight"] = PermuteRotary(Reader::Layer(wk, l), h.n_kv_heads);
    t[p + "self_attn.v_proj.weight"] = Reader::Layer(wv, l);
    t[p + "self_attn.o_proj.weight"] = Reader::Layer(wo, l);
    t[p + "mlp.gate_proj.weight"] = Reader::Layer(w1, l);
    t[p + "mlp.down_proj.weight"] = Reader::Layer(w2, l);
    t[p + "mlp.up_proj.weight"] = Reader::Layer(w3, l);
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out_dir, ": ", ec.message()));

  nlohmann::json config = {
      {"architectures", nlohmann::json::array({"LlamaForCausalLM"})},
      {"model_type", "llama"},
      {"vocab_size", V},
      {"hidden_size", D},
      {"intermediate_size", F},
      {"num_hidden_layers", L},
      {"num_attention_heads", h.n_heads},
      {"num_key_value_heads", h.n_kv_heads},
      {"max_position_embeddings", S},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", shared},
      {"bos_token_id", bos},
      {"eos_token_id", eos},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  nlohmann::json generation = {
      {"_from_model_config", true}, {"bos_token_id", bos}, {"eos_token_id", eos}};
  nlohmann::json tokenizer = {
      {"tokenizer_class", "LlamaTokenizer"},
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"bos_token", sp.bos_piece.empty() ? "<s>" : sp.bos_piece},
      {"eos_token", sp.eos_piece.empty() ? "</s>" : sp.eos_piece},
      {"unk_token", sp.unk_piece.empty() ? "<unk>" : sp.unk_piece},
      {"pad_token", nullptr},
      {"legacy", true},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", S},
      {"sp_model_kwargs", nlohmann::json::object()},
  };
  TS_RETURN_IF_ERROR(WriteText(out_dir + "/config.json", config.dump(2) + "\n"));
  TS_RETURN_IF_ERROR(WriteText(out_dir + "/generation_config.json", generation.dump(2) + "\n"));
  TS_RETURN_IF_ERROR(WriteText(out_dir + "/tokenizer_config.json", tokenizer.dump(2) + "\n"));
  TS_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", t));
  std::filesystem::copy_file(tok_path, out_dir + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(out_dir, "/tokenizer.model: cannot copy from ", tok_path, ": ", ec.message()));
  }
  std::printf(
      "%s: dim=%d hidden=%d layers=%d heads=%d kv_heads=%d vocab=%lld seq_len=%d %s -> %s\n",
      bin_path.c_str(), h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads,
      static_cast<long long>(V), h.seq_len, shared ? "(tied)" : "(untied)", out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace treespec::convert

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(treespec::convert::kUsage, stdout);
      return 0;
    }
  }
  // Also accept --checkpoint X --tokenizer Y --out Z (any order).
  std::string named[3];
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const char* keys[3] = {"--checkpoint", "--tokenizer", "--out"};
    bool matched = false;
    for (int k = 0; k < 3; ++k) {
      const std::string key = keys[k];
      if (args[i] == key && i + 1 < args.size()) {
        named[k] = args[++i];
        matched = true;
      } else if (args[i].rfind(key + "=", 0) == 0) {
        named[k] = args[i].substr(key.size() + 1);
        matched = true;
      }
      if (matched) break;
    }
    if (!matched) positional.push_back(args[i]);
  }
  if (positional.empty() && !named[0].empty() && !named[1].empty() && !named[2].empty()) {
    args.assign(named, named + 3);
  }
  if (args.size() != 3) {
    std::fputs(treespec::convert::kUsage, stderr);
    return 2;
  }
  absl::Status s = treespec::convert::Convert(args[0], args[1], args[2]);
  if (!s.ok()) {
    std::fprintf(stderr, "treespec-convert-llama2c: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
