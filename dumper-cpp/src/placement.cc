#include "placement.h"

#include <set>

#include "../hashkit/placement.h"
#include "codec.h"

namespace cachewarm {

void Placement::Free::operator()(cw_placement* p) const { cw_placement_free(p); }

Placement::Placement() = default;
Placement::~Placement() = default;

Status Placement::Parse(const std::string& description) { return Parse(description, "--placement-description"); }

Status Placement::Parse(const std::string& description, const char* what) {
  char err[256] = "";
  cw_placement* p = cw_placement_parse(description.data(), description.size(), err, sizeof err);
  if (!p) return Status::InvalidArgument(std::string(what) + ": " + err);
  p_.reset(p);
  return Status::OK();
}

Status Placement::ParseEvcache(const std::vector<std::string>& node_keys, int reps, const std::string& delimiter) {
  if (std::set<std::string>(node_keys.begin(), node_keys.end()).size() != node_keys.size()) {
    std::string all;
    for (const std::string& k : node_keys) all += (all.empty() ? "" : ", ") + k;
    return Status::InvalidArgument("node keys collide (" + all +
                                   "); several nodes on one host need a node-key format with the port, "
                                   "e.g. '{host}:{port}'");
  }
  std::string d = "dist ketama\nhash md5\npoints md5x4\ncollision last\n";
  if (!delimiter.empty()) d += "delimiter " + HexEncode(delimiter) + "\n";
  for (size_t i = 0; i < node_keys.size(); i++)
    d += "node " + HexEncode(node_keys[i]) + " " + std::to_string(reps) + " " + std::to_string(i) + "\n";
  return Parse(d, "EVCache's ketama ring");
}

size_t Placement::Index(const Slice& key) const {
  // -1 only when memory runs out: route to the first node rather than crash (never seen).
  const long i = cw_place(p_.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size());
  return i < 0 ? 0 : size_t(i);
}

size_t Placement::nodes() const { return p_ ? cw_placement_nodes(p_.get()) : 0; }
size_t Placement::max_dest() const { return p_ ? cw_placement_max_dest(p_.get()) : 0; }

}  // namespace cachewarm
