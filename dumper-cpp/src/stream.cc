#include "stream.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "cachewarm_core.h"
#include "clock.h"
#include "codec.h"
#include "json.h"
#include "stream_sink.h"

namespace cachewarm {

namespace {
constexpr char kStreamMetaName[] = "STREAM";
constexpr char kStreamedName[] = "STREAMED";
constexpr char kStampsName[] = "STAMPS";
constexpr char kPartSuffix[] = ".stream";
// --resume: a destination's clock (its lower bound, ms) may differ from the one keys/STREAM kept by
// this much before the stream refuses to go on (measurement noise and memcached's timer are ms).
constexpr int64_t kClockMovedMs = 1000;
// Seconds between the monitor's measurements of the destinations' clocks (clock_low).
constexpr double kClockRemeasureS = 30.0;

int64_t ClockMs(const ServerClock& c) { return int64_t(std::floor(c.lo * 1000.0)); }

bool IsPrintableKey(const std::string& k) { return !k.empty() && IsPlainKey(k); }
}  // namespace

void StreamCounts::Add(const StreamCounts& o) {
  stored += o.stored;
  present += o.present;
  resent += o.resent;
  expired += o.expired;
  oversize += o.oversize;
  binary += o.binary;
}

Stream::Stream(const Options& o, Env* env)
    : o_(o), env_(env), items_(o.stream.write_items_per_second), bytes_(o.stream.write_bytes_per_second) {}

Stream::~Stream() { StopMonitor(); }

std::string Stream::PartName(uint64_t chunk, uint32_t part) const {
  char b[48];
  std::snprintf(b, sizeof b, "-%0*" PRIu64 "-%0*" PRIu32 "%s", kChunkDigits, chunk, kPartDigits, part, kPartSuffix);
  return o_.node_id + b;
}

std::string Stream::OversizeReportPath() const {
  return o_.stream.oversize_report.empty() ? o_.out + "/oversize.jsonl" : o_.stream.oversize_report;
}

// What a key's node depends on; a resumed run must route the same way.
std::string Stream::Routing() const {
  std::string r = std::string("mode=") + (o_.stream.set_mode ? "set" : "add") + " nodes=";
  for (size_t i = 0; i < eps_.size(); i++) r += (i ? "," : "") + eps_[i].address();
  if (!o_.stream.placement.empty()) {
    r += " placement=" + HexEncode(o_.stream.placement);
  } else if (eps_.size() > 1) {
    r += " keys=";
    for (size_t i = 0; i < eps_.size(); i++) {
      std::string k;
      FormatNodeKey(o_.stream.node_key_format, eps_[i].host, eps_[i].ip, eps_[i].port, &k);
      r += (i ? "," : "") + HexEncode(k);
    }
    r += " reps=" + std::to_string(o_.stream.ketama_reps) + " delimiter=" + HexEncode(o_.stream.hash_delimiter);
  }
  return r;
}

Status Stream::Open() {
  CW_RETURN_IF_ERROR(ParseEndpoints(o_.stream.to, &eps_));
  for (Endpoint& e : eps_) CW_RETURN_IF_ERROR(ResolveEndpoint(&e));
  if (!o_.stream.placement.empty()) {
    placement_.reset(new Placement);
    CW_RETURN_IF_ERROR(placement_->Parse(o_.stream.placement));
    // the description names each destination once (cachewarm.datapath.placement matched them)
    if (placement_->nodes() != eps_.size() || placement_->max_dest() >= eps_.size())
      return Status::InvalidArgument("--placement-description names " + std::to_string(placement_->nodes()) +
                                     " nodes, --to " + std::to_string(eps_.size()));
  } else if (eps_.size() > 1) {
    std::vector<std::string> keys;
    for (const Endpoint& e : eps_) {
      keys.emplace_back();
      CW_RETURN_IF_ERROR(FormatNodeKey(o_.stream.node_key_format, e.host, e.ip, e.port, &keys.back()));
    }
    placement_.reset(new Placement);
    CW_RETURN_IF_ERROR(placement_->ParseEvcache(keys, o_.stream.ketama_reps, o_.stream.hash_delimiter));
  }
  totals_.assign(eps_.size(), StreamCounts());
  evictions_.assign(eps_.size(), 0);
  for (size_t i = 0; i < eps_.size(); i++) control_.emplace_back(new Conn);
  infos_.assign(eps_.size(), DestinationInfo());
  CW_RETURN_IF_ERROR(Probe(true));
  // Each destination's clock to a few ms (MeasureClock; clock_low).
  clocks_.assign(eps_.size(), ServerClock());
  lows_.reset(new std::atomic<double>[eps_.size()]);
  for (size_t i = 0; i < eps_.size(); i++) {
    CW_RETURN_IF_ERROR(MeasureClock(control_[i].get(), &clocks_[i]));
    lows_[i].store(clocks_[i].lo);
  }
  std::string meta;
  Status s = env_->ReadFileToString(o_.out + "/keys/" + kStreamMetaName, &meta);
  if (s.ok()) return CheckMeta(meta);
  if (!s.IsNotFound()) return s;
  for (const DestinationInfo& i : infos_) evictions_base_.push_back({i.pid, i.evictions});
  return WriteMeta();
}

Status Stream::WriteMeta() {
  std::string m = "routing " + Routing() + "\n";
  for (size_t i = 0; i < eps_.size(); i++)
    m += "dest " + eps_[i].address() + " " + std::to_string(infos_[i].pid) + " " + std::to_string(infos_[i].started) +
         " " + std::to_string(evictions_base_[i].first) + " " + std::to_string(evictions_base_[i].second) + " " +
         std::to_string(ClockMs(clocks_[i])) + "\n";
  return WriteFileAtomically(env_, o_.out + "/keys", std::string(".tmp-") + kStreamMetaName, kStreamMetaName, m);
}

// --resume: the same routing, and destinations that have not restarted since the stream began.
Status Stream::CheckMeta(const std::string& text) {
  const std::string path = o_.out + "/keys/" + kStreamMetaName;
  size_t pos = 0;
  size_t d = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    const std::string line = text.substr(pos, e - pos);
    pos = e + 1;
    if (line.rfind("routing ", 0) == 0) {
      if (line.substr(8) != Routing())
        return Status::InvalidArgument("--resume: " + path + " records a stream with routing '" + line.substr(8) +
                                       "', not '" + Routing() + "': give the same destinations, mode and routing "
                                       "options, or start over in an empty --out");
    } else if (line.rfind("dest ", 0) == 0) {
      char addr[300];
      long long pid, started, bpid, clock_ms;
      unsigned long long bev;
      const int n =
          std::sscanf(line.c_str(), "dest %299s %lld %lld %lld %llu %lld", addr, &pid, &started, &bpid, &bev, &clock_ms);
      if (n < 5 || d >= eps_.size()) return Status::Corruption(path + ": malformed line: " + line.substr(0, 200));
      if (infos_[d].pid != pid || std::llabs(infos_[d].started - started) > 2)
        return Status::Server("--resume: destination " + eps_[d].address() + " restarted since the stream began (pid " +
                              std::to_string(pid) + " -> " + std::to_string(infos_[d].pid) +
                              "): the items streamed to it are gone; start the warm again in an empty --out");
      evictions_base_.push_back({bpid, bev});
      // Its clock when the stream began (a line without one: written before clocks were kept): the
      // items streamed then expire by it. Moved since (a clock step, a paused VM): refused.
      if (n == 6 && std::llabs(ClockMs(clocks_[d]) - clock_ms) > kClockMovedMs)
        return Status::Server("--resume: destination " + eps_[d].address() + "'s clock moved " +
                              std::to_string(ClockMs(clocks_[d]) - clock_ms) + " ms against this host's since the "
                              "stream began (offset " + std::to_string(clock_ms) + " ms, now " +
                              std::to_string(ClockMs(clocks_[d])) + " ms): the items streamed to it before expire "
                              "that much off their TTL; start the warm again in an empty --out");
      d++;
    }
  }
  if (d != eps_.size()) return Status::Corruption(path + " names " + std::to_string(d) + " destinations");
  return Status::OK();
}

