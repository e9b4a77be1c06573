#include "destination.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

namespace cachewarm {

std::string Endpoint::address() const { return host + ":" + std::to_string(port); }

namespace {

bool IsIpLiteral(const std::string& h) {
  unsigned char buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

// A DNS name (RFC 1123 labels) or an IP address, as nodes.py's valid_host.
bool ValidHost(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  if (IsIpLiteral(h)) return true;
  size_t start = 0;
  const size_t end = h.back() == '.' ? h.size() - 1 : h.size();
  if (end == 0) return false;
  while (start <= end) {
    size_t dot = h.find('.', start);
    if (dot == std::string::npos || dot > end) dot = end;
    const size_t n = dot - start;
    if (n == 0 || n > 63) return false;
    for (size_t i = start; i < dot; i++) {
      const unsigned char c = uint8_t(h[i]);
      const bool edge = i == start || i == dot - 1;
      if (!(std::isalnum(c) || (!edge && c == '-'))) return false;
    }
    start = dot + 1;
    if (dot == end) break;
  }
  return true;
}

}  // namespace

Status ParseEndpoints(const std::string& spec, std::vector<Endpoint>* out) {
  out->clear();
  std::set<std::pair<std::string, int>> seen;
  size_t pos = 0;
  for (;;) {
    size_t comma = spec.find(',', pos);
    std::string part = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!part.empty() && part.front() == ' ') part.erase(part.begin());
    while (!part.empty() && part.back() == ' ') part.pop_back();
    const size_t colon = part.rfind(':');
    const Status bad = Status::InvalidArgument("bad destination '" + part + "': expected HOST:PORT");
    if (colon == std::string::npos || colon == 0 || colon + 1 == part.size()) return bad;
    std::string host = part.substr(0, colon);
    const std::string port_s = part.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    for (char c : port_s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return bad;
    const long port = port_s.size() <= 5 ? std::strtol(port_s.c_str(), nullptr, 10) : 0;
    if (host.empty() || port <= 0 || port > 65535) return bad;
    if (!ValidHost(host))
      return Status::InvalidArgument("bad destination '" + part + "': '" + host + "' is not a host name or IP address");
    if (!seen.insert({host, int(port)}).second)
      return Status::InvalidArgument("destination list '" + spec + "' names a node twice");
    Endpoint e;
    e.host = host;
    e.port = int(port);
    out->push_back(e);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return Status::OK();
}

Status ResolveEndpoint(Endpoint* e) {
  if (IsIpLiteral(e->host)) {
    e->ip = e->host;
    return Status::OK();
  }
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(e->host.c_str(), std::to_string(e->port).c_str(), &hints, &res);
  if (rc != 0) return Status::InvalidArgument("cannot resolve '" + e->host + "': " + gai_strerror(rc));
  std::string found;
  for (int want : {AF_INET, AF_INET6}) {
    for (struct addrinfo* a = res; a && found.empty(); a = a->ai_next) {
      if (a->ai_family != want) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      const void* addr = want == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                         : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if (inet_ntop(want, addr, buf, sizeof buf)) found = buf;
    }
    if (!found.empty()) break;
  }
  ::freeaddrinfo(res);
  if (found.empty()) return Status::InvalidArgument("'" + e->host + "' resolves to no IP address");
  e->ip = found;
  return Status::OK();
}

namespace {

Status Stats(Conn* c, const char* cmd, std::map<std::string, std::string>* out) {
  std::string reply;
  CW_RETURN_IF_ERROR(c->Command(cmd, "END\r\n", &reply, 10000));
  size_t pos = 0;
  while (pos < reply.size()) {
    const size_t e = reply.find("\r\n", pos);
    if (e == std::string::npos) break;
    const std::string line = reply.substr(pos, e - pos);
    pos = e + 2;
    if (line.rfind("STAT ", 0) != 0) continue;
    const size_t sp = line.find(' ', 5);
    if (sp != std::string::npos) (*out)[line.substr(5, sp - 5)] = line.substr(sp + 1);
  }
  return Status::OK();
}

}  // namespace

bool ParseVersion(const std::string& text, int v[3]) {
  const char* p = text.c_str();
  for (int i = 0; i < 3; i++) {
    if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
    char* end = nullptr;
    v[i] = int(std::strtol(p, &end, 10));
    p = end;
    if (i < 2) {
      if (*p != '.') return false;
      p++;
    }
  }
  return true;
}

bool TooOld(const std::string& version) {
  int v[3];
  return ParseVersion(version, v) && (v[0] < 1 || (v[0] == 1 && v[1] < 6));
}

Status ReadDestinationInfo(Conn* c, DestinationInfo* out) {
  std::map<std::string, std::string> stats, settings;
  CW_RETURN_IF_ERROR(Stats(c, "stats\r\n", &stats));
  const double here =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CW_RETURN_IF_ERROR(Stats(c, "stats settings\r\n", &settings));
  std::string v;
  CW_RETURN_IF_ERROR(c->Command("version\r\n", "\r\n", &v, 10000));
  if (v.rfind("VERSION ", 0) != 0) return Status::Protocol(c->peer() + " answered `version` with: " + v.substr(0, 100));
  *out = DestinationInfo();
  out->version = v.substr(8, v.size() - 10);
  if (!stats.count("pid") || !settings.count("item_size_max"))
    return Status::Protocol(c->peer() + ": `stats` lacks pid or `stats settings` lacks item_size_max");
  out->pid = std::atoll(stats["pid"].c_str());
  out->started = std::atoll(stats["time"].c_str()) - std::atoll(stats["uptime"].c_str());
  out->evictions = std::strtoull(stats["evictions"].c_str(), nullptr, 10);
  out->clock_offset = int64_t(std::floor(double(std::atoll(stats["time"].c_str())) - here));
  out->limit.item_size_max = std::strtoull(settings["item_size_max"].c_str(), nullptr, 10);
  out->limit.cas = !settings.count("cas_enabled") || settings["cas_enabled"] == "yes";
  out->evictions_enabled = !settings.count("evictions") || settings["evictions"] == "on";
  return Status::OK();
}

int64_t DestExpiry(int64_t expiry, int64_t offset) {
  if (expiry == 0) return 0;
  const int64_t t = std::min<int64_t>(expiry + offset, 2147483647);
  return t > 30 * 24 * 3600 ? t : -1;
}

Status FormatNodeKey(const std::string& format, const std::string& host, const std::string& ip, int port,
                     std::string* out) {
  const Status bad = Status::InvalidArgument("bad node-key format '" + format + "': use {host}, {ip} and {port}");
  out->clear();
  for (size_t i = 0; i < format.size();) {
    const char c = format[i];
    if (c == '{' && i + 1 < format.size() && format[i + 1] == '{') {
      *out += '{';
      i += 2;
    } else if (c == '}' && i + 1 < format.size() && format[i + 1] == '}') {
      *out += '}';
      i += 2;
    } else if (c == '{') {
      const size_t e = format.find('}', i);
      if (e == std::string::npos) return bad;
      const std::string field = format.substr(i + 1, e - i - 1);
      if (field == "host") {
        *out += host;
      } else if (field == "ip") {
        *out += ip.empty() ? host : ip;
      } else if (field == "port") {
        *out += std::to_string(port);
      } else {
        return bad;
      }
      i = e + 1;
    } else if (c == '}') {
      return bad;
    } else {
      *out += c;
      i++;
    }
  }
  return Status::OK();
}

}  // namespace cachewarm
