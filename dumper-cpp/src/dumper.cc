#include "dumper.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <thread>

#include "codec.h"
#include "crawler.h"
#include "json.h"
#include "key_chunks.h"
#include "key_set_diff.h"
#include "response_stream.h"

namespace cachewarm {

namespace {

const char* const kPhaseNames[] = {"start", "crawl", "dump", "reconcile", "done"};
enum Phase { kStart, kCrawl, kDump, kReconcile, kDone };
constexpr int kIoTimeoutMs = 60000;
constexpr int kConnectTimeoutMs = 5000;
constexpr int kMaxReconcilePasses = 4;
// One batch in flight per connection: measured on 2 cores (1M x 1 KB, memcached -t 2), a second
// batch in flight made the dump ~1.7x slower (it starves memcached's crawler of CPU), one batch
// ran at the ceiling reader's speed.
constexpr size_t kBatchesInFlight = 1;
// A batch asks for at most --batch keys and about this many bytes of values. Measured on 2 cores,
// alternating runs, medians of 5, twice: 1 MiB beat 256 KiB in all four comparisons (1M x 1 KB:
// 617k vs 551-580k items/s, 200k x 10 KB: 100-116k vs 93-98k); 512 KiB was between. (An earlier
// measurement that favoured 256 KiB ran while other builds loaded the machine.)
constexpr uint64_t kTargetBatchBytes = 1ULL << 20;
// Key chunks waiting for their fsync while the crawl goes on (counted in PlannedMemory).
constexpr int kPublishQueueDepth = kKeyChunksInFlight;

uint64_t NowMs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// One worker: one connection, two receive buffers, one data file open at a time.
class Worker : public RecordSink {
 public:
  explicit Worker(Dumper* d)
      : d_(d), stream_(d->o_.buffer_size, d->o_.min_ttl),
        writer_(d->env_, d->o_.out, d->o_.node_id, d->dump_start_ms_) {
    keys_.reserve(d->o_.key_file_size + 8192);
    send_.reserve(size_t(d->o_.batch) * kSendBytesPerKey);
    // Effective batch: small enough that a low --max-items-per-second is not bursty.
    batch_ = d->o_.batch;
    const uint64_t rate = d->o_.max_items_per_second;
    if (rate) batch_ = int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(batch_), rate / 10 / uint64_t(d->o_.threads))));
    adaptive_batch_ = batch_;
  }

  void Run() {
    Status s = conn_.Connect(d_->o_.host, d_->o_.port, kConnectTimeoutMs);
    ChunkTask t;
    while (s.ok() && d_->Pop(&t)) {
      s = DoChunk(t);
      if (s.ok()) d_->ChunkDone();
    }
    writer_.Abandon();
    if (!s.ok()) d_->Fail(s);
  }

  Status Write(const struct iovec* iov, int iovcnt, uint64_t records) override {
    uint64_t n = 0;
    for (int i = 0; i < iovcnt; i++) n += iov[i].iov_len;
    d_->progress_.bytes += n;
    d_->progress_.items += records;
    batch_bytes_ += n;
    return writer_.AppendRaw(iov, iovcnt, records);
  }

  Status OnBatchEnd(uint64_t hits, uint64_t skipped) override {
    if (inflight_.empty()) return Status::Protocol("MN without a batch in flight");
    const Batch b = inflight_.front();
    inflight_.pop_front();
    if (hits > b.size) return Status::Protocol("more values than keys requested in a batch");
    const uint64_t m = (b.size - hits) + skipped;
    // Size the next batch so its response is about kTargetBatchBytes (large values: fewer keys).
    if (hits > skipped) {
      const uint64_t per_item = std::max<uint64_t>(1, batch_bytes_ / (hits - skipped));
      adaptive_batch_ = int(std::clamp<uint64_t>(kTargetBatchBytes / per_item, 8, uint64_t(batch_)));
    }
    batch_bytes_ = 0;
    file_misses_ += m;
    d_->progress_.misses += m;
    d_->progress_.skipped_min_ttl += skipped;
    // Cut a new part at this batch boundary once the file is big enough.
    if (writer_.file_bytes() >= d_->o_.data_file_size && b.end < nkeys_) {
      CW_RETURN_IF_ERROR(FinishPart(b.end));
      CW_RETURN_IF_ERROR(writer_.Open(chunk_, part_, b.end));
    }
    return Status::OK();
  }

 private:
  struct Batch {
    uint64_t end;   // one past the last key index of the batch
    uint64_t size;  // keys in the batch
  };

  Status FinishPart(uint64_t end) {
    PublishedFile f;
    CW_RETURN_IF_ERROR(writer_.Finish(end, file_misses_, &f));
    d_->AddPublished(f);
    file_misses_ = 0;
    part_++;
    return Status::OK();
  }

  Status LoadKeys(uint64_t chunk) {
    CW_RETURN_IF_ERROR(d_->env_->ReadFileToString(d_->keys_dir_ + "/" + KeyChunkName(chunk), &keys_));
    lines_.clear();
    return ForEachKeyLine(keys_, [&](const Slice& k, int64_t) {
      lines_.push_back({uint32_t(k.data() - keys_.data()), uint32_t(k.size())});
      return Status::OK();
    });
  }

  // Appends "mg <key> [b] v f t k q u\r\n" for key index i.
  Status AppendGet(uint64_t i) {
    const Slice url(keys_.data() + lines_[i].first, lines_[i].second);
    if (!UrlDecode(url, &raw_)) return Status::Corruption("bad URL-encoded key in key list: " + url.ToString());
    if (raw_.empty() || raw_.size() > kMaxKeyLen) return Status::Corruption("key length out of range: " + url.ToString());
    send_ += "mg ";
    if (IsPlainKey(raw_)) {
      send_ += raw_;
      send_ += " v f t k q u\r\n";
    } else {
      Base64Encode(raw_, &b64_);
      if (b64_.size() > kMaxKeyLen)
        return Status::InvalidArgument("binary key too long to request in base64 (" + std::to_string(raw_.size()) +
                                       " bytes): " + url.ToString());
      send_ += b64_;
      send_ += " b v f t k q u\r\n";
    }
    return Status::OK();
  }

  Status DoChunk(const ChunkTask& t) {
    CW_RETURN_IF_ERROR(LoadKeys(t.chunk));
    chunk_ = t.chunk;
    part_ = t.next_part;
    nkeys_ = lines_.size();
    file_misses_ = 0;
    inflight_.clear();
    send_.clear();
    stream_.Reset();
    if (t.start_index > nkeys_) return Status::Corruption("published parts go past the end of key list " + KeyChunkName(t.chunk));
    CW_RETURN_IF_ERROR(writer_.Open(chunk_, part_, t.start_index));
    uint64_t next = t.start_index;
    size_t send_off = 0;
    auto last_rx = std::chrono::steady_clock::now();
    for (;;) {
      if (d_->aborted()) return Status::IOError("aborted");
      if (send_off == send_.size() && next < nkeys_ && inflight_.size() < kBatchesInFlight) {
        const uint64_t n = std::min<uint64_t>(uint64_t(adaptive_batch_), nkeys_ - next);
        d_->limiter_.Acquire(n);
        send_.clear();
        send_off = 0;
        for (uint64_t i = next; i < next + n; i++) CW_RETURN_IF_ERROR(AppendGet(i));
        send_ += "mn\r\n";
        next += n;
        inflight_.push_back({next, n});
      }
      if (send_off == send_.size() && next >= nkeys_ && inflight_.empty()) break;
      struct pollfd p = {conn_.fd(), short(POLLIN | (send_off < send_.size() ? POLLOUT : 0)), 0};
      int pr = ::poll(&p, 1, 1000);
      if (pr < 0 && errno != EINTR) return Status::IOError(ErrnoMessage("poll", errno));
      if (pr <= 0) {
        if (Since(last_rx) * 1000 > kIoTimeoutMs)
          return Status::IOError("timed out: " + conn_.peer() + " sent nothing for " +
                                 std::to_string(kIoTimeoutMs / 1000) + " s");
        continue;
      }
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t r = ::recv(conn_.fd(), stream_.WritePtr(), stream_.WritableBytes(), 0);
        if (r == 0) return Status::IOError("connection closed by " + conn_.peer() + " mid-dump (killed or restarted?)");
        if (r < 0 && errno != EAGAIN && errno != EINTR)
          return Status::IOError(ErrnoMessage("connection to " + conn_.peer() + " lost mid-dump (killed or restarted?)", errno));
        if (r > 0) {
          last_rx = std::chrono::steady_clock::now();
          stream_.set_now(int64_t(std::time(nullptr)));
          CW_RETURN_IF_ERROR(stream_.Commit(size_t(r), this));
        }
      }
      if ((p.revents & POLLOUT) && send_off < send_.size()) {
        ssize_t w = ::send(conn_.fd(), send_.data() + send_off, send_.size() - send_off, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
          return Status::IOError(ErrnoMessage("connection to " + conn_.peer() + " lost mid-dump (killed or restarted?)", errno));
        if (w > 0) send_off += size_t(w);
      }
    }
    if (!stream_.AtBoundary()) return Status::Protocol("unexpected bytes after the last MN from " + conn_.peer());
    return FinishPart(nkeys_);
  }

  Dumper* d_;
  Conn conn_;
  ResponseStream stream_;
  DataFileWriter writer_;
  std::string keys_, send_, raw_, b64_;
  std::vector<std::pair<uint32_t, uint32_t>> lines_;
  std::deque<Batch> inflight_;
  int batch_;
  int adaptive_batch_ = 0;  // set from batch_ in the constructor, then from the values' sizes
  uint64_t batch_bytes_ = 0;
  uint64_t chunk_ = 0, nkeys_ = 0, file_misses_ = 0;
  uint32_t part_ = 0;
};

