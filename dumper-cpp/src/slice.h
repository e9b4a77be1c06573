// Slice: a non-owning view of bytes (pointer + length). Binary-safe; never copies.
#pragma once
#include <cstddef>
#include <cstring>
#include <string>

namespace cachewarm {

class Slice {
 public:
  Slice() = default;
  Slice(const char* d, size_t n) : data_(d), size_(n) {}
  Slice(const std::string& s) : data_(s.data()), size_(s.size()) {}  // NOLINT: implicit by design
  Slice(const char* s) : data_(s), size_(std::strlen(s)) {}          // NOLINT

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  char operator[](size_t i) const { return data_[i]; }
  void remove_prefix(size_t n) { data_ += n; size_ -= n; }
  std::string ToString() const { return std::string(data_, size_); }
  bool starts_with(const Slice& p) const {
    return size_ >= p.size_ && std::memcmp(data_, p.data_, p.size_) == 0;
  }
  bool operator==(const Slice& o) const {
    return size_ == o.size_ && (size_ == 0 || std::memcmp(data_, o.data_, size_) == 0);
  }
  bool operator!=(const Slice& o) const { return !(*this == o); }

 private:
  const char* data_ = "";
  size_t size_ = 0;
};

}  // namespace cachewarm
