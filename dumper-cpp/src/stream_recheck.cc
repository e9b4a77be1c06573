// The stream's re-check (stream_recheck.h): its thread, and the looks and deletes it pipelines.
// why this file is long: the re-check's rounds and the wire requests only they send share private
// types (Lines, Item) in one anonymous namespace: one idea, which a split would spread over a header.
#include "stream_recheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "binary_get.h"
#include "cachewarm_core.h"
#include "net.h"

namespace cachewarm {

namespace {

// Keys per pipelined look or delete (as the populator's _recheck.c), and per value-carrying compare.
constexpr size_t kBatch = 1000;
constexpr size_t kCompareBatch = 32;
// Looks at a key whose source expiry straddles a tick of the source's clock (_recheck.c LOOK_ROUNDS).
constexpr int kLookRounds = 4;
// Looks at a destination holding a client's value before it is left and reported (recheck.py).
constexpr int kMaxRounds = 3;

double Mono() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool ErrorLine(const std::string& l) {
  return l.compare(0, 12, "SERVER_ERROR") == 0 || l.compare(0, 12, "CLIENT_ERROR") == 0 || l == "ERROR";
}

// A blocking connection read line by line (and value by value).
class Lines {
 public:
  Status Connect(const std::string& host, int port) {
    buf_.clear();
    pos_ = 0;
    return c_.Connect(host, port, kConnectTimeoutMs);
  }
  const std::string& peer() const { return c_.peer(); }
  Status Send(const std::string& req) { return c_.SendAll(req, kIoTimeoutMs); }
  Status Line(std::string* out) {
    for (;;) {
      const size_t e = buf_.find("\r\n", pos_);
      if (e != std::string::npos) {
        out->assign(buf_, pos_, e - pos_);
        pos_ = e + 2;
        return Status::OK();
      }
      CW_RETURN_IF_ERROR(More());
    }
  }
  // n bytes and the "\r\n" after them.
  Status Value(size_t n, std::string* out) {
    while (buf_.size() - pos_ < n + 2) CW_RETURN_IF_ERROR(More());
    out->assign(buf_, pos_, n);
    pos_ += n + 2;
    return Status::OK();
  }
  Status Bytes(size_t n, std::string* out) {
    while (buf_.size() - pos_ < n) CW_RETURN_IF_ERROR(More());
    out->assign(buf_, pos_, n);
    pos_ += n;
    return Status::OK();
  }

