// The metadump reader, key lists and the bounded-memory key-set difference.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "codec.h"
#include "crawler.h"
#include "env.h"
#include "fault_env.h"
#include "key_chunks.h"
#include "key_set_diff.h"
#include "testutil.h"

namespace cachewarm {
namespace {

struct Got {
  std::vector<std::pair<std::string, int64_t>> keys;
};

Status FeedPieces(CrawlReader* r, const std::string& s, size_t piece) {
  for (size_t p = 0; p < s.size(); p += piece) CW_RETURN_IF_ERROR(r->Feed(s.data() + p, std::min(piece, s.size() - p)));
  return Status::OK();
}

TEST(Crawler, BareNewlineLinesAndFinalEnd) {
  const std::string dump =
      "key=user%3A1 exp=-1 la=1700000000 cas=5 fetch=no cls=1 size=70\n"
      "key=%00bin%20key%FF exp=1795003600 la=1700000000 cas=6 fetch=yes cls=2 size=80\n"
      "key=k exp=0 la=1 cas=7 fetch=no cls=1 size=60\n"
      "END\r\n";
  for (size_t piece = 1; piece <= dump.size(); piece++) {
    Got g;
    CrawlReader r([&](const Slice& k, int64_t e) {
      g.keys.push_back({k.ToString(), e});
      return Status::OK();
    });
    ASSERT_TRUE(FeedPieces(&r, dump, piece).ok()) << piece;
    ASSERT_TRUE(r.done());
    EXPECT_FALSE(r.busy());
    ASSERT_EQ(g.keys.size(), 3u);
    EXPECT_EQ(g.keys[0], (std::pair<std::string, int64_t>{"user%3A1", -1}));
    EXPECT_EQ(g.keys[1].second, 1795003600);
    std::string raw;
    ASSERT_TRUE(UrlDecode(g.keys[1].first, &raw));
    EXPECT_EQ(raw, std::string("\x00" "bin key\xff", 9));
  }
}

// memcached >= 1.6.43 answers "OK" on a line of its own first; 1.6.38+ add flags=, 1.6.45 a
// trailing space. All as sent by the real servers (tests/dumper runs them too).
TEST(Crawler, OkLineAndNewerFields) {
  const std::string dump =
      "OK\r\n"
      "key=a exp=-1 la=1795436829 cas=2 fetch=no cls=1 size=65 flags=5 \n"
      "key=%00%20%0D%0A%FF exp=1795440000 la=1795436829 cas=3 fetch=no cls=1 size=69 flags=7 \n"
      "END\r\n";
  for (size_t piece = 1; piece <= dump.size(); piece++) {
    std::vector<std::pair<std::string, int64_t>> got;
    CrawlReader r([&](const Slice& k, int64_t e) {
      got.push_back({k.ToString(), e});
      return Status::OK();
    });
    ASSERT_TRUE(FeedPieces(&r, dump, piece).ok()) << piece;
    ASSERT_TRUE(r.done());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], (std::pair<std::string, int64_t>{"a", -1}));
    EXPECT_EQ(got[1], (std::pair<std::string, int64_t>{"%00%20%0D%0A%FF", 1795440000}));
  }
  // An empty server on 1.6.45.
  CrawlReader empty([](const Slice&, int64_t) { return Status::OK(); });
  ASSERT_TRUE(empty.Feed("OK\r\nEND\r\n", 9).ok());
  EXPECT_TRUE(empty.done());
  EXPECT_EQ(empty.keys(), 0u);
  // OK anywhere but first is not the acknowledgement.
  CrawlReader late([](const Slice&, int64_t) { return Status::OK(); });
  const std::string s = "key=a exp=-1\nOK\r\nEND\r\n";
  EXPECT_EQ(late.Feed(s.data(), s.size()).code(), Status::kProtocol);
}

