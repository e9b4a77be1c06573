#include "server_clock.h"

#include <chrono>
#include <thread>

namespace cachewarm {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status MeasureClock(Conn* c, ServerClock* out) {
  ServerStats s;
  double a0 = WallNow();
  CW_RETURN_IF_ERROR(GetStats(c, &s));
  double b0 = WallNow();
  const int64_t first = s.time;
  // One reading: the server read `first` somewhere in [a0, b0], so beta in [first - b0, first + 1 - a0).
  *out = ServerClock{double(first) - b0, double(first) + 1 - a0};
  int64_t last = first;
  while (WallNow() - b0 < 1.2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const double a = WallNow();
    CW_RETURN_IF_ERROR(GetStats(c, &s));
    const double b = WallNow();
    if (s.time != last) {
      // It ticked to s.time after the reading that began at a0 and by the one that ended at b.
      *out = ServerClock{double(s.time) - b, double(s.time) - a0};
      return Status::OK();
    }
    a0 = a;
    last = s.time;
  }
  return Status::OK();
}

}  // namespace cachewarm

namespace cachewarm {

void ClockKeeper::Start(const std::string& host, int port, double interval_s) {
  Stop();
  stop_ = false;
  thread_ = std::thread([this, host, port, interval_s] {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::duration<double>(interval_s), [this] { return stop_; })) {
      l.unlock();
      Conn c;
      ServerClock fresh;
      const bool ok = c.Connect(host, port, 5000).ok() && MeasureClock(&c, &fresh).ok();
      l.lock();
      if (ok) clock_ = fresh;
    }
  });
}

void ClockKeeper::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace cachewarm