 private:
  Status More() {
    if (pos_ > (1 << 20)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    char tmp[65536];
    size_t n = 0;
    CW_RETURN_IF_ERROR(c_.Recv(tmp, sizeof tmp, &n, kIoTimeoutMs));
    buf_.append(tmp, n);
    return Status::OK();
  }
  Conn c_;
  std::string buf_;
  size_t pos_ = 0;
};

struct Item {
  bool present = false;
  uint64_t cas = 0;
  uint32_t flags = 0;
  int64_t ttl = CW_NEVER;
  std::string value;
};

cw_item AsCore(const Item& it) {
  return cw_item{it.present ? 1 : 0, it.cas, it.flags, it.ttl,
                 reinterpret_cast<const unsigned char*>(it.value.data()), it.value.size()};
}

const unsigned char* U(const std::string& keys, const RecheckEntry& e) {
  return reinterpret_cast<const unsigned char*>(keys.data()) + e.key_off;
}

bool MetaNames(const std::string& keys, const RecheckEntry& e) {
  int kind = 0;
  char tok[CW_MAX_KEY + 1];
  cw_key_token(tok, U(keys, e), e.key_len, &kind);
  return kind != CW_KEY_NONE;
}

// `mg <key> c f t v q O<i>` for each of `idx` on one server: the items as they are now.
Status FetchItems(Lines* c, const std::string& keys, const std::vector<RecheckEntry>& es,
                  const std::vector<size_t>& idx, std::vector<Item>* out) {
  out->assign(idx.size(), Item());
  for (size_t g = 0; g < idx.size(); g += kCompareBatch) {
    const size_t end = std::min(idx.size(), g + kCompareBatch);
    std::string req;
    for (size_t j = g; j < end; j++) {
      const RecheckEntry& e = es[idx[j]];
      char tok[CW_MAX_KEY + 1];
      int kind = 0;
      const size_t n = cw_key_token(tok, U(keys, e), e.key_len, &kind);
      req += "mg ";
      req.append(tok, n);
      if (kind == CW_KEY_BASE64) req += " b";
      req += " c f t v q O" + std::to_string(j) + "\r\n";
    }
    req += "mn\r\n";
    CW_RETURN_IF_ERROR(c->Send(req));
    for (std::string line;;) {
      CW_RETURN_IF_ERROR(c->Line(&line));
      if (ErrorLine(line)) return Status::Server("re-check: " + c->peer() + " answered " + line.substr(0, 200));
      cw_meta_reply r;
      if (cw_meta_reply_parse(line.data(), line.size(), &r) < 0 || r.code[0] == 0)
        return Status::Protocol("re-check: a malformed answer from " + c->peer() + ": " + line.substr(0, 200));
      if (std::strcmp(r.code, "MN") == 0) break;
      if (std::strcmp(r.code, "VA") != 0 || !r.has_opaque || r.opaque < g || r.opaque >= end)
        return Status::Protocol("re-check: an unexpected answer from " + c->peer() + ": " + line.substr(0, 200));
      Item& it = (*out)[size_t(r.opaque)];
      it.present = true;
      it.cas = r.cas;
      it.flags = r.has_flags ? r.flags : 0;
      it.ttl = r.has_ttl ? r.ttl : CW_NEVER;
      CW_RETURN_IF_ERROR(c->Value(size_t(r.value_len), &it.value));
    }
  }
  return Status::OK();
}

// CAS-guarded deletes on one destination: CW_MD_* per (entry index, cas).
Status GuardedDeletes(Lines* c, const Endpoint& ep, const std::string& keys, const std::vector<RecheckEntry>& es,
                      const std::vector<std::pair<size_t, uint64_t>>& todo, std::vector<int>* out) {
  out->assign(todo.size(), CW_MD_DELETED);
  std::vector<size_t> binary;
  for (size_t g = 0; g < todo.size(); g += kBatch) {
    const size_t end = std::min(todo.size(), g + kBatch);
    std::string req;
    char line[CW_MAX_META_LINE];
    for (size_t j = g; j < end; j++) {
      const RecheckEntry& e = es[todo[j].first];
      const size_t n = cw_md_cas_line(line, U(keys, e), e.key_len, todo[j].second, j);
      if (n == 0) binary.push_back(j);
      else req.append(line, n);
    }
    req += "mn\r\n";
    CW_RETURN_IF_ERROR(c->Send(req));
    for (std::string l;;) {
      CW_RETURN_IF_ERROR(c->Line(&l));
      if (ErrorLine(l)) return Status::Server("re-check: " + c->peer() + " answered " + l.substr(0, 200) + " to md");
      cw_meta_reply r;
      if (cw_meta_reply_parse(l.data(), l.size(), &r) < 0 || r.code[0] == 0)
        return Status::Protocol("re-check: a malformed answer to md from " + c->peer() + ": " + l.substr(0, 200));
      if (std::strcmp(r.code, "MN") == 0) break;
      if (!r.has_opaque || r.opaque < g || r.opaque >= end)
        return Status::Protocol("re-check: an unexpected answer to md from " + c->peer() + ": " + l.substr(0, 200));
      const int o = cw_md_outcome(&r);
      if (o == CW_MD_ERROR) return Status::Server("re-check: " + c->peer() + " answered " + l.substr(0, 200) + " to md");
      (*out)[size_t(r.opaque)] = o;
    }
  }
  if (binary.empty()) return Status::OK();
  // Keys only the binary protocol names: DELETE with the CAS in its header (deletes only on a match).
  Conn b;
  CW_RETURN_IF_ERROR(b.Connect(ep.connect_host(), ep.port, kConnectTimeoutMs));
  for (size_t j : binary) {
    const RecheckEntry& e = es[todo[j].first];
    unsigned char req[CW_BIN_HEADER + CW_MAX_KEY];
    cw_bin_cas_request(req, CW_BIN_OP_DELETE, e.key_len, uint32_t(j), todo[j].second);
    std::memcpy(req + CW_BIN_HEADER, U(keys, e), e.key_len);
    CW_RETURN_IF_ERROR(b.SendAll(Slice(reinterpret_cast<const char*>(req), CW_BIN_HEADER + e.key_len), kIoTimeoutMs));
    std::string got;
    while (got.size() < CW_BIN_HEADER) {
      char tmp[4096];
      size_t n = 0;
      CW_RETURN_IF_ERROR(b.Recv(tmp, sizeof tmp, &n, kIoTimeoutMs));
      got.append(tmp, n);
    }
    cw_bin_reply h;
    if (cw_bin_reply_parse(reinterpret_cast<const unsigned char*>(got.data()), got.size(), &h) != 1)
      return Status::Protocol("re-check: " + ep.address() + " sent no binary-protocol answer to DELETE");
    while (got.size() < CW_BIN_HEADER + h.body_len) {
      char tmp[4096];
      size_t n = 0;
      CW_RETURN_IF_ERROR(b.Recv(tmp, sizeof tmp, &n, kIoTimeoutMs));
      got.append(tmp, n);
    }
    (*out)[j] = h.status == CW_BIN_OK          ? CW_MD_DELETED
                : h.status == CW_BIN_NOT_FOUND ? CW_MD_GONE
                : h.status == CW_BIN_EXISTS    ? CW_MD_NOT_OURS
                                               : CW_MD_ERROR;
    if ((*out)[j] == CW_MD_ERROR)
      return Status::Server("re-check: " + ep.address() + " answered " + cw_bin_status_text(h.status) + " to DELETE");
  }
  return Status::OK();
}

}  // namespace

void RecheckCounts::Add(const RecheckCounts& o) {
  rechecked += o.rechecked;
  changed_at_source += o.changed_at_source;
  deleted_stale += o.deleted_stale;
  client_overwrote += o.client_overwrote;
  unsettled += o.unsettled;
  cas_only += o.cas_only;
}

StreamRecheck::StreamRecheck(std::string source_host, int source_port, std::vector<Endpoint> dests, double settle_s,
                             double unavailable_s, std::function<void(const Status&)> on_error)
    : source_host_(std::move(source_host)), source_port_(source_port), dests_(std::move(dests)),
      settle_s_(settle_s), unavailable_s_(unavailable_s), on_error_(std::move(on_error)) {
  thread_ = std::thread([this] { Loop(); });
}

StreamRecheck::~StreamRecheck() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status StreamRecheck::Push(RecheckPart part, Then then) {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t b = part.bytes();
  cv_.wait(l, [&] { return !error_.ok() || jobs_.empty() || queued_bytes_ + b <= kBudgetBytes; });
  if (!error_.ok()) return error_;
  Job j;
  j.part = std::move(part);
  j.has_part = true;
  j.then = std::move(then);
  queued_bytes_ += b;
  jobs_.push_back(std::move(j));
  cv_.notify_all();
  return Status::OK();
}

Status StreamRecheck::Call(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.ok()) return error_;
  Job j;
  j.call = std::move(fn);
  jobs_.push_back(std::move(j));
  cv_.notify_all();
  return Status::OK();
}

void StreamRecheck::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return jobs_.empty() && !busy_; });
}

