#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json.h"

namespace hytra {
namespace {

constexpr uint64_t kMaxHeader = 100000000;

struct DtypeInfo {
  const char* name;
  int bits;
};
// In the format's enum order, which is increasing alignment.
constexpr DtypeInfo kDtypes[] = {{"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6},     {"F6_E3M2", 6},
                                 {"U8", 8},      {"I8", 8},      {"F8_E5M2", 8},     {"F8_E4M3", 8},
                                 {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
                                 {"U16", 16},    {"F16", 16},    {"BF16", 16},       {"I32", 32},
                                 {"U32", 32},    {"F32", 32},    {"C64", 64},        {"F64", 64},
                                 {"I64", 64},    {"U64", 64}};

int dtype_rank(const std::string& d) {
  for (size_t i = 0; i < std::size(kDtypes); ++i)
    if (d == kDtypes[i].name) return int(i);
  return -1;
}

// Alignment in bytes (what the reference writer sorts by): sub-byte types count as 1.
int dtype_alignment(const std::string& d) { return std::max(1, safetensors_dtype_bits(d) / 8); }

int64_t expected_bytes(const std::string& path, const std::string& name, const std::string& dtype,
                       const std::vector<int64_t>& shape) {
  const int bits = safetensors_dtype_bits(dtype);
  HYTRA_CHECK(bits > 0, path, ": tensor '", name, "': unknown dtype '", dtype, "'");
  int64_t n = 1;
  for (int64_t d : shape) {
    HYTRA_CHECK(d >= 0 && (d == 0 || n <= INT64_MAX / 64 / d), path, ": tensor '", name, "': bad shape");
    n *= d;
  }
  HYTRA_CHECK((n * bits) % 8 == 0, path, ": tensor '", name, "': ", n, " elements of ", dtype,
              " do not fill whole bytes");
  return n * bits / 8;
}

// The tensors and metadata of a parsed header, checked against the data buffer's size.
void read_entries(const std::string& path, const Json& root, int64_t buffer, std::vector<SafetensorsEntry>& entries,
                  std::map<std::string, std::string>& metadata) {
  // Names are unique: the JSON parser refuses a repeated key.
  for (const auto& [name, v] : root.as_object("the safetensors header")) {
    if (name == "__metadata__") {
      for (const auto& [k, val] : v.as_object("__metadata__")) {
        HYTRA_CHECK(val.is_string(), path, ": __metadata__['", k, "'] must be a string");
        metadata[k] = val.as_string();
      }
      continue;
    }
    HYTRA_CHECK(v.is_object(), path, ": tensor '", name, "': expected an object with dtype, shape, data_offsets");
    SafetensorsEntry e;
    e.name = name;
    const Json* dt = v.find("dtype");
    const Json* sh = v.find("shape");
    const Json* off = v.find("data_offsets");
    HYTRA_CHECK(dt && sh && off, path, ": tensor '", name, "': missing dtype, shape or data_offsets");
    HYTRA_CHECK(v.as_object().size() == 3, path, ": tensor '", name, "': unexpected keys besides dtype, shape, data_offsets");
    e.dtype = dt->as_string("dtype");
    for (const Json& d : sh->as_array("shape")) e.shape.push_back(d.as_int("shape entry"));
    const auto& o = off->as_array("data_offsets");
    HYTRA_CHECK(o.size() == 2, path, ": tensor '", name, "': data_offsets must be [begin, end]");
    e.begin = o[0].as_int("data_offsets");
    e.end = o[1].as_int("data_offsets");
    HYTRA_CHECK(0 <= e.begin && e.begin <= e.end && e.end <= buffer, path, ": tensor '", name, "': data_offsets [",
                e.begin, ", ", e.end, "] are outside the ", buffer, "-byte data buffer");
    const int64_t want = expected_bytes(path, name, e.dtype, e.shape);
    HYTRA_CHECK(e.end - e.begin == want, path, ": tensor '", name, "': data_offsets span ", e.end - e.begin,
                " bytes but ", e.dtype, " with its shape needs ", want);
    entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t cursor = 0;
  for (const auto& e : entries) {
    HYTRA_CHECK(e.begin == cursor, path, ": tensor '", e.name, "' starts at byte ", e.begin, " of the data buffer, ",
                e.begin < cursor ? "overlapping the previous tensor" : "leaving a gap", " (expected ", cursor, ")");
    cursor = e.end;
  }
  HYTRA_CHECK(cursor == buffer, path, ": ", buffer - cursor, " trailing bytes after the last tensor");
}

}  // namespace

int safetensors_dtype_bits(const std::string& dtype) {
  const int r = dtype_rank(dtype);
  return r < 0 ? 0 : kDtypes[r].bits;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the check below refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK);
  HYTRA_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    fail(str(path, ": not a regular file (expected a .safetensors file)"));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    HYTRA_CHECK(m != MAP_FAILED, path, ": mmap failed (", std::strerror(errno), ")");
    map_ = static_cast<const unsigned char*>(m);
  } else {
    close(fd);
  }
  HYTRA_CHECK(size_ >= 8, path, ": truncated: ", size_, " bytes, the header length alone is 8");
  uint64_t n;
  std::memcpy(&n, map_, 8);
  HYTRA_CHECK(n <= kMaxHeader, path, ": header length ", n, " exceeds the format's limit of ", kMaxHeader);
  HYTRA_CHECK(8 + n <= size_, path, ": truncated: the header says ", n, " bytes but the file has ", size_ - 8,
              " after the length");
  const std::string header(reinterpret_cast<const char*>(map_ + 8), size_t(n));
  HYTRA_CHECK(!header.empty() && header[0] == '{', path, ": the header must be a JSON object starting with '{'");
  Json root;
  try {
    root = Json::parse(header);
  } catch (const Error& e) {
    fail(str(path, ": header: ", e.what()));
  }
  data_ = map_ + 8 + n;
  try {
    read_entries(path, root, int64_t(size_ - 8 - n), entries_, metadata_);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind(path, 0) == 0) throw;
    fail(str(path, ": header: ", what));  // the JSON accessors' errors do not name the file
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<unsigned char*>(map_), size_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void write_safetensors(const std::string& path, std::vector<SafetensorsTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    HYTRA_CHECK(t.name != "__metadata__" && names.insert(t.name).second, path, ": duplicate or reserved tensor name '",
                t.name, "'");
    HYTRA_CHECK(int64_t(t.bytes.size()) == expected_bytes(path, t.name, t.dtype, t.shape), path, ": tensor '", t.name,
                "' holds ", t.bytes.size(), " bytes, its dtype and shape need ",
                expected_bytes(path, t.name, t.dtype, t.shape));
  }
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    const int aa = dtype_alignment(a.dtype), ab = dtype_alignment(b.dtype);
    return aa != ab ? aa > ab : a.name < b.name;
  });
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      header += json_quote(k);
      header += ':';
      header += json_quote(v);
    }
    header += "}";
  }
  int64_t offset = 0;
  for (const auto& t : tensors) {
    if (header.size() > 1) header += ',';
    header += json_quote(t.name);
    header += ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + int64_t(t.bytes.size())) + "]}";
    offset += int64_t(t.bytes.size());
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  AtomicFile f(path);
  const uint64_t n = header.size();
  f.write(&n, 8);
  f.write(header);
  for (const auto& t : tensors) f.write(t.bytes.data(), t.bytes.size());
  f.commit();
}

}  // namespace hytra
