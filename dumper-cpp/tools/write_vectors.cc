// write_vectors DIR: regenerates the golden vectors (tests/vectors/) with the real writer.
#include <cstdio>

#include "golden_vectors.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_vectors DIR\n");
    return 2;
  }
  cachewarm::Status s = cachewarm::WriteGoldenVectors(cachewarm::Env::Default(), argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "write_vectors: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
