#include "stream_options.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "destination.h"
#include "placement.h"
#include "options.h"
#include "stream_sink.h"

namespace cachewarm {

namespace {
enum {
  kTo = kStreamOptionFirst, kMode, kNodeKeyFormat, kKetamaReps, kHashDelimiter, kPlacement, kAcceptOversize,
  kAcceptEvictions, kAcceptIncompleteDump, kAcceptNoEvictions, kOversizeReport, kWriteItems, kWriteBytes,
  kDestinationTimeout, kDestinationCheck, kSettle
};

Status Number(const char* flag, const char* arg, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(arg, &end);
  if (errno || end == arg || *end || !(d >= lo && d <= hi))
    return Status::InvalidArgument(std::string("--") + flag + " " + arg + " is out of range " +
                                   std::to_string(int64_t(lo)) + ".." + std::to_string(int64_t(hi)));
  *out = d;
  return Status::OK();
}
}  // namespace

const struct option kStreamLongOptions[] = {
    {"to", required_argument, nullptr, kTo},
    {"mode", required_argument, nullptr, kMode},
    {"node-key-format", required_argument, nullptr, kNodeKeyFormat},
    {"ketama-reps", required_argument, nullptr, kKetamaReps},
    {"placement-description", required_argument, nullptr, kPlacement},
    {"hash-delimiter", required_argument, nullptr, kHashDelimiter},
    {"accept-oversize", no_argument, nullptr, kAcceptOversize},
    {"accept-evictions", no_argument, nullptr, kAcceptEvictions},
    {"accept-incomplete-dump", no_argument, nullptr, kAcceptIncompleteDump},
    {"accept-no-evictions", no_argument, nullptr, kAcceptNoEvictions},
    {"oversize-report", required_argument, nullptr, kOversizeReport},
    {"max-write-items-per-second", required_argument, nullptr, kWriteItems},
    {"max-write-bytes-per-second", required_argument, nullptr, kWriteBytes},
    {"destination-timeout", required_argument, nullptr, kDestinationTimeout},
    {"destination-check-interval", required_argument, nullptr, kDestinationCheck},
    {"settle-seconds", required_argument, nullptr, kSettle},
    {nullptr, 0, nullptr, 0},
};

Status ParseStreamOption(int id, const char* a, StreamOptions* s) {
  double d = 0;
  switch (id) {
    case kTo: {
      std::vector<Endpoint> eps;
      CW_RETURN_IF_ERROR(ParseEndpoints(a, &eps));
      s->to = a;
      return Status::OK();
    }
    case kMode:
      if (std::string(a) != "add" && std::string(a) != "set")
        return Status::InvalidArgument(std::string("--mode must be add or set, not '") + a + "'");
      s->set_mode = std::string(a) == "set";
      return Status::OK();
    case kNodeKeyFormat: {
      std::string k;
      CW_RETURN_IF_ERROR(FormatNodeKey(a, "h", "i", 1, &k));
      s->node_key_format = a;
      return Status::OK();
    }
    case kKetamaReps:
      CW_RETURN_IF_ERROR(Number("ketama-reps", a, 4, 100000, &d));
      if (d != double(int(d)) || int(d) % 4)
        return Status::InvalidArgument(std::string("--ketama-reps ") + a + " must be a positive multiple of 4");
      s->ketama_reps = int(d);
      return Status::OK();
    case kHashDelimiter:
      if (!*a) return Status::InvalidArgument("--hash-delimiter must not be empty");
      s->hash_delimiter = a;
      return Status::OK();
    case kPlacement: {
      Placement p;
      CW_RETURN_IF_ERROR(p.Parse(a));
      s->placement = a;
      return Status::OK();
    }
    case kAcceptOversize: s->accept_oversize = true; return Status::OK();
    case kAcceptEvictions: s->accept_evictions = true; return Status::OK();
    case kAcceptIncompleteDump: s->accept_incomplete_dump = true; return Status::OK();
    case kAcceptNoEvictions: s->accept_no_evictions = true; return Status::OK();
    case kOversizeReport:
      if (!*a) return Status::InvalidArgument("--oversize-report must not be empty");
      s->oversize_report = a;
      return Status::OK();
    case kWriteItems:
      CW_RETURN_IF_ERROR(Number("max-write-items-per-second", a, 0, 1e9, &d));
      s->write_items_per_second = uint64_t(d);
      return Status::OK();
    case kWriteBytes:
      CW_RETURN_IF_ERROR(Number("max-write-bytes-per-second", a, 0, 1e12, &d));
      s->write_bytes_per_second = uint64_t(d);
      return Status::OK();
    case kDestinationTimeout:
      return Number("destination-timeout", a, 0, 86400, &s->destination_timeout_s);
    case kDestinationCheck:
      return Number("destination-check-interval", a, 0.05, 3600, &s->destination_check_interval_s);
    case kSettle:
      return Number("settle-seconds", a, 0, 3600, &s->settle_s);
  }
  return Status::InvalidArgument("unknown stream option");
}

Status CheckStreamOptions(const Options& o) {
  const StreamOptions& s = o.stream;
  if (s.to.empty()) {
    if (s.set_mode || s.accept_oversize || s.accept_evictions || s.accept_incomplete_dump || s.accept_no_evictions ||
        !s.oversize_report.empty() || s.write_items_per_second || s.write_bytes_per_second ||
        !s.hash_delimiter.empty() || !s.placement.empty())
      return Status::InvalidArgument("--mode, --accept-*, --oversize-report, --max-write-*, --hash-delimiter and "
                                     "--placement-description need --to (the stream mode)");
    return Status::OK();
  }
  if (o.format >= 2)
    return Status::InvalidArgument("--format " + std::to_string(o.format) + " is for data files; the stream mode (--to) writes none");
  return Status::OK();
}

std::string StreamUsage() {
  return R"(
Stream mode (no data files: each item goes straight to its destination node; key lists and
checkpoints stay in --out for reconciliation and --resume):
  --to HOST:PORT[,HOST:PORT...]
                              destination memcached node(s); keys are spread like the EVCache
                              client spreads them (ketama)
  --mode add|set              add (default): never replace a value already in the destination
  --node-key-format FMT       ketama node key: {host} as given, {ip} its resolved address, {port}
                              (default {host}/{ip}:11211, EVCache's)
  --ketama-reps N             ring points per node, a multiple of 4 (default 160)
  --hash-delimiter STR        hash only the key part before STR (hash.on.partial.key)
  --placement-description TEXT
                              another client's placement instead of EVCache's ketama: a hashkit
                              description (hashkit/placement.h; `cachewarm warm --placement`
                              writes it), one node line per --to destination
  --accept-oversize           exit 0 although items too large for a destination were skipped
  --accept-evictions          exit 0 although the destinations evicted items meanwhile
  --accept-incomplete-dump    exit 0 although the dump is incomplete
  --accept-no-evictions       write to destinations running with evictions off (-M)
  --oversize-report PATH      where skipped oversize items are named (default OUT/oversize.jsonl)
  --max-write-items-per-second N, --max-write-bytes-per-second N
                              rate limits of the writes to the destinations (0 = unlimited)
  --destination-timeout SECONDS
                              how long a destination may stay unreachable, 0..86400 (default 120)
  --destination-check-interval SECONDS
                              between looks at evictions and restarts, 0.05..3600 (default 5)
  --settle-seconds SECONDS    add mode: each part is re-checked on the source this long after its
                              writes were acknowledged, 0..3600 (default 2; at least the largest gap
                              between a client's writes to two replicas)
Exit status with --to: 0 when DONE is written and the destinations hold every item (or every
reason they do not was accepted); 1 otherwise (the summary, last on stdout, says why).
)";
}

uint64_t StreamPlannedMemoryPerWorker(const Options& o) {
  if (o.stream.to.empty()) return 0;
  std::vector<Endpoint> eps;
  if (!ParseEndpoints(o.stream.to, &eps).ok()) return 0;
  return StreamSink::PlannedMemory(eps.size());
}

}  // namespace cachewarm