Dumper::Dumper(const Options& o, Env* env)
    : o_(o), env_(env), keys_dir_(o.out + "/keys"), limiter_(o.max_items_per_second),
      crawl_by_hash_(o.crawl_mode == "hash") {}

void Dumper::Fail(const Status& s) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_.ok()) error_ = s;
  aborted_ = true;
  cv_.notify_all();
}

void Dumper::Push(const ChunkTask& t) {
  std::lock_guard<std::mutex> l(mu_);
  queue_.push_back(t);
  outstanding_++;
  cv_.notify_all();
}

bool Dumper::Pop(ChunkTask* t) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !queue_.empty() || closed_ || aborted_; });
  if (aborted_ || queue_.empty()) return false;
  *t = queue_.front();
  queue_.pop_front();
  return true;
}

void Dumper::ChunkDone() {
  std::lock_guard<std::mutex> l(mu_);
  outstanding_--;
  cv_.notify_all();
}

Status Dumper::WaitDrained() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return outstanding_ == 0 || aborted_; });
  return aborted_ ? error_ : Status::OK();
}

void Dumper::AddPublished(const PublishedFile& f) {
  std::lock_guard<std::mutex> l(mu_);
  files_.push_back(f);
  progress_.files++;
}

void Dumper::PrintProgress(const char* event) {
  std::lock_guard<std::mutex> l(out_mu_);
  std::printf("{\"event\": \"%s\", \"phase\": \"%s\", \"keys_listed\": %" PRIu64 ", \"items\": %" PRIu64
              ", \"bytes\": %" PRIu64 ", \"files\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"skipped_min_ttl\": %" PRIu64
              ", \"time_ms\": %" PRIu64 "}\n",
              event, kPhaseNames[progress_.phase.load()], progress_.keys_listed.load(), progress_.items.load(),
              progress_.bytes.load(), progress_.files.load(), progress_.misses.load(),
              progress_.skipped_min_ttl.load(), NowMs());
  std::fflush(stdout);
}

