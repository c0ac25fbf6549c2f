#include "kbrl/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <fmt/format.h>
#include <limits>
#include <unordered_map>

#include "kbrl/core/json.hpp"
#include "kbrl/core/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace kbrl::model {
namespace json = boost::json;
namespace fs = std::filesystem;
using core::ConfigError;

namespace {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  std::size_t bits;
};

constexpr std::array<DtypeEntry, 22> kDtypes{{
    {Dtype::BOOL, "BOOL", 8},          {Dtype::F4, "F4", 4},
    {Dtype::F6_E2M3, "F6_E2M3", 6},    {Dtype::F6_E3M2, "F6_E3M2", 6},
    {Dtype::U8, "U8", 8},              {Dtype::I8, "I8", 8},
    {Dtype::F8_E5M2, "F8_E5M2", 8},    {Dtype::F8_E4M3, "F8_E4M3", 8},
    {Dtype::F8_E8M0, "F8_E8M0", 8},    {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8}, {Dtype::I16, "I16", 16},
    {Dtype::U16, "U16", 16},           {Dtype::F16, "F16", 16},
    {Dtype::BF16, "BF16", 16},         {Dtype::I32, "I32", 32},
    {Dtype::U32, "U32", 32},           {Dtype::F32, "F32", 32},
    {Dtype::C64, "C64", 64},           {Dtype::F64, "F64", 64},
    {Dtype::I64, "I64", 64},           {Dtype::U64, "U64", 64},
}};