// One look at every destination. The first refuses what the populator refuses; later ones count
// evictions and fail on a restart.
Status Stream::Probe(bool first, bool retry) {
  std::lock_guard<std::mutex> l(probe_mu_);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < eps_.size(); i++) {
    DestinationInfo info;
    double wait = 0.1;
    for (;;) {
      Status s = control_[i]->fd() >= 0 ? Status::OK() : control_[i]->Connect(eps_[i].connect_host(), eps_[i].port, kConnectTimeoutMs);
      if (s.ok()) s = ReadDestinationInfo(control_[i].get(), &info);
      if (s.ok()) break;
      control_[i]->Close();
      if (!retry || s.code() == Status::kServer || Since(t0) + wait > o_.stream.destination_timeout_s)
        return Status::IOError("destination " + eps_[i].address() + " unavailable for " +
                               std::to_string(int(Since(t0))) + " s: " + s.ToString());
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      wait = std::min(wait * 2, 5.0);
    }
    if (first) {
      infos_[i] = info;
      continue;
    }
    if (info.pid != infos_[i].pid || std::llabs(info.started - infos_[i].started) > 2)
      return Status::Server("destination " + eps_[i].address() + " restarted during the stream (pid " +
                            std::to_string(infos_[i].pid) + " -> " + std::to_string(info.pid) +
                            "): the items streamed to it are gone; start the warm again in an empty --out");
    if (i < evictions_base_.size() && evictions_base_[i].first == info.pid)
      evictions_[i] = info.evictions - std::min(info.evictions, evictions_base_[i].second);
    CW_RETURN_IF_ERROR(NewOffset(i, info.clock_offset));
  }
  if (!first) return Status::OK();
  std::string old, off;
  for (size_t i = 0; i < eps_.size(); i++) {
    if (TooOld(infos_[i].version)) old += (old.empty() ? "" : ", ") + eps_[i].address() + " (" + infos_[i].version + ")";
    if (!infos_[i].evictions_enabled) off += (off.empty() ? "" : ", ") + eps_[i].address();
  }
  if (!old.empty()) return Status::InvalidArgument("destination(s) " + old + " predate memcached 1.6's meta protocol");
  if (!off.empty() && !o_.stream.accept_no_evictions)
    return Status::InvalidArgument(
        "destination(s) " + off + " run with evictions off (memcached -M): when one fills up it fails stores (the "
        "stream fails; in set mode each failed store deletes its key's value). Give it memory for the whole dump "
        "and pass --accept-no-evictions, or run it with evictions on");
  return Status::OK();
}

