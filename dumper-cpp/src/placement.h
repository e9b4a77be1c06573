// Where the stream mode puts each key over several destinations: hashkit (dumper-cpp/hashkit/, C,
// shared with the populator's Python extension) parses a placement description and places each key,
// so both data paths route alike. The description is EVCache's ketama ring (the default), or another
// client's that cachewarm.datapath.placement wrote (--placement-description).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "slice.h"
#include "status.h"

struct cw_placement;

namespace cachewarm {

class Placement {
 public:
  Placement();
  ~Placement();
  // InvalidArgument naming the problem for a bad description.
  Status Parse(const std::string& description);
  // EVCache's ring (spymemcached's KetamaNodeLocator): node_keys in the destinations' order, each
  // with reps points (a positive multiple of 4), md5 x 4 points a digest, a later node winning a
  // shared point; with a delimiter only the key's part before it is hashed (hash.on.partial.key).
  // The same description cachewarm.datapath.routing writes. InvalidArgument when node keys collide.
  Status ParseEvcache(const std::vector<std::string>& node_keys, int reps, const std::string& delimiter);
  // The destination index of the key's node.
  size_t Index(const Slice& key) const;
  // The number of nodes the description names, and the largest destination index it routes to.
  size_t nodes() const;
  size_t max_dest() const;

 private:
  Status Parse(const std::string& description, const char* what);
  struct Free {
    void operator()(cw_placement* p) const;
  };
  std::unique_ptr<cw_placement, Free> p_;
};

}  // namespace cachewarm
