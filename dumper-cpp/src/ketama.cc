#include "ketama.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>

#include "coding.h"

namespace cachewarm {

namespace {

// One fetched MD5 implementation for the process (an implicit fetch per digest costs ~1 us).
const EVP_MD* Md5Method() {
  static const EVP_MD* md = [] {
    const EVP_MD* m = EVP_MD_fetch(nullptr, "MD5", nullptr);
    if (m == nullptr) std::abort();  // libcrypto without MD5 (a FIPS-only provider): cannot route
    return m;
  }();
  return md;
}

struct DigestCtx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~DigestCtx() { EVP_MD_CTX_free(ctx); }
};

}  // namespace

void Md5(const Slice& data, unsigned char out[16]) {
  thread_local DigestCtx d;
  unsigned int n = 0;
  if (d.ctx == nullptr || EVP_DigestInit_ex2(d.ctx, Md5Method(), nullptr) != 1 ||
      EVP_DigestUpdate(d.ctx, data.data(), data.size()) != 1 || EVP_DigestFinal_ex(d.ctx, out, &n) != 1 || n != 16)
    std::abort();  // out of memory inside libcrypto
}

uint32_t KetamaHash(const Slice& key) {
  unsigned char d[16];
  Md5(key, d);
  return DecodeFixed32(reinterpret_cast<const char*>(d));
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

Status KetamaRing::Build(const std::vector<std::string>& node_keys, int reps, std::string hash_delimiter) {
  if (node_keys.empty()) return Status::InvalidArgument("ketama ring needs at least one node");
  if (reps < 4 || reps % 4) return Status::InvalidArgument("ketama reps " + std::to_string(reps) +
                                                           " must be a positive multiple of 4");
  if (std::set<std::string>(node_keys.begin(), node_keys.end()).size() != node_keys.size()) {
    std::string all;
    for (const std::string& k : node_keys) all += (all.empty() ? "" : ", ") + k;
    return Status::InvalidArgument("node keys collide (" + all +
                                   "); several nodes on one host need a node-key format with the port, "
                                   "e.g. '{host}:{port}'");
  }
  std::map<uint32_t, uint32_t> ring;  // point -> node; a later node overwrites (TreeMap.put)
  unsigned char d[16];
  for (size_t idx = 0; idx < node_keys.size(); idx++) {
    for (int i = 0; i < reps / 4; i++) {
      Md5(node_keys[idx] + "-" + std::to_string(i), d);
      for (int h = 0; h < 4; h++) ring[DecodeFixed32(reinterpret_cast<const char*>(d) + 4 * h)] = uint32_t(idx);
    }
  }
  points_.clear();
  owners_.clear();
  points_.reserve(ring.size());
  owners_.reserve(ring.size());
  for (const auto& [p, o] : ring) {
    points_.push_back(p);
    owners_.push_back(o);
  }
  delimiter_ = std::move(hash_delimiter);
  nodes_ = node_keys.size();
  return Status::OK();
}

size_t KetamaRing::Index(const Slice& key) const {
  Slice k = key;
  if (!delimiter_.empty()) {
    const std::string_view v(key.data(), key.size());
    const size_t cut = v.find(delimiter_);
    if (cut != std::string_view::npos) k = Slice(key.data(), cut);
  }
  const uint32_t h = KetamaHash(k);
  auto it = std::lower_bound(points_.begin(), points_.end(), h);
  const size_t i = it == points_.end() ? 0 : size_t(it - points_.begin());
  return owners_[i];
}

}  // namespace cachewarm