Status Dumper::CheckServer(const char* when) {
  ServerStats now;
  Status s = GetStats(&control_, &now);
  if (!s.ok()) return Status::IOError(std::string("checking the source ") + when + ": " + s.message());
  if (!SameServer(stats_before_, now))
    return Status::Server("memcached at " + o_.host + ":" + std::to_string(o_.port) + " restarted " + when +
                          " (pid " + std::to_string(stats_before_.pid) + " -> " + std::to_string(now.pid) +
                          ", uptime " + std::to_string(now.uptime) + " s): its items are gone, the dump is invalid");
  return Status::OK();
}

uint64_t Dumper::CountChunkKeys(uint64_t chunk) { return chunk_keys_.count(chunk) ? chunk_keys_[chunk] : 0; }

// Fresh start or --resume: directory checks, META, the source's identity.
Status Dumper::Prepare() {
  // Like mkdir -p: every missing parent of --out too.
  for (size_t p = o_.out.find('/', 1); p != std::string::npos; p = o_.out.find('/', p + 1))
    CW_RETURN_IF_ERROR(env_->CreateDirIfMissing(o_.out.substr(0, p)));
  CW_RETURN_IF_ERROR(env_->CreateDirIfMissing(o_.out));
  CW_RETURN_IF_ERROR(env_->CreateDirIfMissing(keys_dir_));
  CW_RETURN_IF_ERROR(control_.Connect(o_.host, o_.port, kConnectTimeoutMs));
  CW_RETURN_IF_ERROR(GetStats(&control_, &stats_before_));
  const std::string meta_path = keys_dir_ + "/META";
  std::string meta;
  Status ms = env_->ReadFileToString(meta_path, &meta);
  if (!ms.ok() && !ms.IsNotFound()) return ms;
  const bool have_meta = ms.ok();
  if (!o_.resume) {
    std::vector<std::string> names;
    CW_RETURN_IF_ERROR(env_->GetChildren(o_.out, &names));
    for (const std::string& n : names)
      if (n != "keys" && n != "lost+found")
        return Status::InvalidArgument("--out " + o_.out + " already holds a dump ('" + n +
                                       "'): use --resume to continue it, or an empty directory");
    std::vector<std::string> knames;
    CW_RETURN_IF_ERROR(env_->GetChildren(keys_dir_, &knames));
    if (!knames.empty())
      return Status::InvalidArgument("--out " + o_.out + "/keys is not empty: use --resume to continue that dump");
    dump_start_ms_ = NowMs();
    curr_items_before_ = stats_before_.curr_items;
  } else {
    curr_items_before_ = stats_before_.curr_items;  // unless META remembers the first run's
    if (!have_meta) return Status::InvalidArgument("--resume: no dump to resume in " + o_.out + " (keys/META missing)");
    std::string node, host;
    int64_t port = 0, start = 0, pid = 0, started = 0, resumes = 0;
    if (!JsonGetString(meta, "node", &node) || !JsonGetString(meta, "host", &host) ||
        !JsonGetInt(meta, "port", &port) || !JsonGetInt(meta, "dump_start_ms", &start) ||
        !JsonGetInt(meta, "pid", &pid) || !JsonGetInt(meta, "started", &started))
      return Status::Corruption(meta_path + " is unreadable");
    JsonGetInt(meta, "resumes", &resumes);
    JsonGetInt(meta, "curr_items_before", &curr_items_before_);
    if (node != o_.node_id || host != o_.host || port != o_.port)
      return Status::InvalidArgument("--resume: " + o_.out + " holds a dump of node " + node + " (" + host + ":" +
                                     std::to_string(port) + "), not of " + o_.node_id + " (" + o_.host + ":" +
                                     std::to_string(o_.port) + ")");
    ServerStats then;
    then.pid = pid;
    then.time = started;
    if (!SameServer(then, stats_before_))
      return Status::Server("--resume: memcached at " + o_.host + ":" + std::to_string(o_.port) +
                            " restarted since the dump began (pid " + std::to_string(pid) + " -> " +
                            std::to_string(stats_before_.pid) + "); its items changed: start a new dump");
    dump_start_ms_ = uint64_t(start);
    resumes_ = uint64_t(resumes) + 1;
    // Temporary files are never part of the checkpoint.
    for (const std::string& dir : {o_.out, keys_dir_}) {
      std::vector<std::string> names;
      CW_RETURN_IF_ERROR(env_->GetChildren(dir, &names));
      for (const std::string& n : names)
        if (n.rfind(".tmp-", 0) == 0 && n != ".tmp-diff") CW_RETURN_IF_ERROR(env_->RemoveFile(dir + "/" + n));
    // keys/.tmp-diff (reconciliation scratch) is a directory: KeySetDiff clears it when it starts.
    }
  }
  const std::string m = "{\"node\": " + JsonQuote(o_.node_id) + ", \"host\": " + JsonQuote(o_.host) +
                        ", \"port\": " + std::to_string(o_.port) + ", \"dump_start_ms\": " + std::to_string(dump_start_ms_) +
                        ", \"pid\": " + std::to_string(stats_before_.pid) + ", \"started\": " +
                        std::to_string(stats_before_.started()) + ", \"resumes\": " + std::to_string(resumes_) +
                        ", \"curr_items_before\": " + std::to_string(curr_items_before_) + "}\n";
  return WriteFileAtomically(env_, keys_dir_, ".tmp-META", "META", m);
}