// Retryable answers: BUSY (another crawl runs, possibly memcached's own background crawler) and
// "ERROR locked try again later" (hash table expansion), also after 1.6.43's OK. Never after keys.
TEST(Crawler, BusyAndLockedAreRetryable) {
  for (const std::string& s : {std::string("BUSY currently processing crawler request\r\n"),
                               std::string("ERROR locked try again later\r\n"),
                               std::string("OK\r\nERROR locked try again later\r\n")}) {
    CrawlReader r([](const Slice&, int64_t) { return Status::OK(); });
    ASSERT_TRUE(r.Feed(s.data(), s.size()).ok()) << s;
    EXPECT_TRUE(r.done());
    EXPECT_TRUE(r.busy());
    EXPECT_EQ(r.busy_line().rfind(s.substr(0, 2) == "OK" ? "ERROR locked" : s.substr(0, 4), 0), 0u);
  }
  CrawlReader after([](const Slice&, int64_t) { return Status::OK(); });
  const std::string s = "key=a exp=-1\nERROR locked try again later\r\n";
  Status st = after.Feed(s.data(), s.size());
  EXPECT_EQ(st.code(), Status::kServer);
  EXPECT_NE(st.message().find("after 1 keys"), std::string::npos) << st.ToString();
  EXPECT_FALSE(after.busy());
  // A server without `metadump hash`: the one answer that makes the dumper fall back to `all`.
  CrawlReader bad([](const Slice&, int64_t) { return Status::OK(); });
  EXPECT_EQ(bad.Feed("BADCLASS invalid class id\r\n", 27).code(), Status::kServer);
  EXPECT_TRUE(bad.unsupported_mode());
  CrawlReader disabled([](const Slice&, int64_t) { return Status::OK(); });
  const std::string d = "CLIENT_ERROR lru crawler disabled\r\n";
  EXPECT_EQ(disabled.Feed(d.data(), d.size()).code(), Status::kServer);
  EXPECT_FALSE(disabled.unsupported_mode());
}

TEST(Crawler, BusyErrorsAndGarbage) {
  auto run = [](const std::string& s, CrawlReader** keep = nullptr) {
    static CrawlReader* r = nullptr;
    delete r;
    r = new CrawlReader([](const Slice&, int64_t) { return Status::OK(); });
    if (keep) *keep = r;
    return r->Feed(s.data(), s.size());
  };
  CrawlReader* r = nullptr;
  EXPECT_TRUE(run("BUSY currently processing crawler request\r\n", &r).ok());
  EXPECT_TRUE(r->busy());
  EXPECT_EQ(run("ERROR\r\n").code(), Status::kServer);
  EXPECT_EQ(run("CLIENT_ERROR bad command\r\n").code(), Status::kServer);
  // What a memcached without `metadump hash` answers: a server error, so the dumper falls back.
  EXPECT_EQ(run("BADCLASS invalid class id\r\n").code(), Status::kServer);
  EXPECT_EQ(run("garbage\n").code(), Status::kProtocol);
  EXPECT_EQ(run("key= exp=1\n").code(), Status::kProtocol);
  EXPECT_EQ(run("key=a exp=\n").code(), Status::kProtocol);
  EXPECT_EQ(run("END\r\nkey=a exp=1\n").code(), Status::kProtocol);
  EXPECT_EQ(run(std::string(9000, 'k')).code(), Status::kProtocol);
  run("");
}

