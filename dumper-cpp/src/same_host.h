// Whether a memcached runs on this host, sharing its monotonic clock: then the dumper knows the
// ceiling of its clock (server_clock.h), which bounds every later move of that clock.
#pragma once
#include <string>

#include "net.h"

namespace cachewarm {

// True when the server behind `c` (its `stats` in `s`) is a process of this host: the connection's
// two ends have one address (or the peer is loopback), /proc/<pid> is a memcached that has run as long
// as the server says (its `uptime`, within 3 s), and it shares this process's time namespace. Else
// false and `why` says what did not match (a server in another PID or time namespace, on another
// host, or a /proc we may not read: its ceiling is then not used, never guessed).
bool SameHostServer(const Conn& c, const ServerStats& s, std::string* why);

}  // namespace cachewarm
