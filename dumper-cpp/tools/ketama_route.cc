// ketama_route --reps N [--delimiter HEX] NODEKEY...: reads keys as hex, one a line, on stdin and
// prints each key's node index (the position of its NODEKEY) on EVCache's ring as the stream mode
// builds it, one a line. Test-only: pytest compares it with the populator's routing and the ketama
// oracle on generated keys (tests/datapath/test_stream_routing.py).
// ketama_route --placement-file PATH: the same with the stream mode's Placement (a hashkit
// description), compared with the populator's in tests/placement/test_stream_placement.py.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "placement.h"

namespace {
std::string FromHex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += char(std::strtol(h.substr(i, 2).c_str(), nullptr, 16));
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 160;
  std::string delimiter, placement_file;
  std::vector<std::string> nodes;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--placement-file" && i + 1 < argc) {
      placement_file = argv[++i];
    } else if (a == "--delimiter" && i + 1 < argc) {
      delimiter = FromHex(argv[++i]);
    } else {
      nodes.push_back(a);
    }
  }
  if (!placement_file.empty()) {
    std::ifstream f(placement_file);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    cachewarm::Placement p;
    cachewarm::Status s = p.Parse(text);
    if (!s.ok()) {
      std::fprintf(stderr, "ketama_route: %s\n", s.ToString().c_str());
      return 2;
    }
    std::string line, out;
    while (std::getline(std::cin, line)) out += std::to_string(p.Index(FromHex(line))) + "\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  cachewarm::Placement ring;
  cachewarm::Status s = ring.ParseEvcache(nodes, reps, delimiter);
  if (!s.ok()) {
    std::fprintf(stderr, "ketama_route: %s\n", s.ToString().c_str());
    return 2;
  }
  std::string line, out;
  while (std::getline(std::cin, line)) out += std::to_string(ring.Index(FromHex(line))) + "\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}
