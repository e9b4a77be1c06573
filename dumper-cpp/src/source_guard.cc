#include "source_guard.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "clock.h"

namespace cachewarm {

namespace {
constexpr size_t kProbeConns = 4;
// The calibration before the dump: 500 probes in half a second (every 1 ms: the dump waits for it).
constexpr int64_t kCalibrationUs = 500000;
constexpr int64_t kCalibrationIntervalUs = 1000;

// The probes' thread wakes for each due time: the kernel's default timer slack (50 us) would add to
// every probe's latency, which counts from its due time. And it runs above the dump's own threads
// when it may (root; nothing changes otherwise): on a busy host the probes must measure the source,
// not their own wait for a core — the way bench/source_harm.py raises its live client.
void ProbeThreadSetup() {
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  ::setpriority(PRIO_PROCESS, id_t(::syscall(SYS_gettid)), -10);  // EPERM: stays as it is
}
}  // namespace

int64_t Percentile(std::vector<int64_t> samples, double p) {
  if (samples.empty()) return -1;
  size_t k = size_t(p / 100.0 * double(samples.size()));
  if (k >= samples.size()) k = samples.size() - 1;
  std::nth_element(samples.begin(), samples.begin() + long(k), samples.end());
  return samples[k];
}

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

GuardConfig GuardConfigOf(const Options& o) {
  GuardConfig c;
  c.target_ratio = o.adaptive_target;
  return c;
}

PaceSettings PaceSettingsOf(const Options& o) {
  PaceSettings s;
  s.max_rate = o.max_items_per_second;
  s.max_bytes_rate = o.max_bytes_per_second;
  s.max_batch = std::min(o.batch, s.max_batch);
  s.start_batch = std::min(s.max_batch, s.start_batch);
  return s;
}

SourceGuard::SourceGuard(const Options& o, RateLimiter* limiter, Progress* progress)
    : o_(o), limiter_(limiter), progress_(progress), config_(GuardConfigOf(o)) {
  std::mt19937_64 rng(uint64_t(::getpid()) ^ NowMs());
  char key[64];
  std::snprintf(key, sizeof key, "__cachewarm_probe_%016llx", static_cast<unsigned long long>(rng()));
  probe_cmd_ = std::string("mg ") + key + " v\r\n";  // a key no one stores: a miss, "EN"
}

SourceGuard::~SourceGuard() {
  Stop();
  if (trace_) std::fclose(trace_);
}

void SourceGuard::Trace(int64_t now_us, const char* what) {
  if (!trace_) return;
  const PaceState& st = core_->pace();
  const WindowStats& w = core_->last_window();
  std::fprintf(trace_,
               "{\"t_ms\":%lld,\"what\":\"%s\",\"items\":%llu,\"rate\":%llu,\"bytes_rate\":%llu,\"batch\":%d,"
               "\"batch_bytes\":%llu,\"paused\":%d,\"backoffs\":%llu,\"baseline_us\":%lld,\"threshold_us\":%lld,"
               "\"win_probes\":%llu,\"win_slow\":%llu,\"win_p99_us\":%lld}\n",
               static_cast<long long>((now_us - trace_t0_) / 1000), what,
               static_cast<unsigned long long>(progress_->items.load()), static_cast<unsigned long long>(st.rate),
               static_cast<unsigned long long>(st.bytes_rate), st.batch, static_cast<unsigned long long>(st.batch_bytes),
               core_->paused() ? 1 : 0, static_cast<unsigned long long>(st.backoffs),
               static_cast<long long>(core_->baseline_us()), static_cast<long long>(core_->threshold_us()),
               static_cast<unsigned long long>(w.probes), static_cast<unsigned long long>(w.slow),
               static_cast<long long>(w.p99_us));
}

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
  can_pace_crawl_ = summary_.crawl_sleep_original_us >= 0;
  uint32_t floor = can_pace_crawl_ ? uint32_t(summary_.crawl_sleep_original_us) : 0;
  if (o_.crawl_sleep_us >= 0) {
    if (!can_pace_crawl_)
      return Status::Server("--crawl-sleep-us: memcached at " + c.peer() + " reports no lru_crawler_sleep setting");
    floor = uint32_t(o_.crawl_sleep_us);
  }
  if (can_pace_crawl_ && floor != crawl_sleep_set_) CW_RETURN_IF_ERROR(SetCrawlSleep(&c, floor));
  c.Close();
  if (!o_.adaptive) return Status::OK();

