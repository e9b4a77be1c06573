#include "checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "clock.h"
#include "format.h"
#include "json.h"
#include "key_chunks.h"

namespace cachewarm {

Checkpoint::Checkpoint(const Options& o, Env* env) : o_(o), env_(env), keys_dir_(o.out + "/keys") {}

Status Checkpoint::CreateDirs() {
  // Like mkdir -p: every missing parent of --out too.
  for (size_t p = o_.out.find('/', 1); p != std::string::npos; p = o_.out.find('/', p + 1))
    CW_RETURN_IF_ERROR(env_->CreateDirIfMissing(o_.out.substr(0, p)));
  CW_RETURN_IF_ERROR(env_->CreateDirIfMissing(o_.out));
  return env_->CreateDirIfMissing(keys_dir_);
}

Status Checkpoint::Open(const ServerStats& source) {
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
    // A run killed while it wrote its first META leaves only `.tmp-META`: no dump was ever published
    // (--resume has nothing to resume), so a fresh start removes it rather than refuse both ways.
    if (!have_meta && knames.size() == 1 && knames[0] == ".tmp-META") {
      CW_RETURN_IF_ERROR(env_->RemoveFile(keys_dir_ + "/.tmp-META"));
      knames.clear();
    }
    if (!knames.empty())
      return Status::InvalidArgument("--out " + o_.out + "/keys is not empty: use --resume to continue that dump");
    meta_.dump_start_ms = NowMs();
    meta_.curr_items_before = source.curr_items;
    // The stream mode writes no data files; its sink reads version 1 records.
    meta_.format = uint16_t(o_.format ? o_.format : o_.stream.to.empty() ? kDefaultFormatVersion : kFormatVersion);
  } else {
    meta_.curr_items_before = source.curr_items;  // unless META remembers the first run's
    if (!have_meta) return Status::InvalidArgument("--resume: no dump to resume in " + o_.out + " (keys/META missing)");
    std::string node, host;
    int64_t port = 0, start = 0, pid = 0, started = 0, resumes = 0;
    if (!JsonGetString(meta, "node", &node) || !JsonGetString(meta, "host", &host) ||
        !JsonGetInt(meta, "port", &port) || !JsonGetInt(meta, "dump_start_ms", &start) ||
        !JsonGetInt(meta, "pid", &pid) || !JsonGetInt(meta, "started", &started))
      return Status::Corruption(meta_path + " is unreadable");
    JsonGetInt(meta, "resumes", &resumes);
    JsonGetInt(meta, "curr_items_before", &meta_.curr_items_before);
    int64_t format = kFormatVersion;  // a dump begun before version 2 existed
    JsonGetInt(meta, "format", &format);
    if (!IsKnownFormat(uint16_t(format)) || format != int64_t(uint16_t(format)))
      return Status::Corruption(meta_path + ": unknown data format version " + std::to_string(format));
    if (o_.format && o_.format != format)
      return Status::InvalidArgument("--resume: " + o_.out + " holds a dump in data format version " +
                                     std::to_string(format) + ", not --format " + std::to_string(o_.format));
    meta_.format = uint16_t(format);
    if (node != o_.node_id || host != o_.host || port != o_.port)
      return Status::InvalidArgument("--resume: " + o_.out + " holds a dump of node " + node + " (" + host + ":" +
                                     std::to_string(port) + "), not of " + o_.node_id + " (" + o_.host + ":" +
                                     std::to_string(o_.port) + ")");
    ServerStats then;
    then.pid = pid;
    then.time = started;
    if (!SameServer(then, source))
      return Status::Server("--resume: memcached at " + o_.host + ":" + std::to_string(o_.port) +
                            " restarted since the dump began (pid " + std::to_string(pid) + " -> " +
                            std::to_string(source.pid) + "); its items changed: start a new dump");
    meta_.dump_start_ms = uint64_t(start);
    meta_.resumes = uint64_t(resumes) + 1;
    CW_RETURN_IF_ERROR(RemoveTemporaryFiles());
  }
  return WriteMeta(source);
}