TEST(KeyChunks, CutByBytesAndReadBack) {
  TempDir t;
  std::vector<std::pair<uint64_t, uint64_t>> published;
  KeyChunkWriter w(Env::Default(), t.path(), 4096, 5, [&](uint64_t c, uint64_t n) { published.push_back({c, n}); });
  for (int i = 0; i < 1000; i++) ASSERT_TRUE(w.Add("key%20" + std::to_string(i), i % 2 ? -1 : 1700000000 + i).ok());
  ASSERT_TRUE(w.Flush().ok());
  ASSERT_GT(published.size(), 3u);
  EXPECT_EQ(published.front().first, 5u);
  uint64_t total = 0, idx = 0;
  for (auto& [c, n] : published) {
    std::string contents;
    ASSERT_TRUE(Env::Default()->ReadFileToString(t.path() + "/" + KeyChunkName(c), &contents).ok());
    EXPECT_LE(contents.size(), 4096u);
    uint64_t k = 0;
    ASSERT_TRUE(ForEachKeyLine(contents, [&](const Slice& key, int64_t e) {
                  EXPECT_EQ(key.ToString(), "key%20" + std::to_string(idx));
                  EXPECT_EQ(e, idx % 2 ? -1 : int64_t(1700000000 + idx));
                  idx++;
                  k++;
                  return Status::OK();
                }).ok());
    EXPECT_EQ(k, n);
    total += n;
  }
  EXPECT_EQ(total, 1000u);
  uint64_t c;
  EXPECT_TRUE(ParseKeyChunkName("00000012.keys", &c));
  EXPECT_EQ(c, 12u);
  EXPECT_FALSE(ParseKeyChunkName(".tmp-00000012.keys", &c));
  EXPECT_FALSE(ForEachKeyLine("no-newline 1", [](const Slice&, int64_t) { return Status::OK(); }).ok());
  EXPECT_FALSE(ForEachKeyLine("k x\n", [](const Slice&, int64_t) { return Status::OK(); }).ok());
}

TEST(KeyChunks, AsyncPublishingKeepsOrderAndReportsErrors) {
  TempDir t;
  std::vector<uint64_t> order;
  std::mutex mu;
  {
    KeyChunkWriter w(Env::Default(), t.path(), 4096, 0, [&](uint64_t c, uint64_t) {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(c);
    }, 2);
    for (int i = 0; i < 5000; i++) ASSERT_TRUE(w.Add("k" + std::to_string(i), -1).ok());
    ASSERT_TRUE(w.Flush().ok());
    ASSERT_EQ(order.size(), w.next_chunk());
    for (size_t i = 0; i < order.size(); i++) EXPECT_EQ(order[i], i);
    std::vector<std::string> names;
    Env::Default()->GetChildren(t.path(), &names);
    EXPECT_EQ(names.size(), order.size());  // no temporary left behind
  }
  Faults f;
  f.fail_rename = true;
  FaultEnv env(&f);
  TempDir t2;
  KeyChunkWriter w(&env, t2.path(), 4096, 0, nullptr, 2);
  Status s;
  for (int i = 0; i < 5000 && s.ok(); i++) s = w.Add("k" + std::to_string(i), -1);
  if (s.ok()) s = w.Flush();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("injected"), std::string::npos);
}

TEST(KeySetDiff, EmitsExactlyTheNewKeysOnce) {
  TempDir t;
  std::mt19937 rng(3);
  std::set<std::string> existing, fresh;
  for (int i = 0; i < 200000; i++) existing.insert("old" + std::to_string(i));
  for (int i = 0; i < 3000; i++) fresh.insert(std::string("new\x01", 4) + std::to_string(rng()));
  KeySetDiff diff(t.path() + "/diff", existing.size());
  EXPECT_GE(diff.partitions(), 16);
  for (const std::string& k : existing) ASSERT_TRUE(diff.AddExisting(k).ok());
  // The crawl lists old and new keys, some twice.
  auto cand = [&](const std::string& k) { return diff.AddCandidate(k, UrlEncode(k), 7); };
  for (const std::string& k : existing) ASSERT_TRUE(cand(k).ok());
  for (const std::string& k : fresh) ASSERT_TRUE(cand(k).ok());
  for (const std::string& k : fresh) ASSERT_TRUE(cand(k).ok());
  std::multiset<std::string> got;
  ASSERT_TRUE(diff.Emit([&](const Slice& url, int64_t e) {
                    std::string raw;
                    EXPECT_TRUE(UrlDecode(url, &raw));
                    EXPECT_EQ(e, 7);
                    got.insert(raw);
                    return Status::OK();
                  }).ok());
  EXPECT_EQ(got, std::multiset<std::string>(fresh.begin(), fresh.end()));
  EXPECT_EQ(diff.duplicates(), fresh.size());  // the fresh keys were listed twice, emitted once
}

