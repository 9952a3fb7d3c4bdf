#include "core/tokenizer/gguf_tokenizer.h"

#include <cstring>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/tokenizer_config.h"
#include "core/tokenizer/tokenizer_internal.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

using nlohmann::json;

enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

absl::Status KeyError(const GgufFile& f, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": metadata '", key, "' ", what));
}

struct Vocab {
  const std::vector<std::string>* tokens = nullptr;
  std::vector<int64_t> types;  // kNormal when the file has no token_type
};

absl::StatusOr<Vocab> ReadVocab(const GgufFile& f) {
  Vocab v;
  TS_ASSIGN_OR_RETURN(v.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  if (v.tokens->empty()) return KeyError(f, "tokenizer.ggml.tokens", "is empty");
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    TS_ASSIGN_OR_RETURN(const std::vector<int64_t>* types,
                        f.GetIntArray("tokenizer.ggml.token_type"));
    if (types->size() != v.tokens->size()) {
      return KeyError(f, "tokenizer.ggml.token_type",
                      absl::StrCat("has ", types->size(), " entries but there are ",
                                   v.tokens->size(), " tokens"));
    }
    for (size_t i = 0; i < types->size(); ++i) {
      if ((*types)[i] < kNormal || (*types)[i] > kByte) {
        return KeyError(f, "tokenizer.ggml.token_type",
                        absl::StrCat("[", i, "] = ", (*types)[i], " is not a token type (1..6)"));
      }
    }
    v.types = *types;
  } else {
    v.types.assign(v.tokens->size(), kNormal);
  }
  return v;
}