// Temporary files are never part of the checkpoint.
Status Checkpoint::RemoveTemporaryFiles() {
  const std::string prefix = kTmpPrefix;
  for (const std::string& dir : {o_.out, keys_dir_}) {
    std::vector<std::string> names;
    CW_RETURN_IF_ERROR(env_->GetChildren(dir, &names));
    for (const std::string& n : names) {
      if (n.rfind(prefix, 0) != 0 || n == kDiffScratchDir) continue;
      // keys/.tmp-diff (reconciliation scratch) is a directory: KeySetDiff clears it when it starts.
      if (n == kRecencyScratchDir) {
        // A killed listing's recency tiers (a directory): nothing in them is kept; a resumed crawl
        // that orders by recency again makes new ones.
        const std::string d = dir + "/" + n;
        std::vector<std::string> tiers;
        CW_RETURN_IF_ERROR(env_->GetChildren(d, &tiers));
        for (const std::string& t : tiers) CW_RETURN_IF_ERROR(env_->RemoveFile(d + "/" + t));
        if (::rmdir(d.c_str()) != 0) return Status::IOError(ErrnoMessage("rmdir " + d, errno));
        continue;
      }
      CW_RETURN_IF_ERROR(env_->RemoveFile(dir + "/" + n));
    }
  }
  return Status::OK();
}

Status Checkpoint::WriteMeta(const ServerStats& source) {
  const std::string m = "{\"node\": " + JsonQuote(o_.node_id) + ", \"host\": " + JsonQuote(o_.host) +
                        ", \"port\": " + std::to_string(o_.port) + ", \"dump_start_ms\": " +
                        std::to_string(meta_.dump_start_ms) + ", \"pid\": " + std::to_string(source.pid) +
                        ", \"started\": " + std::to_string(source.started()) + ", \"resumes\": " +
                        std::to_string(meta_.resumes) + ", \"curr_items_before\": " +
                        std::to_string(meta_.curr_items_before) + ", \"format\": " +
                        std::to_string(meta_.format) + "}\n";
  return WriteFileAtomically(env_, keys_dir_, ".tmp-META", "META", m);
}

bool Checkpoint::Done() { return env_->FileExists(o_.out + "/DONE"); }

bool Checkpoint::ReadCrawled(uint64_t* chunks, bool* by_hash) {
  std::string crawled;
  int64_t v = 0;
  if (!env_->ReadFileToString(keys_dir_ + "/CRAWLED", &crawled).ok() || !JsonGetInt(crawled, "chunks", &v))
    return false;
  *chunks = uint64_t(v);
  std::string mode;
  *by_hash = JsonGetString(crawled, "mode", &mode) && mode == "hash";
  return true;
}

