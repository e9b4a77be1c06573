#include "key_crawl.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <ctime>
#include <thread>

#include "clock.h"
#include "codec.h"
#include "crawl_stream.h"
#include "hot_first.h"
#include "json.h"
#include "key_chunks.h"
#include "key_set_diff.h"
#include "net.h"
#include "recency.h"

namespace cachewarm {

namespace {
// Key chunks waiting for their fsync while the first crawl goes on (counted in PlannedMemory).
constexpr int kPublishQueueDepth = kKeyChunksInFlight;
// Backoff while the crawler is busy: first wait, growth, longest wait.
constexpr int64_t kBusyFirstWaitMs = 100;
constexpr int64_t kBusyMaxWaitMs = 5000;
}  // namespace

KeyCrawl::KeyCrawl(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, Progress* progress)
    : o_(o), env_(env), checkpoint_(checkpoint), queue_(queue), progress_(progress), by_hash_(o.crawl_mode == "hash") {}

void KeyCrawl::Published(uint64_t chunk, uint64_t keys) {
  checkpoint_->AddKeyChunk(chunk, keys);
  queue_->Push(ChunkTask{chunk, 0, 0});
}

Status KeyCrawl::Metadump(const CrawlReader::KeyFn& fn, bool* fell_back) {
  return Metadump(CrawlReader::KeyLaFn([&fn](const Slice& k, int64_t exp, int64_t, bool) { return fn(k, exp); }),
                  fell_back);
}

Status KeyCrawl::Metadump(const CrawlReader::KeyLaFn& fn, bool* fell_back) {
  *fell_back = false;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t wait_ms = kBusyFirstWaitMs;
  for (;;) {
    const std::string mode = by_hash_ ? "hash" : "all";
    // The socket is read on the stream's own thread; this thread parses and writes key lists.
    // Waiting for the first byte is waiting for the crawler too (see CrawlStream): as long as for BUSY.
    const int first_byte_ms = int(std::max<double>(kIoTimeoutMs, o_.crawl_busy_timeout_s * 1000));
    CrawlReader reader(fn, CrawlReader::WithLastAccess());
    reader.set_listing_cas(cas_);
    // Never queue a crawl request behind a running crawl: memcached's worker thread then waits on the
    // crawler's lock, and a hash table expansion starting meanwhile (it pauses every worker while
    // holding that lock) deadlocks the whole server (memcached 1.6.18 to 1.6.45; a source that grows
    // past 1.5 items per bucket does this). Ask `stats` first; a crawl that starts in between is the
    // only window left.
    std::string running;
    CW_RETURN_IF_ERROR(CrawlerRunning(&running));
    if (!running.empty()) reader.SetBusy(running);
    CrawlStream stream(size_t(o_.crawl_buffer), o_.spill_dir, first_byte_ms);
    if (running.empty())
      CW_RETURN_IF_ERROR(stream.Start(o_.host, o_.port, "lru_crawler metadump " + mode + "\r\n"));
    Status s;
    while (s.ok() && !reader.done()) {
      if (queue_->aborted()) {
        s = Status::IOError("aborted");
        break;
      }
      const char* data = nullptr;
      size_t n = 0;
      s = stream.Read(&data, &n);
      if (s.ok() && n == 0) s = Status::Protocol("lru_crawler metadump " + mode + " ended without END");
      if (s.ok()) {
        s = reader.Feed(data, n);
        stream.Consumed();
      }
    }
    stream.Stop();
    const CrawlStream::Stats st = stream.stats();
    stats_.peak_buffered = std::max(stats_.peak_buffered, st.peak_buffered);
    stats_.spilled += st.spilled;
    stats_.answer_wait_s += st.first_byte_wait_s;
    if (!s.ok()) {
      if (reader.unsupported_mode() && by_hash_) {
        stats_.fallback = "hash -> all: " + s.message();
        std::fprintf(stderr, "cachewarm-dump: this memcached has no `lru_crawler metadump hash` (%s): crawling "
                             "the LRUs instead (`metadump all`); reconciliation will list what that skips\n",
                     s.message().c_str());
        by_hash_ = false;
        *fell_back = true;
        return Status::OK();
      }
      return s;
    }
    if (!reader.busy()) {
      if (stats_.modes.empty() || stats_.modes.back() != mode) stats_.modes.push_back(mode);
      return Status::OK();
    }
    // Busy: another crawl is running. Wait and ask again; never switch mode.
    const double waited = Since(t0);
    if (waited >= o_.crawl_busy_timeout_s)
      return Status::Server("lru_crawler metadump " + mode + " stayed busy for " + JsonDouble(waited) + " s (" +
                            std::to_string(stats_.busy_retries) + " retries; last answer: '" + reader.busy_line() +
                            "'): another crawl is running on the server (an operator's, another dump, or memcached's "
                            "own background crawler, which runs after bulk loads); try again later or raise "
                            "--crawl-busy-timeout");
    const int64_t wait = std::min<int64_t>(wait_ms, int64_t((o_.crawl_busy_timeout_s - waited) * 1000) + 1);
    std::fprintf(stderr, "cachewarm-dump: lru_crawler metadump %s: '%s' (another crawl is running); "
                         "retrying in %.1f s\n", mode.c_str(), reader.busy_line().c_str(), double(wait) / 1000);
    stats_.busy_retries++;
    const auto tw = std::chrono::steady_clock::now();
    const auto until = tw + std::chrono::milliseconds(wait);
    while (std::chrono::steady_clock::now() < until) {
      if (queue_->aborted()) return Status::IOError("aborted");
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(wait, 50)));
    }
    stats_.busy_wait_s += Since(tw);
    wait_ms = std::min(wait_ms * 2, kBusyMaxWaitMs);
  }
}

