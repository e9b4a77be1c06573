#include "key_crawl.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "codec.h"
#include "key_chunks.h"
#include "key_set_diff.h"
#include "net.h"

namespace cachewarm {

namespace {
// Key chunks waiting for their fsync while the first crawl goes on (counted in PlannedMemory).
constexpr int kPublishQueueDepth = kKeyChunksInFlight;
constexpr size_t kRecvBytes = 1 << 18;
}  // namespace

KeyCrawl::KeyCrawl(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, Progress* progress)
    : o_(o), env_(env), checkpoint_(checkpoint), queue_(queue), progress_(progress), by_hash_(o.crawl_mode == "hash") {}

void KeyCrawl::Published(uint64_t chunk, uint64_t keys) {
  checkpoint_->AddKeyChunk(chunk, keys);
  queue_->Push(ChunkTask{chunk, 0, 0});
}

Status KeyCrawl::Metadump(const CrawlReader::KeyFn& fn) {
  for (int attempt = 0;; attempt++) {
    Conn c;
    CW_RETURN_IF_ERROR(c.Connect(o_.host, o_.port, kConnectTimeoutMs));
    // `metadump hash` walks the hash table and, measured on 1.6.18, lists every item even while
    // values are fetched (`all` walks the LRUs and skips items it cannot lock). Older servers
    // without it answer an error: fall back to `all` (reconciliation catches what it skips).
    CW_RETURN_IF_ERROR(c.SendAll(std::string("lru_crawler metadump ") + (by_hash_ ? "hash" : "all") + "\r\n",
                                 kIoTimeoutMs));
    CrawlReader reader(fn);
    std::unique_ptr<char[]> buf(new char[kRecvBytes]);
    while (!reader.done()) {
      if (queue_->aborted()) return Status::IOError("aborted");
      size_t n = 0;
      Status s = c.Recv(buf.get(), kRecvBytes, &n, kIoTimeoutMs);
      if (!s.ok()) return Status::IOError("lru_crawler metadump: " + s.message());
      Status fs = reader.Feed(buf.get(), n);
      if (!fs.ok() && by_hash_ && reader.keys() == 0 && fs.code() == Status::kServer) {
        by_hash_ = false;
        break;
      }
      CW_RETURN_IF_ERROR(fs);
    }
    if (!reader.done()) continue;  // retry with `metadump all`
    if (!reader.busy()) return Status::OK();
    if (attempt >= 300) return Status::Server("lru_crawler stayed busy for 60 s (another crawl is running?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Status KeyCrawl::First() {
  KeyChunkWriter w(
      env_, checkpoint_->keys_dir(), o_.key_file_size, checkpoint_->next_chunk(),
      [this](uint64_t chunk, uint64_t keys) { Published(chunk, keys); }, kPublishQueueDepth);
  by_hash_ = o_.crawl_mode == "hash";
  CW_RETURN_IF_ERROR(Metadump([&](const Slice& k, int64_t exp) {
    progress_->keys_listed++;
    return w.Add(k, exp);
  }));
  CW_RETURN_IF_ERROR(w.Flush());
  checkpoint_->set_next_chunk(w.next_chunk());
  return Status::OK();
}

Status KeyCrawl::Filtered(uint64_t* new_keys) {
  const std::string& keys_dir = checkpoint_->keys_dir();
  const std::map<uint64_t, uint64_t> chunks = checkpoint_->KeyChunks();
  uint64_t total = 0;
  for (auto& [c, k] : chunks) total += k;
  KeySetDiff diff(keys_dir + "/" + kDiffScratchDir, total);
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
  CW_RETURN_IF_ERROR(Metadump([&](const Slice& url, int64_t exp) {
    if (!UrlDecode(url, &raw)) return Status::Protocol("bad URL-encoded key from the crawler: " + url.ToString());
    return diff.AddCandidate(raw, url, exp);
  }));
  KeyChunkWriter w(env_, keys_dir, o_.key_file_size, checkpoint_->next_chunk(),
                   [this](uint64_t chunk, uint64_t keys) { Published(chunk, keys); });
  uint64_t n = 0;
  CW_RETURN_IF_ERROR(diff.Emit([&](const Slice& url, int64_t exp) {
    n++;
    progress_->keys_listed++;
    return w.Add(url, exp);
  }));
  CW_RETURN_IF_ERROR(w.Flush());
  checkpoint_->set_next_chunk(w.next_chunk());
  *new_keys = n;
  return Status::OK();
}

}  // namespace cachewarm