Status Stream::CheckIdentity(size_t i) {
  Conn c;
  DestinationInfo info;
  CW_RETURN_IF_ERROR(c.Connect(eps_[i].connect_host(), eps_[i].port, kConnectTimeoutMs));
  CW_RETURN_IF_ERROR(ReadDestinationInfo(&c, &info));
  if (info.pid != infos_[i].pid || std::llabs(info.started - infos_[i].started) > 2)
    return Status::Server("destination " + eps_[i].address() + " restarted during the stream (pid " +
                          std::to_string(infos_[i].pid) + " -> " + std::to_string(info.pid) +
                          "): the items streamed to it are gone; start the warm again in an empty --out");
  return NewOffset(i, info.clock_offset);
}

Status Stream::NewOffset(size_t i, int64_t offset) {
  // Two whole-second readings of one clock pair differ by at most 1 (rounding) plus ~1 (memcached's
  // clock ticks once a second); more is a clock that moved.
  const int64_t first = infos_[i].clock_offset;
  if (std::llabs(offset - first) > 2)
    return Status::Server("destination " + eps_[i].address() + "'s clock moved " + std::to_string(offset - first) +
                          " s against this host's during the stream (offset " + std::to_string(first) + " s, now " +
                          std::to_string(offset) + " s): the items written to it before would expire that much off "
                          "their TTL; start the warm again in an empty --out");
  return Status::OK();
}

void Stream::StartMonitor(WorkQueue* queue) {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = false;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_ = queue;
  }
  monitor_ = std::thread([this, queue] {
    const auto every = std::chrono::duration<double>(o_.stream.destination_check_interval_s);
    auto measured = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> l(stop_mu_);
    while (!stop_cv_.wait_for(l, every, [this] { return stop_; })) {
      l.unlock();
      Status s = Probe(false, false);
      if (s.ok() && Since(measured) >= kClockRemeasureS) {
        // Each destination's clock again (a failed look keeps the last: the sinks see a lost one).
        for (size_t i = 0; i < eps_.size(); i++) {
          ServerClock c;
          Conn conn;
          if (conn.Connect(eps_[i].connect_host(), eps_[i].port, kConnectTimeoutMs).ok() && MeasureClock(&conn, &c).ok())
            lows_[i].store(c.lo);
        }
        measured = std::chrono::steady_clock::now();
      }
      // An unreachable destination is the sinks' business (they reconnect or fail); a restart is not
      // seen by a connection that stays up to the new process.
      if (!s.ok() && s.code() == Status::kServer) queue->Fail(s);
      l.lock();
    }
  });
}

