// Status: the result of an operation that can fail, returned instead of throwing on I/O paths
// (LevelDB style). OK carries no message; errors carry a code and a human-readable message.
#pragma once
#include <string>
#include <utility>

namespace cachewarm {

class Status {
 public:
  enum Code { kOk = 0, kIOError, kInvalidArgument, kCorruption, kNotFound, kProtocol, kServer };

  Status() = default;
  static Status OK() { return Status(); }
  static Status IOError(std::string m) { return Status(kIOError, std::move(m)); }
  static Status InvalidArgument(std::string m) { return Status(kInvalidArgument, std::move(m)); }
  static Status Corruption(std::string m) { return Status(kCorruption, std::move(m)); }
  static Status NotFound(std::string m) { return Status(kNotFound, std::move(m)); }
  // The peer broke the protocol (unexpected bytes, connection closed mid-reply).
  static Status Protocol(std::string m) { return Status(kProtocol, std::move(m)); }
  // The server answered with an error (SERVER_ERROR, CLIENT_ERROR, ERROR) or changed identity.
  static Status Server(std::string m) { return Status(kServer, std::move(m)); }

  bool ok() const { return code_ == kOk; }
  bool IsNotFound() const { return code_ == kNotFound; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

 private:
  Status(Code c, std::string m) : code_(c), msg_(std::move(m)) {}
  Code code_ = kOk;
  std::string msg_;
};

inline std::string Status::ToString() const {
  switch (code_) {
    case kOk: return "OK";
    case kIOError: return "I/O error: " + msg_;
    case kInvalidArgument: return "invalid argument: " + msg_;
    case kCorruption: return "corruption: " + msg_;
    case kNotFound: return "not found: " + msg_;
    case kProtocol: return "protocol error: " + msg_;
    case kServer: return "server error: " + msg_;
  }
  return msg_;
}

}  // namespace cachewarm

#define CW_RETURN_IF_ERROR(expr)        \
  do {                                  \
    ::cachewarm::Status _s = (expr);    \
    if (!_s.ok()) return _s;            \
  } while (0)
