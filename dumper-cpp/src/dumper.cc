#include "dumper.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <thread>

#include "clock.h"
#include "manifest.h"
#include "same_host.h"
#include "worker.h"

namespace cachewarm {

namespace {
constexpr int kMaxReconcilePasses = 4;
// Seconds between looks at the source's clock while the workers run (ClockKeeper).
constexpr double kSourceClockInterval = 10.0;
}  // namespace

Dumper::Dumper(const Options& o, Env* env)
    : o_(o), env_(env), reporter_(&progress_), limiter_(o.max_items_per_second, o.max_bytes_per_second),
      checkpoint_(o_, env), crawl_(o_, env, &checkpoint_, &queue_, &progress_), guard_(o_, &limiter_, &progress_),
      stream_(o_.stream.to.empty() ? nullptr : new Stream(o_, env)) {
  crawl_.set_listing_cas(&listing_cas_);
}

int Dumper::exit_code() const { return stream_ && !stream_->ok() ? 1 : 0; }

Status Dumper::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  CW_RETURN_IF_ERROR(Prepare());
  if (checkpoint_.Done()) {
    reporter_.Print("done");
    if (stream_) return stream_->ReportDone();
    return Status::OK();  // a resumed dump that had already finished
  }
  std::vector<ChunkTask> todo;
  CW_RETURN_IF_ERROR(checkpoint_.Scan(&progress_, &todo));
  if (stream_) CW_RETURN_IF_ERROR(stream_->Resume(&checkpoint_, &progress_, &todo));
  double crawl_s = 0, reconcile_s = 0;
  CW_RETURN_IF_ERROR(StartGuard());
  Status s = DumpWithWorkers(todo, &crawl_s, &reconcile_s);
  StopGuard();
  CW_RETURN_IF_ERROR(s);
  return WriteDone(crawl_s, reconcile_s, t0);
}

Status Dumper::StartGuard() {
  progress_.pace_rate = o_.max_items_per_second;
  std::string saved;
  int64_t saved_us = -1;
  const std::string path = checkpoint_.keys_dir() + "/" + kCrawlSleepName;
  if (env_->ReadFileToString(path, &saved).ok()) saved_us = std::atoll(saved.c_str());
  CW_RETURN_IF_ERROR(guard_.Start(saved_us));
  const int64_t original = guard_.original_crawl_sleep_us();
  if (saved_us < 0 && original >= 0 && (o_.adaptive || o_.crawl_sleep_us >= 0))
    CW_RETURN_IF_ERROR(WriteFileAtomically(env_, checkpoint_.keys_dir(), ".tmp-CRAWL_SLEEP", kCrawlSleepName,
                                           std::to_string(original) + "\n"));
  return Status::OK();
}

void Dumper::StopGuard() {
  guard_.Stop();
  const std::string path = checkpoint_.keys_dir() + "/" + kCrawlSleepName;
  if (env_->FileExists(path)) env_->RemoveFile(path);  // restored (or said so on stderr)
}

Status Dumper::SourceStats(ServerStats* out) {
  Status s = control_.Connect(o_.host, o_.port, kConnectTimeoutMs);
  if (s.ok()) s = GetStats(&control_, out);
  control_.Close();
  return s;
}

// Fresh start or --resume: directory checks, META, the source's identity.
Status Dumper::Prepare() {
  CW_RETURN_IF_ERROR(checkpoint_.CreateDirs());
  CW_RETURN_IF_ERROR(control_.Connect(o_.host, o_.port, kConnectTimeoutMs));
  CW_RETURN_IF_ERROR(GetStats(&control_, &stats_before_));
  // Every expiry the dump carries is read on the source's clock: measured to a few ms, and on this
  // host bounded for good by its ceiling (server_clock.h).
  source_same_host_ = SameHostServer(control_, stats_before_, &source_ceiling_why_);
  CW_RETURN_IF_ERROR(MeasureClock(&control_, &source_clock_, source_same_host_));
  // A ceiling still a second in doubt (every tick watched fell beside a whole second of the monotonic
  // clock, as around the wrap of its phase): a few more ticks settle it, once per dump.
  for (int i = 0; i < 2 && source_clock_.has_ceiling() && !source_clock_.ceiling_exact(); ++i) {
    const ServerClock known = source_clock_;
    CW_RETURN_IF_ERROR(MeasureClock(&control_, &source_clock_, true, &known));
  }
  if (source_same_host_ && !source_clock_.has_ceiling()) source_ceiling_why_ = "its clock did not tick while watched";
  control_.Close();  // no idle connection to the source (SourceStats connects for each look)
  CW_RETURN_IF_ERROR(checkpoint_.Open(stats_before_));
  // The stream mode: the destinations' preflight, before anything is written to them.
  if (stream_ && !checkpoint_.Done()) CW_RETURN_IF_ERROR(stream_->Open());
  return Status::OK();
}