Status StreamRecheck::error() {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

void StreamRecheck::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    busy_ = true;
    Job j = std::move(jobs_.front());
    jobs_.pop_front();
    const bool failed = !error_.ok();
    l.unlock();
    Status s;
    if (!failed) {
      if (j.has_part) {
        // Settled: every client op that reached a destination before our write has reached the
        // source by now (settle_s is at least the clients' largest gap between two replicas).
        const double wait = j.part.acked_at + settle_s_ - Mono();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        RecheckCounts n;
        s = Recheck(j.part, &n);
        if (s.ok() && j.then) s = j.then(j.part, n);
      } else if (j.call) {
        j.call();
      }
    }
    l.lock();
    if (j.has_part) queued_bytes_ -= j.part.bytes();
    if (!s.ok() && error_.ok()) {
      error_ = s;
      l.unlock();
      if (on_error_) on_error_(s);
      l.lock();
    }
    busy_ = false;
    cv_.notify_all();
  }
}

Status StreamRecheck::Recheck(const RecheckPart& part, RecheckCounts* out) {
  // A lost connection (a server restarting, a network blip) is tried again from the start: every
  // delete is guarded by a CAS, so doing a part twice decides the same and deletes nothing more.
  const double started = Mono();
  double wait = 0.1;
  for (;;) {
    RecheckCounts n;
    Status s = RecheckOnce(part, &n);
    if (s.ok()) {
      *out = n;
      return s;
    }
    if (s.code() != Status::kIOError || Mono() - started + wait > unavailable_s_) return s;
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    wait = std::min(wait * 2, 5.0);
  }
}

