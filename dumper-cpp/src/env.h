// Env: every file-system operation the dumper performs goes through this interface, so tests can
// inject faults (short writes, EIO, failing fsync/rename) without touching the real disk's behaviour.
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "slice.h"
#include "status.h"

namespace cachewarm {

// An append-only file. Appendv writes every byte of every iovec (short writes are resumed).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const Slice& data);
  virtual Status Appendv(const struct iovec* iov, int iovcnt) = 0;
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX environment (never deleted).
  static Env* Default();

  virtual Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* out) = 0;
  // Opens (creating if missing) a file to append to; what it holds stays.
  virtual Status NewAppendableFile(const std::string& path, std::unique_ptr<WritableFile>* out) = 0;
  virtual Status ReadFileToString(const std::string& path, std::string* out) = 0;
  // Reads exactly n bytes at offset (Corruption if the file is shorter).
  virtual Status ReadAt(const std::string& path, uint64_t offset, size_t n, std::string* out) = 0;
  virtual Status GetFileSize(const std::string& path, uint64_t* size) = 0;
  virtual Status GetChildren(const std::string& dir, std::vector<std::string>* names) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual Status CreateDirIfMissing(const std::string& dir) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // fsync a directory, so a rename inside it is durable.
  virtual Status SyncDir(const std::string& dir) = 0;
};

// The raw writev used by the POSIX env; a fault-injecting env substitutes its own.
using WritevFn = std::function<ssize_t(int fd, const struct iovec* iov, int iovcnt)>;

// Writes all bytes of iov through `fn`, resuming after short writes and EINTR. `what` names the file
// in error messages. Exposed for tests.
Status WritevAll(const WritevFn& fn, int fd, const struct iovec* iov, int iovcnt, const std::string& what);

// A POSIX Env whose data writes go through `writev_fn` (tests) instead of ::writev.
class PosixEnv : public Env {
 public:
  PosixEnv() = default;
  explicit PosixEnv(WritevFn writev_fn) : writev_fn_(std::move(writev_fn)) {}

  Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status NewAppendableFile(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status ReadFileToString(const std::string& path, std::string* out) override;
  Status ReadAt(const std::string& path, uint64_t offset, size_t n, std::string* out) override;
  Status GetFileSize(const std::string& path, uint64_t* size) override;
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override;
  bool FileExists(const std::string& path) override;
  Status CreateDirIfMissing(const std::string& dir) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;

 protected:
  WritevFn writev_fn_;
};

std::string ErrnoMessage(const std::string& what, int err);

// Atomic publish (docs/data-format.md section 1): `tmp_name` (already written and closed by the
// caller, or written here from `contents`) is fsynced, renamed to `final_name`, and `dir` fsynced.
Status WriteFileAtomically(Env* env, const std::string& dir, const std::string& tmp_name,
                           const std::string& final_name, const Slice& contents);
Status PublishFile(Env* env, const std::string& dir, const std::string& tmp_name,
                   const std::string& final_name);

}  // namespace cachewarm