// `--crawl all` lists an item twice when it moves between LRUs mid-crawl: the first crawl goes
// through the difference with nothing existing, which keeps each key once and counts the repeats.
TEST(KeySetDiff, FirstLruCrawlKeepsEachKeyOnce) {
  TempDir t;
  KeySetDiff diff(t.path() + "/diff", 10000);
  for (int i = 0; i < 10000; i++) ASSERT_TRUE(diff.AddCandidate("k" + std::to_string(i), "k" + std::to_string(i), -1).ok());
  for (int i = 0; i < 10000; i += 7) ASSERT_TRUE(diff.AddCandidate("k" + std::to_string(i), "k" + std::to_string(i), -1).ok());
  std::set<std::string> got;
  uint64_t n = 0;
  ASSERT_TRUE(diff.Emit([&](const Slice& url, int64_t) {
                    got.insert(url.ToString());
                    n++;
                    return Status::OK();
                  }).ok());
  EXPECT_EQ(n, 10000u);
  EXPECT_EQ(got.size(), 10000u);
  EXPECT_EQ(diff.duplicates(), 1429u);
}

TEST(KeySetDiff, NothingExistingOrNothingCrawled) {
  TempDir t;
  {
    KeySetDiff d(t.path() + "/a", 0);
    int n = 0;
    ASSERT_TRUE(d.Emit([&](const Slice&, int64_t) { n++; return Status::OK(); }).ok());
    EXPECT_EQ(n, 0);
  }
  {
    KeySetDiff d(t.path() + "/b", 0);
    ASSERT_TRUE(d.AddCandidate("x", "x", -1).ok());
    int n = 0;
    ASSERT_TRUE(d.Emit([&](const Slice&, int64_t) { n++; return Status::OK(); }).ok());
    EXPECT_EQ(n, 1);
  }
  std::vector<std::string> left;
  Env::Default()->GetChildren(t.path(), &left);
  EXPECT_TRUE(left.empty()) << left.size() << " " << (left.empty() ? "" : left[0]);  // scratch removed
}

TEST(Env, WritevAllResumesShortWritesAndEintr) {
  std::string sink;
  int calls = 0;
  WritevFn fn = [&](int, const struct iovec* iov, int n) -> ssize_t {
    calls++;
    if (calls % 3 == 0) {
      errno = EINTR;
      return -1;
    }
    // Take at most 5 bytes, possibly splitting an iovec.
    size_t left = 5;
    ssize_t done = 0;
    for (int i = 0; i < n && left; i++) {
      size_t k = std::min(left, iov[i].iov_len);
      sink.append(static_cast<const char*>(iov[i].iov_base), k);
      left -= k;
      done += ssize_t(k);
    }
    return done;
  };
  std::string a = "hello ", b = "", c = "wonderful ", d = "world";
  struct iovec iov[4] = {{&a[0], a.size()}, {nullptr, 0}, {&c[0], c.size()}, {&d[0], d.size()}};
  (void)b;
  ASSERT_TRUE(WritevAll(fn, 0, iov, 4, "t").ok());
  EXPECT_EQ(sink, "hello wonderful world");
  WritevFn eio = [](int, const struct iovec*, int) -> ssize_t {
    errno = EIO;
    return -1;
  };
  Status s = WritevAll(eio, 0, iov, 4, "f.cwd");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("f.cwd"), std::string::npos);
}


