// write_vectors DIR: regenerates the golden vectors with the real writer: format version 1 in DIR
// (tests/vectors/), version 2 in DIR/v2, version 3 in DIR/v3.
#include <cstdio>

#include "golden_vectors.h"
#include "../src/format.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_vectors DIR\n");
    return 2;
  }
  cachewarm::Env* env = cachewarm::Env::Default();
  cachewarm::Status s = cachewarm::WriteGoldenVectors(env, argv[1], cachewarm::kFormatVersion);
  if (s.ok()) s = cachewarm::WriteGoldenVectors(env, std::string(argv[1]) + "/v2", cachewarm::kFormatVersion2);
  if (s.ok()) s = cachewarm::WriteGoldenVectors(env, std::string(argv[1]) + "/v3", cachewarm::kFormatVersion3);
  if (!s.ok()) {
    std::fprintf(stderr, "write_vectors: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