// The reference reader refuses larger headers; so do we, before allocating anything for one.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// A private, writable mapping of a whole file: pages are read lazily and a write makes a
// private copy of its page, so views handed to torch may be modified without touching the file.
class Mapping {
 public:
  explicit Mapping(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ConfigError(path.string(), "", fmt::format("cannot open: {}", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(path.string(), "", fmt::format("cannot stat: {}", std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw ConfigError(path.string(), "", "not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw ConfigError(path.string(), "", fmt::format("cannot map: {}", std::strerror(err)));
      }
      data_ = static_cast<std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file's pages reachable
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Reads a non-negative JSON integer; doubles and negatives are errors.
std::optional<std::uint64_t> as_uint(const json::value& v) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
  return std::nullopt;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& where, const std::string& field) {
  if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b)
    throw ConfigError(where, field, "shape overflows 64 bits");
  return a * b;
}

TensorInfo parse_entry(const std::string& file, const std::string& name, const json::value& v) {
  const std::string field = fmt::format("tensor '{}'", name);
  if (!v.is_object()) throw ConfigError(file, field, "header entry is not a JSON object");
  const json::object& o = v.get_object();
  TensorInfo info;
  info.name = name;

  const json::value* dtype = o.if_contains("dtype");
  if (dtype == nullptr || !dtype->is_string()) throw ConfigError(file, field, "missing string 'dtype'");
  const auto parsed = parse_dtype(dtype->get_string());
  if (!parsed) throw ConfigError(file, field, fmt::format("unknown dtype '{}'", std::string_view(dtype->get_string())));
  info.dtype = *parsed;

  const json::value* shape = o.if_contains("shape");
  if (shape == nullptr || !shape->is_array()) throw ConfigError(file, field, "missing array 'shape'");
  std::uint64_t numel = 1;
  for (const json::value& d : shape->get_array()) {
    const auto dim = as_uint(d);
    if (!dim || *dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw ConfigError(file, field, fmt::format("shape entry {} is not a non-negative integer", json::serialize(d)));
    info.shape.push_back(static_cast<std::int64_t>(*dim));
    numel = checked_mul(numel, *dim, file, field);
  }

  const json::value* offsets = o.if_contains("data_offsets");
  if (offsets == nullptr || !offsets->is_array() || offsets->get_array().size() != 2)
    throw ConfigError(file, field, "missing 'data_offsets' [begin, end]");
  const auto begin = as_uint(offsets->get_array()[0]);
  const auto end = as_uint(offsets->get_array()[1]);
  if (!begin || !end) throw ConfigError(file, field, "data_offsets are not non-negative integers");
  if (*end < *begin)
    throw ConfigError(file, field, fmt::format("data_offsets [{}, {}] end before they begin", *begin, *end));
  info.begin = *begin;
  info.end = *end;

  const std::uint64_t bits = checked_mul(numel, dtype_bits(info.dtype), file, field);
  if (bits % 8 != 0)
    throw ConfigError(file, field, fmt::format("{} elements of {} do not fill whole bytes", numel, dtype_name(info.dtype)));
  if (bits / 8 != info.nbytes())
    throw ConfigError(file, field,
                      fmt::format("shape [{}] of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                                  fmt::join(info.shape, ", "), dtype_name(info.dtype), bits / 8, info.begin,
                                  info.end, info.nbytes()));
  return info;
}

// JSON string escaping as serde_json (the reference writer's serializer) does it.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

std::uint64_t byte_size(const std::vector<std::int64_t>& shape, Dtype dtype, const std::string& where,
                        const std::string& field) {
  std::uint64_t numel = 1;
  for (const auto d : shape) {
    if (d < 0) throw ConfigError(where, field, "negative dimension in shape");
    numel = checked_mul(numel, static_cast<std::uint64_t>(d), where, field);
  }
  const std::uint64_t bits = checked_mul(numel, dtype_bits(dtype), where, field);
  if (bits % 8 != 0) throw ConfigError(where, field, "elements do not fill whole bytes");
  return bits / 8;
}

// The reference order: descending dtype (widest alignment first), then name (bytewise).
std::vector<std::pair<const std::string*, const TensorToWrite*>> write_order(
    const std::map<std::string, TensorToWrite>& tensors) {
  std::vector<std::pair<const std::string*, const TensorToWrite*>> order;
  order.reserve(tensors.size());
  for (const auto& [name, t] : tensors) order.emplace_back(&name, &t);
  std::stable_sort(order.begin(), order.end(), [](const auto& l, const auto& r) {
    if (l.second->dtype != r.second->dtype) return l.second->dtype > r.second->dtype;
    return *l.first < *r.first;
  });
  return order;
}

}  // namespace

std::string_view dtype_name(Dtype dtype) { return kDtypes[static_cast<std::size_t>(dtype)].name; }

std::size_t dtype_bits(Dtype dtype) { return kDtypes[static_cast<std::size_t>(dtype)].bits; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& e : kDtypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

struct SafetensorsFile::State {
  fs::path path;
  std::unique_ptr<Mapping> mapping;
  std::byte* data = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, std::size_t> index;
  std::map<std::string, std::string> metadata;
};

SafetensorsFile::SafetensorsFile(const fs::path& path) : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.path = path;
  const std::string file = path.string();
  s.mapping = std::make_unique<Mapping>(path);
  const std::size_t size = s.mapping->size();
  const std::byte* base = s.mapping->data();
  if (size < 8)
    throw ConfigError(file, "", fmt::format("truncated: {} bytes, shorter than the 8-byte header length", size));
  std::uint64_t n = 0;
  std::memcpy(&n, base, 8);
  if (n > size - 8)
    throw ConfigError(file, "", fmt::format("header length {} is beyond the end of the file ({} bytes): "
                                            "truncated or not a safetensors file", n, size));
  if (n > kMaxHeaderBytes)
    throw ConfigError(file, "", fmt::format("header length {} exceeds the format's limit of {} bytes", n, kMaxHeaderBytes));

  const std::string_view header(reinterpret_cast<const char*>(base + 8), static_cast<std::size_t>(n));
  boost::system::error_code ec;
  json::value root = core::parse_json(header, ec);
  if (ec) throw ConfigError(file, "", fmt::format("header is not valid JSON: {}", ec.message()));
  if (!root.is_object()) throw ConfigError(file, "", "header is not a JSON object");

  for (const auto& kv : root.get_object()) {
    const std::string key(kv.key());
    if (key == "__metadata__") {
      if (!kv.value().is_object()) throw ConfigError(file, "__metadata__", "is not a JSON object");
      for (const auto& m : kv.value().get_object()) {
        if (!m.value().is_string())
          throw ConfigError(file, fmt::format("__metadata__.{}", std::string_view(m.key())), "value is not a string");
        s.metadata.emplace(std::string(m.key()), std::string(m.value().get_string()));
      }
      continue;
    }
    s.tensors.push_back(parse_entry(file, key, kv.value()));
  }

  // The data section must be covered exactly once, in order: no overlaps, no gaps, no tail.
  std::stable_sort(s.tensors.begin(), s.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t data_size = size - 8 - n;
  std::uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : s.tensors) {
    const std::string field = fmt::format("tensor '{}'", t.name);
    if (t.begin < cursor)
      throw ConfigError(file, field, fmt::format("data_offsets [{}, {}] overlap tensor '{}' ([{}, {}])", t.begin,
                                                 t.end, previous->name, previous->begin, previous->end));
    if (t.begin > cursor)
      throw ConfigError(file, field, fmt::format("data_offsets [{}, {}] leave a gap of {} bytes before them",
                                                 t.begin, t.end, t.begin - cursor));
    if (t.end > data_size)
      throw ConfigError(file, field, fmt::format("data_offsets [{}, {}] reach beyond the data section ({} bytes): "
                                                 "truncated file", t.begin, t.end, data_size));
    cursor = t.end;
    previous = &t;
  }
  if (cursor != data_size)
    throw ConfigError(file, "", fmt::format("{} bytes after the last tensor are not described by the header",
                                            data_size - cursor));
  for (std::size_t i = 0; i < s.tensors.size(); ++i) s.index.emplace(s.tensors[i].name, i);
  s.data = s.mapping->data() + 8 + n;
}

const fs::path& SafetensorsFile::path() const { return state_->path; }
const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return state_->tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return state_->metadata; }

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = state_->index.find(std::string(name));
  return it == state_->index.end() ? nullptr : &state_->tensors[it->second];
}

bool SafetensorsFile::contains(std::string_view name) const { return find(name) != nullptr; }

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) throw ConfigError(state_->path.string(), fmt::format("tensor '{}'", name), "no such tensor");
  return *t;
}

