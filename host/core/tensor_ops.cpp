// Index rule, tensor-from-values and descriptions (see tensor_ops.h).
#include "host/core/tensor_ops.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <limits>
#include <sstream>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/strings.h"

namespace luatune {

namespace {
int64_t parse_int(const std::string& text, const std::string& item) {
  double v = 0;
  LT_CHECK(str_to_number(text, &v) && v == static_cast<double>(static_cast<int64_t>(v)),
           "bad index '" << item << "': expected an integer, a slice start:stop:step, '...', ':' or 'none'");
  return static_cast<int64_t>(v);
}
}  // namespace

// ============================================================================================
// Parsing

IndexItem index_parse_item(const std::string& raw) {
  std::string text = str_trim(raw);
  IndexItem item;
  if (text == "...") {
    item.kind = IndexItem::Kind::ellipsis;
  } else if (text == "none" || text == "None") {
    item.kind = IndexItem::Kind::newaxis;
  } else if (text.find(':') != std::string::npos) {
    auto parts = str_split(text, ':');
    LT_CHECK(parts.size() <= 3, "bad index '" << text << "': a slice has at most start:stop:step");
    item.kind = IndexItem::Kind::slice;
    if (!str_trim(parts[0]).empty()) item.start = parse_int(parts[0], text);
    if (parts.size() > 1 && !str_trim(parts[1]).empty()) item.stop = parse_int(parts[1], text);
    if (parts.size() > 2 && !str_trim(parts[2]).empty()) item.step = parse_int(parts[2], text);
    LT_CHECK(item.step > 0, "bad index '" << text << "': slice step must be positive (as in PyTorch)");
  } else {
    LT_CHECK(!text.empty(), "bad index: empty item (use ':' for a whole dimension)");
    item = IndexItem::of_select(parse_int(text, text));
  }
  return item;
}

std::vector<IndexItem> index_parse(const std::string& spec) {
  std::vector<IndexItem> items;
  for (const auto& part : str_split(spec, ',')) items.push_back(index_parse_item(part));
  return items;
}

// ============================================================================================
// Indexing

static std::vector<at::indexing::TensorIndex> to_aten(const std::vector<IndexItem>& items) {
  using namespace at::indexing;
  std::vector<TensorIndex> out;
  out.reserve(items.size());
  for (const auto& it : items) {
    switch (it.kind) {
      case IndexItem::Kind::select:
        out.emplace_back(it.index);
        break;
      case IndexItem::Kind::slice: {
        // PyTorch slices clamp to the dimension, so "no stop" is the largest index.
        int64_t start = it.start.value_or(0);
        int64_t stop = it.stop.value_or(std::numeric_limits<int64_t>::max());
        out.emplace_back(Slice(start, stop, it.step));
        break;
      }
      case IndexItem::Kind::ellipsis:
        out.emplace_back(Ellipsis);
        break;
      case IndexItem::Kind::newaxis:
        out.emplace_back(None);
        break;
      case IndexItem::Kind::tensor:
        out.emplace_back(it.tensor);
        break;
    }
  }
  return out;
}

at::Tensor tensor_index(const at::Tensor& t, const std::vector<IndexItem>& items) {
  return t.index(to_aten(items));
}

void tensor_index_put(at::Tensor& t, const std::vector<IndexItem>& items, const at::Tensor& value) {
  t.index_put_(to_aten(items), value);
}

// ============================================================================================
// Construction and description

at::Tensor tensor_from_values(const std::vector<double>& values, const std::vector<int64_t>& shape,
                              c10::ScalarType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  LT_ASSERT(n == static_cast<int64_t>(values.size()),
            "shape " << shape_str(shape) << " vs " << values.size() << " values");
  auto src = at::from_blob(const_cast<double*>(values.data()), shape, at::TensorOptions().dtype(at::kDouble));
  return src.to(dtype, /*non_blocking=*/false, /*copy=*/true);
}

std::string shape_str(at::IntArrayRef shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); i++) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string tensor_describe(const at::Tensor& t) {
  if (!t.defined()) return "Tensor(released)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(t.scalar_type()) << ", " << shape_str(t.sizes()) << ", "
     << device_name(t.device());
  if (t.requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

}  // namespace luatune