Status KeyCrawl::CrawlerRunning(std::string* busy_line) {
  busy_line->clear();
  if (!stats_conn_.connected()) CW_RETURN_IF_ERROR(stats_conn_.Connect(o_.host, o_.port, kConnectTimeoutMs));
  ServerStats st;
  Status s = GetStats(&stats_conn_, &st);
  if (!s.ok()) {
    stats_conn_.Close();
    return s;
  }
  if (st.lru_crawler_running == 1) *busy_line = "BUSY (stats: lru_crawler_running 1)";
  return Status::OK();
}

Status KeyCrawl::FirstByRecency(bool* fell_back) {
  const auto t0 = std::chrono::steady_clock::now();
  RecencyTiers tiers(checkpoint_->keys_dir() + "/" + kRecencyScratchDir, int64_t(std::time(nullptr)));
  CW_RETURN_IF_ERROR(tiers.Open());
  bool first = true;
  KeyChunkWriter w(
      env_, checkpoint_->keys_dir(), o_.key_file_size, checkpoint_->next_chunk(),
      [&](uint64_t chunk, uint64_t keys) {
        if (first) stats_.first_chunk_s = Since(t0);
        first = false;
        Published(chunk, keys);
      },
      kPublishQueueDepth);
  // The workers need keys while fewer key lists wait for them than there are workers (each pops
  // one list at a time): then the hottest keys listed so far are handed out (hot_first.h).
  HotFirstListing hot(
      &tiers, [&] { return queue_->Waiting() + w.queued() < size_t(std::max(1, o_.threads)); },
      [&](const Slice& url, int64_t exp) { return w.Add(url, exp); }, [&] { return w.CutNow(); });
  CW_RETURN_IF_ERROR(Metadump(
      CrawlReader::KeyLaFn([&](const Slice& k, int64_t exp, int64_t la, bool fetched) {
        progress_->keys_listed++;
        return hot.Add(k, exp, la, fetched);
      }),
      fell_back));
  if (*fell_back) {
    // Nothing was listed (the server has no `metadump hash`), so nothing was handed out.
    return Status::OK();
  }
  CW_RETURN_IF_ERROR(hot.Finish());
  CW_RETURN_IF_ERROR(w.Flush());
  checkpoint_->set_next_chunk(w.next_chunk());
  stats_.order = "recency";
  stats_.tiers.clear();
  for (int t = 0; t < kRecencyTiers; t++)
    if (tiers.counts()[size_t(t)])
      stats_.tiers += (stats_.tiers.empty() ? "" : ",") + std::to_string(t) + ":" + std::to_string(tiers.counts()[size_t(t)]);
  return Status::OK();
}

