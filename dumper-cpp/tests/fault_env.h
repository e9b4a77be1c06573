// A fault-injecting Env for tests: short writes, EIO after N bytes, failing fsync / rename / dir sync.
// Data writes still go through the real POSIX code path (WritevAll) so its retry loop is exercised.
#pragma once
#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "env.h"

namespace cachewarm {

struct Faults {
  size_t max_write = 0;             // >0: each writev writes at most this many bytes (short writes)
  long long eio_after_bytes = -1;   // >=0: writes fail with EIO once this many bytes were written
  bool fail_sync = false;
  bool fail_rename = false;
  bool fail_sync_dir = false;
  std::atomic<long long> written{0};
  std::atomic<int> write_calls{0};
};

class FaultEnv : public PosixEnv {
 public:
  explicit FaultEnv(Faults* f)
      : PosixEnv([f](int fd, const struct iovec* iov, int n) -> ssize_t {
          f->write_calls++;
          size_t want = 0;
          for (int i = 0; i < n; i++) want += iov[i].iov_len;
          if (f->eio_after_bytes >= 0 && f->written.load() >= f->eio_after_bytes) {
            errno = EIO;
            return -1;
          }
          if (f->eio_after_bytes >= 0 && f->written.load() + (long long)want > f->eio_after_bytes)
            want = size_t(f->eio_after_bytes - f->written.load());
          if (f->max_write && want > f->max_write) want = f->max_write;
          if (want == 0) {
            errno = EIO;
            return -1;
          }
          // Write exactly `want` bytes from the iovecs (a genuine short write).
          size_t left = want;
          for (int i = 0; i < n && left; i++) {
            size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
            const char* p = static_cast<const char*>(iov[i].iov_base);
            size_t done = 0;
            while (done < k) {
              ssize_t w = ::write(fd, p + done, k - done);
              if (w < 0) return -1;
              done += size_t(w);
            }
            left -= k;
          }
          f->written += (long long)want;
          return ssize_t(want);
        }),
        f_(f) {}

  Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    std::unique_ptr<WritableFile> inner;
    CW_RETURN_IF_ERROR(PosixEnv::NewWritableFile(path, &inner));
    out->reset(new File(std::move(inner), f_));
    return Status::OK();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (f_->fail_rename) return Status::IOError("injected: rename " + from);
    return PosixEnv::RenameFile(from, to);
  }
  Status SyncDir(const std::string& dir) override {
    if (f_->fail_sync_dir) return Status::IOError("injected: fsync dir " + dir);
    return PosixEnv::SyncDir(dir);
  }

 private:
  class File : public WritableFile {
   public:
    File(std::unique_ptr<WritableFile> in, Faults* f) : in_(std::move(in)), f_(f) {}
    Status Appendv(const struct iovec* iov, int n) override { return in_->Appendv(iov, n); }
    Status Sync() override { return f_->fail_sync ? Status::IOError("injected: fsync") : in_->Sync(); }
    Status Close() override { return in_->Close(); }

   private:
    std::unique_ptr<WritableFile> in_;
    Faults* f_;
  };
  Faults* f_;
};

}  // namespace cachewarm
