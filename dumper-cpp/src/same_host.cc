#include "same_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cachewarm {

namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// The address bytes of a socket address (IPv4 or IPv6), and whether it is loopback.
bool AddressOf(const sockaddr_storage& a, std::string* bytes, bool* loopback) {
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    bytes->assign(reinterpret_cast<const char*>(&v4->sin_addr), sizeof v4->sin_addr);
    *loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    return true;
  }
  if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    bytes->assign(reinterpret_cast<const char*>(&v6->sin6_addr), sizeof v6->sin6_addr);
    *loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) ||
                (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127);
    return true;
  }
  return false;
}

// Seconds the process has run, from /proc/<pid>/stat (its start, in clock ticks after boot) and
// /proc/uptime; -1 when not readable.
double ProcessAge(long pid) {
  std::string stat, up;
  if (!ReadFile("/proc/" + std::to_string(pid) + "/stat", &stat) || !ReadFile("/proc/uptime", &up)) return -1;
  // The command name may hold spaces and parentheses: the fields follow the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  // Fields 3..22 (state .. starttime): starttime is the 20th after the name.
  for (int i = 0; i < 20; i++)
    if (!(in >> field)) return -1;
  const double ticks = std::strtod(field.c_str(), nullptr);
  const long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) return -1;
  return std::strtod(up.c_str(), nullptr) - ticks / double(hz);
}

std::string LinkOf(const std::string& path) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

}  // namespace

bool SameHostServer(const Conn& c, const ServerStats& s, std::string* why) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  std::string lb, pb;
  bool l_loop = false, p_loop = false;
  if (c.fd() < 0 || ::getsockname(c.fd(), reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      ::getpeername(c.fd(), reinterpret_cast<sockaddr*>(&peer), &pl) != 0 || !AddressOf(local, &lb, &l_loop) ||
      !AddressOf(peer, &pb, &p_loop)) {
    *why = "its address is not known";
    return false;
  }
  if (!p_loop && lb != pb) {
    *why = "it is reached at another host's address";
    return false;
  }
  const std::string proc = "/proc/" + std::to_string(s.pid);
  std::string comm;
  if (s.pid <= 0 || !ReadFile(proc + "/comm", &comm) || comm.rfind("memcached", 0) != 0) {
    *why = "its pid " + std::to_string(s.pid) + " is not a memcached of this host (another PID namespace?)";
    return false;
  }
  // memcached's `uptime` is its clock's count since it started (plus ~2 s): unchanged by a shifted
  // clock (faketime), unlike its start time.
  const double age = ProcessAge(s.pid);
  if (age < 0 || std::fabs(age - double(s.uptime)) > 3.0) {
    *why = "process " + std::to_string(s.pid) + " of this host has not run as long as the server says";
    return false;
  }
  const std::string mine = LinkOf("/proc/self/ns/time"), theirs = LinkOf(proc + "/ns/time");
  if (mine != theirs) {
    *why = "it runs in another time namespace";
    return false;
  }
  return true;
}

}  // namespace cachewarm
