// Another client's key placement for the stream mode (--placement-description): hashkit
// (dumper-cpp/hashkit/, C, shared with the populator's Python extension) parses the description that
// cachewarm.datapath.placement writes and places each key, so both data paths route alike.
#pragma once
#include <memory>
#include <string>

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
  // The destination index of the key's node.
  size_t Index(const Slice& key) const;
  // The number of nodes the description names, and the largest destination index it routes to.
  size_t nodes() const;
  size_t max_dest() const;

 private:
  struct Free {
    void operator()(cw_placement* p) const;
  };
  std::unique_ptr<cw_placement, Free> p_;
};

}  // namespace cachewarm