TEST(Crawler, ListingCasOfLongEncodedKeysFirstListingWins) {
  Slice key;
  int64_t exp = 0;
  uint64_t cas = 0;
  const std::string line = "key=abc exp=-1 la=1 cas=4242 fetch=no cls=1 size=60";
  ASSERT_TRUE(ParseMetadumpLine(line.data(), line.size(), &key, &exp, nullptr, nullptr, &cas));
  EXPECT_EQ(cas, 4242u);
  const std::string nocas = "key=abc exp=-1 la=1";
  ASSERT_TRUE(ParseMetadumpLine(nocas.data(), nocas.size(), &key, &exp, nullptr, nullptr, &cas));
  EXPECT_EQ(cas, 0u);
  // Only URL-encoded keys over 186 characters (a binary key of 187..250 bytes) are kept.
  ListingCas c;
  CrawlReader r([](const Slice&, int64_t) { return Status::OK(); });
  r.set_listing_cas(&c);
  std::string longkey;
  for (int i = 0; i < 70; i++) longkey += "%00";
  const std::string in = "key=" + longkey + " exp=-1 la=1 cas=7 fetch=no cls=12 size=300\n" +
                         "key=plain exp=-1 la=1 cas=8\nkey=" + longkey + " exp=-1 la=1 cas=9 fetch=no cls=13\nEND\r\n";
  ASSERT_TRUE(r.Feed(in.data(), in.size()).ok());
  EXPECT_EQ(c.Get(Slice(longkey)), 7u);  // the first listing's (its exp is the one kept)
  EXPECT_EQ(c.Class(Slice(longkey)), 12);  // and its slab class: what a re-read of its TTL lists
  EXPECT_EQ(c.Get(Slice("plain")), 0u);
  EXPECT_EQ(c.Class(Slice("plain")), -1);
  int64_t cls = 0;
  ASSERT_TRUE(ParseMetadumpLine(nocas.data(), nocas.size(), &key, &exp, nullptr, nullptr, &cas, &cls));
  EXPECT_EQ(cls, -1);
}

}  // namespace
}  // namespace cachewarm

namespace cachewarm {
namespace {

// The metadump line's fields in any order, absent, repeated (the first counts) or without a number.
TEST(Crawler, MetadumpLineFields) {
  struct Want {
    const char* line;
    bool ok;
    int64_t exp, la;
    bool fetched;
    uint64_t cas;
    int64_t cls;
  };
  const Want cases[] = {
      {"key=a exp=5 la=7 cas=9 fetch=yes cls=3 size=1 flags=2", true, 5, 7, true, 9, 3},
      {"key=a cls=3 fetch=no cas=9 la=7 exp=-1", true, -1, 7, false, 9, 3},
      {"key=a size=1", true, -1, -1, false, 0, -1},
      {"key=a exp=1 exp=2 la=3 la=4 cas=5 cas=6 cls=7 cls=8 fetch=yes fetch=no", true, 1, 3, true, 5, 7},
      {"key=a la=x cas=0 cls= exp=123456789012345678901", true, 123456789012345678, -1, false, 0, -1},
      {"key=a  exp=2  la=-3", true, 2, -3, false, 0, -1},
      {"key=a exp=", false, 0, 0, false, 0, 0},
      {"key=a exp=x", false, 0, 0, false, 0, 0},
      {"key= exp=1", false, 0, 0, false, 0, 0},
  };
  for (const Want& w : cases) {
    Slice key;
    int64_t exp = 0, la = 0, cls = 0;
    bool fetched = false;
    uint64_t cas = 0;
    const std::string line = w.line;
    ASSERT_EQ(ParseMetadumpLine(line.data(), line.size(), &key, &exp, &la, &fetched, &cas, &cls), w.ok) << w.line;
    if (!w.ok) continue;
    EXPECT_EQ(key.ToString(), "a") << w.line;
    EXPECT_EQ(exp, w.exp) << w.line;
    EXPECT_EQ(la, w.la) << w.line;
    EXPECT_EQ(fetched, w.fetched) << w.line;
    EXPECT_EQ(cas, w.cas) << w.line;
    EXPECT_EQ(cls, w.cls) << w.line;
  }
}

}  // namespace
}  // namespace cachewarm