namespace {

// A flat JSON rendering of CrawlStats for keys/CRAWLED and keys/RECONCILED (read back for DONE).
std::string CrawlStatsJson(const CrawlStats& st) {
  std::string modes;
  for (const std::string& m : st.modes) modes += (modes.empty() ? "" : ",") + m;
  // JsonGetString reads strings without escapes: keep quotes and backslashes out of the message.
  std::string fallback = st.fallback;
  for (char& c : fallback)
    if (c == '"' || c == '\\' || uint8_t(c) < 0x20) c = '\'';
  return ", \"modes\": \"" + modes + "\", \"fallback\": \"" + fallback + "\", \"busy_retries\": " +
         std::to_string(st.busy_retries) + ", \"busy_wait_ms\": " + std::to_string(int64_t(st.busy_wait_s * 1000)) +
         ", \"answer_wait_ms\": " + std::to_string(int64_t(st.answer_wait_s * 1000)) +
         ", \"duplicates\": " + std::to_string(st.duplicates) + ", \"peak_buffered\": " +
         std::to_string(st.peak_buffered) + ", \"spilled\": " + std::to_string(st.spilled) +
         ", \"order\": \"" + st.order + "\", \"first_chunk_ms\": " + std::to_string(int64_t(st.first_chunk_s * 1000)) +
         ", \"tiers\": \"" + st.tiers + "\"";
}

void ReadCrawlStats(const std::string& json, CrawlStats* st) {
  std::string modes;
  if (JsonGetString(json, "modes", &modes)) {
    for (size_t p = 0; p < modes.size();) {
      size_t e = modes.find(',', p);
      if (e == std::string::npos) e = modes.size();
      if (e > p) st->modes.push_back(modes.substr(p, e - p));
      p = e + 1;
    }
  }
  JsonGetString(json, "fallback", &st->fallback);
  int64_t v = 0;
  if (JsonGetInt(json, "busy_retries", &v)) st->busy_retries = uint64_t(v);
  if (JsonGetInt(json, "busy_wait_ms", &v)) st->busy_wait_s = double(v) / 1000;
  if (JsonGetInt(json, "answer_wait_ms", &v)) st->answer_wait_s = double(v) / 1000;
  if (JsonGetInt(json, "duplicates", &v)) st->duplicates = uint64_t(v);
  if (JsonGetInt(json, "peak_buffered", &v)) st->peak_buffered = uint64_t(v);
  if (JsonGetInt(json, "spilled", &v)) st->spilled = uint64_t(v);
  JsonGetString(json, "order", &st->order);
  if (JsonGetInt(json, "first_chunk_ms", &v)) st->first_chunk_s = double(v) / 1000;
  JsonGetString(json, "tiers", &st->tiers);
}

}  // namespace

Status Checkpoint::WriteCrawled(uint64_t chunks, uint64_t keys, bool by_hash, double crawl_s, const CrawlStats& st) {
  return WriteFileAtomically(env_, keys_dir_, ".tmp-CRAWLED", "CRAWLED",
                             "{\"chunks\": " + std::to_string(chunks) + ", \"keys\": " + std::to_string(keys) +
                                 ", \"mode\": \"" + (by_hash ? "hash" : "all") + "\", \"crawl_s\": " +
                                 JsonDouble(crawl_s) + CrawlStatsJson(st) + "}\n");
}

bool Checkpoint::Reconciled() { return env_->FileExists(keys_dir_ + "/RECONCILED"); }

Status Checkpoint::WriteReconciled(uint64_t chunks, const std::string& skipped, int passes, bool converged,
                                   uint64_t last_new_keys, const CrawlStats& st) {
  std::string r = "{\"chunks\": " + std::to_string(chunks);
  if (!skipped.empty()) r += ", \"skipped\": " + JsonQuote(skipped);
  r += ", \"passes\": " + std::to_string(passes) + ", \"converged\": " + (converged ? "1" : "0") +
       ", \"last_new_keys\": " + std::to_string(last_new_keys) + CrawlStatsJson(st);
  return WriteFileAtomically(env_, keys_dir_, ".tmp-RECONCILED", "RECONCILED", r + "}\n");
}

Status Checkpoint::Append(std::unique_ptr<WritableFile>* f, const char* name, const std::string& text) {
  if (!*f) CW_RETURN_IF_ERROR(env_->NewAppendableFile(keys_dir_ + "/" + name, f));
  CW_RETURN_IF_ERROR((*f)->Append(text));
  return (*f)->Sync();
}

Status Checkpoint::RecordPart(const PublishedFile& f, const PartStats& ps, const std::string& undumped_lines) {
  std::lock_guard<std::mutex> l(log_mu_);
  if (!undumped_lines.empty()) CW_RETURN_IF_ERROR(Append(&undumped_log_, kUndumpedName, undumped_lines));
  char b[160];
  std::snprintf(b, sizeof b, " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", ps.expired, ps.gone,
                ps.skipped_min_ttl, ps.undumped, ps.binary);
  return Append(&parts_log_, kPartsName, f.name + b);
}

