// Ketama consistent hashing, bit for bit the ring of spymemcached's KetamaNodeLocator (EVCache's
// client) and of agent/cachewarm/datapath/ketama.py: the stream mode routes each item to the node the
// EVCache client would read it from. tests/vectors/ketama.txt (written by the Python implementation)
// holds the two together.
//
// Ring: for each node (in the given order; a later node wins a point collision, like TreeMap.put)
// and each i in 0 .. reps/4 - 1, d = md5(nodeKey + "-" + i); its four little-endian u32 words are
// four ring points. A key's hash is the first little-endian u32 of md5(key) (of the key's part
// before the first hash delimiter, when one is set: EVCache's hash.on.partial.key); its node owns
// the first point >= the hash, wrapping to the first point.
//
// MD5 comes from OpenSSL's libcrypto (EVP), fetched once; each thread keeps its own digest context.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "slice.h"
#include "status.h"

namespace cachewarm {

// The 16-byte MD5 digest of `data` into out[0..16).
void Md5(const Slice& data, unsigned char out[16]);
// A key's ketama hash: the first little-endian u32 of its MD5.
uint32_t KetamaHash(const Slice& key);

// EVCache's node key: the host name as given, "/", the address it resolves to, ":11211" whatever
// the port. {host}, {ip}, {port} are replaced; "{{" and "}}" stand for braces (Python's str.format).
constexpr char kEvcacheNodeKey[] = "{host}/{ip}:11211";
// The node key `format` gives a node; InvalidArgument for any other field or a lone brace.
Status FormatNodeKey(const std::string& format, const std::string& host, const std::string& ip, int port,
                     std::string* out);

class KetamaRing {
 public:
  // node_keys in the destinations' order; reps a positive multiple of 4; node keys must differ.
  Status Build(const std::vector<std::string>& node_keys, int reps, std::string hash_delimiter = "");
  // The index in node_keys of the key's node.
  size_t Index(const Slice& key) const;
  size_t nodes() const { return nodes_; }

 private:
  std::vector<uint32_t> points_;  // sorted
  std::vector<uint32_t> owners_;  // node index of points_[i]
  std::string delimiter_;
  size_t nodes_ = 0;
};

}  // namespace cachewarm
