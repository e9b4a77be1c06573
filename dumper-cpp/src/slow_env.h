// A deliberately slow output for tests and benchmarks (--debug-write-delay-us, --debug-sync-delay-us):
// an Env that sleeps before every write to a file and before every fsync (file or directory), then
// does the real thing through another Env. A slow disk in a box: it shows that the crawl never waits
// on the output (crawl_stream.h) and what a slow volume does to a dump.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "env.h"

namespace cachewarm {

class SlowEnv : public Env {
 public:
  // `base` must outlive this Env.
  SlowEnv(Env* base, uint64_t write_delay_us, uint64_t sync_delay_us)
      : base_(base), write_us_(write_delay_us), sync_us_(sync_delay_us) {}

  Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status NewAppendableFile(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status ReadFileToString(const std::string& path, std::string* out) override {
    return base_->ReadFileToString(path, out);
  }
  Status ReadAt(const std::string& path, uint64_t offset, size_t n, std::string* out) override {
    return base_->ReadAt(path, offset, n, out);
  }
  Status GetFileSize(const std::string& path, uint64_t* size) override { return base_->GetFileSize(path, size); }
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    return base_->GetChildren(dir, names);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Status CreateDirIfMissing(const std::string& dir) override { return base_->CreateDirIfMissing(dir); }
  Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override { return base_->RenameFile(from, to); }
  Status SyncDir(const std::string& dir) override;

 private:
  Status Wrap(Status s, std::unique_ptr<WritableFile>* out);
  Env* base_;
  uint64_t write_us_, sync_us_;
};

}  // namespace cachewarm
