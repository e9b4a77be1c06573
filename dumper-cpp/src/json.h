// Minimal JSON emitting (the DONE manifest, progress lines, checkpoint markers) and a tiny reader
// for the flat objects this program writes itself (keys/META, keys/CRAWLED).
#pragma once
#include <cstdint>
#include <string>

namespace cachewarm {

std::string JsonQuote(const std::string& s);
std::string JsonDouble(double v);

// Finds "name": <number> in a flat JSON object written by this program; false if absent.
bool JsonGetInt(const std::string& json, const std::string& name, int64_t* out);
// Finds "name": "<string without escapes>".
bool JsonGetString(const std::string& json, const std::string& name, std::string* out);

}  // namespace cachewarm
