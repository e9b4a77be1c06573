#include "reread.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "clock.h"
#include "crawl_stream.h"
#include "crawler.h"
#include "net.h"

namespace cachewarm {

namespace {
std::mutex g_reread_mu;
// The reader's ring: these listings are a few slab classes, parsed as they come (the reader's two fixed
// pieces come on top; one re-read at a time: within the memory plan's fixed overhead).
constexpr size_t kRereadRing = 256 << 10;
}  // namespace

Status RelistKeys(const Options& o, const std::string& classes, const std::unordered_set<std::string>& keys,
                  const std::function<bool()>& aborted, std::unordered_map<std::string, Relisted>* out) {
  std::lock_guard<std::mutex> one_at_a_time(g_reread_mu);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t wait_ms = 100;
  const std::string command = "lru_crawler metadump " + classes + "\r\n";
  for (;;) {
    if (aborted()) return Status::IOError("aborted");
    Conn stats;
    ServerStats st;
    CW_RETURN_IF_ERROR(stats.Connect(o.host, o.port, kConnectTimeoutMs));
    CW_RETURN_IF_ERROR(GetStats(&stats, &st));
    stats.Close();
    std::string busy = st.lru_crawler_running == 1 ? "lru_crawler_running 1" : "";
    if (busy.empty()) {
      ListingCas cas;  // the keys asked for are long: the reader keeps their cas
      CrawlReader reader(
          [&](const Slice& k, int64_t exp) {
            if (keys.count(k.ToString())) (*out)[k.ToString()].exptime = exp;
            return Status::OK();
          });
      reader.set_listing_cas(&cas);
      CrawlStream stream(kRereadRing, o.spill_dir,
                         int(std::max<double>(kIoTimeoutMs, o.crawl_busy_timeout_s * 1000)));
      CW_RETURN_IF_ERROR(stream.Start(o.host, o.port, command));
      Status s;
      while (s.ok() && !reader.done()) {
        if (aborted()) {
          s = Status::IOError("aborted");
          break;
        }
        const char* data = nullptr;
        size_t n = 0;
        s = stream.Read(&data, &n);
        if (s.ok() && n == 0) s = Status::Protocol(command.substr(0, command.size() - 2) + " ended without END");
        if (s.ok()) {
          s = reader.Feed(data, n);
          stream.Consumed();
        }
      }
      stream.Stop();
      CW_RETURN_IF_ERROR(s);
      if (!reader.busy()) {
        for (auto& [k, r] : *out) r.cas = cas.Get(Slice(k));
        return Status::OK();
      }
      busy = reader.busy_line();
      out->clear();
    }
    const double waited = Since(t0);
    if (waited >= o.crawl_busy_timeout_s)
      return Status::Server("the crawler stayed busy for " + std::to_string(int(waited)) + " s ('" + busy + "')");
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    while (std::chrono::steady_clock::now() < until) {
      if (aborted()) return Status::IOError("aborted");
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(wait_ms, 50)));
    }
    wait_ms = std::min<int64_t>(wait_ms * 2, 5000);
  }
}

}  // namespace cachewarm
