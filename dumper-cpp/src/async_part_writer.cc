#include "async_part_writer.h"

#include <cstring>
#include <utility>

namespace cachewarm {

AsyncPartWriter::AsyncPartWriter(std::unique_ptr<PartWriter> inner, uint64_t header_bytes,
                                 std::function<void(const Status&)> on_error)
    : inner_(std::move(inner)), header_bytes_(header_bytes), on_error_(std::move(on_error)) {
  for (int i = 0; i < kAsyncWriteBuffers; i++) {
    buffers_.emplace_back(new char[kAsyncWritePiece]);
    free_.push_back(i);
  }
  thread_ = std::thread([this] { Loop(); });
}

AsyncPartWriter::~AsyncPartWriter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
  inner_->Abandon();
}

Status AsyncPartWriter::Push(Op op) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.ok()) return error_;
  ops_.push_back(std::move(op));
  cv_.notify_all();
  return Status::OK();
}

Status AsyncPartWriter::TakeBuffer() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !free_.empty() || !error_.ok(); });
  if (!error_.ok()) return error_;
  fill_ = free_.back();
  free_.pop_back();
  fill_len_ = 0;
  fill_records_ = 0;
  return Status::OK();
}

Status AsyncPartWriter::Flush() {
  if (fill_ < 0 || (fill_len_ == 0 && fill_records_ == 0)) return Status::OK();
  Op op(Op::kData);
  op.buffer = fill_;
  op.len = fill_len_;
  op.records = fill_records_;
  fill_ = -1;
  return Push(std::move(op));
}

Status AsyncPartWriter::Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) {
  Op op(Op::kOpen);
  op.chunk = chunk;
  op.part = part;
  op.end_key_index = first_key_index;
  bytes_ = header_bytes_;
  return Push(std::move(op));
}

Status AsyncPartWriter::AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records) {
  // `records` is counted with the buffer that holds the bytes' start (the inner writer only sums it).
  bool counted = false;
  for (int i = 0; i < iovcnt; i++) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    size_t n = iov[i].iov_len;
    bytes_ += n;
    while (n > 0 || (!counted && records > 0 && i == iovcnt - 1)) {
      if (fill_ < 0) CW_RETURN_IF_ERROR(TakeBuffer());
      if (!counted) {
        fill_records_ += records;
        counted = true;
      }
      const size_t k = std::min(n, kAsyncWritePiece - fill_len_);
      std::memcpy(buffers_[size_t(fill_)].get() + fill_len_, p, k);
      fill_len_ += k;
      p += k;
      n -= k;
      if (fill_len_ == kAsyncWritePiece) CW_RETURN_IF_ERROR(Flush());
    }
  }
  return Status::OK();
}

Status AsyncPartWriter::FinishThen(uint64_t end_key_index, uint64_t misses,
                                   std::function<Status(const PublishedFile&)> before_publish,
                                   std::function<void(const PublishedFile&)> after_publish) {
  CW_RETURN_IF_ERROR(Flush());
  Op op(Op::kFinish);
  op.end_key_index = end_key_index;
  op.misses = misses;
  op.before = std::move(before_publish);
  op.after = std::move(after_publish);
  return Push(std::move(op));
}

Status AsyncPartWriter::Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* /*out*/,
                               const std::function<Status(const PublishedFile&)>& before_publish) {
  return FinishThen(end_key_index, misses, before_publish, nullptr);
}

void AsyncPartWriter::WhenDurable(std::function<void()> fn) {
  Op op(Op::kCall);
  op.call = std::move(fn);
  if (!Push(std::move(op)).ok()) return;  // failed: the dump is aborted (on_error ran)
}

void AsyncPartWriter::SetSourceClock(int64_t ms, uint16_t flags) {
  PartWriter* inner = inner_.get();
  WhenDurable([inner, ms, flags] { inner->SetSourceClock(ms, flags); });
}

void AsyncPartWriter::Abandon() {
  (void)Flush();
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return (ops_.empty() && !busy_) || !error_.ok(); });
    // After an error, what is still queued is dropped (never written, never published).
    if (!error_.ok()) {
      for (const Op& op : ops_)
        if (op.kind == Op::kData) free_.push_back(op.buffer);
      ops_.clear();
    }
    cv_.wait(l, [&] { return !busy_; });
  }
  if (fill_ >= 0) {
    std::lock_guard<std::mutex> l(mu_);
    free_.push_back(fill_);
    fill_ = -1;
  }
  inner_->Abandon();
}

Status AsyncPartWriter::Run(Op& op) {
  switch (op.kind) {
    case Op::kOpen:
      return inner_->Open(op.chunk, op.part, op.end_key_index);
    case Op::kData: {
      struct iovec v = {buffers_[size_t(op.buffer)].get(), op.len};
      return inner_->AppendRaw(&v, 1, op.records);
    }
    case Op::kFinish: {
      PublishedFile f;
      CW_RETURN_IF_ERROR(inner_->Finish(op.end_key_index, op.misses, &f, op.before));
      if (op.after) op.after(f);
      return Status::OK();
    }
    case Op::kCall:
      op.call();
      return Status::OK();
  }
  return Status::OK();
}

void AsyncPartWriter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return !ops_.empty() || stop_; });
    if (ops_.empty()) return;
    Op op = std::move(ops_.front());
    ops_.pop_front();
    busy_ = true;
    l.unlock();
    Status s = Run(op);
    if (!s.ok()) inner_->Abandon();  // still busy_: nobody else touches inner_
    l.lock();
    if (op.kind == Op::kData) free_.push_back(op.buffer);
    const bool first_error = !s.ok() && error_.ok();
    if (first_error) error_ = s;
    if (!error_.ok()) {  // after the first error nothing more is written or published
      for (const Op& o : ops_)
        if (o.kind == Op::kData) free_.push_back(o.buffer);
      ops_.clear();
    }
    busy_ = false;
    cv_.notify_all();
    if (first_error && on_error_) {
      l.unlock();
      on_error_(s);
      l.lock();
    }
  }
}

}  // namespace cachewarm

namespace cachewarm {

std::unique_ptr<PartWriter> NewAsyncFilePartWriter(Env* env, const std::string& dir, const std::string& node,
                                                   uint64_t dump_start_ms, uint16_t version,
                                                   std::function<void(const Status&)> on_error) {
  return std::unique_ptr<PartWriter>(
      new AsyncPartWriter(std::unique_ptr<PartWriter>(new FilePartWriter(env, dir, node, dump_start_ms, version)),
                          DataFileHeaderSize(node.size()), std::move(on_error)));
}

}  // namespace cachewarm
