// The stream mode's destinations: their addresses (HOST:PORT lists, host names resolved once, as the
// EVCache client does), what each can hold, and the preflight that reads it before any write —
// the same rules as the Python populator (agent/cachewarm/datapath/populate/destinations.py,
// encode.ItemLimit; docs/populator.md "Before writing: the preflight"):
//   version            refuse releases before 1.6 (every write is a meta command)
//   item_size_max, cas which items fit: 48 + key + 1 + value + 2 (+4 if flags != 0) (+8 with CAS)
//                      <= item_size_max (memcached's item_size_ok); an item that does not fit is
//                      never sent (a store memcached cannot allocate unlinks the key's live value)
//   evictions on/off   a destination that cannot evict is refused unless accepted
//   evictions, pid     evictions while we write; a restart (pid / start time) loses our items
// tests/vectors/item_size.txt holds the size rule's boundary cases for both languages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "net.h"
#include "status.h"

namespace cachewarm {

struct Endpoint {
  std::string host;  // as given
  int port = 0;
  std::string ip;    // what `host` resolved to (the node key's {ip}; where we connect)
  std::string address() const;  // HOST:PORT as given (nodes.py's Node.address: no brackets)
  const std::string& connect_host() const { return ip.empty() ? host : ip; }
};

// "HOST:PORT[,HOST:PORT...]" (IPv6 in brackets) in order; InvalidArgument names the bad part.
Status ParseEndpoints(const std::string& spec, std::vector<Endpoint>* out);
// Sets e->ip: the host itself if it is an IP address, else its first IPv4 address, else its first
// IPv6 one (Java's, and so the EVCache client's, preference).
Status ResolveEndpoint(Endpoint* e);

// EVCache's node key: the host name as given, "/", the address it resolves to, ":11211" whatever
// the port. {host}, {ip}, {port} are replaced; "{{" and "}}" stand for braces (Python's str.format).
constexpr char kEvcacheNodeKey[] = "{host}/{ip}:11211";
// The node key `format` gives a node; InvalidArgument for any other field or a lone brace.
Status FormatNodeKey(const std::string& format, const std::string& host, const std::string& ip, int port,
                     std::string* out);

// memcached's item size rule (items.c item_size_ok; the same in 1.6.18 .. 1.6.45).
constexpr uint64_t kItemHeader = 48, kItemKeyNul = 1, kItemValueCrlf = 2, kItemFlagsSuffix = 4, kItemCas = 8;
struct ItemLimit {
  uint64_t item_size_max = 0;
  bool cas = true;
  // The most key + value (+ kItemFlagsSuffix when flags != 0) bytes one item may have.
  int64_t budget() const {
    return int64_t(item_size_max) - int64_t(kItemHeader + kItemKeyNul + kItemValueCrlf + (cas ? kItemCas : 0));
  }
  bool Fits(uint64_t key_len, uint64_t value_len, uint32_t flags) const {
    return int64_t(key_len + value_len + (flags ? kItemFlagsSuffix : 0)) <= budget();
  }
};

// One look at a destination: `version`, `stats`, `stats settings`.
struct DestinationInfo {
  std::string version;
  int64_t pid = 0, started = 0;  // one server lifetime
  ItemLimit limit;
  bool evictions_enabled = true;  // `evictions on` (the default); off with -M
  uint64_t evictions = 0;         // the counter
  // Its clock against this host's, whole seconds rounded down: its `stats time` minus our wall clock
  // when the answer arrived. memcached converts an absolute expiry with its own idea of the time
  // (it never re-reads the wall clock), so a T is moved onto it (DestExpiry); rounded down because
  // `stats time` lags the server's real time: never later, at most ~1 s earlier.
  int64_t clock_offset = 0;
};
Status ReadDestinationInfo(Conn* c, DestinationInfo* out);
// The T to send a destination whose clock_offset is `offset` for an item whose T on this host's
// clock is `expiry` (0 = never): moved onto its clock, clamped to 2^31-1 (memcached parses T as a
// signed 32-bit number; clamping only shortens); -1 when it is no absolute time there (not sent).
// The Python twin is format_v2.dest_expiry.
int64_t DestExpiry(int64_t expiry, int64_t offset);
// (1, 6, 45) from "1.6.45" (or "1.6.45-rc1"); false when it is no release number.
bool ParseVersion(const std::string& text, int v[3]);
// True for a release before 1.6.0 (a version we cannot read is not refused, like the Python side).
bool TooOld(const std::string& version);

}  // namespace cachewarm
