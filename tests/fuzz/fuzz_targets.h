// Every reader of outside input as a fuzz target (tests/fuzz/test_fuzz.cpp with gcc, tests/libfuzzer/main.cpp with
// clang): its valid seed inputs, and a run that feeds it one input. A reader may accept the input or refuse it with
// hytra::Error; anything else (another exception, a crash, a sanitizer report) is a finding.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace hytra::test {

struct FuzzTarget {
  std::string name;
  std::vector<std::string> seeds;               // valid inputs
  std::function<void(const std::string&)> run;  // reads one input (through files under the work directory)
};

// The targets, their files kept under `work_dir` (created): safetensors, checkpoint (manifest and directory),
// indexed dataset (.idx), gpt2-vocab (encoder.json), gpt2-merges (vocab.bpe), tokenizer-json, tiktoken-vocab,
// sentencepiece-model, yaml, toml, pattern, json, hf-config (config.json).
std::vector<FuzzTarget> fuzz_targets(const std::string& work_dir);

}  // namespace hytra::test
