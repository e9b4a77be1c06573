// Placeholder until the dumper lands (issue: the dumper).
#include <cstdio>
int main() {
  std::puts("cachewarm-dump: not implemented yet");
  return 2;
}
