#include "engine/chat/internal/text.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "engine/chat/internal/value.h"

namespace kvcast {
namespace jinja_internal {

std::vector<uint32_t> DecodeUtf8(absl::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  std::vector<size_t> off = CodePointOffsets(s);
  for (size_t i = 0; i + 1 < off.size(); ++i) {
    size_t n = off[i + 1] - off[i];
    const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data() + off[i]);
    uint32_t cp = p[0];
    if (n == 2) cp = ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    if (n == 3) cp = ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (n == 4) cp = ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    // A stray byte stays itself: mark it so EncodeUtf8 writes it back raw.
    if (n == 1 && cp >= 0x80) cp = 0x80000000u | cp;
    out.push_back(cp);
  }
  return out;
}

std::string EncodeUtf8(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) {
    if (cp & 0x80000000u) {
      out.push_back(static_cast<char>(cp & 0xFF));
    } else {
      AppendUtf8(cp, &out);
    }
  }
  return out;
}

bool IsPySpace(uint32_t cp) {
  return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

uint32_t ToLowerCp(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    bool even_upper = !((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E));
    if (even_upper ? (cp % 2 == 0) : (cp % 2 == 1)) return cp + 1;
  }
  return cp;
}

uint32_t ToUpperCp(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp >= 0x3B1 && cp <= 0x3CB && cp != 0x3C2) return cp - 32;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    bool even_upper = !((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E));
    if (even_upper ? (cp % 2 == 1) : (cp % 2 == 0)) return cp - 1;
  }
  return cp;
}

bool IsCased(uint32_t cp) { return ToLowerCp(cp) != cp || ToUpperCp(cp) != cp || cp == 0xDF; }

namespace {

template <typename F>
std::string MapCodePoints(absl::string_view s, F f) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!(cps[i] & 0x80000000u)) cps[i] = f(i, cps);
  }
  return EncodeUtf8(cps);
}

}  // namespace

std::string PyLower(absl::string_view s) {
  return MapCodePoints(s, [](size_t i, const std::vector<uint32_t>& c) { return ToLowerCp(c[i]); });
}

std::string PyUpper(absl::string_view s) {
  return MapCodePoints(s, [](size_t i, const std::vector<uint32_t>& c) { return ToUpperCp(c[i]); });
}

std::string PyCapitalize(absl::string_view s) {
  return MapCodePoints(s, [](size_t i, const std::vector<uint32_t>& c) {
    return i == 0 ? ToUpperCp(c[i]) : ToLowerCp(c[i]);
  });
}

std::string PyTitle(absl::string_view s) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  bool previous_cased = false;
  for (uint32_t& cp : cps) {
    if (cp & 0x80000000u) {
      previous_cased = false;
      continue;
    }
    bool cased = IsCased(cp);
    cp = previous_cased ? ToLowerCp(cp) : ToUpperCp(cp);
    previous_cased = cased;
  }
  return EncodeUtf8(cps);
}

std::string JinjaTitle(absl::string_view s) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  bool word_start = true;
  for (uint32_t& cp : cps) {
    bool separator = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || IsPySpace(cp);
    if (separator) {
      word_start = true;
      continue;
    }
    if (!(cp & 0x80000000u)) cp = word_start ? ToUpperCp(cp) : ToLowerCp(cp);
    word_start = false;
  }
  return EncodeUtf8(cps);
}

std::string PyStrip(absl::string_view s, const std::string* chars, int which) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<uint32_t> set;
  if (chars != nullptr) set = DecodeUtf8(*chars);
  auto strip = [&](uint32_t cp) {
    if (chars == nullptr) return IsPySpace(cp);
    for (uint32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  size_t b = 0, e = cps.size();
  if (which & 1) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (which & 2) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> PySplit(absl::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t p = s.find(*sep, start);
      if (p == absl::string_view::npos) break;
      out.emplace_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::vector<uint32_t> cps = DecodeUtf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t e = cps.size();
      while (e > i && IsPySpace(cps[e - 1])) --e;
      out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + e)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::vector<std::string> PyRSplit(absl::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;  // from the right, reversed at the end
  if (sep != nullptr) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t p = s.rfind(*sep, end - sep->size());
      if (p == absl::string_view::npos) break;
      out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::vector<uint32_t> cps = DecodeUtf8(s);
    size_t j = cps.size();
    while (j > 0) {
      while (j > 0 && IsPySpace(cps[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        // The rest, its leading whitespace kept (as Python does).
        out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin(), cps.begin() + j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !IsPySpace(cps[i - 1])) --i;
      out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
      j = i;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<size_t> off = CodePointOffsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(replacement.data(), replacement.size());
        ++done;
      }
      out.append(s.data() + off[i], off[i + 1] - off[i]);
    }
    if (count < 0 || done < count) out.append(replacement.data(), replacement.size());
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(old, start);
    if (p == absl::string_view::npos) break;
    out.append(s.data() + start, p - start);
    out.append(replacement.data(), replacement.size());
    start = p + old.size();
    ++done;
  }
  out.append(s.data() + start, s.size() - start);
  return out;
}

std::string PyStrftime(const std::string& format, const std::tm& time, int microseconds) {
  std::string c_format;  // %z, %Z and %f done here, as Python does first
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      c_format += format[i];
      continue;
    }
    const char d = format[++i];
    if (d == 'z' || d == 'Z') continue;
    if (d == 'f') {
      char micro[8];
      std::snprintf(micro, sizeof(micro), "%06d", microseconds);
      c_format += micro;
      continue;
    }
    c_format += '%';
    c_format += d;
  }
  if (c_format.empty()) return "";
  std::string buffer(256, '\0');
  for (int attempt = 0; attempt < 6; ++attempt) {
    const size_t n = std::strftime(buffer.data(), buffer.size(), c_format.c_str(), &time);
    if (n > 0) return buffer.substr(0, n);
    buffer.resize(buffer.size() * 4);
  }
  return "";
}

std::vector<std::string> PySplitLines(absl::string_view s) {
  std::vector<std::string> out;
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<uint32_t> line;
  for (size_t i = 0; i < cps.size(); ++i) {
    uint32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      line.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    out.push_back(EncodeUtf8(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(EncodeUtf8(line));
  return out;
}

std::string AsciiEscape(absl::string_view s) {
  std::string out;
  for (uint32_t cp : DecodeUtf8(s)) {
    if (cp & 0x80000000u) cp = 0xFFFD;
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x10000) {
      out += absl::StrFormat("\\u%04x", cp);
    } else {
      uint32_t v = cp - 0x10000;
      out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
  }
  return out;
}

}  // namespace jinja_internal
}  // namespace kvcast
