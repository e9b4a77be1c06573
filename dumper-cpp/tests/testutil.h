// Helpers shared by the GoogleTest files: temporary directories.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace cachewarm {

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
