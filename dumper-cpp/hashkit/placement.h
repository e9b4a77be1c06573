/* A placement: which of a pool's nodes a key belongs on, as one client computes it.
 *
 * Built from a text description (one directive a line; names and byte strings in hex), which Python
 * writes (cachewarm.placement.Placement.describe) and both data paths hand to this parser:
 *
 *   dist ketama|modula|rendezvous|furc|wch3
 *   hash <name>                  the key hash (hashkit.h; rendezvous: murmur3; furc: none)
 *   points md5x4|hash            ketama: 4 points per md5 digest of "<name>-<i>", or one point per key
 *                                hash of "<name>-<i>" (libmemcached's non-weighted ketama)
 *   collision last|first         ketama: which node keeps a point two nodes share (spymemcached's
 *                                TreeMap: the later; the C clients' unstable qsort: unknowable, first)
 *   prefix <hex>                 stored before the client's key but not hashed (namespaces, key_prefix)
 *   hash-stop                    mcrouter: hash only the part before the first "|#|"
 *   tag <hex of 2 bytes>         twemproxy hash_tag: hash only the non-empty text between the two
 *   delimiter <hex>              EVCache hash.on.partial.key: hash only the part before it
 *   salt <hex>                   mcrouter: appended to the hashed key
 *   weights <w>,<w>,...          wch3 (mcrouter's WeightedCh3): one weight in [0, 1] per node
 *   keyform str|repr             rendezvous: the key as pymemcache formats a str key (its UTF-8
 *                                characters, each & 0xff; a key that is not UTF-8 was bytes) or a
 *                                bytes key (Python's repr, b'...')
 *   node <hex name> <count> [<dest>]
 *                                in pool order; count = ketama points, modula slots (weight), else 1;
 *                                dest: what cw_place answers for this node's keys (default: its index)
 */
#ifndef CACHEWARM_PLACEMENT_H
#define CACHEWARM_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cw_placement cw_placement;

/* NULL on a bad description, with the reason in err (always NUL-terminated when errlen > 0). */
cw_placement *cw_placement_parse(const char *text, size_t len, char *err, size_t errlen);
void cw_placement_free(cw_placement *p);
size_t cw_placement_nodes(const cw_placement *p);
/* The largest dest a key can get (the caller checks it names one of its destinations). */
size_t cw_placement_max_dest(const cw_placement *p);

/* The dest of key's node (its index in node order unless the description says otherwise); -1 only
 * when memory runs out. */
long cw_place(const cw_placement *p, const unsigned char *key, size_t len);

/* The ring's points and owners (ketama only; 0 points otherwise), for tests and descriptions. */
size_t cw_placement_ring(const cw_placement *p, const uint32_t **points, const uint32_t **owners);

#ifdef __cplusplus
}
#endif
#endif
