"""Run by Debian's python3 (python3-pylibmc): prints the server index libmemcached picks for each key.

argv[1]: JSON {"servers": ["host:port", ...], "behaviors": {...}}; stdin: keys in hex, one a line.
"""

import json
import sys

import pylibmc

conf = json.loads(sys.argv[1])
mc = pylibmc.Client(conf["servers"], behaviors=conf["behaviors"])
out = [str(mc.hash(bytes.fromhex(line.strip()))) for line in sys.stdin if line.strip()]
print("\n".join(out))