Status KeyCrawl::First() {
  by_hash_ = o_.crawl_mode == "hash";
  stats_.order = "crawl";
  if (by_hash_ && o_.order == "recency") {
    bool fell_back = false;
    CW_RETURN_IF_ERROR(FirstByRecency(&fell_back));
    if (!fell_back) return Status::OK();
  } else if (by_hash_) {
    KeyChunkWriter w(
        env_, checkpoint_->keys_dir(), o_.key_file_size, checkpoint_->next_chunk(),
        [this](uint64_t chunk, uint64_t keys) { Published(chunk, keys); }, kPublishQueueDepth);
    bool fell_back = false;
    CW_RETURN_IF_ERROR(Metadump(
        [&](const Slice& k, int64_t exp) {
          progress_->keys_listed++;
          return w.Add(k, exp);
        },
        &fell_back));
    if (!fell_back) {
      CW_RETURN_IF_ERROR(w.Flush());
      checkpoint_->set_next_chunk(w.next_chunk());
      return Status::OK();
    }
  }
  // The LRU crawl: every key once, through the key-set difference (no key list exists yet).
  uint64_t n = 0;
  return Filtered(&n);
}

Status KeyCrawl::Filtered(uint64_t* new_keys) {
  const std::string& keys_dir = checkpoint_->keys_dir();
  const std::map<uint64_t, uint64_t> chunks = checkpoint_->KeyChunks();
  uint64_t total = 0;
  for (auto& [c, k] : chunks) total += k;
  KeySetDiff diff(keys_dir + "/" + kDiffScratchDir, std::max(total, expected_keys_));
  std::string contents, raw;
  for (auto& [chunk, k] : chunks) {
    // A named copy: C++17 lambdas cannot capture a structured binding (GCC allows it, clang does not).
    const uint64_t c = chunk;
    CW_RETURN_IF_ERROR(env_->ReadFileToString(keys_dir + "/" + KeyChunkName(c), &contents));
    CW_RETURN_IF_ERROR(ForEachKeyLine(contents, [&](const Slice& url, int64_t) {
      if (!UrlDecode(url, &raw)) return Status::Corruption("bad key in " + KeyChunkName(c));
      return diff.AddExisting(raw);
    }));
  }
  const CrawlReader::KeyFn add = [&](const Slice& url, int64_t exp) {
    if (!UrlDecode(url, &raw)) return Status::Protocol("bad URL-encoded key from the crawler: " + url.ToString());
    return diff.AddCandidate(raw, url, exp);
  };
  bool fell_back = false;
  CW_RETURN_IF_ERROR(Metadump(add, &fell_back));
  if (fell_back) CW_RETURN_IF_ERROR(Metadump(add, &fell_back));
  KeyChunkWriter w(env_, keys_dir, o_.key_file_size, checkpoint_->next_chunk(),
                   [this](uint64_t chunk, uint64_t keys) { Published(chunk, keys); });
  uint64_t n = 0;
  CW_RETURN_IF_ERROR(diff.Emit([&](const Slice& url, int64_t exp) {
    n++;
    progress_->keys_listed++;
    return w.Add(url, exp);
  }));
  CW_RETURN_IF_ERROR(w.Flush());
  stats_.duplicates += diff.duplicates();
  checkpoint_->set_next_chunk(w.next_chunk());
  *new_keys = n;
  return Status::OK();
}

}  // namespace cachewarm