  PaceSettings ps = PaceSettingsOf(o_);
  ps.crawl_sleep_floor_us = floor;
  if (!can_pace_crawl_) ps.crawl_sleep_max_us = 0;
  crawl_sleep_max_us_ = std::max(ps.crawl_sleep_max_us, floor);
  core_.reset(new GuardCore(config_, ps));
  probes_.reset(new ProbeConns(o_.host, o_.port, probe_cmd_, "EN\r\n"));
  CW_RETURN_IF_ERROR(probes_->Open(kProbeConns));
  if (can_pace_crawl_) CW_RETURN_IF_ERROR(control_.Connect(o_.host, o_.port, kConnectTimeoutMs));
  // The baseline: half a second of open-loop probes before the dump begins (on a thread of its own,
  // set up as the guard's).
  std::vector<int64_t> base;
  std::thread calibration([&] {
    ProbeThreadSetup();
    std::vector<std::pair<int64_t, int64_t>> answers;
    const int64_t t0 = MonotonicUs();
    int64_t due = t0;
    while (MonotonicUs() < t0 + kCalibrationUs) {
      for (int64_t now = MonotonicUs(); due <= now; due += kCalibrationIntervalUs) probes_->Send(due);
      probes_->Poll(due - MonotonicUs(), &answers);
    }
    probes_->Poll(100000, &answers);
    std::sort(answers.begin(), answers.end());  // by due time: Calibrate takes them in order
    for (const auto& a : answers) base.push_back(a.second - a.first);
  });
  calibration.join();
  if (!probes_->last_error().empty()) return Status::IOError("the source guard's probes: " + probes_->last_error());
  core_->Calibrate(base);
  if (const char* path = std::getenv("CACHEWARM_GUARD_TRACE"); path && *path) {
    trace_ = std::fopen(path, "w");
    if (!trace_) std::fprintf(stderr, "cachewarm-dump: CACHEWARM_GUARD_TRACE: cannot write %s: no trace\n", path);
    trace_t0_ = MonotonicUs();
  }
  core_->Start(MonotonicUs(), progress_->items.load(), progress_->bytes.load());
  progress_->probe_baseline_us = uint64_t(core_->baseline_us());
  Apply();
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void SourceGuard::Apply() {
  const PaceState& st = core_->pace();
  const bool paused = core_->paused();
  limiter_->set_rate(st.rate);
  limiter_->set_bytes_rate(st.bytes_rate);
  limiter_->set_batch_cap(st.batch);
  limiter_->set_batch_bytes_cap(st.batch_bytes);
  limiter_->set_paused(paused);
  progress_->pace_rate = st.rate;
  progress_->pace_batch = uint64_t(st.batch);
  progress_->backoffs = st.backoffs;
  progress_->probe_baseline_us = uint64_t(core_->baseline_us());
  // A quiet window quiets the crawl too: the baseline is the source without the dump.
  const uint32_t sleep = paused ? crawl_sleep_max_us_ : st.crawl_sleep_us;
  if (can_pace_crawl_ && sleep != crawl_sleep_set_) {
    if (control_.fd() < 0) control_.Connect(o_.host, o_.port, kConnectTimeoutMs);
    if (control_.fd() >= 0 && !SetCrawlSleep(&control_, sleep).ok()) control_.Close();  // the next change tries again
  }
}

void SourceGuard::Loop() {
  ProbeThreadSetup();
  std::vector<std::pair<int64_t, int64_t>> answers;
  std::vector<int64_t> ages;
  int64_t due = MonotonicUs();
  while (!stop_) {
    // Open loop: every probe that fell due is sent, late ones too (their latency counts from due).
    for (int64_t now = MonotonicUs(); due <= now; due += config_.probe_interval_us) probes_->Send(due);
    answers.clear();
    probes_->Poll(std::min<int64_t>(due - MonotonicUs(), 20000), &answers);
    for (const auto& a : answers) {
      core_->OnProbe(a.second, a.second - a.first);
      progress_->probe_us = uint64_t(a.second - a.first);
    }
    const int64_t now = MonotonicUs();
    probes_->Unanswered(now, &ages);
    const uint64_t windows = core_->windows();
    const uint64_t backoffs = core_->pace().backoffs;
    if (core_->Tick(now, progress_->items.load(), progress_->bytes.load(), ages)) {
      Apply();
      Trace(now, core_->pace().backoffs != backoffs ? "backoff" : core_->windows() != windows ? "window" : "change");
    } else if (core_->windows() != windows) {
      Trace(now, "window");
    }
    progress_->backing_off = core_->backing_off(now);
    if (core_->windows() != windows) {  // a window closed: the progress line's harm fields
      progress_->probe_p99_us = uint64_t(std::max<int64_t>(0, core_->last_window().p99_us));
      progress_->backed_off_ms = uint64_t(core_->Report().backed_off_ms);
    }
  }
}

void SourceGuard::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  limiter_->set_paused(false);
  if (core_) {
    core_->Finish(MonotonicUs());
    const PaceState& st = core_->pace();
    summary_.backoffs = st.backoffs;
    summary_.lowest_rate = st.lowest_rate;
    summary_.lowest_bytes_rate = st.lowest_bytes_rate;
    summary_.harm = core_->Report();
  }
  progress_->backing_off = false;
  if (probes_) probes_->Close();
  control_.Close();
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
