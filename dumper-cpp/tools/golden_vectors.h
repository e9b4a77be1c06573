// The golden vectors of tests/vectors/: a few small, hand-checkable data files and their DONE
// manifest, written by the real writer with a fixed node id and dump start time (deterministic).
#pragma once
#include <cstdint>
#include <string>

#include "../src/env.h"

namespace cachewarm {

// Writes the data files, DONE and vectors.json (a description of every record) into `dir`, in data
// format `version` (1: tests/vectors/, 2: tests/vectors/v2/, which adds a binary record).
Status WriteGoldenVectors(Env* env, const std::string& dir, uint16_t version = 1);

}  // namespace cachewarm
