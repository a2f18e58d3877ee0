// GGUF v3 files (see gguf.h; layout and sources in docs/gguf.md): metadata values, the streaming
// atomic writer, and a checked reader for tests and `runner` checks. Little-endian throughout.
#include "host/io/gguf.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <type_traits>

#include "host/core/error.h"

namespace luatune {

namespace {

constexpr uint32_t kGgufVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kMaxNameBytes = 63;  // ggml's GGML_MAX_NAME is 64 including the terminating NUL
constexpr int kMaxDims = 4;           // GGML_MAX_DIMS

using VT = GgufValue::Type;

bool type_is_known(uint32_t t) {
  return t <= 12;
}

const char* value_type_name(VT t) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) <= 12 ? names[uint32_t(t)] : "?";
}

bool ggml_type_known(uint32_t t) {
  switch (GgmlType(t)) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::BF16:
      return true;
  }
  return false;
}

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// ---------------------------------------------------------------------------------------------
// Serialization of the header into a string (small: metadata and tensor infos only).

void put_raw(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <typename T>
void put(std::string& out, T v) {
  static_assert(std::is_arithmetic<T>::value, "");
  put_raw(out, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// The numeric value types (all but bool, string and array): each one's size in the file, its name
// in read errors, and how it moves between those bytes and the GgufValue field that holds it (u
// for unsigned, i for signed, f for floating point).
template <class T, class V>
auto& number_field(V& v) {
  if constexpr (std::is_floating_point<T>::value)
    return v.f;
  else if constexpr (std::is_signed<T>::value)
    return v.i;
  else
    return v.u;
}
template <class T>
void put_number(std::string& out, const GgufValue& v) {
  put<T>(out, T(number_field<T>(v)));
}
template <class T>
void get_number(const char* bytes, GgufValue& v) {
  T x;
  std::memcpy(&x, bytes, sizeof(T));
  number_field<T>(v) = x;
}

struct NumberType {
  VT type;
  const char* what;
  size_t bytes;
  void (*put)(std::string& out, const GgufValue& v);
  void (*get)(const char* bytes, GgufValue& v);
};
template <class T>
constexpr NumberType number_type(VT t, const char* what) {
  return {t, what, sizeof(T), put_number<T>, get_number<T>};
}
const NumberType kNumberTypes[] = {
    number_type<uint8_t>(VT::u8, "a u8"),    number_type<int8_t>(VT::i8, "an i8"),
    number_type<uint16_t>(VT::u16, "a u16"), number_type<int16_t>(VT::i16, "an i16"),
    number_type<uint32_t>(VT::u32, "a u32"), number_type<int32_t>(VT::i32, "an i32"),
    number_type<uint64_t>(VT::u64, "a u64"), number_type<int64_t>(VT::i64, "an i64"),
    number_type<float>(VT::f32, "an f32"),   number_type<double>(VT::f64, "an f64"),
};

const NumberType* number_type_of(VT t) {
  for (const NumberType& n : kNumberTypes)
    if (n.type == t) return &n;
  return nullptr;
}

void put_scalar(std::string& out, VT t, const GgufValue& v) {
  if (t == VT::string) return put_string(out, v.s);
  if (t == VT::boolean) return put<uint8_t>(out, v.u ? 1 : 0);
  const NumberType* n = number_type_of(t);
  if (!n) fail_internal(__FILE__, __LINE__, "put_scalar on an array");
  n->put(out, v);
}

void put_value(std::string& out, const GgufValue& v) {
  put<uint32_t>(out, uint32_t(v.type));
  if (v.type != VT::array) return put_scalar(out, v.type, v);
  put<uint32_t>(out, uint32_t(v.item_type));
  put<uint64_t>(out, v.items.size());
  for (const GgufValue& item : v.items) put_scalar(out, v.item_type, item);
}

// ---------------------------------------------------------------------------------------------
// The temporary file the writer streams into; destroyed without commit(), it removes itself.

class TempFile {
 public:
  explicit TempFile(const std::string& path)
      : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail("cannot write GGUF '" + path_ + "': " + std::strerror(errno));
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 22);
  }
  ~TempFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      fail("cannot write GGUF '" + path_ + "': " + std::strerror(errno));
    pos_ += n;
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[4096] = {};
    uint64_t n = align_up(pos_, alignment) - pos_;
    while (n) {
      size_t k = size_t(std::min<uint64_t>(n, sizeof(zeros)));
      write(zeros, k);
      n -= k;
    }
  }
  uint64_t pos() const { return pos_; }
  void commit() {
    bool ok = std::fflush(f_) == 0;
    ok = ok && ::fsync(::fileno(f_)) == 0;
    int saved = errno;
    ok = (std::fclose(f_) == 0) && ok;
    f_ = nullptr;
    if (!ok) fail("cannot write GGUF '" + path_ + "': " + std::strerror(saved ? saved : errno));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      fail("cannot move '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
    }
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  FILE* f_ = nullptr;
  uint64_t pos_ = 0;
  bool committed_ = false;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// GgufValue

namespace {

// A value of type `t` holding `v` in `field` (u, i, f or s).
template <class Field, class V>
GgufValue gguf_scalar(GgufValue::Type t, Field GgufValue::*field, V v) {
  GgufValue r;
  r.type = t;
  r.*field = std::move(v);
  return r;
}

// An array of `item_type` items, item k made by make(v[k]).
template <class V, class Make>
GgufValue gguf_array(GgufValue::Type item_type, const std::vector<V>& v, Make make) {
  GgufValue r;
  r.type = GgufValue::Type::array;
  r.item_type = item_type;
  r.items.reserve(v.size());
  for (const V& x : v) r.items.push_back(make(x));
  return r;
}

}  // namespace

GgufValue GgufValue::unsigned_value(Type t, uint64_t v) {
  return gguf_scalar(t, &GgufValue::u, v);
}
GgufValue GgufValue::signed_value(Type t, int64_t v) {
  return gguf_scalar(t, &GgufValue::i, v);
}
GgufValue GgufValue::float_value(Type t, double v) {
  return gguf_scalar(t, &GgufValue::f, v);
}
GgufValue GgufValue::str(std::string v) {
  return gguf_scalar(Type::string, &GgufValue::s, std::move(v));
}

GgufValue GgufValue::strings(const std::vector<std::string>& v) {
  return gguf_array(Type::string, v, str);
}
GgufValue GgufValue::i32s(const std::vector<int32_t>& v) {
  return gguf_array(Type::i32, v, i32);
}
GgufValue GgufValue::f32s(const std::vector<float>& v) {
  return gguf_array(Type::f32, v, f32);
}

// ---------------------------------------------------------------------------------------------
// GgufWriter

void GgufWriter::set(const std::string& key, GgufValue v) {
  if (key.empty() || key.size() > 65535) fail("GGUF key '" + key + "': must be 1 to 65535 bytes");
  for (unsigned char c : key) {
    if (c < 0x20 || c > 0x7e) fail("GGUF key '" + key + "': must be printable ASCII");
  }
  if (!type_is_known(uint32_t(v.type))) fail("GGUF key '" + key + "': unknown value type");
  if (v.type == VT::array) {
    // llama.cpp's reader rejects arrays of arrays, so they are refused here.
    if (v.item_type == VT::array || !type_is_known(uint32_t(v.item_type))) {
      fail("GGUF key '" + key + "': arrays of arrays (or of unknown types) are not readable by llama.cpp");
    }
    for (const GgufValue& item : v.items) {
      if (item.type != v.item_type) {
        fail("GGUF key '" + key + "': an array of " + value_type_name(v.item_type) + " holds a " +
             value_type_name(item.type));
      }
    }
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, const at::Tensor& t, GgmlType type) {
  const std::string what = "GGUF tensor '" + name + "'";
  if (name.empty() || name.size() > kMaxNameBytes) {
    fail(what + ": the name must be 1 to " + std::to_string(kMaxNameBytes) + " bytes (ggml's GGML_MAX_NAME)");
  }
  for (const Entry& e : tensors_) {
    if (e.name == name) fail(what + ": added twice");
  }
  if (!t.defined()) fail(what + ": undefined tensor");
  if (!at::isFloatingType(t.scalar_type())) {
    fail(what + ": expected a floating-point tensor, got " + std::string(c10::toString(t.scalar_type())));
  }
  if (t.dim() > kMaxDims) fail(what + ": " + std::to_string(t.dim()) + " dimensions, ggml allows at most 4");
  Entry e;
  e.name = name;
  e.type = type;
  for (int64_t d = t.dim() - 1; d >= 0; --d) e.ne.push_back(t.size(d));
  if (e.ne.empty()) e.ne.push_back(1);  // a scalar is one element, as ggml writes it
  const int64_t bs = ggml_block_size(type);
  if (e.ne[0] % bs != 0) {
    fail(what + ": rows of " + std::to_string(e.ne[0]) + " elements cannot be " + ggml_type_name(type) +
             " (blocks of " + std::to_string(bs) + ")",
         "keep such tensors in f16 or f32 (llama.cpp's converter falls back the same way)");
  }
  e.tensor = t.detach();
  tensors_.push_back(std::move(e));
}

void GgufWriter::write(const std::string& path) const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& kv : kv_) {
    if (kv.first != "general.alignment") continue;
    if (kv.second.type != VT::u32) fail("GGUF key 'general.alignment': must be a u32 (ggml reads it as one)");
    alignment = kv.second.u;
    if (alignment < 8 || (alignment & (alignment - 1)) != 0) {
      fail("GGUF key 'general.alignment': " + std::to_string(alignment) + " is not a power of two >= 8");
    }
  }

  // Header, metadata and tensor infos; each tensor's offset is the padded running size.
  std::string head;
  head += "GGUF";
  put<uint32_t>(head, kGgufVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const auto& kv : kv_) {
    put_string(head, kv.first);
    put_value(head, kv.second);
  }
  uint64_t offset = 0;
  for (const Entry& e : tensors_) {
    put_string(head, e.name);
    put<uint32_t>(head, uint32_t(e.ne.size()));
    for (int64_t n : e.ne) put<uint64_t>(head, uint64_t(n));
    put<uint32_t>(head, uint32_t(e.type));
    put<uint64_t>(head, offset);
    int64_t numel = 1;
    for (int64_t n : e.ne) numel *= n;
    offset += align_up(uint64_t(ggml_row_bytes(e.type, numel)), alignment);
  }

  TempFile out(path);
  out.write(head.data(), head.size());
  out.pad_to(alignment);
  const uint64_t data_start = out.pos();
  std::string buf;
  for (const Entry& e : tensors_) {
    // One slice of whole rows at a time (about 16M elements): converted to f32 on the CPU, then
    // to the file's type, so memory stays bounded whatever the tensor's size and device.
    const at::Tensor flat = e.tensor.reshape({-1});
    const int64_t row = e.ne[0], numel = flat.numel();
    const int64_t step = row == 0 ? 1 : std::max<int64_t>(1, (int64_t(1) << 24) / row) * row;
    for (int64_t i = 0; i < numel; i += step) {
      const int64_t n = std::min(step, numel - i);
      at::Tensor part =
          flat.narrow(0, i, n).to(at::TensorOptions().dtype(at::kFloat).device(at::kCPU)).contiguous();
      buf.resize(size_t(ggml_row_bytes(e.type, n)));
      ggml_quantize_into(e.type, part.data_ptr<float>(), n, &buf[0]);
      out.write(buf.data(), buf.size());
    }
    out.pad_to(alignment);
  }
  if (out.pos() - data_start != offset) {
    fail_internal(__FILE__, __LINE__,
                  "GGUF data section is " + std::to_string(out.pos() - data_start) + " bytes, expected " +
                      std::to_string(offset));
  }
  out.commit();
}

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) fail("cannot read GGUF '" + path + "': " + std::strerror(errno));
    if (std::fseek(f_, 0, SEEK_END) != 0) bad("cannot seek");
    long end = std::ftell(f_);
    if (end < 0) bad("cannot tell its size");
    size_ = uint64_t(end);
    std::fseek(f_, 0, SEEK_SET);
  }
  ~Reader() { std::fclose(f_); }
  [[noreturn]] void bad(const std::string& what) const { fail("bad GGUF file '" + path_ + "': " + what); }
  void raw(void* p, uint64_t n, const char* what) {
    if (n > size_ - pos_) bad(std::string("truncated (") + what + " at byte " + std::to_string(pos_) + ")");
    if (n && std::fread(p, 1, size_t(n), f_) != n) bad(std::string("read error in ") + what);
    pos_ += n;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    raw(&v, sizeof(T), what);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    if (n > size_ - pos_) bad(std::string("truncated (") + what + " of " + std::to_string(n) + " bytes)");
    std::string s(size_t(n), '\0');
    raw(&s[0], n, what);
    return s;
  }
  void seek(uint64_t p) {
    if (p > size_) bad("offset " + std::to_string(p) + " beyond its end");
    std::fseek(f_, long(p), SEEK_SET);
    pos_ = p;
  }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  uint64_t size_ = 0, pos_ = 0;
};

