// The stream's end (stream.h): the counts checked against the records, the summary (DONE's `stream`
// object and the stream_summary event) and its judgement, kept in keys/SUMMARY so that a run that
// finds the stream already done reports the same verdict.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "cachewarm_core.h"
#include "json.h"
#include "stream.h"

namespace cachewarm {

namespace {
constexpr char kSummaryName[] = "SUMMARY";

// Each reason's first words and the flag that accepts it: the Python populator's (report.py).
constexpr char kOversize[] = "items too large for their destination were never sent";
constexpr char kEvicted[] = "the destinations evicted items during the populate";
constexpr char kIncompleteDump[] = "the dump is incomplete (DONE says complete: false)";

std::string Line(const std::string& text) {
  std::string o = text;
  for (char& c : o)
    if (c == '\n' || c == '\r') c = ' ';
  return o;
}
}  // namespace

Status Stream::DedupOversizeReport() {
  oversize_log_.reset();
  std::string text;
  Status s = env_->ReadFileToString(OversizeReportPath(), &text);
  if (s.IsNotFound()) return Status::OK();
  CW_RETURN_IF_ERROR(s);
  std::set<std::string> seen;
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) break;  // torn by a crash: that part is redone
    const std::string line = text.substr(pos, e - pos);
    pos = e + 1;
    if (!line.empty() && seen.insert(line).second) out += line + "\n";
  }
  if (out == text) return Status::OK();
  const std::string path = OversizeReportPath();
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return WriteFileAtomically(env_, dir, ".tmp-" + base, base, out);
}

std::string Stream::SummaryBody(const Manifest& m) {
  StreamCounts t;
  for (const StreamCounts& c : totals_) t.Add(c);
  uint64_t evictions = 0, misses = 0;
  for (uint64_t e : evictions_) evictions += e;
  for (const PublishedFile& f : m.files) misses += f.misses;
  std::string per_node, by_node, dests;
  for (size_t i = 0; i < eps_.size(); i++) {
    const std::string a = JsonQuote(eps_[i].address());
    per_node += (i ? ", " : "") + a + ": " + std::to_string(totals_[i].written());
    if (evictions_[i]) by_node += (by_node.empty() ? "" : ", ") + a + ": " + std::to_string(evictions_[i]);
    dests += (i ? ", " : "") + a + ": {\"version\": " + JsonQuote(infos_[i].version) +
             ", \"item_size_max\": " + std::to_string(infos_[i].limit.item_size_max) +
             ", \"cas\": " + (infos_[i].limit.cas ? "true" : "false") +
             ", \"evictions\": " + (infos_[i].evictions_enabled ? "true" : "false") + "}";
  }
  const bool has_report = t.oversize > 0;
  // Add mode re-checks every stored item (stream_recheck.h); set mode overwrites by definition.
  const RecheckCounts& r = recheck_totals_;
  const std::string recheck =
      o_.stream.set_mode ? "\"n/a\""
                         : "\"on\", \"settle_seconds\": " + JsonDouble(o_.stream.settle_s) + ", \"rechecked\": " +
                               std::to_string(r.rechecked) + ", \"changed_at_source\": " +
                               std::to_string(r.changed_at_source) + ", \"deleted_stale\": " +
                               std::to_string(r.deleted_stale) + ", \"client_overwrote\": " +
                               std::to_string(r.client_overwrote) + ", \"unsettled\": " + std::to_string(r.unsettled) +
                               ", \"cas_only\": " + std::to_string(r.cas_only);
  return "\"mode\": \"" + std::string(o_.stream.set_mode ? "set" : "add") + "\", \"recheck\": " + recheck +
         ", \"records\": " +
         std::to_string(records_) + ", \"stored\": " + std::to_string(t.stored) + ", \"already_present\": " +
         std::to_string(t.present) + ", \"resent_own\": " + std::to_string(t.resent) + ", \"expired\": " +
         std::to_string(t.expired) + ", \"oversize\": " + std::to_string(t.oversize) + ", \"oversize_report\": " +
         (has_report ? JsonQuote(OversizeReportPath()) : "null") + ", \"binary_protocol\": " +
         std::to_string(t.binary) + ", \"bytes\": " + std::to_string(bytes_total_) + ", \"parts\": " +
         std::to_string(m.files.size()) + ", \"per_node\": {" + per_node + "}, \"destination_evictions\": " +
         std::to_string(evictions) + ", \"evictions_by_node\": {" + by_node + "}, \"destinations\": {" + dests +
         "}, \"keys_listed\": " + std::to_string(m.keys_listed) + ", \"dump_misses\": " + std::to_string(misses) +
         ", \"misses_expired\": " + std::to_string(m.misses_expired) + ", \"misses_gone\": " +
         std::to_string(m.misses_gone) + ", \"undumped\": " + std::to_string(m.undumped) + ", \"skipped_min_ttl\": " +
         std::to_string(m.skipped_min_ttl) + ", \"dump_complete\": " + (m.complete ? "true" : "false") +
         ", \"dump_incomplete_reason\": " + (m.complete ? "null" : JsonQuote(m.incomplete_reason)) +
         ", \"elapsed_s\": " + JsonDouble(m.total_s);
}

