#include "json.h"

#include <cstdio>
#include <cstdlib>

namespace cachewarm {

std::string JsonQuote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += char(c);
        }
    }
  }
  return o + "\"";
}

std::string JsonDouble(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

static size_t FindValue(const std::string& json, const std::string& name) {
  const std::string pat = "\"" + name + "\":";
  size_t p = json.find(pat);
  if (p == std::string::npos) return p;
  p += pat.size();
  while (p < json.size() && json[p] == ' ') p++;
  return p;
}

bool JsonGetInt(const std::string& json, const std::string& name, int64_t* out) {
  size_t p = FindValue(json, name);
  if (p == std::string::npos || p >= json.size()) return false;
  char* end = nullptr;
  long long v = std::strtoll(json.c_str() + p, &end, 10);
  if (end == json.c_str() + p) return false;
  *out = v;
  return true;
}

bool JsonGetString(const std::string& json, const std::string& name, std::string* out) {
  size_t p = FindValue(json, name);
  if (p == std::string::npos || p >= json.size() || json[p] != '"') return false;
  size_t e = json.find('"', p + 1);
  if (e == std::string::npos) return false;
  *out = json.substr(p + 1, e - p - 1);
  return true;
}

}  // namespace cachewarm