// Reads the checkpoint: key lists and published data files; builds the chunks still to dump.
Status Dumper::ScanPublished() {
  std::vector<std::string> names;
  CW_RETURN_IF_ERROR(env_->GetChildren(keys_dir_, &names));
  std::string contents;
  for (const std::string& n : names) {
    uint64_t c;
    if (!ParseKeyChunkName(n, &c)) continue;
    CW_RETURN_IF_ERROR(env_->ReadFileToString(keys_dir_ + "/" + n, &contents));
    uint64_t k = 0;
    CW_RETURN_IF_ERROR(ForEachKeyLine(contents, [&](const Slice&, int64_t) {
      k++;
      return Status::OK();
    }));
    chunk_keys_[c] = k;
    progress_.keys_listed += k;
    next_chunk_ = std::max(next_chunk_, c + 1);
  }
  CW_RETURN_IF_ERROR(env_->GetChildren(o_.out, &names));
  std::map<uint64_t, std::vector<PublishedFile>> by_chunk;
  for (const std::string& n : names) {
    ParsedName pn;
    if (!ParseDataFileName(n, &pn)) continue;
    if (pn.node != o_.node_id) return Status::InvalidArgument("--out holds a data file of another node: " + n);
    PublishedFile f;
    CW_RETURN_IF_ERROR(ReadDataFile(env_, o_.out, n, false, &f, nullptr));
    if (!chunk_keys_.count(f.chunk)) return Status::Corruption(n + ": its key list is missing from keys/");
    by_chunk[f.chunk].push_back(f);
  }
  for (auto& [chunk, keys] : chunk_keys_) {
    std::vector<PublishedFile>& fs = by_chunk[chunk];
    std::sort(fs.begin(), fs.end(), [](const PublishedFile& a, const PublishedFile& b) { return a.part < b.part; });
    uint64_t end = 0;
    for (size_t i = 0; i < fs.size(); i++) {
      if (fs[i].part != i || fs[i].first_key_index != end || fs[i].end_key_index > keys)
        return Status::Corruption("published parts of chunk " + std::to_string(chunk) + " are not contiguous at " + fs[i].name);
      end = fs[i].end_key_index;
      files_.push_back(fs[i]);
      progress_.files++;
      progress_.items += fs[i].records;
      progress_.misses += fs[i].misses;
      progress_.bytes += fs[i].bytes - (kHeaderFixed + o_.node_id.size()) - kTrailerSize;  // record bytes
    }
    if (fs.empty() || end < keys) resume_tasks_[chunk] = ChunkTask{chunk, end, uint32_t(fs.size())};
  }
  return Status::OK();
}