Status Dumper::DumpWithWorkers(const std::vector<ChunkTask>& todo, double* crawl_s, double* reconcile_s) {
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::thread> threads;
  for (int i = 0; i < o_.threads; i++)
    workers.emplace_back(new Worker(o_, env_, &checkpoint_, &queue_, &limiter_, &progress_, stream_.get()));
  for (auto& w : workers) {
    w->set_listing_cas(&listing_cas_);
    w->set_source_clock(source_clock_);
    w->set_clock_keeper(&source_clocks_);
    w->set_crawling(&crawling_);
  }
  source_clocks_.Set(source_clock_);
  source_clocks_.Start(o_.host, o_.port, kSourceClockInterval, source_same_host_);
  for (int i = 0; i < o_.threads; i++) threads.emplace_back([w = workers[size_t(i)].get()] { w->Run(); });
  reporter_.Start(o_.progress_interval_s);
  if (stream_) stream_->StartMonitor(&queue_);

  Status s = [&]() -> Status {
    for (const ChunkTask& t : todo) queue_.Push(t);  // what a resumed dump had left
    CW_RETURN_IF_ERROR(CrawlPhase(crawl_s));
    progress_.phase = kDump;
    CW_RETURN_IF_ERROR(queue_.WaitDrained());
    CW_RETURN_IF_ERROR(CheckServer("during the dump"));
    CW_RETURN_IF_ERROR(ReconcilePhase(reconcile_s));
    CW_RETURN_IF_ERROR(queue_.WaitDrained());
    return CheckServer("during the dump");
  }();
  if (!s.ok()) queue_.Fail(s);
  queue_.Close();
  for (std::thread& t : threads) t.join();
  if (stream_) stream_->StopMonitor();
  source_clocks_.Stop();
  reporter_.Stop();
  return queue_.aborted() ? queue_.error() : Status::OK();
}

Status Dumper::CrawlPhase(double* crawl_s) {
  bool by_hash = false;
  if (checkpoint_.ReadCrawled(&crawl_chunks_, &by_hash)) {
    crawl_.set_by_hash(by_hash);
    return Status::OK();
  }
  progress_.phase = kCrawl;
  const auto tc = std::chrono::steady_clock::now();
  crawl_.set_expected_keys(uint64_t(std::max<int64_t>(0, stats_before_.curr_items)));
  crawl_.ResetStats();
  crawling_ = true;
  Status s;
  if (checkpoint_.KeyChunks().empty()) {
    s = crawl_.First();
  } else {
    uint64_t n = 0;  // the first crawl was interrupted: list only what is not listed yet
    s = crawl_.Filtered(&n);
  }
  crawling_ = false;
  CW_RETURN_IF_ERROR(s);
  *crawl_s = Since(tc);
  crawl_chunks_ = checkpoint_.next_chunk();
  return checkpoint_.WriteCrawled(crawl_chunks_, progress_.keys_listed.load(), crawl_.by_hash(), *crawl_s,
                                  crawl_.stats());
}

