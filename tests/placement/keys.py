"""The keys every placement test places: ASCII, bytes >= 0x80 (UTF-8 and not), 250-byte keys,
hash-tagged keys ({tag}), mcrouter hash stops (|#|), prefixed keys. Deterministic."""

from __future__ import annotations

import random


def corpus(n: int = 2000, seed: int = 24, utf8_only: bool = False) -> list[bytes]:
    rnd = random.Random(seed)
    printable = bytes(range(0x21, 0x7F))
    high = bytes(range(0x80, 0x100))
    keys: set[bytes] = set()
    while len(keys) < n:
        kind = len(keys) % 8
        if kind == 0:
            k = f"user:{rnd.randrange(10**9)}".encode()
        elif kind == 1:  # UTF-8 text (pymemcache str keys, nutcracker's signed-char hashes)
            k = "".join(rnd.choice("éüßñøœ漢字キー🙂ab") for _ in range(rnd.randint(1, 20))).encode()
        elif kind == 2:  # raw high bytes (not UTF-8)
            k = bytes(rnd.choice(high + printable) for _ in range(rnd.randint(1, 40)))
            if utf8_only:
                k = k.decode("latin-1").encode()
        elif kind == 3:  # 250 bytes, the longest memcached key
            k = bytes(rnd.choice(printable) for _ in range(250))
        elif kind == 4:  # hash-tagged
            k = f"session:{{{rnd.randrange(50)}}}:{rnd.randrange(10**6)}".encode()
        elif kind == 5:  # mcrouter hash stop
            k = f"obj:{rnd.randrange(10**6)}|#|v{rnd.randrange(100)}".encode()
        elif kind == 6:  # a namespace / key_prefix
            k = f"app1:{rnd.randrange(10**9)}".encode()
        else:
            k = bytes(rnd.choice(printable) for _ in range(rnd.randint(1, 30)))
        if len(k) <= 250:
            keys.add(k)
    return sorted(keys)
