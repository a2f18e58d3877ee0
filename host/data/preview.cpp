// The debug view (see preview.h): runs of masked and trained tokens decoded separately.
#include "host/data/preview.h"

#include "host/text/tokenizer.h"

namespace luatune {

namespace {

std::string escape_controls(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string data_preview(const Dataset& ds, const Tokenizer& tok, const std::string& source, bool color) {
  const char* open = color ? "\x1b[2m[" : "[";
  const char* close = color ? "]\x1b[0m" : "]";
  std::string out = source + ": format " + data_format_name(ds.format());
  if (ds.format() != DataFormat::text)
    out += ds.chat() ? std::string(" (chat template ") + ds.chat()->tmpl->origin() + ")"
                     : std::string(" (plain text template)");
  out += ", max_length " + std::to_string(ds.options().max_length) +
         "; [bracketed] tokens are masked (no loss on them)\n";
  for (int64_t d = 0; d < ds.documents(); d++) {
    Document doc = ds.document(d);
    int64_t targets = 0;
    for (uint8_t m : doc.mask) targets += m;
    out += "line " + std::to_string(ds.document_origin(d)) + ": " + std::to_string(doc.ids.size()) +
           " tokens, " + std::to_string(targets) + " targets\n";
    std::string text = "  text: ", ids = "  ids:  ";
    for (size_t b = 0; b < doc.ids.size();) {
      size_t e = b;
      while (e < doc.ids.size() && doc.mask[e] == doc.mask[b]) e++;
      std::vector<int32_t> run(doc.ids.begin() + b, doc.ids.begin() + e);
      std::string piece = escape_controls(tok.decode(run));
      std::string numbers;
      for (int32_t id : run) numbers += (numbers.empty() ? "" : " ") + std::to_string(id);
      bool masked = doc.mask[b] == 0;
      text += masked ? open + piece + close : piece;
      ids += (b > 0 ? " " : "") + (masked ? open + numbers + close : numbers);
      b = e;
    }
    out += text + "\n" + ids + "\n";
  }
  DataStats s = ds.stats();
  out += "records " + std::to_string(s.records) + ", skipped_bad " + std::to_string(s.skipped_bad) +
         ", dropped_empty " + std::to_string(s.dropped_empty) + ", tokens " + std::to_string(s.tokens) +
         ", target_tokens " + std::to_string(s.target_tokens) + ", truncated " + std::to_string(s.truncated) +
         "\n";
  return out;
}

}  // namespace luatune
