#include <cstdio>
int main() {
  std::puts("cachewarm-dump: not implemented yet");
  return 2;
}
