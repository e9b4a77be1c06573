// Helpers shared by the GoogleTest files: temporary directories, writes to a test's sockets.
#pragma once
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace cachewarm {

// write(2) for a test's fake server or client socket. MSG_NOSIGNAL, as in the product: a peer that has
// gone away must be an EPIPE return, not a SIGPIPE that kills the whole test binary. Never rely on the
// disposition ctest inherited: CI's ignores SIGPIPE, an ordinary terminal's does not.
inline ssize_t SocketWrite(int fd, const void* data, size_t n) { return ::send(fd, data, n, MSG_NOSIGNAL); }

// A fresh directory under $TMPDIR, removed (recursively) at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/cwtest-XXXXXX";
    path_ = mkdtemp(&tmpl[0]) ? tmpl : std::string();
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::string cmd = "rm -rf '" + path_ + "'";
      if (system(cmd.c_str()) != 0) {
      }
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cachewarm
