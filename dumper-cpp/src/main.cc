// cachewarm-dump: dumps a memcached server into data format v1 files (docs/data-format.md).
#include <csignal>
#include <cstdio>

#include "dumper.h"
#include "options.h"

int main(int argc, char** argv) {
  // A dead peer must surface as an error from send(), never as a silent SIGPIPE death.
  std::signal(SIGPIPE, SIG_IGN);
  cachewarm::Options o;
  cachewarm::Status s = cachewarm::ParseOptions(argc, argv, &o);
  if (o.help) {
    std::fputs(cachewarm::Usage().c_str(), stdout);
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cachewarm-dump: %s\n(see --help)\n", s.ToString().c_str());
    return 2;
  }
  cachewarm::Dumper d(o, cachewarm::Env::Default());
  s = d.Run();
  if (!s.ok()) {
    std::fprintf(stderr, "cachewarm-dump: FAILED, no DONE written: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
