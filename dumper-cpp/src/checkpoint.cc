#include "checkpoint.h"

#include <algorithm>

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
    if (!knames.empty())
      return Status::InvalidArgument("--out " + o_.out + "/keys is not empty: use --resume to continue that dump");
    meta_.dump_start_ms = NowMs();
    meta_.curr_items_before = source.curr_items;
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
    for (const std::string& n : names)
      if (n.rfind(prefix, 0) == 0 && n != kDiffScratchDir) CW_RETURN_IF_ERROR(env_->RemoveFile(dir + "/" + n));
    // keys/.tmp-diff (reconciliation scratch) is a directory: KeySetDiff clears it when it starts.
  }
  return Status::OK();
}

Status Checkpoint::WriteMeta(const ServerStats& source) {
  const std::string m = "{\"node\": " + JsonQuote(o_.node_id) + ", \"host\": " + JsonQuote(o_.host) +
                        ", \"port\": " + std::to_string(o_.port) + ", \"dump_start_ms\": " +
                        std::to_string(meta_.dump_start_ms) + ", \"pid\": " + std::to_string(source.pid) +
                        ", \"started\": " + std::to_string(source.started()) + ", \"resumes\": " +
                        std::to_string(meta_.resumes) + ", \"curr_items_before\": " +
                        std::to_string(meta_.curr_items_before) + "}\n";
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

Status Checkpoint::WriteCrawled(uint64_t chunks, uint64_t keys, bool by_hash, double crawl_s) {
  return WriteFileAtomically(env_, keys_dir_, ".tmp-CRAWLED", "CRAWLED",
                             "{\"chunks\": " + std::to_string(chunks) + ", \"keys\": " + std::to_string(keys) +
                                 ", \"mode\": \"" + (by_hash ? "hash" : "all") + "\", \"crawl_s\": " +
                                 JsonDouble(crawl_s) + "}\n");
}

bool Checkpoint::Reconciled() { return env_->FileExists(keys_dir_ + "/RECONCILED"); }

Status Checkpoint::WriteReconciled(uint64_t chunks, const std::string& skipped) {
  std::string r = "{\"chunks\": " + std::to_string(chunks);
  if (!skipped.empty()) r += ", \"skipped\": " + JsonQuote(skipped);
  return WriteFileAtomically(env_, keys_dir_, ".tmp-RECONCILED", "RECONCILED", r + "}\n");
}

Status Checkpoint::Scan(Progress* p, std::vector<ChunkTask>* todo) {
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
      AddFile(fs[i]);
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

void Checkpoint::AddFile(const PublishedFile& f) {
  std::lock_guard<std::mutex> l(mu_);
  files_.push_back(f);
}

std::map<uint64_t, uint64_t> Checkpoint::KeyChunks() {
  std::lock_guard<std::mutex> l(mu_);
  return chunk_keys_;
}

void Checkpoint::FillManifest(uint64_t crawl_chunks, Manifest* m) {
  std::lock_guard<std::mutex> l(mu_);
  m->curr_items_before = meta_.curr_items_before;
  m->dump_start_ms = meta_.dump_start_ms;
  m->resumes = meta_.resumes;
  m->files = files_;
  for (auto& [c, k] : chunk_keys_) {
    m->keys_listed += k;
    if (c >= crawl_chunks) m->reconciled_keys += k;
  }
}

}  // namespace cachewarm
