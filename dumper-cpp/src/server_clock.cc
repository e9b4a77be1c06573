#include "server_clock.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace cachewarm {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double MonoNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void SleepSeconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

Status WatchClock(const ClockSource& src, ServerClock* out) {
  int64_t first = 0;
  double a0 = src.wall();
  double m0 = src.mono();
  CW_RETURN_IF_ERROR(src.read(&first));
  const double b0 = src.wall();
  // One reading: the server read `first` somewhere in [a0, b0], so beta in [first - b0, first + 1 - a0).
  ServerClock best{double(first) - b0, double(first) + 1 - a0};
  bool ticked = false, tight = false;
  // memcached's time minus floor(its monotonic clock at a tick): an integer fixed at its start.
  int64_t k_lo = src.k_lo, k_hi = src.k_hi, k_safe = src.k_hi == INT64_MAX ? INT64_MIN : src.k_hi;
  double mono_minus_wall = 0;
  double deadline = b0 + kClockWatchS;
  const double limit = b0 + kClockPatienceS;
  int64_t last = first;
  while (src.wall() < deadline) {
    src.sleep(0.002);
    const double a = src.wall();
    const double m = src.mono();
    int64_t now = 0;
    CW_RETURN_IF_ERROR(src.read(&now));
    const double b = src.wall();
    const double mb = src.mono();
    if (now != last) {
      // It ticked to `now` after the reading that began at a0 and by the one that ended at b. On the
      // monotonic clock that was in [m0, mb], and memcached's time then became floor(that) + K: K is
      // now - floor(m0), or one less when the two straddle a whole second. Every tick narrows K;
      // while it is one of two the larger is used (a ceiling too high is never wrong, but costs
      // every copy a second). Its ceiling against the wall clock: K + (mono - wall).
      const int64_t k_max = now - int64_t(std::floor(m0));
      k_lo = std::max(k_lo, now - int64_t(std::floor(mb)));
      k_hi = std::min(k_hi, k_max);
      k_safe = std::max(k_safe, k_max);
      mono_minus_wall = mb - b;
      ServerClock tick{double(now) - b, double(now) - a0};
      // Once a tick is tight its bound is kept (the populator's watch_clock stops there: the shared
      // vectors); later ticks only narrow K.
      if (!tight && (!ticked || tick.hi - tick.lo < best.hi - best.lo)) best = tick;
      ticked = true;
      tight = best.hi - best.lo <= kClockTightS;
      if (tight && (!src.ceiling || k_lo >= k_hi)) {
        last = now;
        break;
      }
      deadline = std::min(b + kClockWatchS, limit);
    } else if (!ticked) {
      deadline = limit;  // no tick yet: a held-up main thread; watch on
    }
    a0 = a;
    m0 = m;
    last = now;
  }
  if (ticked) {
    // Ticks that disagree (never, for one memcached process) or disagree with the earlier look: the
    // largest K any of them allows.
    if (k_lo > k_hi) k_lo = k_hi = k_safe;
    best.k_lo = k_lo;
    best.k_hi = k_hi;
    best.ceiling = double(k_hi) + mono_minus_wall;
  }
  best.seen = last;
  best.seen_at = src.wall();
  *out = best;
  return Status::OK();
}

Status MeasureClock(Conn* c, ServerClock* out, bool same_host, const ServerClock* known) {
  ClockSource src;
  src.ceiling = same_host;
  if (same_host && known != nullptr && known->has_ceiling()) {
    src.k_lo = known->k_lo;
    src.k_hi = known->k_hi;
  }
  src.read = [c](int64_t* t) {
    ServerStats s;
    CW_RETURN_IF_ERROR(GetStats(c, &s));
    *t = s.time;
    return Status::OK();
  };
  CW_RETURN_IF_ERROR(WatchClock(src, out));
  if (!same_host) out->ceiling = std::nan("");
  return Status::OK();
}

}  // namespace cachewarm

namespace cachewarm {

void ClockKeeper::Start(const std::string& host, int port, double interval_s, bool same_host) {
  Stop();
  stop_ = false;
  thread_ = std::thread([this, host, port, interval_s, same_host] {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait_for(l, std::chrono::duration<double>(interval_s), [this] { return stop_ || poked_; });
      if (stop_) break;
      poked_ = false;
      l.unlock();
      Conn c;
      ServerClock fresh;
      const ServerClock known = Get();
      const bool ok = c.Connect(host, port, 5000).ok() && MeasureClock(&c, &fresh, same_host, &known).ok();
      l.lock();
      if (ok) clock_ = fresh;
    }
  });
}

void ClockKeeper::Poke() {
  {
    std::lock_guard<std::mutex> l(mu_);
    poked_ = true;
  }
  cv_.notify_all();
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