// An optional token id key, checked against the vocabulary size; -1 if absent
// or "none" (llama.cpp writes a missing id as uint32 0xFFFFFFFF, i.e. -1).
absl::StatusOr<int32_t> TokenId(const GgufFile& f, const std::string& key, size_t vocab) {
  if (f.Find(key) == nullptr) return -1;
  TS_ASSIGN_OR_RETURN(int64_t id, f.GetInt(key));
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  if (id < 0 || static_cast<size_t>(id) >= vocab) {
    return KeyError(f, key, absl::StrCat("= ", id, " is outside the vocabulary [0, ", vocab, ")"));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<TokenizerConfig> ReadConfig(const GgufFile& f, size_t vocab) {
  TokenizerConfig c;
  if (f.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    TS_ASSIGN_OR_RETURN(c.add_bos_token, f.GetBoolOr("tokenizer.ggml.add_bos_token", false));
  }
  if (f.Find("tokenizer.ggml.add_eos_token") != nullptr) {
    TS_ASSIGN_OR_RETURN(c.add_eos_token, f.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  }
  TS_ASSIGN_OR_RETURN(c.bos_token_id, TokenId(f, "tokenizer.ggml.bos_token_id", vocab));
  TS_ASSIGN_OR_RETURN(int32_t eos, TokenId(f, "tokenizer.ggml.eos_token_id", vocab));
  if (eos >= 0) c.eos_token_ids.push_back(eos);
  TS_ASSIGN_OR_RETURN(int32_t eot, TokenId(f, "tokenizer.ggml.eot_token_id", vocab));
  if (eot >= 0 && eot != eos) c.eos_token_ids.push_back(eot);
  return c;
}

// llama.cpp's pre-tokenizer names → tokenizer.json pre_tokenizer specs.
absl::StatusOr<json> PreTokenizerFor(const GgufFile& f, const std::string& pre) {
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  auto split_then_bytes = [](const char* regex) {
    return json{{"type", "Sequence"},
                {"pretokenizers", json::array({json{{"type", "Split"},
                                                    {"pattern", {{"Regex", regex}}},
                                                    {"behavior", "Isolated"},
                                                    {"invert", false}},
                                               json{{"type", "ByteLevel"},
                                                    {"add_prefix_space", false},
                                                    {"trim_offsets", true},
                                                    {"use_regex", false}}})}};
  };
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return byte_level;
  if (pre == "smollm") {
    // llama.cpp: "\p{N}" (each digit alone), then the GPT-2 regex; the same as
    // SmolLM's tokenizer.json Digits(individual_digits) + ByteLevel.
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 json::array({json{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  }
  if (pre == "llama-bpe" || pre == "llama3") {
    return split_then_bytes(
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  }
  if (pre == "qwen2") {
    return split_then_bytes(
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  }
  return absl::UnimplementedError(
      absl::StrCat(f.path(), ": metadata 'tokenizer.ggml.pre' = \"", pre,
                   "\" is not supported (default, gpt2, smollm, llama-bpe, llama3, qwen2 are)"));
}

// Protocol-buffer wire encoding, just what a SentencePiece ModelProto needs.
class ProtoWriter {
 public:
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void Tag(int field, int wire) { Varint((static_cast<uint64_t>(field) << 3) | wire); }
  void Int(int field, int64_t v) {
    Tag(field, 0);
    Varint(static_cast<uint64_t>(v));  // negative int32: 10-byte sign extension
  }
  void Bytes(int field, const std::string& s) {
    Tag(field, 2);
    Varint(s.size());
    out_ += s;
  }
  void Float(int field, float v) {
    Tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    out_.append(b, 4);
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace

absl::StatusOr<json> GgufToTokenizerJson(const GgufFile& f) {
  TS_ASSIGN_OR_RETURN(Vocab v, ReadVocab(f));
  TS_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                      f.GetStringArray("tokenizer.ggml.merges"));
  std::string pre = "default";
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    TS_ASSIGN_OR_RETURN(pre, f.GetString("tokenizer.ggml.pre"));
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    const std::string& t = (*v.tokens)[i];
    if (vocab.contains(t)) {
      return KeyError(
          f, "tokenizer.ggml.tokens",
          absl::StrCat("[", i, "] = \"", t, "\" repeats token ", vocab[t].get<int64_t>()));
    }
    vocab[t] = i;
    if (v.types[i] == kControl || v.types[i] == kUserDefined) {
      added.push_back({{"id", i},
                       {"content", t},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", v.types[i] == kControl}});
    }
  }
  json merge_list = json::array();
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() ||
        m.find(' ', sp + 1) != std::string::npos) {
      return KeyError(f, "tokenizer.ggml.merges",
                      absl::StrCat("[", i, "] = \"", m, "\" is not two tokens split by a space"));
    }
    merge_list.push_back(m);
  }
  TS_ASSIGN_OR_RETURN(json pre_tokenizer, PreTokenizerFor(f, pre));
  json root = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
  return root;
}

absl::StatusOr<std::string> GgufToSentencePieceProto(const GgufFile& f) {
  TS_ASSIGN_OR_RETURN(Vocab v, ReadVocab(f));
  const size_t n = v.tokens->size();
  TS_ASSIGN_OR_RETURN(const std::vector<double>* scores, f.GetFloatArray("tokenizer.ggml.scores"));
  if (scores->size() != n) {
    return KeyError(f, "tokenizer.ggml.scores",
                    absl::StrCat("has ", scores->size(), " entries but there are ", n, " tokens"));
  }
  TS_ASSIGN_OR_RETURN(int32_t bos, TokenId(f, "tokenizer.ggml.bos_token_id", n));
  TS_ASSIGN_OR_RETURN(int32_t eos, TokenId(f, "tokenizer.ggml.eos_token_id", n));
  TS_ASSIGN_OR_RETURN(int32_t unk, TokenId(f, "tokenizer.ggml.unknown_token_id", n));
  TS_ASSIGN_OR_RETURN(int32_t pad, TokenId(f, "tokenizer.ggml.padding_token_id", n));
  TS_ASSIGN_OR_RETURN(bool dummy_prefix, f.GetBoolOr("tokenizer.ggml.add_space_prefix", true));
  int num_unknown = 0;
  bool has_bytes = false;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
    if (!seen.insert((*v.tokens)[i]).second) {
      return KeyError(f, "tokenizer.ggml.tokens",
                      absl::StrCat("[", i, "] = \"", (*v.tokens)[i], "\" is repeated"));
    }
    if (v.types[i] == kUnknown) {
      ++num_unknown;
      if (unk < 0) unk = static_cast<int32_t>(i);
    }
    has_bytes |= v.types[i] == kByte;
  }
  if (num_unknown != 1 || v.types[unk < 0 ? 0 : unk] != kUnknown) {
    return KeyError(f, "tokenizer.ggml.token_type",
                    absl::StrCat("must mark exactly one UNKNOWN (2) token, the unknown_token_id; "
                                 "found ",
                                 num_unknown));
  }
  ProtoWriter model;
  for (size_t i = 0; i < n; ++i) {
    ProtoWriter piece;
    piece.Bytes(1, (*v.tokens)[i]);
    piece.Float(2, static_cast<float>((*scores)[i]));
    piece.Int(3, v.types[i]);
    model.Bytes(1, piece.str());
  }
  ProtoWriter trainer;
  trainer.Int(3, 2);  // model_type = BPE
  trainer.Int(4, static_cast<int64_t>(n));
  trainer.Int(35, has_bytes ? 1 : 0);  // byte_fallback
  trainer.Int(40, unk);
  trainer.Int(41, bos);
  trainer.Int(42, eos);
  trainer.Int(43, pad);
  trainer.Bytes(45, (*v.tokens)[unk]);
  if (bos >= 0) trainer.Bytes(46, (*v.tokens)[bos]);
  if (eos >= 0) trainer.Bytes(47, (*v.tokens)[eos]);
  if (pad >= 0) trainer.Bytes(48, (*v.tokens)[pad]);
  model.Bytes(2, trainer.str());
  ProtoWriter normalizer;
  normalizer.Bytes(1, "identity");
  normalizer.Int(3, dummy_prefix ? 1 : 0);  // add_dummy_prefix
  normalizer.Int(4, 0);                     // remove_extra_whitespaces
  normalizer.Int(5, 1);                     // escape_whitespaces
  model.Bytes(3, normalizer.str());
  return model.str();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& f) {
  TS_ASSIGN_OR_RETURN(std::string kind, f.GetString("tokenizer.ggml.model"));
  TS_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                      f.GetStringArray("tokenizer.ggml.tokens"));
  TS_ASSIGN_OR_RETURN(TokenizerConfig config, ReadConfig(f, tokens->size()));
  if (kind == "gpt2") {
    TS_ASSIGN_OR_RETURN(json root, GgufToTokenizerJson(f));
    return LoadHfTokenizerFromJson(root, f.path(), config);
  }
  if (kind == "llama") {
    TS_ASSIGN_OR_RETURN(std::string proto, GgufToSentencePieceProto(f));
    return LoadSentencePieceTokenizerFromBytes(proto, f.path(), config);
  }
  return absl::UnimplementedError(absl::StrCat(f.path(), ": metadata 'tokenizer.ggml.model' = \"",
                                               kind, "\" is not supported (gpt2, llama are)"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> f, GgufFile::Open(path));
  return LoadGgufTokenizer(*f);
}

absl::StatusOr<std::string> GgufChatTemplate(const GgufFile& f) {
  if (f.Find("tokenizer.chat_template") == nullptr) return std::string();
  return f.GetString("tokenizer.chat_template");
}

}  // namespace treespec