Status Checkpoint::ReadParts(std::map<std::string, PartStats>* parts) {
  std::string text;
  Status s = env_->ReadFileToString(keys_dir_ + "/" + kPartsName, &text);
  if (s.IsNotFound()) return Status::OK();
  CW_RETURN_IF_ERROR(s);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) break;  // a torn last line: its file was never published
    const std::string line = text.substr(pos, e - pos);
    pos = e + 1;
    char name[256];
    PartStats ps;
    unsigned long long v[5];
    if (std::sscanf(line.c_str(), "%255s %llu %llu %llu %llu %llu", name, &v[0], &v[1], &v[2], &v[3], &v[4]) != 6)
      return Status::Corruption(keys_dir_ + "/" + kPartsName + ": malformed line: " + line.substr(0, 200));
    ps.expired = v[0];
    ps.gone = v[1];
    ps.skipped_min_ttl = v[2];
    ps.undumped = v[3];
    ps.binary = v[4];
    (*parts)[name] = ps;  // a later line for the same name wins
  }
  return Status::OK();
}

Status Checkpoint::Scan(Progress* p, std::vector<ChunkTask>* todo) {
  std::map<std::string, PartStats> parts;
  CW_RETURN_IF_ERROR(ReadParts(&parts));
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
    AddKeyChunk(c, k);
    p->keys_listed += k;
    next_chunk_ = std::max(next_chunk_, c + 1);
  }
  const std::map<uint64_t, uint64_t> chunk_keys = KeyChunks();
  CW_RETURN_IF_ERROR(env_->GetChildren(o_.out, &names));
  std::map<uint64_t, std::vector<PublishedFile>> by_chunk;
  for (const std::string& n : names) {
    ParsedName pn;
    if (!ParseDataFileName(n, &pn)) continue;
    if (pn.node != o_.node_id) return Status::InvalidArgument("--out holds a data file of another node: " + n);
    PublishedFile f;
    CW_RETURN_IF_ERROR(ReadDataFile(env_, o_.out, n, false, &f, nullptr));
    if (f.version != meta_.format)
      return Status::Corruption(n + ": data format version " + std::to_string(f.version) + ", the dump's is " +
                                std::to_string(meta_.format));
    if (!chunk_keys.count(f.chunk)) return Status::Corruption(n + ": its key list is missing from keys/");
    by_chunk[f.chunk].push_back(f);
  }
  const uint64_t overhead = DataFileHeaderSize(o_.node_id.size()) + kTrailerSize;  // bytes that are not records
  for (auto& [chunk, keys] : chunk_keys) {
    std::vector<PublishedFile>& fs = by_chunk[chunk];
    std::sort(fs.begin(), fs.end(), [](const PublishedFile& a, const PublishedFile& b) { return a.part < b.part; });
    uint64_t end = 0;
    for (size_t i = 0; i < fs.size(); i++) {
      if (fs[i].part != i || fs[i].first_key_index != end || fs[i].end_key_index > keys)
        return Status::Corruption("published parts of chunk " + std::to_string(chunk) + " are not contiguous at " + fs[i].name);
      end = fs[i].end_key_index;
      // A file without a keys/PARTS line (written by an older dumper): its misses count as gone.
      PartStats ps;
      auto it = parts.find(fs[i].name);
      if (it != parts.end()) {
        ps = it->second;
      } else {
        ps.gone = fs[i].misses;
      }
      AddFile(fs[i], ps);
      p->skipped_min_ttl += ps.skipped_min_ttl;
      p->files++;
      p->items += fs[i].records;
      p->misses += fs[i].misses;
      p->bytes += fs[i].bytes - overhead;
    }
    if (fs.empty() || end < keys) todo->push_back(ChunkTask{chunk, end, uint32_t(fs.size())});
  }
  return Status::OK();
}

void Checkpoint::AddKeyChunk(uint64_t chunk, uint64_t keys) {
  std::lock_guard<std::mutex> l(mu_);
  chunk_keys_[chunk] = keys;
}