void Stream::StopMonitor() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

bool Stream::IsResend(uint64_t chunk, uint32_t part) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resend_.find(chunk);
  return it != resend_.end() && part >= it->second;
}

std::unique_ptr<PartWriter> Stream::NewSink() { return std::unique_ptr<PartWriter>(new StreamSink(this)); }

void Stream::Fail(const Status& s) {
  WorkQueue* q = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    q = queue_;
  }
  if (q) q->Fail(s);
}

Status Stream::RecordStamps(const RecheckPart& part) {
  std::string out;
  out.reserve(part.keys.size() + part.entries.size() * 25);
  for (const RecheckEntry& e : part.entries) {
    out.push_back(char(e.key_len));
    out.append(part.keys, e.key_off, e.key_len);
    const cw_read rd{e.source_cas, e.source_exp, e.value_len};
    unsigned char b[CW_READ_STAMP];
    cw_read_pack(b, &rd);
    out.append(reinterpret_cast<const char*>(b), sizeof b);
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!stamps_log_) CW_RETURN_IF_ERROR(env_->NewAppendableFile(o_.out + "/keys/" + kStampsName, &stamps_log_));
  return stamps_log_->Append(out);
}

Status Stream::RecordPart(const PublishedFile& f, const std::vector<StreamCounts>& counts,
                          const std::vector<OversizeItem>& oversize, const RecheckCounts* recheck) {
  std::lock_guard<std::mutex> l(mu_);
  if (!oversize.empty()) {
    std::string lines;
    for (const OversizeItem& it : oversize) {
      lines += "{\"part\":" + JsonQuote(f.name) + ",\"destination\":" + JsonQuote(eps_[it.dest].address()) + ",";
      if (IsPrintableKey(it.key)) {
        lines += "\"key\":" + JsonQuote(it.key);
      } else {
        std::string b64;
        Base64Encode(it.key, &b64);
        lines += "\"key_b64\":\"" + b64 + "\"";
      }
      lines += ",\"value_bytes\":" + std::to_string(it.value_len) + ",\"flags\":" + std::to_string(it.flags) +
               ",\"item_size_max\":" + std::to_string(infos_[it.dest].limit.item_size_max) + "}\n";
    }
    if (!oversize_log_) CW_RETURN_IF_ERROR(env_->NewAppendableFile(OversizeReportPath(), &oversize_log_));
    CW_RETURN_IF_ERROR(oversize_log_->Append(lines));
    CW_RETURN_IF_ERROR(oversize_log_->Sync());
    oversize_lines_ += oversize.size();
  }
  char b[200];
  std::snprintf(b, sizeof b, " %" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %zu",
                f.chunk, f.part, f.first_key_index, f.end_key_index, f.records, f.misses, f.bytes, counts.size());
  std::string line = f.name + b;
  for (const StreamCounts& c : counts) {
    std::snprintf(b, sizeof b, " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, c.stored,
                  c.present, c.resent, c.expired, c.oversize, c.binary);
    line += b;
  }
  if (recheck) {  // after the per-destination counts: a reader of an older line finds none
    std::snprintf(b, sizeof b, " R %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
                  recheck->rechecked, recheck->changed_at_source, recheck->deleted_stale, recheck->client_overwrote,
                  recheck->unsettled, recheck->cas_only);
    line += b;
  }
  if (!streamed_log_) CW_RETURN_IF_ERROR(env_->NewAppendableFile(o_.out + "/keys/" + kStreamedName, &streamed_log_));
  CW_RETURN_IF_ERROR(streamed_log_->Append(line + "\n"));
  CW_RETURN_IF_ERROR(streamed_log_->Sync());
  for (size_t i = 0; i < counts.size() && i < totals_.size(); i++) totals_[i].Add(counts[i]);
  if (recheck) recheck_totals_.Add(*recheck);
  records_ += f.records;
  bytes_total_ += f.bytes;
  return Status::OK();
}

