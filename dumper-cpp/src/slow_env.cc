#include "slow_env.h"

#include <chrono>
#include <thread>

namespace cachewarm {

namespace {

void SleepUs(uint64_t us) {
  if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

class SlowFile : public WritableFile {
 public:
  SlowFile(std::unique_ptr<WritableFile> in, uint64_t write_us, uint64_t sync_us)
      : in_(std::move(in)), write_us_(write_us), sync_us_(sync_us) {}
  Status Appendv(const struct iovec* iov, int iovcnt) override {
    SleepUs(write_us_);
    return in_->Appendv(iov, iovcnt);
  }
  Status Sync() override {
    SleepUs(sync_us_);
    return in_->Sync();
  }
  Status Close() override { return in_->Close(); }

 private:
  std::unique_ptr<WritableFile> in_;
  uint64_t write_us_, sync_us_;
};

}  // namespace

Status SlowEnv::Wrap(Status s, std::unique_ptr<WritableFile>* out) {
  if (!s.ok()) return s;
  out->reset(new SlowFile(std::move(*out), write_us_, sync_us_));
  return Status::OK();
}

Status SlowEnv::NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* out) {
  return Wrap(base_->NewWritableFile(path, out), out);
}

Status SlowEnv::NewAppendableFile(const std::string& path, std::unique_ptr<WritableFile>* out) {
  return Wrap(base_->NewAppendableFile(path, out), out);
}

Status SlowEnv::SyncDir(const std::string& dir) {
  SleepUs(sync_us_);
  return base_->SyncDir(dir);
}

}  // namespace cachewarm
