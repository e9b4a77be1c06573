// xxHash for the whole-file and stream checksums, which hash every byte of every value: where the
// library ships its x86 dispatcher, XXH3 runs the widest vector code this CPU has (AVX2 rather than
// the library's SSE2 default); the same hashes, fewer instructions.
#pragma once
#include <xxhash.h>
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