Status Stream::Resume(Checkpoint* cp, Progress* p, std::vector<ChunkTask>* todo) {
  std::string text;
  Status s = env_->ReadFileToString(o_.out + "/keys/" + kStreamedName, &text);
  if (s.IsNotFound()) text.clear();
  else CW_RETURN_IF_ERROR(s);
  struct Part {
    PublishedFile f;
    std::vector<StreamCounts> counts;
    RecheckCounts recheck;
  };
  std::map<std::string, Part> by_name;  // a later line for the same part wins
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t e = text.find('\n', pos);
    if (e == std::string::npos) break;  // a torn last line: that part was never acknowledged
    const std::string line = text.substr(pos, e - pos);
    pos = e + 1;
    Part part;
    char name[300];
    unsigned long long chunk, first, end, records, misses, bytes;
    unsigned part_no;
    size_t n = 0;
    int used = 0;
    if (std::sscanf(line.c_str(), "%299s %llu %u %llu %llu %llu %llu %llu %zu%n", name, &chunk, &part_no, &first, &end,
                    &records, &misses, &bytes, &n, &used) != 9 ||
        n != eps_.size())
      return Status::Corruption(o_.out + "/keys/STREAMED: malformed line: " + line.substr(0, 200));
    const char* rest = line.c_str() + used;
    for (size_t i = 0; i < n; i++) {
      StreamCounts c;
      int u = 0;
      unsigned long long v[6];
      if (std::sscanf(rest, " %llu %llu %llu %llu %llu %llu%n", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &u) != 6)
        return Status::Corruption(o_.out + "/keys/STREAMED: malformed line: " + line.substr(0, 200));
      rest += u;
      c.stored = v[0], c.present = v[1], c.resent = v[2], c.expired = v[3], c.oversize = v[4], c.binary = v[5];
      part.counts.push_back(c);
    }
    unsigned long long r[6];
    if (std::sscanf(rest, " R %llu %llu %llu %llu %llu %llu", &r[0], &r[1], &r[2], &r[3], &r[4], &r[5]) == 6) {
      part.recheck.rechecked = r[0], part.recheck.changed_at_source = r[1], part.recheck.deleted_stale = r[2];
      part.recheck.client_overwrote = r[3], part.recheck.unsettled = r[4], part.recheck.cas_only = r[5];
    }
    part.f.name = name;
    part.f.chunk = chunk;
    part.f.part = part_no;
    part.f.first_key_index = first;
    part.f.end_key_index = end;
    part.f.records = records;
    part.f.misses = misses;
    part.f.bytes = bytes;
    by_name[part.f.name] = part;
  }
  std::map<std::string, PartStats> stats;
  CW_RETURN_IF_ERROR(cp->ReadParts(&stats));
  std::map<uint64_t, std::vector<Part*>> by_chunk;
  for (auto& [name, part] : by_name) by_chunk[part.f.chunk].push_back(&part);
  const std::map<uint64_t, uint64_t> chunk_keys = cp->KeyChunks();
  std::vector<ChunkTask> left;
  for (const ChunkTask& t : *todo) {
    std::vector<Part*>& parts = by_chunk[t.chunk];
    std::sort(parts.begin(), parts.end(), [](const Part* a, const Part* b) { return a->f.part < b->f.part; });
    uint64_t end = 0;
    const uint64_t keys = chunk_keys.count(t.chunk) ? chunk_keys.at(t.chunk) : 0;
    for (size_t i = 0; i < parts.size(); i++) {
      const PublishedFile& f = parts[i]->f;
      if (f.part != i || f.first_key_index != end || f.end_key_index > keys)
        return Status::Corruption("acknowledged parts of chunk " + std::to_string(t.chunk) +
                                  " are not contiguous at " + f.name);
      end = f.end_key_index;
      auto it = stats.find(f.name);
      PartStats ps;
      if (it != stats.end()) ps = it->second;
      else ps.gone = f.misses;
      cp->AddFile(f, ps);
      p->skipped_min_ttl += ps.skipped_min_ttl;
      p->files++;
      p->items += f.records;
      p->misses += f.misses;
      p->bytes += f.bytes;
      for (size_t d = 0; d < eps_.size(); d++) totals_[d].Add(parts[i]->counts[d]);
      recheck_totals_.Add(parts[i]->recheck);
      records_ += f.records;
      bytes_total_ += f.bytes;
    }
    if (parts.empty() || end < keys) {
      left.push_back(ChunkTask{t.chunk, end, uint32_t(parts.size())});
      resend_[t.chunk] = uint32_t(parts.size());
    }
  }
  *todo = left;
  return Status::OK();
}

}  // namespace cachewarm
