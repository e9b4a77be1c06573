#include <dirent.h>
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "env.h"

namespace cachewarm {

std::string ErrnoMessage(const std::string& what, int err) { return what + ": " + std::strerror(err); }

Status WritableFile::Append(const Slice& data) {
  struct iovec iov;
  iov.iov_base = const_cast<char*>(data.data());
  iov.iov_len = data.size();
  return Appendv(&iov, 1);
}

Status WritevAll(const WritevFn& fn, int fd, const struct iovec* iov_in, int iovcnt, const std::string& what) {
  // Work on a local copy so partially written iovecs can be advanced. IOV_MAX bounds each call.
  constexpr int kMaxIov = 1024;
  struct iovec local[kMaxIov];
  int idx = 0;
  while (idx < iovcnt) {
    int n = 0;
    while (n < kMaxIov && idx + n < iovcnt) {
      local[n] = iov_in[idx + n];
      n++;
    }
    idx += n;
    struct iovec* cur = local;
    int left = n;
    while (left > 0 && cur->iov_len == 0) { cur++; left--; }
    while (left > 0) {
      ssize_t w = fn(fd, cur, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::IOError(ErrnoMessage("write " + what, errno));
      }
      if (w == 0) return Status::IOError("write " + what + ": wrote 0 bytes");
      size_t done = size_t(w);
      while (left > 0 && done >= cur->iov_len) {
        done -= cur->iov_len;
        cur++;
        left--;
      }
      if (left > 0 && done > 0) {
        cur->iov_base = static_cast<char*>(cur->iov_base) + done;
        cur->iov_len -= done;
      }
      while (left > 0 && cur->iov_len == 0) { cur++; left--; }
    }
  }
  return Status::OK();
}

namespace {

// Closes a descriptor on every return path.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, const WritevFn* fn) : path_(std::move(path)), fd_(fd), fn_(fn) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Appendv(const struct iovec* iov, int iovcnt) override {
    static const WritevFn kReal = [](int fd, const struct iovec* v, int c) { return ::writev(fd, v, c); };
    CW_RETURN_IF_ERROR(WritevAll(*fn_ ? *fn_ : kReal, fd_, iov, iovcnt, path_));
    for (int i = 0; i < iovcnt; i++) size_ += iov[i].iov_len;
    // Start writeback of every full 8 MiB behind us, so the disk works while we keep fetching and
    // the final fsync has little left to do (otherwise the page cache holds it all until fsync).
    if (size_ - kicked_ >= kWritebackStep) {
      const uint64_t upto = size_ - size_ % kWritebackStep;
      ::sync_file_range(fd_, off_t(kicked_), off_t(upto - kicked_), SYNC_FILE_RANGE_WRITE);
      kicked_ = upto;
    }
    return Status::OK();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Status::IOError(ErrnoMessage("fsync " + path_, errno));
    return Status::OK();
  }
  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) return Status::IOError(ErrnoMessage("close " + path_, errno));
    return Status::OK();
  }

 private:
  static constexpr uint64_t kWritebackStep = 8ULL << 20;
  std::string path_;
  int fd_;
  const WritevFn* fn_;
  uint64_t size_ = 0, kicked_ = 0;
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

Status PosixEnv::NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* out) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(ErrnoMessage("create " + path, errno));
  out->reset(new PosixWritableFile(path, fd, &writev_fn_));
  return Status::OK();
}

Status PosixEnv::NewAppendableFile(const std::string& path, std::unique_ptr<WritableFile>* out) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(ErrnoMessage("open " + path, errno));
  out->reset(new PosixWritableFile(path, fd, &writev_fn_));
  return Status::OK();
}

Status PosixEnv::ReadFileToString(const std::string& path, std::string* out) {
  out->clear();
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return Status::NotFound(path);
    return Status::IOError(ErrnoMessage("open " + path, errno));
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IOError(ErrnoMessage("read " + path, errno));
    if (r == 0) break;
    out->append(buf, size_t(r));
  }
  return Status::OK();
}

Status PosixEnv::ReadAt(const std::string& path, uint64_t offset, size_t n, std::string* out) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::IOError(ErrnoMessage("open " + path, errno));
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd.get(), &(*out)[got], n - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IOError(ErrnoMessage("read " + path, errno));
    if (r == 0) break;
    got += size_t(r);
  }
  if (got != n) return Status::Corruption(path + ": file shorter than expected");
  return Status::OK();
}

Status PosixEnv::GetFileSize(const std::string& path, uint64_t* size) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOError(ErrnoMessage("stat " + path, errno));
  *size = uint64_t(st.st_size);
  return Status::OK();
}

Status PosixEnv::GetChildren(const std::string& dir, std::vector<std::string>* names) {
  names->clear();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::IOError(ErrnoMessage("opendir " + dir, errno));
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names->push_back(n);
  }
  ::closedir(d);
  return Status::OK();
}

bool PosixEnv::FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Status PosixEnv::CreateDirIfMissing(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::IOError(ErrnoMessage("mkdir " + dir, errno));
  return Status::OK();
}

Status PosixEnv::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return Status::IOError(ErrnoMessage("unlink " + path, errno));
  return Status::OK();
}

Status PosixEnv::RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return Status::IOError(ErrnoMessage("rename " + from + " -> " + to, errno));
  return Status::OK();
}

Status PosixEnv::SyncDir(const std::string& dir) {
  ScopedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Status::IOError(ErrnoMessage("open dir " + dir, errno));
  if (::fsync(fd.get()) != 0) return Status::IOError(ErrnoMessage("fsync dir " + dir, errno));
  return Status::OK();
}

Status PublishFile(Env* env, const std::string& dir, const std::string& tmp_name,
                   const std::string& final_name) {
  CW_RETURN_IF_ERROR(env->RenameFile(dir + "/" + tmp_name, dir + "/" + final_name));
  return env->SyncDir(dir);
}

Status WriteFileAtomically(Env* env, const std::string& dir, const std::string& tmp_name,
                           const std::string& final_name, const Slice& contents) {
  std::unique_ptr<WritableFile> f;
  const std::string tmp = dir + "/" + tmp_name;
  Status s = env->NewWritableFile(tmp, &f);
  if (s.ok()) s = f->Append(contents);
  if (s.ok()) s = f->Sync();
  if (s.ok()) s = f->Close();
  if (!s.ok()) {
    f.reset();
    env->RemoveFile(tmp);
    return s;
  }
  s = PublishFile(env, dir, tmp_name, final_name);
  if (!s.ok()) env->RemoveFile(tmp);
  return s;
}

}  // namespace cachewarm