GgufValue read_scalar(Reader& r, VT t) {
  GgufValue v;
  v.type = t;
  if (t == VT::string) {
    v.s = r.str("a string");
  } else if (t == VT::boolean) {
    uint8_t b = r.get<uint8_t>("a bool");
    if (b > 1) r.bad("a bool holds " + std::to_string(b));
    v.u = b;
  } else if (const NumberType* n = number_type_of(t)) {
    char bytes[8];
    r.raw(bytes, n->bytes, n->what);
    n->get(bytes, v);
  } else {
    r.bad("an array of arrays");
  }
  return v;
}

}  // namespace

const GgufValue* GgufFile::find(const std::string& key) const {
  for (const auto& kv : this->kv) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

GgufFile gguf_read(const std::string& path, bool with_data) {
  Reader r(path);
  GgufFile g;
  char magic[4];
  r.raw(magic, 4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) r.bad("no GGUF magic");
  g.version = r.get<uint32_t>("version");
  if (g.version != 2 && g.version != 3) r.bad("version " + std::to_string(g.version) + " (expected 3)");
  const uint64_t n_tensors = r.get<uint64_t>("tensor count");
  const uint64_t n_kv = r.get<uint64_t>("metadata count");
  // Every kv takes at least 12 bytes and every tensor info at least 24: bounds before reserving.
  if (n_kv > r.size() / 12 || n_tensors > r.size() / 24) r.bad("counts larger than the file");
  std::set<std::string> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str("a key");
    if (!seen.insert(key).second) r.bad("key '" + key + "' twice");
    const uint32_t t = r.get<uint32_t>("a value type");
    if (!type_is_known(t)) r.bad("key '" + key + "' has value type " + std::to_string(t));
    GgufValue v;
    if (VT(t) == VT::array) {
      v.type = VT::array;
      const uint32_t it = r.get<uint32_t>("an array type");
      if (!type_is_known(it) || VT(it) == VT::array)
        r.bad("key '" + key + "' has array item type " + std::to_string(it));
      v.item_type = VT(it);
      const uint64_t n = r.get<uint64_t>("an array length");
      if (n > r.size() - r.pos())
        r.bad("key '" + key + "' has " + std::to_string(n) + " items, more than the file holds");
      v.items.reserve(size_t(n));
      for (uint64_t k = 0; k < n; ++k) v.items.push_back(read_scalar(r, v.item_type));
    } else {
      v = read_scalar(r, VT(t));
    }
    if (key == "general.alignment") {
      if (v.type != VT::u32)
        r.bad("general.alignment is a " + std::string(value_type_name(v.type)) + ", not a u32");
      if (v.u == 0 || (v.u & (v.u - 1)) != 0)
        r.bad("general.alignment " + std::to_string(v.u) + " is not a power of two");
      g.alignment = v.u;
    }
    g.kv.emplace_back(std::move(key), std::move(v));
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufFile::Tensor t;
    t.name = r.str("a tensor name");
    if (!names.insert(t.name).second) r.bad("tensor '" + t.name + "' twice");
    const uint32_t nd = r.get<uint32_t>("n_dims");
    if (nd > uint32_t(kMaxDims)) r.bad("tensor '" + t.name + "' has " + std::to_string(nd) + " dimensions");
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = r.get<uint64_t>("a dimension");
      if (n > uint64_t(INT64_MAX)) r.bad("tensor '" + t.name + "' has a dimension of " + std::to_string(n));
      t.ne.push_back(int64_t(n));
    }
    const uint32_t ty = r.get<uint32_t>("a tensor type");
    if (!ggml_type_known(ty))
      r.bad("tensor '" + t.name + "' has ggml type " + std::to_string(ty) + ", which luatune does not read");
    t.type = GgmlType(ty);
    t.offset = r.get<uint64_t>("a tensor offset");
    if (!t.ne.empty() && t.ne[0] % ggml_block_size(t.type) != 0) {
      r.bad("tensor '" + t.name + "' has rows of " + std::to_string(t.ne[0]) + ", not whole " +
            ggml_type_name(t.type) + " blocks");
    }
    g.tensors.push_back(std::move(t));
  }
  g.data_offset = align_up(r.pos(), g.alignment);
  for (GgufFile::Tensor& t : g.tensors) {
    if (t.offset % g.alignment != 0)
      r.bad("tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not aligned");
    int64_t numel = 1;
    for (int64_t n : t.ne) {
      if (n != 0 && numel > INT64_MAX / n) r.bad("tensor '" + t.name + "' is too large");
      numel *= n;
    }
    const uint64_t bytes = uint64_t(ggml_row_bytes(t.type, numel));
    if (t.offset > r.size() || bytes > r.size() - t.offset || g.data_offset > r.size() - t.offset - bytes) {
      r.bad("tensor '" + t.name + "' (" + std::to_string(bytes) + " bytes at data offset " +
            std::to_string(t.offset) + ") runs past the end of the file");
    }
    if (with_data) {
      r.seek(g.data_offset + t.offset);
      t.bytes.resize(size_t(bytes));
      r.raw(&t.bytes[0], bytes, "tensor data");
    }
  }
  return g;
}

}  // namespace luatune
