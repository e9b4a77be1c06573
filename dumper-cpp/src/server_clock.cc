#include "server_clock.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace cachewarm {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void SleepSeconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

Status WatchClock(const ClockSource& src, ServerClock* out) {
  int64_t first = 0;
  double a0 = src.wall();
  CW_RETURN_IF_ERROR(src.read(&first));
  const double b0 = src.wall();
  // One reading: the server read `first` somewhere in [a0, b0], so beta in [first - b0, first + 1 - a0).
  ServerClock best{double(first) - b0, double(first) + 1 - a0};
  double deadline = b0 + kClockWatchS;
  const double limit = b0 + kClockPatienceS;
  int64_t last = first;
  while (src.wall() < deadline) {
    src.sleep(0.002);
    const double a = src.wall();
    int64_t now = 0;
    CW_RETURN_IF_ERROR(src.read(&now));
    const double b = src.wall();
    if (now != last) {
      // It ticked to `now` after the reading that began at a0 and by the one that ended at b.
      const ServerClock tick{double(now) - b, double(now) - a0};
      if (tick.hi - tick.lo < best.hi - best.lo) best = tick;
      if (best.hi - best.lo <= kClockTightS) break;
      deadline = std::min(b + kClockWatchS, limit);
    }
    a0 = a;
    last = now;
  }
  *out = best;
  return Status::OK();
}

Status MeasureClock(Conn* c, ServerClock* out) {
  ClockSource src;
  src.read = [c](int64_t* t) {
    ServerStats s;
    CW_RETURN_IF_ERROR(GetStats(c, &s));
    *t = s.time;
    return Status::OK();
  };
  return WatchClock(src, out);
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