void Stream::Judge(uint64_t oversize, uint64_t evictions, bool dump_complete, const std::string& evictions_by_node,
                   const std::string& dump_reason, const std::string& report) {
  incomplete_.clear();
  accepted_.clear();
  struct Check {
    bool hit, accepted;
    std::string why;
  };
  const Check checks[] = {
      {oversize > 0, o_.stream.accept_oversize,
       std::string(kOversize) + ": " + std::to_string(oversize) +
           " (a failed store would delete the key's live value); their keys are in " + report},
      {evictions > 0, o_.stream.accept_evictions,
       std::string(kEvicted) + ": " + std::to_string(evictions) + " ({" + evictions_by_node +
           "}), too small for the data or live traffic; those items are gone"},
      {!dump_complete, o_.stream.accept_incomplete_dump, std::string(kIncompleteDump) + ": " + dump_reason},
  };
  ok_ = true;
  for (const Check& c : checks) {
    if (!c.hit) continue;
    incomplete_.push_back(c.why);
    if (c.accepted) accepted_.push_back(c.why);
    else ok_ = false;
  }
}

Status Stream::Finish(Manifest* m) {
  CW_RETURN_IF_ERROR(Probe(false));
  StreamCounts t;
  for (const StreamCounts& c : totals_) t.Add(c);
  if (t.items() != records_)
    return Status::Corruption("stream counts do not add up: stored " + std::to_string(t.stored) + " + present " +
                              std::to_string(t.present) + " + resent " + std::to_string(t.resent) + " + expired " +
                              std::to_string(t.expired) + " + oversize " + std::to_string(t.oversize) +
                              " != records " + std::to_string(records_));
  CW_RETURN_IF_ERROR(DedupOversizeReport());
  m->format = "cachewarm-stream";
  // DONE's completeness first (DecideCompleteness ran before): the summary repeats it.
  summary_ = SummaryBody(*m);
  m->extra = "  \"stream\": {" + summary_ + "},\n";
  uint64_t evictions = 0;
  std::string by_node;
  for (size_t i = 0; i < eps_.size(); i++) {
    evictions += evictions_[i];
    if (evictions_[i]) by_node += (by_node.empty() ? "'" : ", '") + eps_[i].address() + "': " + std::to_string(evictions_[i]);
  }
  Judge(t.oversize, evictions, m->complete, by_node, m->incomplete_reason, OversizeReportPath());
  std::string saved = summary_ + "\noversize " + std::to_string(t.oversize) + "\nevictions " + std::to_string(evictions) +
                      "\ncomplete " + (m->complete ? "1" : "0") + "\nby_node " + Line(by_node) + "\nreason " +
                      Line(m->incomplete_reason) + "\nreport " + Line(OversizeReportPath()) + "\n";
  return WriteFileAtomically(env_, o_.out + "/keys", std::string(".tmp-") + kSummaryName, kSummaryName, saved);
}

void Stream::Report() {
  std::string inc, acc;
  for (const std::string& r : incomplete_) inc += (inc.empty() ? "" : ", ") + JsonQuote(r);
  for (const std::string& r : accepted_) acc += (acc.empty() ? "" : ", ") + JsonQuote(r);
  std::printf("{\"event\": \"stream_summary\", \"ok\": %s, \"incomplete\": [%s], \"accepted\": [%s], %s}\n",
              ok_ ? "true" : "false", inc.c_str(), acc.c_str(), summary_.c_str());
  std::fflush(stdout);
  if (ok_) return;
  std::string open, flags;
  const std::pair<const char*, const char*> flag_of[] = {
      {kOversize, "--accept-oversize"}, {kEvicted, "--accept-evictions"}, {kIncompleteDump, "--accept-incomplete-dump"}};
  for (const std::string& r : incomplete_) {
    if (std::find(accepted_.begin(), accepted_.end(), r) != accepted_.end()) continue;
    open += (open.empty() ? "" : "; ") + r;
    for (const auto& [head, flag] : flag_of)
      if (r.rfind(head, 0) == 0) flags += (flags.empty() ? "" : " ") + std::string(flag);
  }
  std::fprintf(stderr, "cachewarm-dump: error: the warm is not complete: %s (to accept: %s)\n", open.c_str(),
               flags.c_str());
}

Status Stream::ReportDone() {
  std::string text;
  CW_RETURN_IF_ERROR(env_->ReadFileToString(o_.out + "/keys/" + kSummaryName, &text));
  std::map<std::string, std::string> kv;
  size_t pos = text.find('\n');
  if (pos == std::string::npos) return Status::Corruption(o_.out + "/keys/SUMMARY is unreadable");
  summary_ = text.substr(0, pos);
  pos++;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    const std::string line = text.substr(pos, e - pos);
    pos = e + 1;
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) kv[line.substr(0, sp)] = line.substr(sp + 1);
  }
  Judge(std::strtoull(kv["oversize"].c_str(), nullptr, 10), std::strtoull(kv["evictions"].c_str(), nullptr, 10),
        kv["complete"] == "1", kv["by_node"], kv["reason"], kv["report"]);
  Report();
  return Status::OK();
}

}  // namespace cachewarm
