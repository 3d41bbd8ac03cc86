#include "data/index_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/md5.h"
#include "data/npy.h"

namespace hytra {
namespace {

constexpr const char* kSidecarHeader = "hytra index cache checksums v1";

// splitmix64's finalizer chained over the values, then the count: a checksum that catches a
// stale or damaged cache (any changed, moved or missing value), not a deliberate forgery.
class Checksum {
 public:
  void add(int64_t v) {
    h_ = mix(h_ + uint64_t(v));
    ++n_;
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(mix(h_ ^ n_)));
    return buf;
  }

 private:
  static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  uint64_t h_ = 0x9e3779b97f4a7c15ULL, n_ = 0;
};

// One sidecar line: the name, the shape and the checksum of the values.
template <class V>
std::string checksum_line(const std::string& name, const std::vector<int64_t>& shape, const V& values) {
  Checksum c;
  for (auto v : values) c.add(int64_t(v));
  std::string dims;
  for (int64_t d : shape) dims += (dims.empty() ? "" : "x") + std::to_string(d);
  return name + " " + dims + " " + c.hex();
}

std::vector<std::string> sidecar_lines(const std::vector<int64_t>& lengths, const NpyArray& doc,
                                       const NpyArray& sample, const NpyArray& shuffle) {
  return {kSidecarHeader, checksum_line("sequence_lengths", {int64_t(lengths.size())}, lengths),
          checksum_line("document_index", doc.shape, doc.values),
          checksum_line("sample_index", sample.shape, sample.values),
          checksum_line("shuffle_index", shuffle.shape, shuffle.values)};
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Each check returns "" or what is wrong, naming the file and the entry.

std::string check_document_index(const std::string& path, const NpyArray& a, SplitRange range, const EpochPlan& plan) {
  const int64_t per_epoch = range.end - range.begin, want = plan.num_epochs * per_epoch;
  if (a.shape != std::vector<int64_t>{want})
    return str(path, ": shape ", shape_text(a.shape), ", expected (", want, ",) (", plan.num_epochs,
               " epochs of the split's ", per_epoch, " sequences)");
  // Each sequence once per epoch; with a separate final epoch, once among the last per_epoch entries.
  std::vector<int64_t> count(size_t(per_epoch), 0), final_count(size_t(per_epoch), 0);
  for (int64_t k = 0; k < want; ++k) {
    const int64_t v = a.values[size_t(k)];
    if (v < range.begin || v >= range.end)
      return str(path, ": entry ", k, " is sequence ", v, ", outside the split's sequences [", range.begin, ", ",
                 range.end, ")");
    ++count[size_t(v - range.begin)];
    if (k >= want - per_epoch) ++final_count[size_t(v - range.begin)];
  }
  for (int64_t s = 0; s < per_epoch; ++s) {
    if (count[size_t(s)] != plan.num_epochs)
      return str(path, ": sequence ", range.begin + s, " appears ", count[size_t(s)],
                 " times, expected once per epoch (", plan.num_epochs, ")");
    if (plan.separate_final_epoch && final_count[size_t(s)] != 1)
      return str(path, ": sequence ", range.begin + s, " appears ", final_count[size_t(s)],
                 " times in the final epoch (the last ", per_epoch, " entries, shuffled apart), expected once");
  }
  return "";
}

// Row j must mark stream token j * seq_length: the sample j spans [j L, (j+1) L] inclusive.
std::string check_sample_index(const std::string& path, const NpyArray& a, const std::vector<int64_t>& doc,
                               const std::vector<int64_t>& lengths, int64_t seq_length, int64_t n) {
  if (a.shape != std::vector<int64_t>{n + 1, 2})
    return str(path, ": shape ", shape_text(a.shape), ", expected (", n + 1, ", 2) for ", n, " samples");
  if (a.values[0] != 0 || a.values[1] != 0)
    return str(path, ": row 0 is (", a.values[0], ", ", a.values[1], "), expected (0, 0)");
  int64_t pos = 0, stream = 0;  // stream: tokens of document_index[0, pos)
  for (int64_t j = 1; j <= n; ++j) {
    const int64_t p = a.values[size_t(2 * j)], offset = a.values[size_t(2 * j + 1)];
    if (p < pos || p >= int64_t(doc.size()))
      return str(path, ": row ", j, " is at document_index position ", p, ", expected ", pos, " to ",
                 int64_t(doc.size()) - 1, " (positions never decrease)");
    for (; pos < p; ++pos) stream += lengths[size_t(doc[size_t(pos)])];
    const int64_t length = lengths[size_t(doc[size_t(p)])];
    if (offset < 0 || offset >= length)
      return str(path, ": row ", j, " has token offset ", offset, " in sequence ", doc[size_t(p)], " of ", length,
                 " tokens");
    if (stream + offset != j * seq_length)
      return str(path, ": row ", j, " marks token ", stream + offset, " of the concatenated documents, expected ",
                 j * seq_length, " (samples of ", seq_length, "+1 tokens)");
  }
  return "";
}

std::string check_shuffle_index(const std::string& path, const NpyArray& a, const EpochPlan& plan) {
  const int64_t n = plan.num_samples;
  if (a.shape != std::vector<int64_t>{n}) return str(path, ": shape ", shape_text(a.shape), ", expected (", n, ",)");
  std::vector<bool> seen(size_t(n), false);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = a.values[size_t(k)];
    if (v < 0 || v >= n) return str(path, ": entry ", k, " is sample ", v, ", outside [0, ", n, ")");
    if (seen[size_t(v)]) return str(path, ": sample ", v, " appears twice (entry ", k, ")");
    seen[size_t(v)] = true;
    if (plan.separate_final_epoch && k < plan.sans_final && v >= plan.sans_final)
      return str(path, ": entry ", k, " is sample ", v, " of the final epoch, expected one of the first ",
                 plan.sans_final, " (the final epoch is shuffled apart)");
  }
  return "";
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

std::string cache_description(const IndexCache& c, SplitRange range, int64_t seq_length,
                              std::optional<int64_t> num_samples, uint32_t seed) {
  std::string path;
  for (char ch : c.dataset_path) path += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return str("{\n    \"class\": \"GPTDataset\",\n    \"dataset_path\": \"", path, "\",\n    \"index_split\": \"",
             c.split_name, "\",\n    \"sequence_range\": [", range.begin, ", ", range.end, "],\n    \"num_samples\": ",
             num_samples ? std::to_string(*num_samples) : "null", ",\n    \"random_seed\": ", seed,
             ",\n    \"sequence_length\": ", seq_length, ",\n    \"add_extra_token_to_sequence\": true\n}");
}

std::string cache_base(const IndexCache& c, const std::string& description) {
  return c.dir + "/" + md5_hex(description) + "-GPTDataset-" + c.split_name + "-";
}

CacheRead read_index_cache(const std::string& base, const std::string& description,
                           const std::vector<int64_t>& lengths, SplitRange range, int64_t seq_length,
                           const EpochPlan& plan) {
  CacheRead r;
  const std::string desc_path = base + "description.txt";
  if (!exists(desc_path)) return r;
  if (read_text(desc_path) != description) {
    r.problem = str(desc_path, ": describes another dataset than its name says");
    return r;
  }
  const std::string doc_path = base + "document_index.npy", sample_path = base + "sample_index.npy",
                    shuffle_path = base + "shuffle_index.npy", sidecar_path = base + "hytra_checksums.txt";
  NpyArray doc, sample, shuffle;
  try {
    doc = read_npy(doc_path);
    sample = read_npy(sample_path);
    shuffle = read_npy(shuffle_path);
  } catch (const Error& e) {
    r.problem = e.what();
    return r;
  }
  if (exists(sidecar_path)) {
    std::vector<std::string> recorded;
    std::istringstream in(read_text(sidecar_path));
    for (std::string line; std::getline(in, line);) recorded.push_back(line);
    const std::vector<std::string> now = sidecar_lines(lengths, doc, sample, shuffle);
    recorded.resize(now.size());
    const std::string arrays[] = {doc_path, sample_path, shuffle_path};  // lines 2, 3, 4
    if (recorded[0] != now[0])
      r.problem = str(sidecar_path, ": not a hytra checksum file (expected \"", kSidecarHeader, "\")");
    else if (recorded[1] != now[1])
      r.problem = str(sidecar_path, ": the index cache was built for other sequence lengths than the dataset's .idx "
                      "holds now (re-preprocessed into the same prefix?)");
    for (size_t k = 2; k < now.size() && r.problem.empty(); ++k)
      if (recorded[k] != now[k])
        r.problem = str(arrays[k - 2], ": its contents differ from the checksum recorded in ", sidecar_path);
    if (!r.problem.empty()) return r;
  }
  r.problem = check_document_index(doc_path, doc, range, plan);
  if (r.problem.empty())
    r.problem = check_sample_index(sample_path, sample, doc.values, lengths, seq_length, plan.num_samples);
  if (r.problem.empty()) r.problem = check_shuffle_index(shuffle_path, shuffle, plan);
  if (!r.problem.empty()) return r;
  GptIndices idx;
  idx.document_index.assign(doc.values.begin(), doc.values.end());
  idx.sample_index = std::move(sample.values);
  idx.shuffle_index = std::move(shuffle.values);
  idx.num_epochs = plan.num_epochs;
  idx.separate_final_epoch = plan.separate_final_epoch;
  r.indices = std::move(idx);
  return r;
}

void write_index_cache(const std::string& base, const std::string& description, const GptIndices& idx,
                       const std::vector<int64_t>& lengths) {
  const std::string dir = std::filesystem::path(base).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  HYTRA_CHECK(!ec, dir, ": cannot create the index cache directory (", ec.message(), ")");
  std::remove((base + "description.txt").c_str());  // incomplete until it is written back, last
  const int64_t max_len = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  const bool small = std::max<int64_t>(int64_t(idx.document_index.size()), max_len) <= INT32_MAX;
  const int64_t n = int64_t(idx.shuffle_index.size());
  const NpyArray doc{"<i4", {int64_t(idx.document_index.size())},
                     std::vector<int64_t>(idx.document_index.begin(), idx.document_index.end())};
  const NpyArray sample{small ? "<i4" : "<i8", {n + 1, 2}, idx.sample_index};
  const NpyArray shuffle{n < int64_t(UINT32_MAX) - 1 ? "<u4" : "<i8", {n}, idx.shuffle_index};
  write_npy(base + "document_index.npy", doc);
  write_npy(base + "sample_index.npy", sample);
  write_npy(base + "shuffle_index.npy", shuffle);
  std::string sidecar;
  for (const std::string& line : sidecar_lines(lengths, doc, sample, shuffle)) sidecar += line + "\n";
  write_file_atomic(base + "hytra_checksums.txt", sidecar);
  write_file_atomic(base + "description.txt", description);
}

}  // namespace hytra