void Checkpoint::AddFile(const PublishedFile& f, const PartStats& ps) {
  std::lock_guard<std::mutex> l(mu_);
  files_.push_back(f);
  file_stats_.push_back(ps);
}

std::map<uint64_t, uint64_t> Checkpoint::KeyChunks() {
  std::lock_guard<std::mutex> l(mu_);
  return chunk_keys_;
}

Status Checkpoint::FillManifest(uint64_t crawl_chunks, Manifest* m) {
  {
    std::lock_guard<std::mutex> l(mu_);
    m->curr_items_before = meta_.curr_items_before;
    m->dump_start_ms = meta_.dump_start_ms;
    m->resumes = meta_.resumes;
    m->version = meta_.format;
    m->files = files_;
    for (auto& [c, k] : chunk_keys_) {
      m->keys_listed += k;
      if (c >= crawl_chunks) m->reconciled_keys += k;
    }
    PartStats sum;
    for (const PartStats& ps : file_stats_) sum.Add(ps);
    m->misses_expired = sum.expired;
    m->misses_gone = sum.gone;
    m->skipped_min_ttl = sum.skipped_min_ttl;
    m->undumped = sum.undumped;
    m->binary_records = sum.binary;
  }
  // What the crawls did: keys/CRAWLED (first crawl) and keys/RECONCILED, whichever run wrote them.
  std::string text;
  CrawlStats first, rec;
  if (env_->ReadFileToString(keys_dir_ + "/CRAWLED", &text).ok()) ReadCrawlStats(text, &first);
  if (env_->ReadFileToString(keys_dir_ + "/RECONCILED", &text).ok()) {
    ReadCrawlStats(text, &rec);
    int64_t v = 0;
    if (JsonGetInt(text, "passes", &v)) m->reconcile_passes = int(v);
    if (JsonGetInt(text, "converged", &v)) m->reconcile_converged = v != 0;
    if (JsonGetInt(text, "last_new_keys", &v)) m->reconcile_last_new_keys = uint64_t(v);
  }
  m->order = first.order == "recency" ? "recency" : "crawl";
  m->first_chunk_s = first.first_chunk_s;
  m->tiers = first.tiers;
  for (const CrawlStats* st : {&first, &rec}) {
    for (const std::string& mode : st->modes)
      if (std::find(m->crawl_modes.begin(), m->crawl_modes.end(), mode) == m->crawl_modes.end())
        m->crawl_modes.push_back(mode);
    if (m->crawl_fallback.empty()) m->crawl_fallback = st->fallback;
    m->busy_retries += st->busy_retries;
    m->busy_wait_s += st->busy_wait_s;
    m->answer_wait_s += st->answer_wait_s;
    m->duplicates += st->duplicates;
    m->crawl_peak_buffered = std::max(m->crawl_peak_buffered, st->peak_buffered);
    m->crawl_spilled += st->spilled;
  }
  // keys/UNDUMPED: one line per key (a part redone after a crash may have named a key twice).
  {
    std::lock_guard<std::mutex> l(log_mu_);
    parts_log_.reset();
    undumped_log_.reset();
  }
  Status s = env_->ReadFileToString(keys_dir_ + "/" + kUndumpedName, &text);
  if (s.ok()) {
    std::set<std::string> seen;
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t e = text.find('\n', pos);
      if (e == std::string::npos) e = text.size();
      const std::string line = text.substr(pos, e - pos);
      pos = e + 1;
      if (line.empty() || !seen.insert(line.substr(0, line.find(' '))).second) continue;
      out += line + "\n";
    }
    if (out != text)
      CW_RETURN_IF_ERROR(WriteFileAtomically(env_, keys_dir_, std::string(".tmp-") + kUndumpedName, kUndumpedName, out));
    if (!out.empty()) m->undumped_report = std::string("keys/") + kUndumpedName;
  } else if (!s.IsNotFound()) {
    return s;
  }
  return Status::OK();
}

}  // namespace cachewarm