// Reconciliation runs after every chunk of the first crawl is dumped (so nothing fetches values while
// the crawler walks and it can lock every item). A `metadump hash` crawl takes each hash bucket's lock
// (blocking, never trylock) with table expansion held off, so it lists every item that exists
// throughout; then a reconciliation crawl is needed only if fewer keys were listed than the server
// holds. An LRU crawl (`all`) skips busy items: always reconcile. Reconciliation has converged when a
// pass lists no key that no earlier crawl listed, or the keys listed reach the server's curr_items;
// if it has not after kMaxReconcilePasses, the dump is incomplete (DONE says so and why).
Status Dumper::ReconcilePhase(double* reconcile_s) {
  if (checkpoint_.Reconciled()) return Status::OK();
  ServerStats now;
  CW_RETURN_IF_ERROR(SourceStats(&now));
  const bool short_count = progress_.keys_listed.load() < uint64_t(std::max<int64_t>(0, now.curr_items));
  crawl_.ResetStats();
  if (!(o_.reconcile_always || !crawl_.by_hash() || short_count))
    return checkpoint_.WriteReconciled(checkpoint_.next_chunk(), "hash crawl listed every item", 0, true, 0,
                                       crawl_.stats());
  progress_.phase = kReconcile;
  const auto tr = std::chrono::steady_clock::now();
  crawl_.set_expected_keys(uint64_t(std::max<int64_t>(0, now.curr_items)));
  int passes = 0;
  bool converged = false, hash_pass = false, extra_pass = false;
  uint64_t n = 0;
  // The reconciliation crawl itself may skip a locked item (rarely: seen once in 1M on an idle
  // server), so crawl again while it still finds keys and fewer are listed than the server holds.
  while (!converged && (passes < kMaxReconcilePasses || extra_pass)) {
    extra_pass = false;
    n = 0;
    crawling_ = true;
    Status s = crawl_.Filtered(&n);
    crawling_ = false;
    CW_RETURN_IF_ERROR(s);
    CW_RETURN_IF_ERROR(queue_.WaitDrained());
    CW_RETURN_IF_ERROR(SourceStats(&now));
    passes++;
    std::fprintf(stderr, "cachewarm-dump: reconciliation pass %d listed %" PRIu64 " new keys (%" PRIu64
                 " listed, server holds %" PRId64 ")\n", passes, n, progress_.keys_listed.load(), now.curr_items);
    const bool short_now = progress_.keys_listed.load() < uint64_t(std::max<int64_t>(0, now.curr_items));
    converged = n == 0 || !short_now;
    // An LRU pass that found nothing new proves nothing while keys are still short: it skips busy
    // items, and under load the same key can be busy in two passes (seen: 1 of 100,000 keys missing
    // from a "complete" dump). Expired items not yet reclaimed also count in curr_items, so "short"
    // alone is no proof either: one more pass by hash (every item that exists, no skips; on a server
    // without it the crawl falls back to the LRUs, and says so) decides.
    if (converged && short_now && !crawl_.by_hash() && !hash_pass) {
      crawl_.set_by_hash(true);
      hash_pass = extra_pass = true;  // one pass more, even past kMaxReconcilePasses
      converged = false;
    }
  }
  *reconcile_s = Since(tr);
  return checkpoint_.WriteReconciled(checkpoint_.next_chunk(), "", passes, converged, n, crawl_.stats());
}

Status Dumper::CheckServer(const char* when) {
  ServerStats now;
  Status s = SourceStats(&now);
  if (!s.ok()) return Status::IOError(std::string("checking the source ") + when + ": " + s.message());
  if (!SameServer(stats_before_, now))
    return Status::Server("memcached at " + o_.host + ":" + std::to_string(o_.port) + " restarted " + when +
                          " (pid " + std::to_string(stats_before_.pid) + " -> " + std::to_string(now.pid) +
                          ", uptime " + std::to_string(now.uptime) + " s): its items are gone, the dump is invalid");
  return Status::OK();
}

