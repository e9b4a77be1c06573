#include "source_guard.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "clock.h"

namespace cachewarm {

namespace {
// Probe connections: memcached hands new connections to its worker threads in turn, so a few
// consecutive ones sample a few threads (a live client may sit on any of them).
constexpr size_t kProbeConns = 4;
// One probe every this many microseconds, round robin over the probe connections.
constexpr int64_t kProbeIntervalUs = 2000;
// A control window: the controller decides once per window, on its probes' 90th percentile.
constexpr int64_t kWindowUs = 100000;
constexpr double kPercentile = 90;
// Probes before the dump that make the baseline.
constexpr int kBaselineProbes = 100;
// A probe that fails (connection lost) counts as this slow; the workers report a dead server.
constexpr int64_t kFailedProbeUs = 1000000;
constexpr int kProbeTimeoutMs = 1000;
// Two congested windows in a row (200 ms) before a back-off; and an absolute slack over the probes'
// baseline: the probes run on the source's own host, so a few hundred microseconds there are small
// against what a remote client sees (its round trip), bench/source_harm.py.
constexpr int kConfirmWindows = 2;
constexpr int64_t kSlackUs = 200;
}  // namespace

// ---- PaceController ---------------------------------------------------------------------------

PaceController::PaceController(const PaceSettings& s) : s_(s) {
  s_.min_batch = std::max(1, std::min(s_.min_batch, s_.max_batch));
  st_.batch = std::clamp(s_.start_batch, s_.min_batch, s_.max_batch);
  st_.rate = s_.max_rate ? std::min(s_.start_rate, s_.max_rate) : s_.start_rate;
  st_.rate = std::max(st_.rate, std::min(s_.min_rate, s_.max_rate ? s_.max_rate : s_.min_rate));
  st_.crawl_sleep_us = s_.crawl_sleep_floor_us;
}

void PaceController::Calibrate(int64_t baseline_us) { baseline_us_ = std::max<int64_t>(0, baseline_us); }

int64_t PaceController::threshold_us() const {
  return int64_t(double(baseline_us_) * s_.target_ratio) + s_.slack_us;
}

void PaceController::Update(int64_t probe_us, uint64_t achieved_rate) {
  st_.windows++;
  since_backoff_ = std::min(since_backoff_ + 1, 1 << 30);
  const bool congested = probe_us < 0 || probe_us > threshold_us();
  if (congested) st_.congested_windows++;
  congested_run_ = congested ? congested_run_ + 1 : 0;
  // One noisy window (another process on the core, a page fault) is not the dump's doing.
  const bool confirmed =
      congested_run_ >= s_.confirm_windows || probe_us < 0 || probe_us > 4 * threshold_us();
  if (hold_ > 0) hold_--;
  peak_achieved_ = std::max(peak_achieved_, achieved_rate);
  // Workers using less than a tenth of the limit (the crawl alone runs, or they wait for key lists):
  // the rate is not what hurts, the crawl's pace may be.
  const bool fetching = achieved_rate * 10 >= st_.rate;
  if (congested && confirmed && hold_ == 0) {
    if (fetching) {
      // Multiplicative decrease, from what the workers really fetched when that is below the limit
      // (an unreached limit cut by 30% would change nothing).
      const uint64_t from = std::min(st_.rate, std::max(achieved_rate, st_.rate / 2));
      st_.rate = std::max<uint64_t>(s_.min_rate, from * 7 / 10);
      if (s_.max_rate) st_.rate = std::min(st_.rate, s_.max_rate);
      st_.batch = std::max(s_.min_batch, st_.batch / 2);
      st_.lowest_rate = st_.lowest_rate ? std::min(st_.lowest_rate, st_.rate) : st_.rate;
    }
    st_.crawl_sleep_us = std::min(s_.crawl_sleep_max_us, std::max<uint32_t>(st_.crawl_sleep_us * 2, 100));
    st_.crawl_sleep_us = std::max(st_.crawl_sleep_us, s_.crawl_sleep_floor_us);
    st_.backoffs++;
    slow_start_ = false;
    hold_ = s_.hold_windows;
    since_backoff_ = 0;
  } else if (!congested) {
    // Grow, but not far past what is used: a limit far above the achieved rate means nothing.
    const uint64_t cap_by_use = std::max<uint64_t>(s_.start_rate, achieved_rate * 3 / 2);
    const uint64_t step = std::max({s_.min_rate, st_.rate / 10, peak_achieved_ / 20});
    uint64_t next = slow_start_ ? st_.rate * 3 / 2 : st_.rate + step;
    next = std::max(st_.rate, std::min(next, cap_by_use));
    if (s_.max_rate) next = std::min(next, s_.max_rate);
    st_.rate = next;
    st_.batch = std::min(s_.max_batch, st_.batch + std::max(1, st_.batch / 4));
    uint32_t sleep = st_.crawl_sleep_us * 3 / 4;
    st_.crawl_sleep_us = std::max(sleep, s_.crawl_sleep_floor_us);
  }
  st_.backing_off = since_backoff_ < s_.backing_off_windows;
}

int64_t Percentile(std::vector<int64_t> samples, double p) {
  if (samples.empty()) return -1;
  size_t k = size_t(p / 100.0 * double(samples.size()));
  if (k >= samples.size()) k = samples.size() - 1;
  std::nth_element(samples.begin(), samples.begin() + long(k), samples.end());
  return samples[k];
}

// ---- SourceGuard ------------------------------------------------------------------------------

Status GetCrawlSleep(Conn* c, int64_t* us) {
  std::string reply;
  *us = -1;
  Status s = c->Command("stats settings\r\n", "END\r\n", &reply, 10000);
  if (!s.ok()) return s;
  const std::string name = "STAT lru_crawler_sleep ";
  const size_t p = reply.find(name);
  if (p != std::string::npos) *us = std::atoll(reply.c_str() + p + name.size());
  return Status::OK();
}

namespace {
PaceSettings SettingsOf(const Options& o) {
  PaceSettings s;
  s.target_ratio = o.adaptive_target;
  s.max_rate = o.max_items_per_second;
  // The workers' own cap for a low --max-items-per-second (worker.cc) applies as well.
  s.max_batch = o.batch;
  s.start_batch = std::min(o.batch, s.start_batch);
  s.confirm_windows = kConfirmWindows;
  s.slack_us = kSlackUs;
  return s;
}
}  // namespace

SourceGuard::SourceGuard(const Options& o, RateLimiter* limiter, Progress* progress)
    : o_(o), limiter_(limiter), progress_(progress), controller_(SettingsOf(o)) {
  std::mt19937_64 rng(uint64_t(::getpid()) ^ NowMs());
  char key[64];
  std::snprintf(key, sizeof key, "__cachewarm_probe_%016llx", static_cast<unsigned long long>(rng()));
  probe_cmd_ = std::string("mg ") + key + " v\r\n";  // a key no one stores: a miss, "EN"
}

SourceGuard::~SourceGuard() { Stop(); }

Status SourceGuard::SetCrawlSleep(Conn* c, uint32_t us) {
  std::string reply;
  Status s = c->Command("lru_crawler sleep " + std::to_string(us) + "\r\n", "\r\n", &reply, 10000);
  if (s.ok() && reply != "OK\r\n") s = Status::Server("lru_crawler sleep answered: " + reply.substr(0, 100));
  if (s.ok()) {
    crawl_sleep_set_ = us;
    crawl_sleep_changed_ = true;
    summary_.crawl_sleep_max_us = std::max(summary_.crawl_sleep_max_us, us);
  }
  return s;
}

Status SourceGuard::Start(int64_t saved_crawl_sleep_us) {
  summary_.adaptive = o_.adaptive;
  Conn c;
  CW_RETURN_IF_ERROR(c.Connect(o_.host, o_.port, kConnectTimeoutMs));
  int64_t current = -1;
  CW_RETURN_IF_ERROR(GetCrawlSleep(&c, &current));
  // A resumed dump after a crash finds the sleep an earlier run set: the saved value is the server's.
  summary_.crawl_sleep_original_us = saved_crawl_sleep_us >= 0 ? saved_crawl_sleep_us : current;
  crawl_sleep_set_ = current < 0 ? 0 : uint32_t(current);
  crawl_sleep_changed_ = current >= 0 && current != summary_.crawl_sleep_original_us;
  const bool can_pace_crawl = summary_.crawl_sleep_original_us >= 0;
  uint32_t floor = can_pace_crawl ? uint32_t(summary_.crawl_sleep_original_us) : 0;
  if (o_.crawl_sleep_us >= 0) {
    if (!can_pace_crawl)
      return Status::Server("--crawl-sleep-us: memcached at " + c.peer() + " reports no lru_crawler_sleep setting");
    floor = uint32_t(o_.crawl_sleep_us);
  }
  if (can_pace_crawl && floor != crawl_sleep_set_) CW_RETURN_IF_ERROR(SetCrawlSleep(&c, floor));
  c.Close();
  if (!o_.adaptive) return Status::OK();

  PaceSettings ps = SettingsOf(o_);
  ps.crawl_sleep_floor_us = floor;
  if (!can_pace_crawl) ps.crawl_sleep_max_us = 0;
  controller_ = PaceController(ps);
  for (size_t i = 0; i < kProbeConns; i++) {
    probes_.emplace_back(new Conn);
    CW_RETURN_IF_ERROR(probes_.back()->Connect(o_.host, o_.port, kConnectTimeoutMs));
  }
  std::vector<int64_t> base;
  for (int i = 0; i < kBaselineProbes; i++) {
    int64_t us = 0;
    CW_RETURN_IF_ERROR(Probe(size_t(i) % probes_.size(), &us));
    base.push_back(us);
    std::this_thread::sleep_for(std::chrono::microseconds(kProbeIntervalUs));
  }
  controller_.Calibrate(Percentile(base, kPercentile));
  summary_.baseline_us = controller_.baseline_us();
  summary_.threshold_us = controller_.threshold_us();
  progress_->probe_baseline_us = uint64_t(summary_.baseline_us);
  const PaceState& st = controller_.state();
  limiter_->set_rate(st.rate);
  limiter_->set_batch_cap(st.batch);
  progress_->pace_rate = st.rate;
  progress_->pace_batch = uint64_t(st.batch);
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

Status SourceGuard::Probe(size_t i, int64_t* us) {
  Conn* c = probes_[i].get();
  if (c->fd() < 0) CW_RETURN_IF_ERROR(c->Connect(o_.host, o_.port, kConnectTimeoutMs));
  std::string reply;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c->Command(probe_cmd_, "\r\n", &reply, kProbeTimeoutMs);
  *us = int64_t(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
  if (s.ok() && reply != "EN\r\n") s = Status::Protocol("probe answered: " + reply.substr(0, 100));
  if (!s.ok()) c->Close();
  return s;
}

void SourceGuard::Loop() {
  using clock = std::chrono::steady_clock;
  auto next = clock::now();
  auto window_start = next;
  uint64_t items0 = progress_->items.load();
  std::vector<int64_t> win;
  size_t i = 0;
  while (!stop_) {
    while (!stop_ && clock::now() < next) std::this_thread::sleep_until(std::min(next, clock::now() + std::chrono::milliseconds(20)));
    if (stop_) break;
    int64_t us = 0;
    if (!Probe(i++ % probes_.size(), &us).ok()) us = kFailedProbeUs;
    progress_->probe_us = uint64_t(us);
    win.push_back(us);
    const auto now = clock::now();
    next += std::chrono::microseconds(kProbeIntervalUs);
    if (next < now) next = now;
    const double elapsed = std::chrono::duration<double>(now - window_start).count();
    if (elapsed * 1e6 < double(kWindowUs)) continue;
    const uint64_t items = progress_->items.load();
    controller_.Update(Percentile(win, kPercentile), uint64_t(double(items - items0) / elapsed));
    win.clear();
    window_start = now;
    items0 = items;
    const PaceState& st = controller_.state();
    limiter_->set_rate(st.rate);
    limiter_->set_batch_cap(st.batch);
    progress_->pace_rate = st.rate;
    progress_->pace_batch = uint64_t(st.batch);
    progress_->backing_off = st.backing_off;
    progress_->backoffs = st.backoffs;
    if (st.crawl_sleep_us != crawl_sleep_set_ && summary_.crawl_sleep_original_us >= 0 && probes_[0]->fd() >= 0)
      SetCrawlSleep(probes_[0].get(), st.crawl_sleep_us);  // best effort: the next window tries again
  }
}

void SourceGuard::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  const PaceState& st = controller_.state();
  summary_.backoffs = st.backoffs;
  summary_.windows = st.windows;
  summary_.congested_windows = st.congested_windows;
  summary_.lowest_rate = st.lowest_rate;
  progress_->backing_off = false;
  for (auto& p : probes_) p->Close();
  probes_.clear();
  if (crawl_sleep_changed_ && summary_.crawl_sleep_original_us >= 0 &&
      crawl_sleep_set_ != uint32_t(summary_.crawl_sleep_original_us)) {
    Conn c;
    Status s = c.Connect(o_.host, o_.port, kConnectTimeoutMs);
    if (s.ok()) s = SetCrawlSleep(&c, uint32_t(summary_.crawl_sleep_original_us));
    if (!s.ok())
      std::fprintf(stderr, "cachewarm-dump: could not restore the source's lru_crawler sleep to %lld us: %s\n",
                   static_cast<long long>(summary_.crawl_sleep_original_us), s.message().c_str());
  }
  crawl_sleep_changed_ = false;
}

}  // namespace cachewarm
