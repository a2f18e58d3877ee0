// The GPT-2 byte-level alphabet: every byte maps to one printable character (bytes '!'..'~',
// U+00A1..U+00AC and U+00AE..U+00FF map to themselves; the other 68 bytes, in order, to U+0100
// onwards), so BPE vocabularies can hold arbitrary bytes as text. Used by the ByteLevel
// pre-tokenizer (bytes -> chars) and decoder (chars -> bytes).
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> text;   // byte -> UTF-8 of its char
  std::array<int16_t, 0x144> byte_of;  // code point -> byte, -1 when not in the alphabet

  ByteAlphabet() {
    byte_of.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      utf8_append(text[b], cp);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_level_char(uint8_t b) {
  return alphabet().text[b];
}

bool byte_level_unmap(std::string_view token, std::string& bytes) {
  const ByteAlphabet& a = alphabet();
  size_t i = 0;
  while (i < token.size()) {
    char32_t cp = utf8_next(token, i);
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) return false;
    bytes += static_cast<char>(a.byte_of[cp]);
  }
  return true;
}

void byte_level_map(Piece& p) {
  const ByteAlphabet& a = alphabet();
  Piece out;
  out.text.reserve(p.text.size() * 2);
  out.src.reserve(p.text.size() * 2);
  for (size_t i = 0; i < p.text.size(); i++) out.append(a.text[static_cast<uint8_t>(p.text[i])], p.src[i]);
  p = std::move(out);
}

const char* byte_level_gpt2_pattern() {
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

}  // namespace luatune
