// A memcached's clock against this host's wall clock, to a few milliseconds.
//
// memcached's `stats time` is `process_started + current_time`: a whole second that advances on a
// 1-s timer, behind the wall clock by up to ~2 s depending on when the process started. As a model:
// the server's time at this host's wall time w is floor(w + beta), for a real `beta` (negative: it
// lags). An absolute expiry T on that server ends at the wall moment T - beta; `mg t` returns its
// end minus floor(w + beta). One `stats time` reading bounds beta only to a second; watching the
// value tick (polling until it changes) bounds it to the polling round trip. TTLs are carried with
// that bound (docs/data-format.md section 2.1 and docs/reliability.md "How a TTL is carried").
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>

#include <algorithm>

#include "format.h"
#include "net.h"
#include "status.h"

namespace cachewarm {

struct ServerClock {
  // beta in [lo, hi] (seconds): the server's clock minus this host's wall clock.
  double lo = 0, hi = 0;
  // The server's clock can never be ahead of this (seconds against this host's wall clock): its
  // ceiling. memcached's time is floor(its monotonic clock at its last tick) + an integer fixed at its
  // start, so it is never ahead of floor(monotonic now) + that integer, whatever its timer does later
  // (slips, stalls, the whole-second jump when a slip passes a second). Known only for a server on this
  // host (the same monotonic clock: SameHostServer); NaN otherwise.
  double ceiling = std::nan("");
  // The server's `stats time` at the last reading, which ended at this host's wall time seen_at: it
  // is never less at any later moment.
  int64_t seen = 0;
  double seen_at = 0;
  // That integer (memcached's time minus floor(its monotonic clock at a tick)) lies in [k_lo, k_hi]:
  // fixed for the life of the process, so every later look narrows it (WatchClock). The ceiling is
  // built on k_hi: exact when k_lo == k_hi, else a second high (copies a second short, never late).
  int64_t k_lo = INT64_MIN, k_hi = INT64_MAX;
  bool has_ceiling() const { return !std::isnan(ceiling); }
  bool ceiling_exact() const { return has_ceiling() && k_lo == k_hi; }
  // What a server time is moved by to become one on this host's clock that is never later: the
  // ceiling when known (never later, whatever the server's clock does next), else hi (never later
  // while its clock stays as measured).
  double Ahead() const { return has_ceiling() && ceiling > hi ? ceiling : hi; }
  // The server's `stats time` at this host's wall time w, never more than the true one.
  int64_t TimeAtMost(double w) const { return int64_t(std::floor(w + lo)); }
  // The server's `stats time` at this host's wall time w, never less than the true one (the ceiling
  // when known: hi holds only while the clock stays as measured).
  int64_t TimeAtLeast(double w) const { return int64_t(std::floor(w + Ahead())); }
  // Whole seconds a server time is moved back to become one on this host's clock that is never
  // later: ceil(Ahead()). The records carry Ahead() in ms (header source_clock_ms): their reader
  // recovers the fraction this rounding dropped and gives it back.
  int64_t WholeAhead() const { return int64_t(std::ceil(double(MillisAtLeast()) / 1000.0)); }
  // Ahead() in whole ms, rounded up (what the data file header and the DONE manifest record).
  int64_t MillisAtLeast() const { return int64_t(std::ceil(Ahead() * 1000.0)); }
  // The fraction of a second the records' expiries were rounded down by (0 <= f < 1).
  double DroppedFraction() const { return double(WholeAhead()) - double(MillisAtLeast()) / 1000.0; }
  // hi - lo in whole ms, rounded up (the header's spread: how far the measurement could be off; a
  // nanosecond of float noise is not a millisecond more).
  int64_t SpreadMillis() const { return int64_t(std::ceil((hi - lo) * 1000.0 - 1e-6)); }
};

// The data file header's clock_flags for records moved by c (format.h): known, ceiling, spread.
inline uint16_t HeaderClockFlags(const ServerClock& c) {
  const int64_t spread = std::min<int64_t>(std::max<int64_t>(c.SpreadMillis(), 1), kHeaderClockSpreadMax);
  return uint16_t(kHeaderClockKnown | (c.has_ceiling() ? kHeaderClockCeiling : 0) |
                  uint16_t(spread << kHeaderClockSpreadShift));
}

// This host's wall clock, seconds.
double WallNow();
// This host's monotonic clock (CLOCK_MONOTONIC, the one memcached counts on), seconds.
double MonoNow();
// Sleeps this thread for s seconds.
void SleepSeconds(double s);

// How long to watch for a tick; a tick bounded wider than kClockTightS (this host descheduled us
// between the readings around it) is watched again at the next ticks, for up to kClockPatienceS in
// all, and the tightest bound is kept: a wide bound is never wrong, but copies are that much shorter.
// A clock that does not tick within kClockWatchS (its main thread held up: a loaded host, a stall) is
// watched on, up to kClockPatienceS: a stalled server's one reading says little about where its clock
// goes once it resumes.
constexpr double kClockWatchS = 1.2;
constexpr double kClockTightS = 0.02;
constexpr double kClockPatienceS = 3.6;

// What WatchClock reads and waits with (tests script them).
struct ClockSource {
  std::function<Status(int64_t*)> read;  // the server's `stats time`
  std::function<double()> wall = WallNow;
  std::function<double()> mono = MonoNow;
  std::function<void(double)> sleep = SleepSeconds;
  // Whether the ceiling is wanted (a server of this host): then a tick whose readings straddle a
  // whole second of the monotonic clock, which leaves the integer one of two, is watched past.
  bool ceiling = true;
  // What earlier looks at the same process knew of that integer (ServerClock k_lo, k_hi).
  int64_t k_lo = INT64_MIN, k_hi = INT64_MAX;
};

// Reads the server's time until it ticks and bounds beta by the readings around the tick (see the
// constants above). A server whose clock does not tick within kClockPatienceS gets the one-reading
// bound (a second wide). The tick's moment on the monotonic clock also gives the server's ceiling
// (out->ceiling, meaningful only for a server on this host: MeasureClock keeps it only then); a tick
// just either side of a whole monotonic second leaves it a second in doubt, so the watch goes on to
// the next ticks (within kClockPatienceS) until the readings around one do not straddle it. The
// populator's twin (lo and hi): watch_clock in agent/cachewarm/datapath/meta.py; both read the shared
// vectors in tests/vectors/clock_watch.txt.
Status WatchClock(const ClockSource& src, ServerClock* out);
// WatchClock over `stats time` on c; `same_host`: the server runs on this host (SameHostServer), so its
// ceiling is kept.
// `known`: an earlier look at the same process (its k_lo, k_hi narrow this one's).
Status MeasureClock(Conn* c, ServerClock* out, bool same_host = false, const ServerClock* known = nullptr);

}  // namespace cachewarm

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace cachewarm {

// The source's clock, measured again every `interval_s` on a connection of its own: memcached's 1-s
// timer is re-armed after each tick, so its phase slips (measured on a loaded 2-core host: 70 ms in a
// few seconds), and after a slip past the second its clock jumps a second ahead. Each data file (and
// the stream's part) takes the clock current when it opens and keeps it (its header says which).
class ClockKeeper {
 public:
  ClockKeeper() = default;
  ~ClockKeeper() { Stop(); }
  ClockKeeper(const ClockKeeper&) = delete;
  ClockKeeper& operator=(const ClockKeeper&) = delete;
  void Set(const ServerClock& c) {
    std::lock_guard<std::mutex> l(mu_);
    clock_ = c;
  }
  ServerClock Get() const {
    std::lock_guard<std::mutex> l(mu_);
    return clock_;
  }
  // Starts re-measuring host:port (`same_host`: MeasureClock); a failed look keeps the last clock (the
  // dump notices a lost source).
  void Start(const std::string& host, int port, double interval_s, bool same_host = false);
  // Asks for a look now (a batch saw the source's clock ahead of the one measured).
  void Poke();
  void Stop();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ServerClock clock_;
  bool stop_ = false;
  bool poked_ = false;
  std::thread thread_;
};

}  // namespace cachewarm
