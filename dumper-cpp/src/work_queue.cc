#include "work_queue.h"

namespace cachewarm {

void WorkQueue::Push(const ChunkTask& t) {
  std::lock_guard<std::mutex> l(mu_);
  queue_.push_back(t);
  outstanding_++;
  cv_.notify_all();
}

bool WorkQueue::Pop(ChunkTask* t) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !queue_.empty() || closed_ || aborted_; });
  if (aborted_ || queue_.empty()) return false;
  *t = queue_.front();
  queue_.pop_front();
  return true;
}

void WorkQueue::Done() {
  std::lock_guard<std::mutex> l(mu_);
  outstanding_--;
  cv_.notify_all();
}

Status WorkQueue::WaitDrained() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return outstanding_ == 0 || aborted_; });
  return aborted_ ? error_ : Status::OK();
}

void WorkQueue::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  cv_.notify_all();
}

void WorkQueue::Fail(const Status& s) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_.ok()) error_ = s;
  aborted_ = true;
  cv_.notify_all();
}

bool WorkQueue::Empty() {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.empty();
}

size_t WorkQueue::Waiting() {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size();
}

Status WorkQueue::error() {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

}  // namespace cachewarm