// Runs one `lru_crawler metadump all` on its own connection, retrying while the crawler is busy.
Status Dumper::CrawlInto(const std::function<Status(const Slice&, int64_t)>& fn) {
  for (int attempt = 0;; attempt++) {
    Conn c;
    CW_RETURN_IF_ERROR(c.Connect(o_.host, o_.port, kConnectTimeoutMs));
    // `metadump hash` walks the hash table and, measured on 1.6.18, lists every item even while
    // values are fetched (`all` walks the LRUs and skips items it cannot lock). Older servers
    // without it answer an error: fall back to `all` (reconciliation catches what it skips).
    CW_RETURN_IF_ERROR(c.SendAll(std::string("lru_crawler metadump ") + (crawl_by_hash_ ? "hash" : "all") + "\r\n",
                                 kIoTimeoutMs));
    CrawlReader reader(fn);
    std::unique_ptr<char[]> buf(new char[1 << 18]);
    while (!reader.done()) {
      if (aborted()) return Status::IOError("aborted");
      size_t n = 0;
      Status s = c.Recv(buf.get(), 1 << 18, &n, kIoTimeoutMs);
      if (!s.ok()) return Status::IOError("lru_crawler metadump: " + s.message());
      Status fs = reader.Feed(buf.get(), n);
      if (!fs.ok() && crawl_by_hash_ && reader.keys() == 0 && fs.code() == Status::kServer) {
        crawl_by_hash_ = false;
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

// The first crawl, pipelined: each key chunk goes to the workers as soon as it is published.
Status Dumper::Crawl(bool pipelined) {
  KeyChunkWriter w(env_, keys_dir_, o_.key_file_size, next_chunk_, [&](uint64_t chunk, uint64_t keys) {
    {
      std::lock_guard<std::mutex> l(mu_);
      chunk_keys_[chunk] = keys;
    }
    if (pipelined) Push(ChunkTask{chunk, 0, 0});
  }, kPublishQueueDepth);
  crawl_by_hash_ = o_.crawl_mode == "hash";
  CW_RETURN_IF_ERROR(CrawlInto([&](const Slice& k, int64_t exp) {
    progress_.keys_listed++;
    return w.Add(k, exp);
  }));
  CW_RETURN_IF_ERROR(w.Flush());
  next_chunk_ = w.next_chunk();
  return Status::OK();
}

// A crawl that lists, as new chunks, only keys not already in any key list (reconciliation, and a
// resumed dump whose first crawl was interrupted).
Status Dumper::FilteredCrawl(uint64_t* new_keys) {
  uint64_t total = 0;
  for (auto& [c, k] : chunk_keys_) total += k;
  KeySetDiff diff(keys_dir_ + "/.tmp-diff", total);
  std::string contents, raw;
  for (auto& [chunk, k] : chunk_keys_) {
    // A named copy: C++17 lambdas cannot capture a structured binding (GCC allows it, clang does not).
    const uint64_t c = chunk;
    CW_RETURN_IF_ERROR(env_->ReadFileToString(keys_dir_ + "/" + KeyChunkName(c), &contents));
    CW_RETURN_IF_ERROR(ForEachKeyLine(contents, [&](const Slice& url, int64_t) {
      if (!UrlDecode(url, &raw)) return Status::Corruption("bad key in " + KeyChunkName(c));
      return diff.AddExisting(raw);
    }));
  }
  CW_RETURN_IF_ERROR(CrawlInto([&](const Slice& url, int64_t exp) {
    if (!UrlDecode(url, &raw)) return Status::Protocol("bad URL-encoded key from the crawler: " + url.ToString());
    return diff.AddCandidate(raw, url, exp);
  }));
  KeyChunkWriter w(env_, keys_dir_, o_.key_file_size, next_chunk_, [&](uint64_t chunk, uint64_t keys) {
    {
      std::lock_guard<std::mutex> l(mu_);
      chunk_keys_[chunk] = keys;
    }
    Push(ChunkTask{chunk, 0, 0});
  });
  uint64_t n = 0;
  CW_RETURN_IF_ERROR(diff.Emit([&](const Slice& url, int64_t exp) {
    n++;
    progress_.keys_listed++;
    return w.Add(url, exp);
  }));
  CW_RETURN_IF_ERROR(w.Flush());
  next_chunk_ = w.next_chunk();
  *new_keys = n;
  return Status::OK();
}

Status Dumper::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  CW_RETURN_IF_ERROR(Prepare());
  if (env_->FileExists(o_.out + "/DONE")) {
    PrintProgress("done");
    return Status::OK();  // a resumed dump that had already finished
  }
  CW_RETURN_IF_ERROR(ScanPublished());

  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::thread> threads;
  for (int i = 0; i < o_.threads; i++) workers.emplace_back(new Worker(this));
  for (int i = 0; i < o_.threads; i++) threads.emplace_back([w = workers[size_t(i)].get()] { w->Run(); });
  std::atomic<bool> stop_progress{false};
  std::thread reporter([&] {
    auto next = std::chrono::steady_clock::now();
    while (!stop_progress) {
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(o_.progress_interval_s));
      while (!stop_progress && std::chrono::steady_clock::now() < next)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!stop_progress) PrintProgress("progress");
    }
  });

  double crawl_s = 0, reconcile_s = 0;
  Status s = [&]() -> Status {
    for (auto& [c, t] : resume_tasks_) Push(t);
    // Phase 1: the crawl (pipelined with the workers).
    std::string crawled;
    Status cs = env_->ReadFileToString(keys_dir_ + "/CRAWLED", &crawled);
    int64_t v = 0;
    if (cs.ok() && JsonGetInt(crawled, "chunks", &v)) {
      crawl_chunks_ = uint64_t(v);
      std::string mode;
      crawl_by_hash_ = JsonGetString(crawled, "mode", &mode) && mode == "hash";
    } else {
      progress_.phase = kCrawl;
      const auto tc = std::chrono::steady_clock::now();
      if (chunk_keys_.empty()) {
        CW_RETURN_IF_ERROR(Crawl(true));
      } else {
        uint64_t n = 0;  // the first crawl was interrupted: list only what is not listed yet
        CW_RETURN_IF_ERROR(FilteredCrawl(&n));
      }
      crawl_s = Since(tc);
      crawl_chunks_ = next_chunk_;
      CW_RETURN_IF_ERROR(WriteFileAtomically(
          env_, keys_dir_, ".tmp-CRAWLED", "CRAWLED",
          "{\"chunks\": " + std::to_string(next_chunk_) + ", \"keys\": " + std::to_string(progress_.keys_listed.load()) +
              ", \"mode\": \"" + (crawl_by_hash_ ? "hash" : "all") + "\", \"crawl_s\": " + JsonDouble(crawl_s) + "}\n"));
    }
    progress_.phase = kDump;
    CW_RETURN_IF_ERROR(WaitDrained());
    CW_RETURN_IF_ERROR(CheckServer("during the dump"));
    // Phase 2: reconciliation, after every chunk of the first crawl is dumped (so nothing fetches
    // values while the crawler walks and it can lock every item). A `metadump hash` crawl takes each
    // hash bucket's lock (blocking, never trylock) with table expansion held off, so it lists every
    // item that exists throughout; then a reconciliation crawl is needed only if fewer keys were
    // listed than the server holds. An LRU crawl (`all`) skips busy items: always reconcile.
    ServerStats now;
    CW_RETURN_IF_ERROR(GetStats(&control_, &now));
    const bool short_count = progress_.keys_listed.load() < uint64_t(std::max<int64_t>(0, now.curr_items));
    if (!env_->FileExists(keys_dir_ + "/RECONCILED") && (o_.reconcile_always || !crawl_by_hash_ || short_count)) {
      progress_.phase = kReconcile;
      const auto tr = std::chrono::steady_clock::now();
      // The reconciliation crawl itself may skip a locked item (rarely: seen once in 1M on an idle
      // server), so crawl again while fewer keys are listed than the server holds, a few times at most.
      for (int pass = 0; pass < kMaxReconcilePasses; pass++) {
        uint64_t n = 0;
        CW_RETURN_IF_ERROR(FilteredCrawl(&n));
        CW_RETURN_IF_ERROR(WaitDrained());
        CW_RETURN_IF_ERROR(GetStats(&control_, &now));
        std::fprintf(stderr, "cachewarm-dump: reconciliation pass %d listed %" PRIu64 " new keys (%" PRIu64
                     " listed, server holds %" PRId64 ")\n", pass + 1, n, progress_.keys_listed.load(), now.curr_items);
        if (progress_.keys_listed.load() >= uint64_t(std::max<int64_t>(0, now.curr_items))) break;
      }
      reconcile_s = Since(tr);
      CW_RETURN_IF_ERROR(WriteFileAtomically(env_, keys_dir_, ".tmp-RECONCILED", "RECONCILED",
                                             "{\"chunks\": " + std::to_string(next_chunk_) + "}\n"));
    }
    if (!env_->FileExists(keys_dir_ + "/RECONCILED"))
      CW_RETURN_IF_ERROR(WriteFileAtomically(env_, keys_dir_, ".tmp-RECONCILED", "RECONCILED",
                                             "{\"chunks\": " + std::to_string(next_chunk_) +
                                                 ", \"skipped\": \"hash crawl listed every item\"}\n"));
    CW_RETURN_IF_ERROR(WaitDrained());
    return CheckServer("during the dump");
  }();
  if (!s.ok()) Fail(s);
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  for (std::thread& t : threads) t.join();
  stop_progress = true;
  reporter.join();
  if (aborted()) {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

  ServerStats after;
  CW_RETURN_IF_ERROR(GetStats(&control_, &after));
  Manifest m;
  m.node = o_.node_id;
  m.host = o_.host;
  m.port = o_.port;
  m.curr_items_before = curr_items_before_;
  m.curr_items_after = after.curr_items;
  m.dump_start_ms = dump_start_ms_;
  m.files = files_;
  for (auto& [c, k] : chunk_keys_) {
    m.keys_listed += k;
    if (c >= crawl_chunks_) m.reconciled_keys += k;
  }
  m.skipped_min_ttl = progress_.skipped_min_ttl;
  m.resumes = resumes_;
  m.crawl_s = crawl_s;
  m.reconcile_s = reconcile_s;
  m.total_s = Since(t0);
  CW_RETURN_IF_ERROR(WriteManifest(env_, o_.out, m));
  progress_.phase = kDone;
  PrintProgress("done");
  return Status::OK();
}

}  // namespace cachewarm
