#include "fuzz/fuzz_targets.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "cli/config_file.h"
#include "common/base64.h"
#include "common/sentencepiece_writer.h"
#include "core/json.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/gpt2_bpe.h"
#include "data/tokenizer/sentencepiece.h"
#include "data/tokenizer/tiktoken.h"
#include "interop/hf_convert.h"
#include "model/pattern.h"

namespace hytra::test {
namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string quoted(const std::string& s) { return json_quote(s); }

// A small byte-level BPE: the 256 byte symbols, then "ab", "abc" and "<|endoftext|>".
std::string encoder_json() {
  std::string v = "{";
  for (int b = 0; b < 256; ++b)
    v += (b ? ", " : "") + quoted(bytes_to_alphabet(std::string(1, char(b)))) + ": " + std::to_string(b);
  return v + ", \"ab\": 256, \"abc\": 257, \"<|endoftext|>\": 258}";
}

}  // namespace

std::vector<FuzzTarget> fuzz_targets(const std::string& work_dir) {
  const std::string w = (fs::path(work_dir)).string();
  fs::create_directories(w);
  std::vector<FuzzTarget> out;

  // safetensors: a file of two tensors.
  {
    const std::string path = w + "/seed.safetensors";
    write_safetensors(
        path,
        {{"a", "F32", {2, 3}, std::vector<unsigned char>(24, 1)}, {"b", "BF16", {4}, std::vector<unsigned char>(8, 2)}},
        {{"format", "pt"}});
    const std::string file = w + "/in.safetensors";
    out.push_back({"safetensors", {read(path)}, [file](const std::string& bytes) {
                     write(file, bytes);
                     SafetensorsFile f(file);
                     for (const SafetensorsEntry& e : f.entries()) (void)f.data(e);
                   }});
  }
  // checkpoint: the manifest of a saved checkpoint (its files as saved), read and verified.
  {
    CheckpointContents c;
    c.manifest.iteration = 2;
    c.manifest.consumed_samples = 8;
    c.manifest.config = "seed";
    c.manifest.model = {{"hidden_size", "32"}};
    c.model = {{"w", "F32", {2}, std::vector<unsigned char>(8, 0)}};
    fs::remove_all(w + "/ckpt");
    save_checkpoint(w + "/ckpt", c);
    const std::string dir = w + "/ckpt/iter_0000002";
    const std::string seed = read(dir + "/manifest.json");
    out.push_back({"checkpoint", {seed}, [dir](const std::string& bytes) {
                     write(dir + "/manifest.json", bytes);
                     (void)read_manifest(dir);
                   }});
  }
  // indexed dataset: the .idx of three documents (the .bin kept valid).
  {
    const std::string prefix = w + "/data";
    {
      IndexedDatasetWriter writer(prefix, TokenDtype::U16);
      writer.add_document({1, 2, 3});
      writer.add_document({4, 5});
      writer.add_document({6});
      writer.finalize();
    }
    const std::string seed = read(prefix + ".idx");
    out.push_back({"indexed-dataset", {seed}, [prefix](const std::string& bytes) {
                     write(prefix + ".idx", bytes);
                     IndexedDataset d(prefix);
                     for (int64_t i = 0; i < d.num_sequences(); ++i) (void)d.sequence(i);
                   }});
  }
  // GPT-2 files: encoder.json and vocab.bpe, each fuzzed with the other valid.
  {
    const std::string enc = w + "/encoder.json", bpe = w + "/vocab.bpe";
    const std::string enc_seed = encoder_json(), bpe_seed = "#version: 0.2\na b\nab c\n";
    out.push_back({"gpt2-vocab", {enc_seed}, [enc, bpe, bpe_seed](const std::string& bytes) {
                     write(enc, bytes);
                     write(bpe, bpe_seed);
                     (void)Gpt2Bpe::from_files(enc, bpe).encode("abc abd");
                   }});
    out.push_back({"gpt2-merges", {bpe_seed}, [enc, bpe, enc_seed](const std::string& bytes) {
                     write(enc, enc_seed);
                     write(bpe, bytes);
                     (void)Gpt2Bpe::from_files(enc, bpe).encode("abc abd");
                   }});
    const std::string tok = w + "/tokenizer.json";
    const std::string tok_seed =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": " + enc_seed +
        ", \"merges\": [[\"a\", \"b\"], \"ab c\"]}, \"added_tokens\": []}";
    // Llama-3 style: a Split by a regex, then ByteLevel without its regex.
    const std::string split_seed =
        "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
        "{\"Regex\": \"\\\\p{L}+| ?[^\\\\s\\\\p{L}]+|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
        "{\"type\": \"ByteLevel\", \"use_regex\": false}]}, \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, "
        "\"vocab\": " +
        enc_seed + ", \"merges\": [\"a b\", \"ab c\"]}}";
    out.push_back({"tokenizer-json", {tok_seed, split_seed}, [tok](const std::string& bytes) {
                     write(tok, bytes);
                     (void)Gpt2Bpe::from_hf_tokenizer_json(tok).encode("abc abd");
                   }});
  }
  // TikTokenizer's ranks file: the 256 bytes, then "ab" and "abc"; 3 special tokens.
  {
    const std::string path = w + "/tiktoken.json";
    std::string seed = "[";
    auto entry = [&](int rank, const std::string& bytes) {
      seed += (rank ? ", " : "") + std::string("{\"rank\": ") + std::to_string(rank) +
              ", \"token_bytes\": " + quoted(base64(bytes)) + ", \"token_str\": \"\"}";
    };
    for (int b = 0; b < 256; ++b) entry(b, std::string(1, char(b)));
    entry(256, "ab");
    entry(257, "abc");
    seed += "]";
    out.push_back({"tiktoken-vocab", {seed}, [path](const std::string& bytes) {
                     write(path, bytes);
                     TikTokenConfig cfg;
                     cfg.path = path;
                     cfg.pattern = "v2";
                     cfg.vocab_size = 261;
                     cfg.num_special_tokens = 3;
                     (void)TikTokenizer(cfg).encode("abc abd");
                   }});
  }
  // SentencePiece .model files: a BPE model with the hand-built charsmap and a Unigram one with byte pieces.
  {
    const std::string path = w + "/sp.model";
    const std::vector<Piece> pieces = {{"<unk>", 0, 2},
                                       {"<s>", 0, 3},
                                       {"</s>", 0, 3},
                                       {"xy", 0, 4},
                                       {"\xE2\x96\x81", -1, 1},
                                       {"a", -1, 1},
                                       {"b", -1, 1},
                                       {"ab", -2, 5},
                                       {"\xE2\x96\x81"
                                        "a",
                                        -2, 1}};
    std::vector<Piece> with_bytes = pieces;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      with_bytes.push_back({name, 0, 6});
    }
    out.push_back({"sentencepiece-model",
                   {model_bytes(pieces, 2, false, true, two_rule_charsmap()), model_bytes(with_bytes, 1, true, false)},
                   [path](const std::string& bytes) {
                     write(path, bytes);
                     for (auto flavor : {SentencePieceTokenizer::Flavor::Plain,
                                         SentencePieceTokenizer::Flavor::LegacySentencePiece}) {
                       const SentencePieceTokenizer tok(path, flavor);
                       (void)tok.decode(tok.encode("ABab xy  a\xC3\xA9<EOD>\xFF"));
                     }
                   }});
  }
  // Config files.
  out.push_back({"yaml",
                 {"# a run\nhybrid-layer-pattern: \"M*-\"\nhidden-size: 64\nlr: 3.0e-4\nswiglu: true\n"
                  "data-path: [\"a\", \"b\"]\nsplit: 99,1,0\n"},
                 [](const std::string& bytes) { (void)parse_config_text(bytes, ConfigFormat::Yaml, "fuzz.yaml"); }});
  out.push_back({"toml",
                 {"# a run\nhybrid-layer-pattern = \"M*-\"\nhidden-size = 64\nlr = 3.0e-4\nswiglu = true\n"
                  "data-path = [\"a\", \"b\"]\n"},
                 [](const std::string& bytes) { (void)parse_config_text(bytes, ConfigFormat::Toml, "fuzz.toml"); }});
  out.push_back({"pattern", {"M*-E", "[*-][*E]|M-/*-", "MM*-|[*E]M/*-/*-", "M-M-M*-"}, [](const std::string& bytes) {
                   (void)parse_hybrid_pattern(bytes);
                 }});
  out.push_back({"json",
                 {"{\"a\": [1, 2.5e-3, -7, true, null, \"x\\u00e9\"], \"b\": {\"c\": {}}}", "[[[]]]"},
                 [](const std::string& bytes) { (void)Json::parse(bytes); }});
  // Hugging Face config.json (read_hf_config reads DIR/config.json).
  {
    const std::string dir = w + "/hf";
    fs::create_directories(dir);
    out.push_back({"hf-config",
                   {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    "\"num_key_value_heads\": 2, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                    "\"vocab_size\": 256, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false}",
                    "{\"model_type\": \"nemotron_h\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    "\"intermediate_size\": 128, \"vocab_size\": 256, \"hybrid_override_pattern\": \"M*-E\", "
                    "\"mamba_num_heads\": 8, \"mamba_head_dim\": 16, \"ssm_state_size\": 16, \"n_groups\": 2, "
                    "\"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32}"},
                   [dir](const std::string& bytes) {
                     write(dir + "/config.json", bytes);
                     (void)read_hf_config(dir);
                   }});
  }
  return out;
}

}  // namespace hytra::test