// DONE's source_protection: the limits, what the guard did and what its probes saw (data-format.md).
std::string Dumper::ProtectionJson(const GuardSummary& g, const ServerStats& after) const {
  const HarmReport& h = g.harm;
  auto i = [](const char* k, int64_t v) { return std::string(", \"") + k + "\": " + std::to_string(v); };
  const ServerStats& b = stats_before_;
  std::string cpu = "-1";
  if (b.rusage_s >= 0 && after.rusage_s >= 0) {
    char c[32];
    std::snprintf(c, sizeof c, "%.2f", after.rusage_s - b.rusage_s);
    cpu = c;
  }
  std::string ratio = "null";  // the tail during the dump over the tail before it
  if (h.before_p99_us > 0 && h.during_window_p99_median_us >= 0) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", double(h.during_window_p99_median_us) / double(h.before_p99_us));
    ratio = b;
  }
  return std::string("{\"adaptive\": ") + (g.adaptive ? "true" : "false") +
         i("max_items_per_second", int64_t(o_.max_items_per_second)) +
         i("max_bytes_per_second", int64_t(o_.max_bytes_per_second)) + i("probe_baseline_us", h.baseline_us) +
         i("probe_threshold_us", h.threshold_us) + i("backoffs", int64_t(g.backoffs)) +
         i("windows", int64_t(h.windows)) + i("congested_windows", int64_t(h.congested_windows)) +
         i("lowest_rate", int64_t(g.lowest_rate)) + i("lowest_bytes_rate", int64_t(g.lowest_bytes_rate)) +
         i("backed_off_ms", h.backed_off_ms) + i("paused_ms", h.paused_ms) +
         i("recalibrations", int64_t(h.recalibrations)) + i("probes_before", int64_t(h.probes_before)) +
         i("probe_p50_before_us", h.before_p50_us) + i("probe_p99_before_us", h.before_p99_us) +
         i("probes_during", int64_t(h.probes_during)) + i("probe_p50_during_us", h.during_p50_us) +
         i("probe_p99_during_us", h.during_p99_us) + i("probe_window_p99_median_us", h.during_window_p99_median_us) +
         i("probe_max_during_us", h.during_max_us) + ", \"probe_p99_ratio\": " + ratio +
         // memcached's own view over this run of the dumper (-1: not reported).
         i("server_conn_yields", b.conn_yields >= 0 && after.conn_yields >= 0 ? after.conn_yields - b.conn_yields : -1) +
         ", \"server_cpu_s\": " + cpu +
         i("crawl_sleep_original_us", g.crawl_sleep_original_us) +
         i("crawl_sleep_max_us", int64_t(g.crawl_sleep_max_us)) + "}";
}

Status Dumper::WriteDone(double crawl_s, double reconcile_s, std::chrono::steady_clock::time_point t0) {
  ServerStats after;
  CW_RETURN_IF_ERROR(SourceStats(&after));
  Manifest m;
  m.node = o_.node_id;
  m.host = o_.host;
  m.port = o_.port;
  m.curr_items_after = after.curr_items;
  CW_RETURN_IF_ERROR(checkpoint_.FillManifest(crawl_chunks_, &m));
  m.crawl_buffer = o_.crawl_buffer;
  m.crawl_s = crawl_s;
  m.reconcile_s = reconcile_s;
  m.total_s = Since(t0);
  m.source_clock_known = true;
  m.source_clock_ms = source_clock_.MillisAtLeast();
  m.source_clock_lo_ms = int64_t(std::floor(source_clock_.lo * 1000.0));
  m.source_clock_hi_ms = int64_t(std::ceil(source_clock_.hi * 1000.0));
  m.source_ceiling = source_clock_.has_ceiling();
  m.source_ceiling_unsettled = source_clock_.has_ceiling() && !source_clock_.ceiling_exact();
  m.source_ceiling_why = source_clock_.has_ceiling() ? "" : source_ceiling_why_;
  m.source_pid = stats_before_.pid;
  m.source_started = stats_before_.started();
  const GuardSummary& g = guard_.summary();
  m.protection_json = ProtectionJson(g, after);
  DecideCompleteness(&m);
  if (stream_) CW_RETURN_IF_ERROR(stream_->Finish(&m));  // a last look at the destinations; the summary
  CW_RETURN_IF_ERROR(WriteManifest(env_, o_.out, m));
  if (!m.complete)
    std::fprintf(stderr, "cachewarm-dump: DONE written, but the dump is INCOMPLETE (\"complete\": false): %s\n",
                 m.incomplete_reason.c_str());
  progress_.phase = kDone;
  reporter_.Print("done");
  if (stream_) stream_->Report();
  return Status::OK();
}

}  // namespace cachewarm
