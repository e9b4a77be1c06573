// cachewarm-dump: dumps a memcached server into data format v1 files (docs/data-format.md).
#include <csignal>
#include <cstdio>
#include <memory>

#include "dumper.h"
#include "options.h"
#include "slow_env.h"

int main(int argc, char** argv) {
  // A dead peer must surface as an error from send(), never as a silent SIGPIPE death.
  std::signal(SIGPIPE, SIG_IGN);
  cachewarm::Options o;
  cachewarm::Status s = cachewarm::ParseOptions(argc, argv, &o);
  if (o.help) {
    std::fputs(cachewarm::Usage().c_str(), stdout);
    return 0;
  }
  if (o.version) {
    std::printf("cachewarm-dump %s\n", CACHEWARM_VERSION);
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cachewarm-dump: %s\n(see --help)\n", s.ToString().c_str());
    return 2;
  }
  cachewarm::Env* env = cachewarm::Env::Default();
  std::unique_ptr<cachewarm::SlowEnv> slow;
  if (o.debug_write_delay_us || o.debug_sync_delay_us) {
    slow.reset(new cachewarm::SlowEnv(env, o.debug_write_delay_us, o.debug_sync_delay_us));
    env = slow.get();
  }
  cachewarm::Dumper d(o, env);
  s = d.Run();
  if (!s.ok()) {
    std::fprintf(stderr, "cachewarm-dump: FAILED, no DONE written: %s\n", s.ToString().c_str());
    return 1;
  }
  return d.exit_code();
}
