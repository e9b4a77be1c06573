"""Run by Debian's python3 (python3-pylibmc): prints the server index libmemcached picks for each key.

argv[1]: JSON {"servers": ["host:port", ...], "behaviors": {...}, "then": {...}}; stdin: keys in hex,
one a line. "then": behaviors set after the client is made (pylibmc applies its constructor's
behaviors in its own order: ketama_weighted there resets the hash to md5).
"""

import json
import sys

import pylibmc

conf = json.loads(sys.argv[1])
mc = pylibmc.Client(conf["servers"], behaviors=conf["behaviors"])
for name, value in conf.get("then", {}).items():
    mc.behaviors[name] = value
out = [str(mc.hash(bytes.fromhex(line.strip()))) for line in sys.stdin if line.strip()]
print("\n".join(out))
