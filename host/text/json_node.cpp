// JsonNode: reads tokenizer.json fields while remembering the file and the JSON path, so every
// malformed or unsupported field is reported as one line naming both (see tokenizer_parts.h).
#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {
std::string join_path(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : path + "." + key;
}
const char* kind(const nlohmann::json& j) {
  return j.type_name();
}
}  // namespace

bool JsonNode::has(const char* key) const {
  return j_->is_object() && j_->contains(key) && !(*j_)[key].is_null();
}

JsonNode JsonNode::at(const char* key) const {
  if (!has(key)) {
    expect_object();
    fail("has no \"" + std::string(key) + "\" field");
  }
  return JsonNode((*j_)[key], file_, join_path(path_, key));
}

JsonNode JsonNode::get(const char* key) const {
  static const nlohmann::json null_json;
  if (!has(key)) return JsonNode(null_json, file_, join_path(path_, key));
  return JsonNode((*j_)[key], file_, join_path(path_, key));
}

JsonNode JsonNode::at(size_t i) const {
  expect_array();
  return JsonNode((*j_)[i], file_, path_ + "[" + std::to_string(i) + "]");
}

size_t JsonNode::size() const {
  expect_array();
  return j_->size();
}

std::string JsonNode::str(const char* key) const {
  JsonNode n = at(key);
  if (!n.j_->is_string()) n.fail("should be a string, got " + std::string(kind(*n.j_)));
  return n.j_->get<std::string>();
}

std::string JsonNode::str_or(const char* key, const std::string& def) const {
  return has(key) ? str(key) : def;
}

bool JsonNode::boolean_or(const char* key, bool def) const {
  if (!has(key)) return def;
  JsonNode n = at(key);
  if (!n.j_->is_boolean()) n.fail("should be true or false, got " + std::string(kind(*n.j_)));
  return n.j_->get<bool>();
}

int64_t JsonNode::integer(const char* key) const {
  JsonNode n = at(key);
  if (!n.j_->is_number_integer()) n.fail("should be an integer, got " + std::string(kind(*n.j_)));
  return n.j_->get<int64_t>();
}

int64_t JsonNode::integer_or(const char* key, int64_t def) const {
  return has(key) ? integer(key) : def;
}

std::string JsonNode::type() const {
  return str("type");
}

void JsonNode::fail(const std::string& what) const {
  luatune::fail(file_ + ": " + (path_.empty() ? std::string("top level") : path_) + " " + what);
}

void JsonNode::unsupported(const std::vector<std::string>& supported) const {
  JsonNode t = at("type");
  t.fail("\"" + type() + "\" is not supported (supported: " + str_join(supported, ", ") + ")");
}

void JsonNode::expect_array() const {
  if (!j_->is_array()) fail("should be an array, got " + std::string(kind(*j_)));
}

void JsonNode::expect_object() const {
  if (!j_->is_object()) fail("should be an object, got " + std::string(kind(*j_)));
}

}  // namespace luatune