std::span<std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  return {state_->data + info.begin, static_cast<std::size_t>(info.nbytes())};
}

std::shared_ptr<const void> SafetensorsFile::keep_alive() const { return state_; }

namespace {

std::string build_header(const std::map<std::string, TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata, const std::string& where) {
  std::string out = "{";
  bool first = true;
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) out.push_back(',');
      first = false;
      append_json_string(out, k);
      out.push_back(':');
      append_json_string(out, v);
    }
    out.push_back('}');
    first = false;
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : write_order(tensors)) {
    if (*name == "__metadata__") throw ConfigError(where, *name, "is reserved for metadata");
    const std::uint64_t n = byte_size(t->shape, t->dtype, where, fmt::format("tensor '{}'", *name));
    if (n != t->bytes.size())
      throw ConfigError(where, fmt::format("tensor '{}'", *name),
                        fmt::format("shape [{}] of {} needs {} bytes, got {}", fmt::join(t->shape, ", "),
                                    dtype_name(t->dtype), n, t->bytes.size()));
    if (!first) out.push_back(',');
    first = false;
    append_json_string(out, *name);
    out += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", dtype_name(t->dtype),
                       fmt::join(t->shape, ","), offset, offset + n);
    offset += n;
  }
  out.push_back('}');
  out.resize((out.size() + 7) / 8 * 8, ' ');
  return out;
}

}  // namespace

std::string safetensors_header(const std::map<std::string, TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  return build_header(tensors, metadata, "safetensors header");
}

void write_safetensors(const fs::path& path, const std::map<std::string, TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(tensors, metadata, path.string());
  fs::path tmp = path;
  tmp += fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(path.string(), "", fmt::format("cannot write {}", tmp.string()));
    const std::uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, t] : write_order(tensors))
      out.write(reinterpret_cast<const char*>(t->bytes.data()), static_cast<std::streamsize>(t->bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw ConfigError(path.string(), "", "write failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw ConfigError(path.string(), "", fmt::format("cannot rename the written file into place: {}", ec.message()));
  }
}

}  // namespace kbrl::model
