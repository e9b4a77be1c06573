// The golden vectors of tests/vectors/: a few small, hand-checkable data files and their DONE
// manifest, written by the real writer with a fixed node id and dump start time (deterministic).
#pragma once
#include <string>

#include "../src/env.h"

namespace cachewarm {

// Writes the data files, DONE and vectors.json (a description of every record) into `dir`.
Status WriteGoldenVectors(Env* env, const std::string& dir);

}  // namespace cachewarm