Status StreamRecheck::RecheckOnce(const RecheckPart& part, RecheckCounts* out) {
  const std::string& keys = part.keys;
  const std::vector<RecheckEntry>& es = part.entries;
  std::vector<int> verdict(es.size(), CW_SOURCE_UNCHANGED);
  for (const RecheckEntry& e : es) out->rechecked += e.recheck;
  if (out->rechecked == 0) return Status::OK();
  Lines src;
  CW_RETURN_IF_ERROR(src.Connect(source_host_, source_port_));

  // 1. The source, as _recheck.c source_look: `stats`, the looks, `mn`, `stats` per batch.
  std::vector<size_t> todo, binary;
  char line[CW_MAX_META_LINE];
  for (size_t i = 0; i < es.size(); i++)
    if (es[i].recheck) (cw_mg_look_line(line, U(keys, es[i]), es[i].key_len, 0) ? todo : binary).push_back(i);
  for (int round = 0; round < kLookRounds && !todo.empty(); round++) {
    std::vector<size_t> again;
    for (size_t g = 0; g < todo.size(); g += kBatch) {
      const size_t end = std::min(todo.size(), g + kBatch);
      std::string req = "stats\r\n";
      for (size_t j = g; j < end; j++) {
        const RecheckEntry& e = es[todo[j]];
        req.append(line, cw_mg_look_line(line, U(keys, e), e.key_len, j));
      }
      req += "mn\r\nstats\r\n";
      CW_RETURN_IF_ERROR(src.Send(req));
      struct Seen {
        bool present = false;
        uint64_t cas = 0;
        int64_t ttl = CW_NEVER, size = -1;
      };
      std::vector<Seen> seen(end - g);
      int64_t t0 = -1, t1 = -1;
      for (int phase = 0; phase < 3;) {
        std::string l;
        CW_RETURN_IF_ERROR(src.Line(&l));
        if (ErrorLine(l)) return Status::Server("re-check: the source answered " + l.substr(0, 200));
        if (phase != 1) {
          if (l == "END") phase++;
          else if (l.compare(0, 10, "STAT time ") == 0) (phase == 0 ? t0 : t1) = std::stoll(l.substr(10));
          continue;
        }
        cw_meta_reply r;
        if (cw_meta_reply_parse(l.data(), l.size(), &r) < 0)
          return Status::Protocol("re-check: a malformed answer to mg from the source: " + l.substr(0, 200));
        if (std::strcmp(r.code, "MN") == 0) {
          phase = 2;
          continue;
        }
        if (std::strcmp(r.code, "HD") != 0 || !r.has_opaque || r.opaque < g || r.opaque >= end || !r.has_cas ||
            !r.has_ttl)
          return Status::Protocol("re-check: an unexpected answer to mg from the source: " + l.substr(0, 200));
        Seen& s = seen[size_t(r.opaque - g)];
        s.present = true;
        s.cas = r.cas;
        s.ttl = r.ttl;
        s.size = r.has_size ? int64_t(r.size) : -1;
      }
      if (t0 < 0 || t1 < t0) return Status::Protocol("re-check: the source's stats without a time (or a clock that went back)");
      for (size_t j = g; j < end; j++) {
        const RecheckEntry& e = es[todo[j]];
        const Seen& s = seen[j - g];
        const cw_read rd{e.source_cas, e.source_exp, e.value_len};
        cw_source_now now{s.present ? 1 : 0, s.cas, CW_NEVER, CW_NEVER, s.size};
        if (s.present && s.ttl != CW_NEVER) {
          now.exp_lo = t0 + s.ttl;
          now.exp_hi = t1 + s.ttl;
        }
        const int v = cw_source_verdict(&rd, &now);
        verdict[todo[j]] = v;
        if (v == CW_SOURCE_UNSURE) again.push_back(todo[j]);
      }
    }
    todo.swap(again);
  }
  if (!binary.empty()) {
    // Keys no meta command names: by presence, CAS and size (GETK's header); their expiry cannot be read.
    out->cas_only = binary.size();
    std::vector<std::string> raw;
    for (size_t i : binary) raw.emplace_back(keys, es[i].key_off, es[i].key_len);
    std::vector<int> same(binary.size(), 0);
    BinaryGetter g(source_host_, source_port_, 1 << 20);
    std::string unavailable;
    CW_RETURN_IF_ERROR(g.Get(
        raw,
        [&](size_t k, uint32_t, uint32_t len, uint64_t cas) {
          same[k] = cas == es[binary[k]].source_cas && int64_t(len) == es[binary[k]].value_len;
          return Status::OK();
        },
        [](const Slice&) { return Status::OK(); }, [](size_t, const std::string&) { return Status::OK(); },
        &unavailable));
    if (!unavailable.empty()) return Status::Server("re-check: the source: " + unavailable);
    for (size_t k = 0; k < binary.size(); k++) verdict[binary[k]] = same[k] ? CW_SOURCE_UNCHANGED : CW_SOURCE_CHANGED;
  }

  // 2. Per destination: our stale copies deleted while still ours; the rest compared.
  for (size_t d = 0; d < dests_.size(); d++) {
    std::vector<std::pair<size_t, uint64_t>> dels;
    std::vector<size_t> compare;
    for (size_t i = 0; i < es.size(); i++) {
      if (es[i].dest != d || !es[i].recheck) continue;
      // The source unchanged: a destination value that is no longer ours is a client's (a fill after
      // a miss, a write to this replica only) and is never touched, even where it could be an
      // increment applied on top of our copy (the stream's counters may run ahead within a client's
      // replica skew: docs/reliability.md).
      if (verdict[i] == CW_SOURCE_UNCHANGED) continue;
      out->changed_at_source++;
      if (es[i].ours) dels.emplace_back(i, es[i].ours);
      else compare.push_back(i);
    }
    if (dels.empty() && compare.empty()) continue;
    const Endpoint& ep = dests_[d];
    Lines dst;
    CW_RETURN_IF_ERROR(dst.Connect(ep.connect_host(), ep.port));
    std::vector<int> outcome;
    CW_RETURN_IF_ERROR(GuardedDeletes(&dst, ep, keys, es, dels, &outcome));
    for (size_t j = 0; j < dels.size(); j++) {
      if (outcome[j] == CW_MD_DELETED) out->deleted_stale++;
      else if (outcome[j] == CW_MD_NOT_OURS) compare.push_back(dels[j].first);
    }
    // Keys whose destination holds a value we did not write (or may not have): compared with the
    // source's, again after the settle delay while they differ (recheck.py _settle_clients).
    std::vector<size_t> pending;
    for (size_t i : compare) {
      if (MetaNames(keys, es[i])) pending.push_back(i);
      else out->unsettled++;  // neither side's expiry can be read: left, reported
    }
    std::map<size_t, uint64_t> before;
    for (int rnd = 1; rnd <= kMaxRounds && !pending.empty(); rnd++) {
      std::vector<Item> s, t;
      CW_RETURN_IF_ERROR(FetchItems(&src, keys, es, pending, &s));
      CW_RETURN_IF_ERROR(FetchItems(&dst, keys, es, pending, &t));
      std::vector<size_t> again;
      std::vector<std::pair<size_t, uint64_t>> del;
      for (size_t j = 0; j < pending.size(); j++) {
        const size_t i = pending[j];
        const cw_item si = AsCore(s[j]), di = AsCore(t[j]);
        const int v = cw_compare_verdict(&si, &di, before[i], rnd, kMaxRounds, int64_t(std::ceil(settle_s_)));
        if (v == CW_CMP_KEEP) {
          out->client_overwrote++;
        } else if (v == CW_CMP_WAIT) {
          before[i] = t[j].cas;
          again.push_back(i);
        } else if (v == CW_CMP_DELETE) {
          del.emplace_back(i, t[j].cas);
        } else if (v == CW_CMP_UNSETTLED) {
          out->unsettled++;
        }
      }
      std::vector<int> o;
      CW_RETURN_IF_ERROR(GuardedDeletes(&dst, ep, keys, es, del, &o));
      for (size_t j = 0; j < del.size(); j++) {
        if (o[j] == CW_MD_DELETED) {
          out->deleted_stale++;
        } else if (o[j] == CW_MD_NOT_OURS) {  // written again between the look and the delete
          if (rnd < kMaxRounds) {
            before[del[j].first] = 0;
            again.push_back(del[j].first);
          } else {
            out->unsettled++;
          }
        }
      }
      pending.swap(again);
      if (!pending.empty()) std::this_thread::sleep_for(std::chrono::duration<double>(settle_s_));
    }
    out->unsettled += pending.size();
  }
  return Status::OK();
}

}  // namespace cachewarm
