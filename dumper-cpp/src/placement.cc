#include "placement.h"

#include "../hashkit/placement.h"

namespace cachewarm {

void Placement::Free::operator()(cw_placement* p) const { cw_placement_free(p); }

Placement::Placement() = default;
Placement::~Placement() = default;

Status Placement::Parse(const std::string& description) {
  char err[256] = "";
  cw_placement* p = cw_placement_parse(description.data(), description.size(), err, sizeof err);
  if (!p) return Status::InvalidArgument(std::string("--placement-description: ") + err);
  p_.reset(p);
  return Status::OK();
}

size_t Placement::Index(const Slice& key) const {
  // -1 only when memory runs out: route to the first node rather than crash (never seen).
  const long i = cw_place(p_.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size());
  return i < 0 ? 0 : size_t(i);
}

size_t Placement::nodes() const { return p_ ? cw_placement_nodes(p_.get()) : 0; }
size_t Placement::max_dest() const { return p_ ? cw_placement_max_dest(p_.get()) : 0; }

}  // namespace cachewarm
